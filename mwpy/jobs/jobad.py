"""The part of a job's ClassAd that ``condor_submit`` makes from the policy and placement commands.

``condor_submit`` does not hand ``max_retries`` or ``success_exit_code`` to
the schedd as such: it writes ``OnExitRemove``, ``OnExitHold``,
``JobMaxRetries``, ``JobSuccessExitCode`` and the periodic expressions into
the job's ad, and the shadow and the schedd evaluate those. :class:`JobAd`
makes the same attributes from the same commands, following
``SubmitHash::SetJobRetries`` and ``SetPeriodicExpressions`` of HTCondor's
``src/condor_utils/submit_utils.cpp`` (v25.14.0); tests/test_jobs_oracle.py
compares them with what ``condor_submit -dry-run`` writes.
:mod:`mwpy.jobs.policy` evaluates them with HTCondor's ClassAd library.

The placement commands (``requirements``, ``request_*``, ...) become a
:class:`Placement`: what a job asks of the machine that runs it. Jobs are
grouped by it, and on a pool each group's jobs run on slave jobs of its
shape (:meth:`Placement.need`, the overseer's slave jobs per need).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping

import attrs

from mwpy.errors import SubmitError
from mwpy.resources import Resources

#: HTCondor's DEFAULT_JOB_MAX_RETRIES: the retries a job gets when only success_exit_code or retry_until is set.
DEFAULT_MAX_RETRIES = 2
#: Hold reason code of a job submitted with ``hold = true`` (CONDOR_HOLD_CODE::SubmittedOnHold).
SUBMITTED_ON_HOLD = 15

#: The attributes the schedd and the shadow keep in a job's ad (:class:`mwpy.jobs.policy.JobLife` keeps them):
#: what ``$$([expression])`` may refer to beside the submit file's own attributes.
SCHEDD_ATTRIBUTES = frozenset(
    "ClusterId ProcId Owner QDate JobUniverse Cmd Iwd JobStatus LastJobStatus EnteredCurrentStatus NumJobStarts "  # noqa: SIM905
    "JobRunCount NumJobCompletions NumHolds NumSystemHolds ExitBySignal ExitCode ExitSignal RemoteWallClockTime "
    "LastRemoteWallClockTime CumulativeSlotTime RemoteUserCpu RemoteSysCpu CumulativeRemoteUserCpu "
    "CumulativeRemoteSysCpu CurrentTime JobStartDate JobCurrentStartDate JobCurrentStartExecutingDate ShadowBday "
    "CompletionDate HoldReason HoldReasonCode HoldReasonSubCode LastHoldReason LastHoldReasonCode ReleaseReason "
    "RemoveReason ResidentSetSize MemoryUsage ImageSize".split()
)
#: ``$$([expression])``: evaluated in the job's ad when it is matched (each run); ``$$(Name)``: the machine's.
JOB_EXPRESSION = re.compile(r"\$\$\(\[(.*?)\]\)")
_MACHINE_ATTRIBUTE = re.compile(r"\$\$\((?!\[)([^)]*)\)")

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGTP]?)B?\s*$", re.IGNORECASE)


@attrs.frozen
class Placement:
    """What a job asks of the machine that runs it, as the ad's expressions (``""``: not asked)."""

    cpus: str = "1"
    memory: str = ""  # MB
    disk: str = ""  # KB
    gpus: str = ""
    requirements: str = ""
    rank: str = ""
    #: ``+`` attributes that requirements or rank use, and the other request_/require_/gpus_ commands.
    others: tuple[tuple[str, str], ...] = ()

    def need(self) -> Resources | None:
        """What a slave must have to run the job (:class:`~mwpy.resources.Resources`), None for nothing.

        The requests that are plain numbers (an expression cannot size a slave job) and the requirements;
        one cpu is what every slave has. ``rank`` and ``+`` attributes stay the job's own: a slave job for
        the need does not carry them, so requirements that name one are left out (they would match no slot).
        """

        def number(text: str) -> int:
            return int(text) if text.strip().isdigit() else 0

        cpus = number(self.cpus)
        return Resources.of(
            {
                "cpus": cpus if cpus > 1 else 0,
                "memory": number(self.memory),
                "disk": math.ceil(number(self.disk) / 1024),  # KB in the ad, MB in a need
                "gpus": number(self.gpus),
                "requirements": "" if any(name.startswith("+") for name, _ in self.others) else self.requirements,
            }
        )

    def describe(self) -> str:
        """One line: ``cpus 1, memory 1024 MB, requirements (HAS_X)``."""
        parts = [f"cpus {self.cpus}"]
        parts += [f"memory {self.memory} MB"] if self.memory else []
        parts += [f"disk {self.disk} KB"] if self.disk else []
        parts += [f"gpus {self.gpus}"] if self.gpus else []
        parts += [f"requirements {self.requirements}"] if self.requirements else []
        parts += [f"rank {self.rank}"] if self.rank else []
        parts += [f"{name} {value}" for name, value in self.others]
        return ", ".join(parts)


@attrs.frozen
class JobAd:
    """The job-ad attributes made from a job's policy, placement and bookkeeping commands.

    ``attributes`` are ``(name, ClassAd expression text)`` pairs; ``policy`` is
    False when the file sets no policy command at all (every job then simply
    completes when it exits, and the master needs no ClassAd).
    """

    attributes: tuple[tuple[str, str], ...] = ()
    placement: Placement = Placement()
    policy: bool = False
    hold: bool = False  # submitted on hold (``hold = true``)
    kill_sig: str = ""  # the signal that stops a held or removed job (``""``: SIGTERM)
    hold_kill_sig: str = ""  # for a job held while it runs, if not kill_sig
    remove_kill_sig: str = ""  # for a job removed while it runs, if not kill_sig
    kill_timeout: int | None = None  # seconds before SIGKILL (kill_sig_timeout / job_max_vacate_time)

    def get(self, name: str, default: str = "") -> str:
        for key, value in self.attributes:
            if key.lower() == name.lower():
                return value
        return default

    @classmethod
    def from_commands(cls, value: Callable[[str], str], spellings: Mapping[str, tuple[str, ...]], where: str) -> JobAd:
        """The attributes ``condor_submit`` would write, from ``value(command)`` (expanded, ``""`` when unset)."""
        attributes: dict[str, str] = {}
        policy = _retries(value, attributes, where) | _periodic(value, attributes)
        for command, attribute in _INTEGERS.items():
            if value(command).strip():
                attributes[attribute] = _integer(value(command), command, where)
                policy = True
        for command, attribute in _STRINGS.items():
            if value(command).strip():
                attributes[attribute] = _quoted(value(command))
        if value("priority").strip():
            attributes["JobPrio"] = _integer(value("priority"), "priority", where)
        own = _own_attributes(value, spellings)
        attributes.update(own)
        placement = _placement(value, spellings, own, where)
        attributes.update(_placement_attributes(placement))
        for name, expression in attributes.items():
            _check_expression(name, expression, where)
        hold = value("hold").strip().lower() in ("true", "yes", "t", "y", "1")
        timeout = value("kill_sig_timeout").strip() or value("job_max_vacate_time").strip()
        return cls(
            attributes=tuple(attributes.items()),
            placement=placement,
            policy=policy or hold,
            hold=hold,
            kill_sig=value("kill_sig").strip(),
            hold_kill_sig=value("hold_kill_sig").strip(),
            remove_kill_sig=value("remove_kill_sig").strip(),
            kill_timeout=int(_integer(timeout, "kill_sig_timeout", where)) if timeout else None,
        )


DEFAULT_AD = JobAd()

#: Commands that become an integer attribute as they are.
_INTEGERS = {"allowed_job_duration": "AllowedJobDuration", "allowed_execute_duration": "AllowedExecuteDuration"}
#: Commands that become a string attribute.
_STRINGS = {"batch_name": "JobBatchName", "description": "JobDescription", "submit_event_notes": "SubmitEventNotes"}


def _retries(value: Callable[[str], str], attributes: dict[str, str], where: str) -> bool:
    """``SetJobRetries``: OnExitRemove and OnExitHold, and what max_retries, success_exit_code and retry_until
    make of them. True when the file sets any of these."""
    remove, hold = value("on_exit_remove").strip(), value("on_exit_hold").strip()
    retries, success, until = (value(c).strip() for c in ("max_retries", "success_exit_code", "retry_until"))
    attributes["OnExitHold"] = hold or "false"
    if not (retries or success or until):
        attributes["OnExitRemove"] = remove or "true"
        return bool(remove or hold)
    attributes["JobMaxRetries"] = _integer(retries, "max_retries", where) if retries else str(DEFAULT_MAX_RETRIES)
    check = "0"
    if success:
        attributes["JobSuccessExitCode"] = _integer(success, "success_exit_code", where)
        check = "JobSuccessExitCode"
    if until:
        check += " || " + (f"ExitCode =?= {int(until)}" if re.fullmatch(r"-?\d+", until) else _wrapped(until))
    expression = f"NumJobCompletions > JobMaxRetries || ExitCode =?= {check}"
    attributes["OnExitRemove"] = expression + (f" || {_wrapped(remove)}" if remove else "")
    return True


def _periodic(value: Callable[[str], str], attributes: dict[str, str]) -> bool:
    """``SetPeriodicExpressions``: the periodic checks (false when unset) and the hold reasons and codes."""
    policy = False
    for command, attribute in (
        ("periodic_hold", "PeriodicHold"),
        ("periodic_release", "PeriodicRelease"),
        ("periodic_remove", "PeriodicRemove"),
    ):
        expression = value(command).strip()
        attributes[attribute] = expression or "false"
        policy = policy or bool(expression)
    for command, attribute in (
        ("periodic_hold_reason", "PeriodicHoldReason"),
        ("periodic_hold_subcode", "PeriodicHoldSubCode"),
        ("on_exit_hold_reason", "OnExitHoldReason"),
        ("on_exit_hold_subcode", "OnExitHoldSubCode"),
    ):
        if value(command).strip():
            attributes[attribute] = value(command).strip()
    return policy


def _wrapped(expression: str) -> str:
    """An expression to be joined with ``||``: parenthesised when a ``?:`` would otherwise swallow the rest."""
    return f"({expression})" if "?" in expression else expression


def _check_expression(name: str, expression: str, where: str) -> None:
    """condor_submit refuses an attribute that is no ClassAd expression ("Parse error in expression"): refuse it
    before any job runs, not when the policy first evaluates it."""
    if not _parses(expression):
        hint = " (a '#' starts a comment only at the start of a line)" if "#" in expression else ""
        raise SubmitError(f"{name} = {expression} ({where}): not a ClassAd expression{hint}")


@functools.lru_cache(maxsize=4096)  # most jobs of a file share their expressions
def _parses(expression: str) -> bool:
    import classad2  # noqa: PLC0415 (loaded with the bindings already)

    try:
        classad2.ExprTree(expression)
    except Exception:  # the library's own exception type (classad2_impl.ClassAdException)
        return False
    return True


def _integer(text: str, command: str, where: str) -> str:
    if re.fullmatch(r"\s*-?\d+\s*", text) is None:
        raise SubmitError(f"{command} = {text.strip()} ({where}): expected an integer")
    return text.strip()


def _quoted(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _own_attributes(value: Callable[[str], str], spellings: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """``+Name = expr`` and ``MY.Name = expr``: the job's own attributes, as expression text."""
    found = {}
    for name in spellings:
        if name.startswith("+") or name.startswith("my."):
            expression = value(name).strip()
            if expression:
                attribute = spellings[name][0]
                found[attribute[1:] if attribute.startswith("+") else attribute[3:]] = expression
    return found


def size(text: str, unit: int) -> str:
    """``request_memory = 1 GB`` -> ``"1024"`` (``unit`` bytes each, rounded up); an expression stays as it is."""
    found = _SIZE.match(text)
    if found is None:
        return text.strip()
    number = float(found.group(1)) * _UNITS[found.group(2).upper()] if found.group(2) else float(found.group(1))
    return str(math.ceil(number / unit)) if found.group(2) else str(math.ceil(number))


def _placement(
    value: Callable[[str], str], spellings: Mapping[str, tuple[str, ...]], own: Mapping[str, str], where: str
) -> Placement:
    del where
    requirements, rank = value("requirements").strip(), value("rank").strip()
    used = {name for name in own if re.search(rf"\b{re.escape(name)}\b", requirements + " " + rank, re.IGNORECASE)}
    others = [(f"+{name}", own[name]) for name in sorted(used)]
    for name in sorted(spellings):
        asked = name.startswith(("request_", "require_", "gpus_")) or name == "cuda_version"
        if asked and name not in _PLACEMENT_COMMANDS and value(name).strip():
            others.append((name, value(name).strip()))
    memory = value("request_memory").strip() or value("image_size").strip()
    return Placement(
        cpus=value("request_cpus").strip() or "1",
        memory=size(memory, 1 << 20) if value("request_memory").strip() else _image_memory(value("image_size")),
        disk=size(value("request_disk"), 1 << 10) if value("request_disk").strip() else "",
        gpus=value("request_gpus").strip(),
        requirements=requirements,
        rank=rank,
        others=tuple(others),
    )


def _image_memory(image_size: str) -> str:
    """Without request_memory, condor_submit asks for the image size (``image_size`` KB) in MB."""
    if not image_size.strip():
        return ""
    kilobytes = size(image_size, 1 << 10)
    return str(math.ceil(int(kilobytes) / 1024)) if kilobytes.isdigit() else ""


_PLACEMENT_COMMANDS = frozenset({"request_cpus", "request_memory", "request_disk", "request_gpus"})


def _placement_attributes(placement: Placement) -> dict[str, str]:
    found = {"RequestCpus": placement.cpus}
    if placement.memory:
        found["RequestMemory"] = placement.memory
    if placement.disk:
        found["RequestDisk"] = placement.disk
    if placement.gpus:
        found["RequestGPUs"] = placement.gpus
    if placement.requirements:
        found["Requirements"] = placement.requirements
    if placement.rank:
        found["Rank"] = placement.rank
    return found


def check_job_expressions(text: str, ad: JobAd, where: str) -> None:
    """``$$(...)`` in ``text`` (arguments, environment): ``$$([expression])`` of the job's own ad is evaluated
    per run (:meth:`mwpy.jobs.policy.JobLife.expand`); what needs the matched machine's ad (``$$(Name)``, an
    expression naming a machine attribute) is refused, as mwpy's slaves have no machine ad for a job."""
    import classad2  # noqa: PLC0415 (loaded with the bindings already)

    plain = _MACHINE_ATTRIBUTE.search(text)
    if plain is not None:
        raise SubmitError(f"{where}: $$({plain[1]}) is an attribute of the matched machine: {_NO_MACHINE}")
    names = SCHEDD_ATTRIBUTES | {name for name, _ in ad.attributes}
    for found in JOB_EXPRESSION.finditer(text):
        try:
            tree = classad2.ExprTree(found[1])
        except Exception:  # the library's own exception type
            raise SubmitError(f"{where}: $$([{found[1]}]): not a ClassAd expression") from None
        machine = [name for name in classad2.ClassAd(dict.fromkeys(names, 0)).externalRefs(tree) if name]
        if machine:
            attributes = ", ".join(sorted(machine))
            raise SubmitError(f"{where}: $$([{found[1]}]) uses {attributes} of the matched machine: {_NO_MACHINE}")


_NO_MACHINE = "mwpy jobs has no machine ad (only $$([expression]) of the job's own attributes is evaluated)"

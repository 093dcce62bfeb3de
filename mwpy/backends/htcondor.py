"""Slaves as HTCondor vanilla jobs, through the ``htcondor2`` Python bindings.

Every slave job carries ``MwpyMemberId`` (the computation's member id) and
``MwpyRole = "slave"`` in its ClassAd; the back end only ever queries or
removes jobs with both, so an overseer never touches another computation's
jobs. The resource file travels with ``transfer_input_files`` and is sent anew
at every (re)start; ``on_exit_remove`` keeps a slave queued until it exits 0.

``submit/slaves.sub`` describes the same job for ``condor_submit``;
:data:`SLAVE_POLICY` is its job policy, and tests/test_condor_description.py
fails when the two disagree on any command. A user's ``--submit-file`` adds
commands, but may not change those mwpy's bookkeeping relies on
(:data:`RESERVED`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import classad2
import htcondor2

from mwpy import resource_file
from mwpy.backends import Job, JobState, Launch, condor_match, exited
from mwpy.backends.condor_log import RECONCILE_EVERY, JobLog
from mwpy.errors import BackendError, ConfigurationError, ResourceFileError, UsageError
from mwpy.names import MEMBER_ATTRIBUTE, ROLE_ATTRIBUTE, SHAPE_ATTRIBUTE, SLAVES_LOG
from mwpy.resources import Resources

ON_EXIT_REMOVE = "(ExitBySignal == False) && (ExitCode == 0)"
#: Memory (MB) a slave job asks for, as in submit/slaves.sub. An explicit request keeps a
#: slave that once grew big from never matching again (CL-MW's memory note).
REQUEST_MEMORY = "512"
#: A slave held because its input transfer failed (hold code 13: the resource file was being
#: replaced, the master not yet there) tries again every 20 s, up to 30 times.
PERIODIC_RELEASE = "(HoldReasonCode == 13) && (NumHolds <= 30) && ((time() - EnteredCurrentStatus) > 20)"

#: What every slave job gets besides what the resource file names: the job policy of
#: submit/slaves.sub, command by command (tests/test_condor_description.py holds the two together).
SLAVE_POLICY: dict[str, str] = {
    "universe": "vanilla",
    "transfer_executable": "false",
    "should_transfer_files": "YES",
    "when_to_transfer_output": "ON_EXIT",
    "on_exit_remove": ON_EXIT_REMOVE,
    "periodic_release": PERIODIC_RELEASE,
    "request_memory": REQUEST_MEMORY,
    "output": "slave.$(Cluster).$(Process).out",
    "error": "slave.$(Cluster).$(Process).err",
    "log": SLAVES_LOG,
    "notification": "never",
    f"+{ROLE_ATTRIBUTE}": '"slave"',
    "+WantIOProxy": "true",
}

#: Submit commands the overseer's bookkeeping depends on (compared as :func:`command_key` makes them):
#: a ``--submit-file`` that sets one is refused, rather than making jobs the overseer cannot count or start.
RESERVED = frozenset(
    {
        "executable",
        "arguments",
        "initialdir",
        "initial_dir",
        "transfer_input_files",
        "on_exit_remove",
        f"my.{MEMBER_ATTRIBUTE.lower()}",
        f"my.{ROLE_ATTRIBUTE.lower()}",
        f"my.{SHAPE_ATTRIBUTE.lower()}",
    }
)
#: Commands whose user value is added to mwpy's with ``&&`` instead of replacing it.
CONJOINED = frozenset({"requirements"})

_STATES = {
    int(htcondor2.JobStatus.IDLE): JobState.IDLE,
    int(htcondor2.JobStatus.RUNNING): JobState.RUNNING,
    int(htcondor2.JobStatus.TRANSFERRING_OUTPUT): JobState.RUNNING,
    int(htcondor2.JobStatus.SUSPENDED): JobState.RUNNING,
    int(htcondor2.JobStatus.HELD): JobState.HELD,
}

#: What newer bindings (25.x) say when an older schedd (23.x) does not bind FS authentication to its address.
_FS_BINDING_MISMATCH = "doesn't match server's network address"

T = TypeVar("T")


class CondorError(BackendError):
    """The schedd could not be found or refused a request (the message is one line for users)."""


def quote_arguments(arguments: Sequence[str]) -> str:
    """Condor's new-style ``arguments`` syntax: double-quoted, each argument single-quoted."""
    quoted = ("'" + arg.replace("'", "''").replace('"', '""') + "'" for arg in arguments)
    return '"' + " ".join(quoted) + '"'


def command_key(command: str) -> str:
    """A submit command as Condor compares it: case-insensitive, ``+Name`` the same as ``MY.Name``."""
    key = command.strip().lower()
    return f"my.{key[1:]}" if key.startswith("+") else key


def slave_description(launch: Launch, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The submit description of one slave job, with a user's ``extra`` commands merged in.

    ``extra`` commands replace mwpy's of the same name, except ``requirements``,
    which must hold as well as mwpy's; reserved commands are refused
    (:func:`check_user_commands`). A launch for a need (:attr:`Launch.shape`)
    adds that need on top: :func:`shape_commands`.
    """
    description = {
        **SLAVE_POLICY,
        "executable": launch.executable,
        "arguments": quote_arguments(launch.arguments),
        "initialdir": str(Path(launch.resource_file).parent),
        "transfer_input_files": ",".join([*launch.files, launch.resource_file]),
        f"+{MEMBER_ATTRIBUTE}": classad2.quote(launch.member_id),
    }
    merged = merge_commands(description, check_user_commands(extra or {}))
    if launch.shape is not None:
        merged = shape_commands(merged, launch.shape)
    if launch.memory is not None:
        raise_request(merged, "request_memory", launch.memory)
    return merged


def shape_commands(description: Mapping[str, str], shape: Resources) -> dict[str, str]:
    """``description`` made to serve tasks that need ``shape``: its requests raised to the need's (never
    lowered: a user's larger request stays), its requirements ``&&`` the need's, and ``+MwpyShape`` naming
    the need, so the overseer counts the job for it and its slave reports the need's requirements."""
    merged = dict(description)
    for command, value in (
        ("request_cpus", shape.cpus),
        ("request_memory", shape.memory),
        ("request_disk", shape.disk * 1024),  # KB, condor_submit's unit for a bare number
        ("request_gpus", shape.gpus),
    ):
        if value:
            raise_request(merged, command, value)
    if shape.requirements:
        merged = merge_commands(merged, {"requirements": shape.requirements})
    merged[f"+{SHAPE_ATTRIBUTE}"] = classad2.quote(str(shape))
    return merged


def raise_request(description: dict[str, str], command: str, amount: int) -> None:
    """Ask for at least ``amount`` (``request_memory``: MB): mwpy raises a request (its default's or the
    user's), never lowers it.

    A user's value that is not a plain number ("2 GB", an expression) cannot be compared and is replaced:
    the overseer asks for more only after slaves needed more (or a job was held for memory), or for a need.
    """
    name = next((given for given in description if command_key(given) == command), command)
    current = description.get(name, "").strip()
    if not current.isdigit() or int(current) < amount:
        description.pop(name, None)
        description[command] = str(amount)


def merge_commands(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``extra`` merged in: a command of either spelling replaces, ``requirements`` add up (``&&``)."""
    merged = dict(base)
    for command, value in extra.items():
        key = command_key(command)
        mine = next((name for name in merged if command_key(name) == key), None)
        if mine is not None and key in CONJOINED:
            merged[mine] = f"({merged[mine]}) && ({value})"
            continue
        if mine is not None:
            del merged[mine]
        merged[command] = value
    return merged


def check_user_commands(commands: Mapping[str, str], source: str = "submit commands") -> dict[str, str]:
    """``commands`` unchanged, or :class:`~mwpy.errors.ConfigurationError` naming a reserved one."""
    for command in commands:
        if command_key(command) in RESERVED:
            raise ConfigurationError(
                f"{source}: {command.strip()} is set by mwpy for every slave job and cannot be overridden"
            )
    return dict(commands)


def read_submit_commands(path: str) -> dict[str, str]:
    """``key = value`` lines of a submit file (comments and ``queue`` ignored), for ``--submit-file``.

    A line that is not a command, or a reserved command, is a
    :class:`~mwpy.errors.ConfigurationError` (``mwpy overseer`` exits 2).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--submit-file: cannot read {path}: {exc.strerror or exc}") from None
    commands: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith("queue"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ConfigurationError(f"{path}:{number}: expected 'command = value'")
        commands[key.strip()] = value.strip()
    return check_user_commands(commands, f"--submit-file {path}")


def slave_constraint(member_id: str) -> str:
    """The ClassAd constraint that selects one computation's slave jobs."""
    return f'{MEMBER_ATTRIBUTE} == {classad2.quote(member_id)} && {ROLE_ATTRIBUTE} == "slave"'


def explain(exc: Exception) -> str:
    """One line for an error of the bindings, with a hint where one is known."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if _FS_BINDING_MISMATCH in text:
        text += (
            " (the htcondor bindings are newer than the schedd: install the schedd's version of the "
            "htcondor package, or set _condor_SEC_FS_ENFORCE_CHANNEL_BINDING=false; see docs/condor.md)"
        )
    return text


class CondorBackend:
    """Submits, lists and removes one computation's slave jobs on a Condor schedd.

    The member id comes from the constructor or, lazily, from the resource
    file, so an overseer may start before the master has written the file.
    A failed call of the bindings is tried again with a freshly located
    schedd: after a schedd restart the first calls of a long-lived client fail
    on its cached security sessions (docs/condor-pool.md, surprise 2). A
    submit is not retried blindly (it may have gone through); the overseer's
    next reconciliation counts the queue again instead.

    The job table comes from the slave jobs' user log (:class:`~mwpy.backends.condor_log.JobLog`): the schedd
    is queried to reconcile at the start, every ``reconcile_every`` seconds and when the log leaves a doubt
    (0: every :meth:`jobs`, as polling). :attr:`queries` counts the schedd queries by purpose.
    """

    name = "condor"

    def __init__(
        self,
        member_id: str | None = None,
        *,
        resource_file: str | None = None,
        extra: Mapping[str, str] | None = None,
        schedd: str | None = None,
        collector: str | None = None,
        reconcile_every: float = RECONCILE_EVERY,
    ) -> None:
        if member_id is None and resource_file is None:
            raise ConfigurationError("CondorBackend needs a member id or a resource file")
        self._member_id = member_id
        self._resource_file = resource_file
        self._extra = check_user_commands(extra or {})
        self._schedd_name = schedd
        self._collector = collector
        self._schedd = self._locate()
        self._reconcile_every = reconcile_every
        self._log = JobLog()
        self._master_log = JobLog()  # the master's own job, from its user log (master_departure)
        if resource_file is not None:  # the log slaves.sub names, followed from the first look on
            self._log.watch(str(Path(resource_file).parent / SLAVES_LOG))
        #: Schedd queries so far, by purpose: "jobs" (the job table), "master" (its job), "explain" (idle jobs).
        self.queries: collections.Counter[str] = collections.Counter()

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """``mwpy overseer --backend condor`` options."""
        parser.add_argument(
            "--submit-file", help="condor back end: extra submit commands for slave jobs (one 'command = value' a line)"
        )
        parser.add_argument(
            "--reconcile-every",
            type=float,
            default=RECONCILE_EVERY,
            metavar="SECONDS",
            help="condor back end: query the schedd to check the job table followed from the slaves' user log "
            f"this often (default {RECONCILE_EVERY:g}; 0 queries at every reconciliation)",
        )
        add_location_arguments(parser)

    @classmethod
    def create(cls, resource_file: str, options: argparse.Namespace) -> CondorBackend:
        """The back end for the computation a resource file describes (the file may not exist yet)."""
        extra = read_submit_commands(options.submit_file) if options.submit_file else None
        return cls(
            resource_file=str(Path(resource_file).resolve()),
            extra=extra,
            schedd=options.schedd,
            collector=options.collector,
            reconcile_every=options.reconcile_every,
        )

    @property
    def member_id(self) -> str:
        """The computation's member id (read from the resource file the first time it is needed)."""
        if self._member_id is None:
            assert self._resource_file is not None
            self._member_id = resource_file.read(self._resource_file).member_id
        return self._member_id

    def jobs(self) -> list[Job]:
        """The slave jobs as their user log tells (the schedd is asked when :class:`JobLog` says so).

        Each job carries its failed runs from the log: a job that failed and restarted between two looks
        looks running at both.
        """
        self._log.follow()
        if self._log.needs_query(time.monotonic(), self._reconcile_every):
            ads = self._query("jobs", slave_constraint(self.member_id), _PROJECTION)
            self._log.reconciled([_record(ad) for ad in ads], time.monotonic())
            self._log.follow()  # a log named for the first time: its failed runs
        jobs = (_job(ad, self._log.counts[_job_id(ad)] if self._log.followed(ad) else None) for ad in self._log.ads)
        return [job for job in jobs if job is not None]

    def submit(self, launch: Launch, count: int) -> None:
        commands = slave_description(launch, self._extra)
        description = htcondor2.Submit(commands)
        result = self._call("submit slave jobs", lambda schedd: schedd.submit(description, count=count), retry=False)
        self._log.expect(
            int(result.cluster()), range(result.first_proc(), result.first_proc() + result.num_procs()),
            _command(commands, "request_memory"), _log_path(commands), time.time(),
            shape=None if launch.shape is None else str(launch.shape),
        )  # fmt: skip

    def submit_shaped(self, launch: Launch, count: int) -> None:
        """Slave jobs for ``launch.shape`` (:func:`shape_commands`): the same submission, the need on top."""
        self.submit(launch, count)

    def remove(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            ids = list(job_ids)
            self._call(
                "remove slave jobs", lambda schedd: schedd.act(htcondor2.JobAction.Remove, ids, reason="mwpy overseer")
            )

    def master_departure(self, job_id: str) -> str | None:
        """How the computation's master job left the queue (from the queue, else the history), or None.

        None while it is queued (running, idle or held: a held master may be
        released) and when this schedd has never known it (a master submitted
        through another schedd is not taken for gone). Once the queue has shown
        it, its own user log is followed as the slaves' is: the schedd is asked
        again when the log says it terminated or was aborted, or leaves a doubt,
        and every ``reconcile_every`` seconds.
        """
        self._master_log.follow()
        now = time.monotonic()
        if not self._master_log.needs_query(now, self._reconcile_every) and any(
            _job_id(ad) == job_id for ad in self._master_log.ads
        ):
            return None
        constraint = self._master_constraint(job_id)
        queued = self._query("master", constraint, _MASTER_PROJECTION)
        self._adopt_member_id(queued)
        if queued and int(queued[0].get("JobStatus", 0)) not in _GONE:
            self._master_log.reconciled([_record(queued[0])], now)
            self._master_log.follow()  # its log from the start: what happened since is applied
            return None
        ads = queued or self._master_history(constraint)
        self._adopt_member_id(ads)
        return departure(job_id, ads[0]) if ads else None

    def master_known(self, job_id: str) -> bool:
        """Whether the queue or the history holds ``job_id`` as this computation's master job."""
        constraint = self._master_constraint(job_id)
        return bool(self._query("master", constraint, _MASTER_PROJECTION) or self._master_history(constraint))

    def _master_constraint(self, job_id: str) -> str:
        """The master job ``job_id`` (an mwpy master; this computation's, once its member id is known)."""
        cluster, _, proc = job_id.partition(".")
        constraint = f'ClusterId == {int(cluster)} && ProcId == {int(proc)} && {ROLE_ATTRIBUTE} == "master"'
        member = self._known_member_id()
        return constraint if member is None else f"{constraint} && {MEMBER_ATTRIBUTE} == {classad2.quote(member)}"

    def _master_history(self, constraint: str) -> list[Any]:
        """The master job's ad in the schedd's history (its last), or none (counted as a query of the master)."""
        self.queries["master"] += 1
        return list(
            self._call(
                "read the schedd's history", lambda schedd: schedd.history(constraint, projection=_DEPARTURE, match=1)
            )
        )

    def _known_member_id(self) -> str | None:
        """The member id, if known: given, learned, or read from the resource file (which may not exist)."""
        try:
            return self.member_id
        except ResourceFileError:
            return None

    def _adopt_member_id(self, ads: Sequence[Any]) -> None:
        """With no member id yet (no resource file), take the master job's: its slave jobs carry the same,
        so they can be listed and removed although the master never wrote its file, or the file is gone."""
        if self._member_id is None and ads and isinstance(ads[0].get(MEMBER_ATTRIBUTE), str):
            self._member_id = str(ads[0][MEMBER_ATTRIBUTE])

    def explain_idle(self, jobs: Sequence[Job]) -> list[Job]:
        """``jobs`` with why each idle one does not run (:func:`~mwpy.backends.condor_match.why_idle`).

        One job is analysed per shape and memory request (slave jobs differ in nothing else), with one
        collector query.
        """
        idle = {(job.shape, job.memory): job for job in jobs if job.state is JobState.IDLE}
        if not idle:
            return list(jobs)
        try:
            slots = self._slot_ads()
        except CondorError as exc:
            return [attrs.evolve(job, reason=str(exc)) if job.state is JobState.IDLE else job for job in jobs]
        why: dict[tuple[str | None, int | None], str] = {}
        for kind, job in idle.items():
            ad = self._full_ad(job.job_id)
            if ad is not None:
                why[kind] = condor_match.why_idle(ad, slots)
        return [
            _with_reason(job, why.get((job.shape, job.memory))) if job.state is JobState.IDLE else job for job in jobs
        ]

    def _full_ad(self, job_id: str) -> Any:
        """The whole ad of one of this computation's jobs (its Requirements may name any attribute), or None."""
        cluster, _, proc = job_id.partition(".")
        constraint = f"ClusterId == {int(cluster)} && ProcId == {int(proc)} && {slave_constraint(self.member_id)}"
        ads = self._query("explain", constraint)
        return ads[0] if ads else None

    def _slot_ads(self) -> list[Any]:
        """Every slot the pool's collector lists (``--collector``, else the local pool's)."""
        try:
            collector = htcondor2.Collector(self._collector) if self._collector else htcondor2.Collector()
            return list(collector.query(htcondor2.AdType.Startd))
        except (htcondor2.HTCondorException, ValueError) as exc:
            raise CondorError(f"cannot ask the collector for the pool's slots: {explain(exc)}") from None

    def poll(self) -> None:
        """Condor restarts and moves jobs by itself: nothing to do."""

    def close(self) -> None:
        """The schedd connection needs no closing; the user logs followed are closed."""
        self._log.close()
        self._master_log.close()

    def _query(self, purpose: str, constraint: str, projection: list[str] | None = None) -> list[Any]:
        """Ask the schedd for the ads that match (whole ads without ``projection``), counted in :attr:`queries`."""
        self.queries[purpose] += 1
        return self._call("query the schedd", lambda schedd: schedd.query(constraint, projection=projection or []))

    def _call(self, what: str, call: Callable[[Any], T], *, retry: bool = True) -> T:
        """Call the bindings; on failure locate the schedd afresh and, if ``retry``, try twice more.

        After a restart the collector (which locates the schedd) and the schedd
        each refuse the first call, so a call may fail twice before it works.
        """
        error: Exception | None = None
        for _ in range(3 if retry else 1):
            try:
                return call(self._schedd)
            except htcondor2.HTCondorException as exc:
                error = exc
                with contextlib.suppress(CondorError):
                    self._schedd = self._locate()
        assert error is not None
        raise CondorError(f"cannot {what}: {explain(error)}")

    def _locate(self) -> Any:
        """The schedd: the local one, or the one named (``--schedd``) through a collector (``--collector``).

        A pilot factory submits through a schedd on another host; it is found by name in the pool's
        collector, exactly as ``condor_q -name NAME -pool HOST:PORT`` finds it.
        """
        where = self.where()
        try:
            if self._schedd_name is None and self._collector is None:
                return htcondor2.Schedd()
            collector = htcondor2.Collector(self._collector) if self._collector else htcondor2.Collector()
            located = collector.locate(htcondor2.DaemonType.Schedd, self._schedd_name)
        except (htcondor2.HTCondorException, ValueError) as exc:
            raise CondorError(f"cannot find the schedd{where}: {explain(exc)}") from None
        if located is None:  # the bindings return None for an unknown name; Schedd(None) would be the LOCAL schedd
            raise CondorError(f"cannot find the schedd{where}: the collector knows no schedd by that name")
        return htcondor2.Schedd(located)

    def where(self) -> str:
        """`` NAME via HOST:PORT`` for messages, "" for the local schedd."""
        name = f" {self._schedd_name}" if self._schedd_name else ""
        via = f" via collector {self._collector}" if self._collector else ""
        return name + via


#: The job attributes :func:`_job` reads.
_PROJECTION = [
    "ClusterId",
    "ProcId",
    "JobStatus",
    "ExitCode",
    "ExitBySignal",
    "ExitSignal",
    "HoldReason",
    "HoldReasonCode",
    "EnteredCurrentStatus",
    "RequestMemory",
    "UserLog",
    SHAPE_ATTRIBUTE,
]
#: The attributes :func:`departure` reads, and the job states of a job on its way out (removed, completed).
_DEPARTURE = [
    "JobStatus", "RemoveReason", "ExitCode", "ExitBySignal", "ExitSignal", "EnteredCurrentStatus", MEMBER_ATTRIBUTE,
]  # fmt: skip
_GONE = (int(htcondor2.JobStatus.REMOVED), int(htcondor2.JobStatus.COMPLETED))
#: What the master job's query asks: how it left, and what following its log needs.
_MASTER_PROJECTION = sorted({*_DEPARTURE, *_PROJECTION})


def departure(job_id: str, ad: Mapping[str, Any]) -> str:
    """``master job 12.0 removed at 14:02:11 (via condor_rm (by user me))``: how a job left the queue, one line."""
    entered = ad.get("EnteredCurrentStatus")
    when = f" at {time.strftime('%H:%M:%S', time.localtime(entered))}" if isinstance(entered, int | float) else ""
    if int(ad.get("JobStatus", 0)) == int(htcondor2.JobStatus.REMOVED):
        reason = " ".join(str(ad.get("RemoveReason") or "").split())
        return f"master job {job_id} removed{when}" + (f" ({reason})" if reason else "")
    if ad.get("ExitBySignal"):
        return f"master job {job_id} killed by signal {ad.get('ExitSignal', '?')}{when}"
    return f"master job {job_id} exited with status {ad.get('ExitCode', '?')}{when}"


#: Seconds a master that got SIGTERM waits for its schedd to say whether its job was removed.
REMOVAL_QUESTION_WAIT = 5.0


def job_removed(job_id: str, wait: float = REMOVAL_QUESTION_WAIT) -> bool:
    """Whether this host's schedd holds ``job_id`` as removed (``condor_rm``, ``JobStatus == 3``).

    Asked by a master that got SIGTERM, which a schedd shutting down sends too (it starts the job again when it
    comes back, and the slaves should wait for it). No answer within ``wait`` seconds (a schedd on its way down)
    counts as not removed.
    """
    cluster, _, proc = job_id.partition(".")
    answers: list[bool] = []

    def ask() -> None:
        with contextlib.suppress(htcondor2.HTCondorException, ValueError):
            ads = htcondor2.Schedd().query(
                constraint=f"ClusterId == {int(cluster)} && ProcId == {int(proc)}", projection=["JobStatus"]
            )
            answers.append(bool(ads) and int(ads[0].get("JobStatus", 0)) == int(htcondor2.JobStatus.REMOVED))

    asking = threading.Thread(target=ask, name="mwpy-job-removed", daemon=True)
    asking.start()
    asking.join(wait)
    return bool(answers) and answers[0]


#: HoldReasonCode 34 (JobOutOfResources): the job used more memory than it asked for (the startd's cgroup
#: policy); a site's periodic hold says so in its reason instead ("memory usage exceeded request_memory").
MEMORY_HOLD_CODE = 34
_MEMORY_REASON = re.compile(r"\bmemory\b.*\b(limit|request|exceed)", re.IGNORECASE)


def _job_id(ad: Mapping[str, Any]) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def _job(ad: Mapping[str, Any], failed_runs: int | None = None) -> Job | None:
    """A job ad as a :class:`Job`; None for a job on its way out (removed, completed).

    ``failed_runs``: the job's failed runs counted from its user log, None when it has none.
    """
    state = _STATES.get(int(ad["JobStatus"]))
    if state is None:
        return None
    by_signal = bool(ad.get("ExitBySignal", False))
    exit_code = None if by_signal or ad.get("ExitCode") is None else int(ad["ExitCode"])
    reason: str | None = None
    if state is JobState.HELD:
        reason = str(ad.get("HoldReason") or "held")
    elif by_signal:
        reason = f"killed by signal {ad.get('ExitSignal', '?')}"
    elif exit_code:
        reason = exited(exit_code)
    entered = ad.get("EnteredCurrentStatus")
    since = float(entered) if isinstance(entered, int | float) else None
    memory_hold = state is JobState.HELD and (
        ad.get("HoldReasonCode") == MEMORY_HOLD_CODE or _MEMORY_REASON.search(reason or "") is not None
    )
    return Job(
        _job_id(ad), state, exit_code=exit_code, reason=reason, since=since,
        memory=_requested_memory(ad), memory_hold=memory_hold, failed_runs=failed_runs,
        shape=_shape(ad),
    )  # fmt: skip


def _shape(ad: Mapping[str, Any]) -> str | None:
    """The need a job was submitted for (its ``MwpyShape``, as ``str(Resources)``); None for a plain job, or
    one whose attribute someone changed into what no need is (it is then counted as a plain job)."""
    text = ad.get(SHAPE_ATTRIBUTE)
    if not isinstance(text, str):
        return None
    try:
        return str(Resources.parse(text))
    except UsageError:
        return None


def _record(ad: Mapping[str, Any]) -> dict[str, Any]:
    """A queried ad as the job table keeps it: the projection, with RequestMemory as a number of MB."""
    return {**{name: ad.get(name) for name in _PROJECTION}, "RequestMemory": _requested_memory(ad)}


def _command(description: Mapping[str, str], name: str) -> int | None:
    """A submit command's value as a whole number (``request_memory = 2048``), None when absent or not one."""
    value = next((value for command, value in description.items() if command_key(command) == name), "").strip()
    return int(value) if value.isdigit() else None


def _log_path(description: Mapping[str, str]) -> str:
    """The user log a slave job writes: its ``log`` (slaves.sub's unless a --submit-file changed it), in its folder."""
    log = next(value for command, value in description.items() if command_key(command) == "log").strip().strip('"')
    return str(Path(description["initialdir"]) / log)


def _with_reason(job: Job, why: str | None) -> Job:
    """An idle job with why it does not match, after how its last run ended (if it ran)."""
    if why is None:
        return job
    return attrs.evolve(job, reason=why if job.reason is None else f"{why}; its last run {job.reason}")


def _requested_memory(ad: Mapping[str, Any]) -> int | None:
    """The job's RequestMemory in MB (an expression is evaluated in the ad), or None when it has none."""
    value = ad.get("RequestMemory")
    if value is not None and not isinstance(value, int | float) and hasattr(ad, "eval"):
        with contextlib.suppress(Exception):
            value = ad.eval("RequestMemory")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def add_location_arguments(parser: argparse.ArgumentParser) -> None:
    """``--schedd`` and ``--collector``, shared by ``mwpy overseer --backend condor`` and ``mwpy status``."""
    parser.add_argument("--schedd", metavar="NAME", help="condor: the schedd's name (default: the local schedd)")
    parser.add_argument(
        "--collector", metavar="HOST:PORT", help="condor: the collector that knows the schedd (default: the local pool)"
    )


def job_counts(
    member_id: str, *, analyse: bool = True, schedd: str | None = None, collector: str | None = None
) -> tuple[dict[str, int], str | None]:
    """A computation's slave jobs in the schedd's queue (idle, running, held and total), and why the first
    idle one does not run (None when none is idle, or when not ``analyse``: that costs a collector query).

    Raises :class:`CondorError` when there is no schedd to ask.
    """
    backend = CondorBackend(member_id, schedd=schedd, collector=collector)
    jobs = backend.jobs()
    if analyse:
        jobs = backend.explain_idle(jobs)
    return counts_of(jobs), next((job.reason for job in jobs if job.state is JobState.IDLE and job.reason), None)


def counts_of(jobs: Sequence[Job]) -> dict[str, int]:
    """Jobs by state: idle, running, held and total."""
    counts = {state.value: sum(job.state is state for job in jobs) for state in JobState}
    counts["total"] = len(jobs)
    return counts


def queue_view(
    member_id: str, master_job: str | None, *, schedd: str | None = None, collector: str | None = None
) -> tuple[list[Job], str | None]:
    """A computation's slave jobs (idle ones with why they do not match), and how its master job left the queue
    (None: queued, or no master job named).

    For ``mwpy status``: one schedd located once for both questions (raises :class:`CondorError` without one).
    """
    backend = CondorBackend(member_id, schedd=schedd, collector=collector)
    jobs = backend.explain_idle(backend.jobs())
    return jobs, (backend.master_departure(master_job) if master_job else None)

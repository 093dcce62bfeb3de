"""Slaves as HTCondor vanilla jobs, through the ``htcondor2`` Python bindings.

Every slave job carries ``MwpyMemberId`` (the computation's member id) and
``MwpyRole = "slave"`` in its ClassAd; the back end only ever queries or
removes jobs with both, so an overseer never touches another computation's
jobs. The resource file travels with ``transfer_input_files`` and is sent anew
at every (re)start; ``on_exit_remove`` keeps a slave queued until it exits 0.

``submit/slaves.sub`` describes the same job for ``condor_submit``; keep the
two in step (docs/condor.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import classad2
import htcondor2

from mwpy import resource_file
from mwpy.backends import Job, JobState, Launch
from mwpy.errors import BackendError

#: The job attribute that ties a job to its computation.
MEMBER_ATTRIBUTE = "MwpyMemberId"
#: The job attribute that says what a job is: "slave", "master" or "overseer".
ROLE_ATTRIBUTE = "MwpyRole"
ON_EXIT_REMOVE = "(ExitBySignal == False) && (ExitCode == 0)"
#: Memory (MB) a slave job asks for, as in submit/slaves.sub. An explicit request keeps a
#: slave that once grew big from never matching again (CL-MW's memory note).
REQUEST_MEMORY = "512"

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


def slave_description(launch: Launch, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The submit description of one slave job (``extra`` commands override the defaults)."""
    folder = str(Path(launch.resource_file).parent)
    description = {
        "universe": "vanilla",
        "executable": launch.executable,
        "transfer_executable": "false",
        "arguments": quote_arguments(launch.arguments),
        "initialdir": folder,
        "should_transfer_files": "YES",
        "when_to_transfer_output": "ON_EXIT",
        "transfer_input_files": ",".join([*launch.files, launch.resource_file]),
        "on_exit_remove": ON_EXIT_REMOVE,
        "request_memory": REQUEST_MEMORY,
        "output": "slave.$(Cluster).$(Process).out",
        "error": "slave.$(Cluster).$(Process).err",
        "log": "slaves.log",
        "notification": "never",
        f"+{MEMBER_ATTRIBUTE}": classad2.quote(launch.member_id),
        f"+{ROLE_ATTRIBUTE}": '"slave"',
    }
    description.update(extra or {})
    return description


def read_submit_commands(path: str) -> dict[str, str]:
    """``key = value`` lines of a submit file (comments and ``queue`` ignored), for ``--submit-file``."""
    commands: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith("queue"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ValueError(f"{path}:{number}: expected 'command = value'")
        commands[key.strip()] = value.strip()
    return commands


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
    """

    name = "condor"

    def __init__(
        self, member_id: str | None = None, *, resource_file: str | None = None, extra: dict[str, str] | None = None
    ) -> None:
        if member_id is None and resource_file is None:
            raise ValueError("CondorBackend needs a member id or a resource file")
        self._member_id = member_id
        self._resource_file = resource_file
        self._extra = extra or {}
        self._schedd = self._locate()

    @classmethod
    def for_resource_file(cls, path: str, *, submit_file: str | None = None) -> CondorBackend:
        """The back end for the computation a resource file describes (the file may not exist yet)."""
        extra = read_submit_commands(submit_file) if submit_file else None
        return cls(resource_file=str(Path(path).resolve()), extra=extra)

    @property
    def member_id(self) -> str:
        """The computation's member id (read from the resource file the first time it is needed)."""
        if self._member_id is None:
            assert self._resource_file is not None
            self._member_id = resource_file.read(self._resource_file).member_id
        return self._member_id

    def jobs(self) -> list[Job]:
        constraint = slave_constraint(self.member_id)
        ads = self._call(
            "query the schedd",
            lambda schedd: schedd.query(constraint, projection=["ClusterId", "ProcId", "JobStatus"]),
        )
        jobs = []
        for ad in ads:
            state = _STATES.get(int(ad["JobStatus"]))
            if state is not None:
                jobs.append(Job(f"{ad['ClusterId']}.{ad['ProcId']}", state))
        return jobs

    def submit(self, launch: Launch, count: int) -> None:
        description = htcondor2.Submit(slave_description(launch, self._extra))
        self._call("submit slave jobs", lambda schedd: schedd.submit(description, count=count), retry=False)

    def remove(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            ids = list(job_ids)
            self._call(
                "remove slave jobs", lambda schedd: schedd.act(htcondor2.JobAction.Remove, ids, reason="mwpy overseer")
            )

    def poll(self) -> None:
        """Condor restarts and moves jobs by itself: nothing to do."""

    def close(self) -> None:
        """The schedd connection needs no closing."""

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
                with contextlib.suppress(htcondor2.HTCondorException):
                    self._schedd = htcondor2.Schedd()
        assert error is not None
        raise CondorError(f"cannot {what}: {explain(error)}")

    @staticmethod
    def _locate() -> Any:
        try:
            return htcondor2.Schedd()
        except htcondor2.HTCondorException as exc:
            raise CondorError(f"cannot find the schedd: {explain(exc)}") from None


def job_counts(member_id: str) -> dict[str, int]:
    """A computation's slave jobs in the local schedd's queue: idle, running, held and total.

    Raises :class:`CondorError` when there is no schedd to ask.
    """
    jobs = CondorBackend(member_id).jobs()
    counts = {state.value: sum(job.state is state for job in jobs) for state in JobState}
    counts["total"] = len(jobs)
    return counts

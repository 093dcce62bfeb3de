"""Slaves as HTCondor vanilla jobs, through the ``htcondor2`` Python bindings.

Every slave job carries ``MwpyMemberId`` (the computation's member id) and
``MwpyRole = "slave"`` in its ClassAd; the back end only ever queries or
removes jobs with both, so an overseer never touches another computation's
jobs. The resource file travels with ``transfer_input_files`` and is sent anew
at every (re)start; ``on_exit_remove`` keeps a slave queued until it exits 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import classad2
import htcondor2

from mwpy import resource_file
from mwpy.backends import Job, JobState, Launch

#: The job attribute that ties a slave job to its computation.
MEMBER_ATTRIBUTE = "MwpyMemberId"
ROLE_ATTRIBUTE = "MwpyRole"
ON_EXIT_REMOVE = "(ExitBySignal == False) && (ExitCode == 0)"

_STATES = {
    int(htcondor2.JobStatus.IDLE): JobState.IDLE,
    int(htcondor2.JobStatus.RUNNING): JobState.RUNNING,
    int(htcondor2.JobStatus.TRANSFERRING_OUTPUT): JobState.RUNNING,
    int(htcondor2.JobStatus.SUSPENDED): JobState.RUNNING,
    int(htcondor2.JobStatus.HELD): JobState.HELD,
}


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


class CondorBackend:
    """Submits, lists and removes one computation's slave jobs on a Condor schedd."""

    name = "condor"

    def __init__(self, member_id: str, *, extra: dict[str, str] | None = None) -> None:
        self._member_id = member_id
        self._extra = extra or {}
        self._schedd = htcondor2.Schedd()
        self._constraint = f'{MEMBER_ATTRIBUTE} == {classad2.quote(member_id)} && {ROLE_ATTRIBUTE} == "slave"'

    @classmethod
    def for_resource_file(cls, path: str, *, submit_file: str | None = None) -> CondorBackend:
        """The back end for the computation a resource file describes."""
        record = resource_file.read(path)
        extra = read_submit_commands(submit_file) if submit_file else None
        return cls(record.member_id, extra=extra)

    def jobs(self) -> list[Job]:
        ads = self._schedd.query(self._constraint, projection=["ClusterId", "ProcId", "JobStatus"])
        jobs = []
        for ad in ads:
            state = _STATES.get(int(ad["JobStatus"]))
            if state is not None:
                jobs.append(Job(f"{ad['ClusterId']}.{ad['ProcId']}", state))
        return jobs

    def submit(self, launch: Launch, count: int) -> None:
        description = htcondor2.Submit(slave_description(launch, self._extra))
        self._schedd.submit(description, count=count)

    def remove(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._schedd.act(htcondor2.JobAction.Remove, list(job_ids), reason="mwpy overseer")

    def poll(self) -> None:
        """Condor restarts and moves jobs by itself: nothing to do."""

    def close(self) -> None:
        """The schedd connection needs no closing."""

"""Batch-system back ends: how the overseer starts, lists and removes slave jobs.

A back end knows nothing of mwpy's protocol: it runs the command the resource
file describes, ships the files it names, and keeps a failed slave queued
(Condor's ``on_exit_remove = (ExitBySignal == False) && (ExitCode == 0)``).
The overseer decides how many; the back end only does as it is told.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

import attrs

from mwpy.resource_file import ResourceFile


class JobState(enum.Enum):
    """Where a slave job stands in its batch system."""

    IDLE = "idle"  # queued, waiting to (re)start
    RUNNING = "running"
    HELD = "held"  # stopped by the batch system or an administrator


@attrs.frozen
class Job:
    """One slave job of the computation."""

    job_id: str
    state: JobState


@attrs.frozen
class Launch:
    """What one slave job runs, read from the resource file."""

    member_id: str
    resource_file: str
    executable: str
    arguments: list[str]
    files: list[str]

    @classmethod
    def of(cls, record: ResourceFile, resource_file: str) -> Launch:
        return cls(
            member_id=record.member_id,
            resource_file=resource_file,
            executable=record.slave_executable,
            arguments=list(record.slave_arguments),
            files=list(record.slave_files),
        )


class Backend(Protocol):
    """The small interface every batch system implements for the overseer."""

    #: Shown in logs and ``mwpy status``.
    name: str

    def jobs(self) -> list[Job]:
        """The slave jobs of this computation that are still in the queue."""
        ...

    def submit(self, launch: Launch, count: int) -> None:
        """Queue ``count`` more slave jobs, in one batch."""
        ...

    def remove(self, job_ids: Sequence[str]) -> None:
        """Take these jobs out of the queue (running ones are stopped)."""
        ...

    def poll(self) -> None:
        """Let the back end do its own periodic work (restart exited slaves, ...)."""
        ...

    def close(self) -> None:
        """Release resources; jobs are left as they are."""
        ...

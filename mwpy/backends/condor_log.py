"""The slave jobs' user logs, followed with ``htcondor2.JobEventLog``: what a look at the queue cannot see.

A slave job that fails and is requeued between two queries of the schedd
looks the same at both; its user log has one event for every run that ended.
The Condor back end counts each job's failed runs from it, so that
:class:`~mwpy.pool.failing_slaves.SetupFailures` counts Condor slaves exactly,
as it does local ones, instead of sampling job states. The log is the source
that is always written (HTCondor does not bump ``NumJobStarts`` for every
failed start).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import htcondor2

#: A run that ended by itself: requeued (``on_exit_remove`` false) or terminated.
_ENDED = frozenset({htcondor2.JobEventType.JOB_EVICTED, htcondor2.JobEventType.JOB_TERMINATED})


def _failed(event: Any) -> bool:
    """Whether ``event`` ends a run that failed: non-zero exit or a signal, or a hold."""
    if event.type == htcondor2.JobEventType.JOB_HELD:
        return True
    if event.type not in _ENDED:
        return False
    if event.type == htcondor2.JobEventType.JOB_EVICTED and not event.get("TerminatedAndRequeued", False):
        return False  # preempted, vacated: not the slave's failure
    return not event.get("TerminatedNormally", True) or int(event.get("ReturnValue", 0)) != 0


class FailedRuns:
    """Failed runs per job (``CLUSTER.PROC``), read incrementally from the jobs' user logs."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._logs: dict[str, htcondor2.JobEventLog] = {}

    def follow(self, paths: Iterable[str]) -> None:
        """Read the events added to each log in ``paths`` since the last call (one not there yet: next time)."""
        for path in paths:
            log = self._logs.get(path)
            if log is None:
                try:
                    log = self._logs[path] = htcondor2.JobEventLog(path)
                except htcondor2.HTCondorException:  # not written yet (no job has started), or unreadable
                    continue
            for event in log.events(0):
                if _failed(event):
                    self.counts[f"{event.cluster}.{event.proc}"] += 1

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()

"""The slave jobs' user logs, followed with ``htcondor2.JobEventLog``: the Condor back end's job table.

HTCondor recommends following the job event log over querying the schedd
for tracking many jobs (``condor_watch_q`` does the same: one query to start,
then the logs). :class:`JobLog` keeps one ad-like record per slave job --
the attributes a query would return -- and updates it from each job event
(submit, execute, evicted, held, released, terminated, aborted), reading each
log from where it stopped. The schedd is asked only to reconcile
(:meth:`JobLog.needs_query`): at the start, every ``RECONCILE_EVERY``
seconds, and whenever the logs say something the table cannot resolve -- a
job of a cluster it does not know, a hold whose reason the log does not give
(``condor_hold``'s), a log that is gone, replaced or shorter than what was read
(truncated): then it polls until the log is whole again.

The log also counts each job's failed runs: a slave job that fails and is
requeued between two looks at the queue looks the same at both; its user log
has one event for every run that ended, so
:class:`~mwpy.pool.failing_slaves.SetupFailures` counts Condor slaves exactly
(HTCondor does not bump ``NumJobStarts`` for every failed start).
"""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import htcondor2

#: Seconds between two reconciling queries of the schedd while the logs answer everything: a change the
#: logs cannot show (a job edited with condor_qedit, a log truncated and regrown past the point read) is
#: seen within this long.
RECONCILE_EVERY = 300.0

_Type = htcondor2.JobEventType
_Status = htcondor2.JobStatus
#: A run that ended by itself: requeued (``on_exit_remove`` false) or terminated.
_ENDED = frozenset({_Type.JOB_EVICTED, _Type.JOB_TERMINATED})
#: Events after which the job waits in the queue again, and events after which it runs.
_TO_IDLE = frozenset({_Type.SUBMIT, _Type.JOB_EVICTED, _Type.JOB_RELEASED, _Type.SHADOW_EXCEPTION})
_TO_RUNNING = frozenset({_Type.EXECUTE, _Type.JOB_UNSUSPENDED})
#: Events after which the job has left the queue (exit 0 with ``on_exit_remove``, or removed).
_GONE = frozenset({_Type.JOB_TERMINATED, _Type.JOB_ABORTED})
#: Events that change a job's state; the others (image size, file transfer, Chirp updates...) do not.
_STATE_EVENTS = _TO_IDLE | _TO_RUNNING | _GONE | {_Type.JOB_HELD, _Type.JOB_SUSPENDED}

Ad = dict[str, Any]


def _failed(event: Any) -> bool:
    """Whether ``event`` ends a run that failed: non-zero exit or a signal, or a hold."""
    if event.type == _Type.JOB_HELD:
        return True
    if event.type not in _ENDED:
        return False
    if event.type == _Type.JOB_EVICTED and not event.get("TerminatedAndRequeued", False):
        return False  # preempted, vacated: not the slave's failure
    return not event.get("TerminatedNormally", True) or int(event.get("ReturnValue", 0)) != 0


@attrs.define
class _Followed:
    """One log being read: the reader and which file it reads (a new inode is a new log)."""

    reader: htcondor2.JobEventLog
    inode: tuple[int, int]

    def offset(self) -> int:
        """Bytes read so far (the reader's own offset, which pickling exposes)."""
        return int(self.reader.__getstate__()[1])


class JobLog:
    """Slave jobs as their user logs tell them, and when the schedd must be asked instead."""

    def __init__(self) -> None:
        #: Failed runs per job (``CLUSTER.PROC``).
        self.counts: collections.Counter[str] = collections.Counter()
        self._ads: dict[str, Ad] = {}
        self._logs: dict[str, _Followed | None] = {}  # None: to be opened (not there yet, or gone)
        self._ours: dict[int, int | None] = {}  # cluster -> RequestMemory of its jobs (None: unknown)
        self._foreign: set[int] = set()  # clusters in a followed log that a query showed are not this computation's
        self._unknown: set[int] = set()  # clusters seen in a log, not yet known either way
        self._doubt = True  # nothing known yet: the first look is a query
        self._synced_at: float | None = None

    @property
    def ads(self) -> list[Ad]:
        """The jobs in the queue, as ad-like records (the attributes of the back end's projection)."""
        return list(self._ads.values())

    def followed(self, ad: Mapping[str, Any]) -> bool:
        """Whether the job's user log is followed (so its failed runs are counted)."""
        return _key(ad.get("UserLog")) in self._logs

    def needs_query(self, now: float, every: float) -> bool:
        """Whether the schedd must be asked: nothing known yet, the logs left a doubt, or ``every`` s passed."""
        return self._doubt or self._synced_at is None or now - self._synced_at >= every

    def expect(self, cluster: int, procs: Iterable[int], memory: int | None, log: str, now: float) -> None:
        """Jobs this back end just submitted, idle: known before their submit events are read, so that the
        overseer never submits twice for one shortfall."""
        self._ours[cluster] = memory
        self.watch(log)
        for proc in procs:
            ad = {"ClusterId": cluster, "ProcId": proc, "UserLog": log, "RequestMemory": memory}
            self._ads[f"{cluster}.{proc}"] = {**ad, "JobStatus": int(_Status.IDLE), "EnteredCurrentStatus": now}

    def watch(self, path: str) -> None:
        """Follow ``path`` too (from its start), whether or not a job writes it yet."""
        self._logs.setdefault(_key(path), None)

    def reconciled(self, ads: Iterable[Ad], now: float) -> None:
        """The schedd's answer replaces the table (call :meth:`follow` just before the query)."""
        self._ads = {_id(ad): ad for ad in ads}
        clusters = {int(ad["ClusterId"]) for ad in self._ads.values()}
        for cluster in clusters:
            self._ours.setdefault(cluster, None)
        self._foreign |= self._unknown - clusters
        self._unknown.clear()
        for ad in self._ads.values():
            if ad.get("UserLog"):
                self.watch(str(ad["UserLog"]))
        self._doubt = False
        self._synced_at = now

    def follow(self) -> None:
        """Read what each log gained since the last call and apply it; a log in trouble leaves a doubt."""
        for path in list(self._logs):
            followed = self._open(path)
            if followed is None:
                continue
            try:
                for event in followed.reader.events(0):
                    self._apply(event, path)
            except htcondor2.HTCondorException:  # a garbled log: read it afresh, and ask the schedd
                self._drop(path)

    def _open(self, path: str) -> _Followed | None:
        """The reader of ``path``, (re)opened when the file is new, replaced or shorter than what was read."""
        followed = self._logs[path]
        try:
            stat = os.stat(path)
        except OSError:
            if followed is not None or self._uses(path):
                self._drop(path)  # gone: jobs that write it can only be seen in the queue
            return None
        inode = (stat.st_dev, stat.st_ino)
        if followed is not None and (followed.inode != inode or stat.st_size < followed.offset()):
            self._drop(path)
            followed = None
        if followed is None:
            try:
                followed = self._logs[path] = _Followed(htcondor2.JobEventLog(path), inode)
            except htcondor2.HTCondorException:
                self._doubt = self._doubt or self._uses(path)
                return None
        return followed

    def _uses(self, path: str) -> bool:
        return any(_key(ad.get("UserLog")) == path for ad in self._ads.values())

    def _drop(self, path: str) -> None:
        followed = self._logs.get(path)
        if followed is not None:
            followed.reader.close()
        self._logs[path] = None
        self._doubt = True

    def _apply(self, event: Any, path: str) -> None:
        """One event: a failed run counted, the job's record updated (or a doubt, for a job not known)."""
        job = f"{event.cluster}.{event.proc}"
        if _failed(event):
            self.counts[job] += 1
        if event.type not in _STATE_EVENTS or event.cluster in self._foreign:
            return
        ad = self._ads.get(job)
        if ad is None and event.type == _Type.SUBMIT and event.cluster in self._ours:
            ad = self._ads[job] = {"ClusterId": event.cluster, "ProcId": event.proc, "UserLog": path}
            ad["RequestMemory"] = self._ours[event.cluster]
        if ad is None:
            # A job this table does not hold: another computation's (its submit event), one submitted behind
            # the overseer's back, or a job whose earlier events were lost. Only the schedd can say.
            if event.type == _Type.SUBMIT or event.cluster not in self._ours:
                self._unknown.add(event.cluster)
            self._doubt = self._doubt or event.type not in _GONE
            return
        _update(ad, event)
        if event.type == _Type.JOB_HELD and not ad["HoldReason"]:
            self._doubt = True  # a hold by condor_hold logs no reason ("Reason unspecified"); the schedd's ad has it
        if event.type in _GONE:
            del self._ads[job]

    def close(self) -> None:
        for followed in self._logs.values():
            if followed is not None:
                followed.reader.close()
        self._logs.clear()


@functools.lru_cache(maxsize=256)
def _key(path: object) -> str:
    """A log's path as the table keys it: one file named two ways (the job ad's, slaves.sub's) is read once."""
    return os.path.realpath(str(path)) if path else ""


def _id(ad: Mapping[str, Any]) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def _update(ad: Ad, event: Any) -> None:
    """Change a job's record as the schedd changes its ad on this event."""
    ad["EnteredCurrentStatus"] = event.timestamp
    if event.type in _TO_IDLE:
        ad["JobStatus"] = int(_Status.IDLE)
    elif event.type in _TO_RUNNING:
        ad["JobStatus"] = int(_Status.RUNNING)
    elif event.type == _Type.JOB_SUSPENDED:
        ad["JobStatus"] = int(_Status.SUSPENDED)
    elif event.type == _Type.JOB_HELD:
        ad["JobStatus"] = int(_Status.HELD)
        ad["HoldReason"] = event.get("HoldReason")
        ad["HoldReasonCode"] = event.get("HoldReasonCode")
    if event.type == _Type.JOB_EVICTED and event.get("TerminatedAndRequeued", False):
        normal = bool(event.get("TerminatedNormally", True))
        ad["ExitBySignal"] = not normal
        ad["ExitCode"] = int(event.get("ReturnValue", 0)) if normal else None
        ad["ExitSignal"] = None if normal else event.get("TerminatedBySignal")

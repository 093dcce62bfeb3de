"""The overseer: keeps a batch system's slave jobs matched to what the master asks for.

It watches the resource file (watchdog: it reacts within moments of a rewrite)
and also reconciles on a timer. Each reconciliation is idempotent: it compares
the jobs in the queue with the slaves the master wants and only then submits
or removes, so repeated events never over-submit, and a restarted overseer
picks up where the last one stopped.

* wanted slaves = slaves connected + slaves needed (both from the file);
* serving jobs = idle + running; held jobs do not serve but count against
  the total cap, so a job held or removed behind the overseer's back is
  replaced while the caps hold;
* grow: submit the shortfall in one batch, within ``max_jobs`` (total),
  ``max_idle`` (idle) and ``batch``;
* shrink: remove idle jobs only, never a running slave (it may hold work);
* finished: remove every remaining job of the computation (running slaves
  get ``FINISH_GRACE`` seconds to leave by themselves first), and stop once
  none is left;
* stale (the master is overdue): submit nothing, keep the queue, say so, and
  carry on when a fresh file appears.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from mwpy import resource_file
from mwpy.backends import Backend, Job, JobState, Launch
from mwpy.errors import InvalidResourceFileError, ResourceFileError

Log = Callable[[str], None]

#: Seconds before a failed reconciliation is tried again, and before the
#: overseer checks that the jobs it removed at the end are gone.
RETRY_DELAY = 2.0
#: Seconds running slaves get to leave by themselves once the computation is
#: finished (the master told them to shut down) before the overseer removes them.
FINISH_GRACE = 10.0


class Verdict(enum.Enum):
    """What one reconciliation found."""

    WAITING = "waiting"  # no readable resource file yet
    RUNNING = "running"
    STALE = "stale"
    FINISHED = "finished"  # the computation is finished; its jobs are being removed
    INVALID = "invalid"  # the file is there but can never be used (wrong version, not a regular file, ...)


@attrs.frozen
class Limits:
    """Caps that keep the overseer polite to a shared pool."""

    max_jobs: int = 1000
    max_idle: int = 100
    batch: int = 100


@attrs.frozen
class Decision:
    """The outcome of one reconciliation, for logs and tests."""

    verdict: Verdict
    submitted: int = 0
    removed: int = 0
    idle: int = 0
    running: int = 0
    held: int = 0
    wanted: int = 0


class Overseer:
    """Reconciles one computation's slave jobs with its resource file."""

    def __init__(
        self,
        path: str | Path,
        backend: Backend,
        limits: Limits,
        *,
        log: Log | None = None,
        finish_grace: float = FINISH_GRACE,
    ) -> None:
        self.path = _real_path(Path(path))
        self.problem: str | None = None  # why the overseer gave up, when it did
        self.backend = backend
        self.limits = limits
        self.finish_grace = finish_grace
        self._finished_at: float | None = None
        self._log = log or (lambda text: None)
        self._last_note = ""
        self._wake = threading.Event()

    def reconcile(self) -> Decision:
        """Look at the file and the queue once, and act on the difference."""
        try:
            record = resource_file.read(self.path)
        except InvalidResourceFileError as exc:
            # mwpy's master writes the file atomically: a bad file will not fix itself.
            self.problem = str(exc)
            self._note(f"giving up: {exc}")
            return Decision(Verdict.INVALID)
        except ResourceFileError as exc:
            self._note(f"waiting: {exc}")
            return Decision(Verdict.WAITING)
        jobs = self.backend.jobs()
        idle = [j.job_id for j in jobs if j.state is JobState.IDLE]
        running = sum(j.state is JobState.RUNNING for j in jobs)
        held = sum(j.state is JobState.HELD for j in jobs)
        counts = {"idle": len(idle), "running": running, "held": held}
        if record.finished:
            return self._finish(jobs, counts)
        if record.stale():
            self._note(
                f"master silent for {record.age():.0f} s (update interval {record.update_interval:g} s): "
                f"not submitting; keeping {len(jobs)} jobs queued"
            )
            return Decision(Verdict.STALE, **counts)
        wanted = min(self.limits.max_jobs, sum(record.slaves_connected.values()) + record.slaves_needed)
        serving = len(idle) + running
        submit = min(
            wanted - serving,
            self.limits.max_jobs - len(jobs),
            self.limits.max_idle - len(idle),
            self.limits.batch,
        )
        removed = 0
        if submit > 0:
            self.backend.submit(Launch.of(record, str(self.path)), submit)
        elif serving > wanted and idle:
            doomed = idle[-min(serving - wanted, len(idle)) :]
            self.backend.remove(doomed)
            removed = len(doomed)
        submitted = max(0, submit)
        self._note(
            f"wanted {wanted} (connected {sum(record.slaves_connected.values())} + needed {record.slaves_needed}); "
            f"jobs idle {len(idle)} running {running} held {held}{_held_because(jobs)}; "
            f"submitted {submitted}, removed {removed}"
        )
        return Decision(Verdict.RUNNING, submitted, removed, wanted=wanted, **counts)

    def _finish(self, jobs: list[Job], counts: dict[str, int]) -> Decision:
        """Remove what is left: idle and held jobs at once, running ones once they had time to leave.

        Slaves the master told to shut down exit 0 by themselves (and Condor
        then brings their output back); only one still running after
        ``finish_grace`` seconds is removed.
        """
        now = time.monotonic()
        if self._finished_at is None:
            self._finished_at = now
        late = now - self._finished_at >= self.finish_grace
        doomed = [j.job_id for j in jobs if late or j.state is not JobState.RUNNING]
        if doomed:
            self.backend.remove(doomed)
        waiting = len(jobs) - len(doomed)
        if not jobs:
            self._note("computation finished: no slave jobs left")
        elif waiting:
            left = self.finish_grace - (now - self._finished_at)
            self._note(
                f"computation finished: removed {len(doomed)} slave jobs; "
                f"{waiting} running ones get {left:.0f} s more to exit by themselves"
            )
        else:
            self._note(f"computation finished: removed {len(doomed)} slave jobs")
        return Decision(Verdict.FINISHED, removed=len(doomed), **counts)

    def run(self, stop: threading.Event, *, interval: float = 10.0, poll: float = 0.25) -> Verdict:
        """Reconcile on every rewrite of the file and every ``interval`` seconds until finished or ``stop``.

        Returns ``FINISHED`` once the computation is finished and a reconciliation
        found none of its jobs left. A failing reconciliation (the schedd is
        restarting, say) is logged and tried again after ``RETRY_DELAY`` seconds:
        the overseer outlives its batch system's hiccups.
        """
        observer = Observer()
        observer.schedule(_Wake(self.path, self._wake), str(self.path.parent), recursive=False)
        observer.start()
        try:
            next_at = 0.0
            while not stop.is_set():
                now = time.monotonic()
                try:
                    self.backend.poll()
                    if self._wake.is_set() or now >= next_at:
                        self._wake.clear()
                        next_at = now + interval
                        decision = self.reconcile()
                        if decision.verdict is Verdict.INVALID:
                            return Verdict.INVALID
                        if decision.verdict is Verdict.FINISHED:
                            if not decision.idle + decision.running + decision.held:
                                return Verdict.FINISHED
                            next_at = now + min(interval, RETRY_DELAY)  # see that they are gone
                except Exception as exc:
                    self._note(f"reconciliation failed: {exc} (trying again in {min(interval, RETRY_DELAY):g} s)")
                    next_at = now + min(interval, RETRY_DELAY)
                self._wake.wait(poll)
            return Verdict.RUNNING
        finally:
            _stop_quietly(observer)

    def _note(self, text: str) -> None:
        """Log a line, but not the same line over and over."""
        if text != self._last_note:
            self._last_note = text
            self._log(text)


def _real_path(path: Path) -> Path:
    """The file the master renames into place, whose folder the watcher must watch.

    A symlink loop has no real path; the loop itself is reported by the first
    read, as for every other reader of resource files.
    """
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop on Python < 3.13
        return Path(os.path.abspath(path))


def _held_because(jobs: list[Job]) -> str:
    """`` (REASON)`` of the first held job that has one, else "": held jobs serve nobody until someone acts."""
    reason = next((job.reason for job in jobs if job.state is JobState.HELD and job.reason), None)
    return f" ({reason})" if reason else ""


def _stop_quietly(observer: BaseObserver) -> None:
    """Stop the watcher without watchdog's harmless "called when the thread is inactive" error.

    Stopping races the inotify reader thread, which then logs an ERROR (watchdog
    PR 963) that a user of ``mwpy local`` would take for a failure.
    """
    log = logging.getLogger("watchdog.observers.inotify")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        observer.stop()
        observer.join()
    finally:
        log.setLevel(level)


class _Wake(FileSystemEventHandler):
    """Sets an event when the resource file is written or renamed into place."""

    def __init__(self, path: Path, wake: threading.Event) -> None:
        self._path = str(path)
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Only changes wake the overseer: watchdog also reports opens and reads, and the overseer's
        # own reading of the file would otherwise wake it again, forever (a core spent spinning).
        if event.event_type in _CHANGES and self._path in (event.src_path, getattr(event, "dest_path", "")):
            self._wake.set()


_CHANGES = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_MOVED, EVENT_TYPE_CLOSED, EVENT_TYPE_DELETED})

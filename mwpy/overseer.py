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
* finished: remove every remaining job of the computation;
* stale (the master is overdue): submit nothing, keep the queue, say so, and
  carry on when a fresh file appears.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from mwpy import resource_file
from mwpy.backends import Backend, JobState, Launch
from mwpy.resource_file import ResourceFileError

Log = Callable[[str], None]


class Verdict(enum.Enum):
    """What one reconciliation found."""

    WAITING = "waiting"  # no readable resource file yet
    RUNNING = "running"
    STALE = "stale"
    FINISHED = "finished"  # finished and no job left


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

    def __init__(self, path: str | Path, backend: Backend, limits: Limits, *, log: Log | None = None) -> None:
        self.path = Path(path).resolve()
        self.backend = backend
        self.limits = limits
        self._log = log or (lambda text: None)
        self._last_note = ""
        self._wake = threading.Event()

    def reconcile(self) -> Decision:
        """Look at the file and the queue once, and act on the difference."""
        try:
            record = resource_file.read(self.path)
        except ResourceFileError as exc:
            self._note(f"waiting: {exc}")
            return Decision(Verdict.WAITING)
        jobs = self.backend.jobs()
        idle = [j.job_id for j in jobs if j.state is JobState.IDLE]
        running = sum(j.state is JobState.RUNNING for j in jobs)
        held = sum(j.state is JobState.HELD for j in jobs)
        counts = {"idle": len(idle), "running": running, "held": held}
        if record.finished:
            if jobs:
                self.backend.remove([j.job_id for j in jobs])
                self._note(f"computation finished: removed {len(jobs)} slave jobs")
            else:
                self._note("computation finished: no slave jobs left")
            return Decision(Verdict.FINISHED, removed=len(jobs), **counts)
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
            f"jobs idle {len(idle)} running {running} held {held}; submitted {submitted}, removed {removed}"
        )
        return Decision(Verdict.RUNNING, submitted, removed, wanted=wanted, **counts)

    def run(self, stop: threading.Event, *, interval: float = 10.0, poll: float = 0.25) -> Verdict:
        """Reconcile on every rewrite of the file and every ``interval`` seconds until finished or ``stop``."""
        observer = Observer()
        observer.schedule(_Wake(self.path, self._wake), str(self.path.parent), recursive=False)
        observer.start()
        try:
            next_at = 0.0
            while not stop.is_set():
                self.backend.poll()
                now = time.monotonic()
                if self._wake.is_set() or now >= next_at:
                    self._wake.clear()
                    next_at = now + interval
                    if self.reconcile().verdict is Verdict.FINISHED:
                        return Verdict.FINISHED
                self._wake.wait(poll)
            return Verdict.RUNNING
        finally:
            observer.stop()
            observer.join()

    def _note(self, text: str) -> None:
        """Log a line, but not the same line over and over."""
        if text != self._last_note:
            self._last_note = text
            self._log(text)


class _Wake(FileSystemEventHandler):
    """Sets an event when the resource file is written or renamed into place."""

    def __init__(self, path: Path, wake: threading.Event) -> None:
        self._path = str(path)
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if self._path in (event.src_path, getattr(event, "dest_path", "")):
            self._wake.set()

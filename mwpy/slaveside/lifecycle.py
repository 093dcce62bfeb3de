"""The slave's life beside its tasks: heartbeats, held results' rescue, the soft-kill signal, a lost master.

A background thread sends heartbeats while a long task runs, so the master
can tell a busy slave from a dead one, and sends results held behind a task
that turns out long. Condor's soft-kill signal (SIGTERM for vanilla jobs:
vacate, preemption, ``condor_rm``) interrupts the running task so the slave
can leave gracefully. Exit statuses are documented in docs/exit-codes.md.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mwpy.observe.audit import Audit
from mwpy.slaveside.connection import Link
from mwpy.wire import protocol
from mwpy.wire.protocol import ExitCode

#: Seconds between two looks at the peak memory (the heartbeat thread), and the growth that is reported early.
MEMORY_LOOK = 1.0
MEMORY_GROWTH = 1.1

#: Seconds finished results may wait on the slave for more to share their frame (while tasks run this short).
RESULT_HOLD = 0.002
#: Seconds between the heartbeat thread's looks at held results while holds keep beginning: a result behind a
#: task that turns out long waits at most this much more than RESULT_HOLD.
RESCUE_LOOK = 0.02


class Evicted(BaseException):
    """Raised into a running task by the soft-kill signal (a BaseException: tasks' ``except Exception`` let it by)."""


class HoldWatch:
    """The heartbeat thread's watch over the results a slave holds for RESULT_HOLD (design.md "Results").

    Woken as a hold begins, it waits for exactly that hold's end; while holds
    keep beginning (short tasks, each flushed by the main thread itself) it
    stays watching and looks every RESCUE_LOOK instead, so a stream of tasks
    costs the main thread no wake-ups (a wake-up per hold, every RESULT_HOLD
    under short tasks, cost a fifth of the throughput in GIL hand-overs); it
    stops watching after a look that finds nothing held and no hold begun since
    the last, and is woken again by the next hold. A plain lock: the main
    thread takes it per result (a Condition's own ``with`` is a Python call).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wakeup = threading.Condition(self.lock)
        self._watching = False
        self._looked_at = 0.0  # the hold's start at the last look: a new value, a new hold since

    def begins(self) -> None:
        """A hold begins: wake the heartbeat thread unless it is watching already."""
        with self.lock:
            if not self._watching:
                self._wakeup.notify()

    def wake(self) -> None:
        with self.lock:
            self._wakeup.notify()

    def wait(self, until: float, held: Callable[[], tuple[bool, float]]) -> bool:
        """Wait until ``until`` (monotonic), or until results have been held RESULT_HOLD; True in that case."""
        with self.lock:
            now = time.monotonic()
            wait = until - now
            holding, since = held()
            if holding:
                if now - since >= RESULT_HOLD:
                    return True
                wait = min(wait, RESCUE_LOOK if self._watching else RESULT_HOLD - (now - since))
                self._watching = True
            elif self._watching and since != self._looked_at:  # holds began since the last look
                wait = min(wait, RESCUE_LOOK)
            else:
                self._watching = False
            self._looked_at = since
            if wait > 0:
                self._wakeup.wait(wait)
            holding, since = held()
            return holding and time.monotonic() - since >= RESULT_HOLD


class Heartbeats:
    """The heartbeat thread: a heartbeat when nothing else went out for ``interval``, and at once when the peak
    memory grew or the cache's counters changed (within :data:`MEMORY_LOOK` s: the event log and the metrics
    show them); held results sent when they waited too long; the process ended when the master is lost while a
    task runs.

    The master publishes the largest peak a slave reported, and the overseer
    asks Condor for that much memory for new slave jobs: a peak reached by a
    task that then gets the job held must be reported quickly.
    """

    def __init__(
        self,
        interval: float,
        link: Link,
        hold: HoldWatch,
        audit: Audit,
        *,
        flush: Callable[[], None],
        held: Callable[[], tuple[bool, float]],
        lost: Callable[[], str | None],
        stranded: Callable[[], bool],
    ) -> None:
        """``held()``: whether results are held and since when; ``lost()``: why the master is lost, if it is;
        ``stranded()``: a task runs that no soft-kill signal interrupted (it would hold the slot for nothing)."""
        self._link = link
        self._hold = hold
        self._audit = audit
        self._flush = flush
        self._held = held
        self._lost = lost
        self._stranded = stranded
        #: The counters of this process's cache of shared objects (hits, misses, bytes fetched, evictions).
        self.cache_counts: Callable[[], tuple[int, int, int, int]] = lambda: (0, 0, 0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(interval,), name="mwpy-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._hold.wake()  # the thread waits on it

    def _beat(self, interval: float) -> None:
        reported, cache_reported = 0, (0, 0, 0, 0)
        look = min(interval / 2, MEMORY_LOOK)
        next_look = time.monotonic() + look
        while not self._stop.is_set():
            if self._hold.wait(next_look, self._held):
                self._flush()  # results held behind a task that runs long: they go now
            if self._stop.is_set() or time.monotonic() < next_look:
                continue
            next_look = time.monotonic() + look
            peak, cache = peak_memory(), self.cache_counts()
            grew = peak > reported * MEMORY_GROWTH or cache != cache_reported
            if (grew or time.monotonic() - self._link.last_send >= interval) and self._lost() is None:
                self._link.send(protocol.Heartbeat(peak, cache))
                reported, cache_reported = peak, cache
            lost = self._lost()
            if lost is not None and self._stranded():
                leave_lost_master(self._audit, lost)


class SoftKill:
    """Condor's soft-kill signal (SIGTERM): noted, a wait for the master cut short (``wake``), a running task
    interrupted (``running()``: raises :class:`Evicted` into it); the slave then leaves as soon as it is safe."""

    def __init__(self, wake: Callable[[], None], running: Callable[[], bool]) -> None:
        self._wake = wake
        self._running = running
        #: The soft-kill signal received, if any.
        self.signum: int | None = None
        self._previous: Any = None
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous = signal.signal(signal.SIGTERM, self._received)

    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGTERM).name

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _received(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        self._wake()
        if self._running():
            raise Evicted


def leave_lost_master(audit: Audit, lost: str) -> None:
    """The connection died (``lost``) while a task runs: leave now rather than hold the slot until the task ends.

    The task's result has nowhere to go (the master queued the task again when
    the connection dropped, or is gone), and a pilot whose master is gone must
    not outlive it: the job stays queued and its next run finds the
    current master, or leaves the queue once the master is gone for good.
    """
    reason = f"the connection to the master ended without a shutdown while a task ran ({lost})"
    audit(f"MASTER LOST WHILE A TASK RAN: leaving ({lost})")
    audit.flush()
    line = f"mwpy slave: {reason} {exit_named(ExitCode.MASTER_LOST)}\n"
    os.write(2, line.encode(errors="replace"))  # not sys.stderr: the running task's output capture holds it
    os._exit(int(ExitCode.MASTER_LOST))


def exit_named(code: ExitCode) -> str:
    """``[exit status 3 UNREACHABLE: Condor keeps the job queued]``: how a failing slave's stderr line ends.

    The status by number and name (docs/exit-codes.md), so that a job's .err file says what its user log's
    return value means.
    """
    return f"[exit status {int(code)} {code.name}: Condor keeps the job queued]"


def peak_memory() -> int:
    """Bytes: this process's peak resident set size so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)

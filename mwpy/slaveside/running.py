"""One task run on the slave: its algorithm and arguments, what it printed, its result, its timeout.

A task that raises produces a failed result and never kills the slave. A task
with a timeout is interrupted by SIGALRM when it runs past it; one that ignores
the interruption for :data:`TIMEOUT_GRACE` seconds ends the process (a
watchdog thread), reported as timed out so that a fresh slave takes its place.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from mwpy import (
    calls,  # noqa: F401 (registers the built-in task algorithms: an Executor's calls, map chunks)
    safe_text,
)
from mwpy.errors import TaskTimeoutError
from mwpy.observe.audit import Audit
from mwpy.task import registry
from mwpy.wire import codec, protocol
from mwpy.wire.codec import decode_arguments
from mwpy.wire.protocol import ExitCode, ResultItem, TaskItem

log = safe_text.logger("mwpy.slave")

#: Characters of a task's stdout (and as many of its stderr) kept for its result; the rest is cut.
MAX_OUTPUT = 64 * 1024

#: Seconds a task past its timeout has to stop after its TaskTimeoutError before the slave exits (status 8).
TIMEOUT_GRACE = 5.0


class _Capture(io.StringIO):
    """One stream of one task's output, kept up to MAX_OUTPUT characters (the rest is counted, not kept)."""

    #: Characters written so far (a class default: no __init__ of our own, made twice per task).
    size = 0

    def write(self, text: str) -> int:
        room = MAX_OUTPUT - self.size
        self.size += len(text)
        if room > 0:
            super().write(text[:room])
        return len(text)

    def text(self) -> str:
        kept = self.getvalue()
        if self.size > len(kept):
            kept += f"\n[mwpy: {self.size - len(kept)} more characters not kept]\n"
        return kept


class Runner:
    """Runs the slave's tasks one at a time (on the main thread), keeping what each printed for its result.

    ``rescue(result)`` sends a result at once: the watchdog's, for a task stuck past its timeout, just before
    the process exits.
    """

    def __init__(
        self, slave_id: str, *, max_out: int, store: tuple[str, int], audit: Audit, rescue: Callable[[ResultItem], None]
    ) -> None:
        self._slave_id = slave_id
        self._max_out = max_out
        self._store = store  # where a result too large for a frame goes
        self._audit = audit
        self._rescue = rescue
        #: What the finished tasks printed, if anything, by task id (taken with their results).
        self.outputs: dict[int, tuple[str, str]] = {}
        #: Task id -> seconds, for queued tasks that have a timeout.
        self.timeouts: dict[int, float] = {}
        #: A task's own code runs now: the soft-kill signal interrupts it.
        self.in_task = False
        self._timing: tuple[int, float] | None = None  # (task id, timeout) of the running task, if it has one
        self._deadline: float | None = None  # when the watchdog gives up on the running task
        self._watch = threading.Condition()
        self._watchdog: threading.Thread | None = None
        self._stop = threading.Event()

    def run(self, item: TaskItem) -> ResultItem:
        task_id = item[0]
        timeout = self.timeouts.pop(task_id, None) if self.timeouts else None
        if timeout is None:
            return self._call(item)
        self._arm(task_id, timeout)
        try:
            return self._call(item)
        finally:
            self._disarm()

    def stop(self) -> None:
        """End the watchdog (the slave hangs up)."""
        self._stop.set()

    def _call(self, item: TaskItem) -> ResultItem:
        task_id, name, blob = item
        started = time.perf_counter()
        try:
            algorithm = registry.require(name)
            args, kwargs = decode_arguments(blob)
            printed, warned = _Capture(), _Capture()
            # sys.stdout/stderr swapped by hand: contextlib.redirect_* cost 2 µs a task, a no-op task's whole run.
            saved = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = printed, warned
            try:
                self.in_task = True
                try:
                    value = algorithm.fn(*args, **kwargs)
                finally:
                    self.in_task = False
            finally:
                sys.stdout, sys.stderr = saved
                if printed.size or warned.size:
                    self.outputs[task_id] = (printed.text(), warned.text())
            elapsed = time.perf_counter() - started
            out = codec.encode_result(value, self._store)
        except (Exception, SystemExit) as exc:
            elapsed = time.perf_counter() - started
            return (task_id, False, codec.encode_error(exc), elapsed)
        if not protocol.fits(len(out), self._max_out):
            reason = f"the result takes {len(out)} bytes; the master accepts frames of at most {self._max_out}"
            return (task_id, False, codec.encode_failure("ResultTooLarge", reason), elapsed)
        return (task_id, True, out, elapsed)

    # ------------------------------------------------------------------ timeouts

    def _arm(self, task_id: int, timeout: float) -> None:
        """Interrupt the task after ``timeout`` s (SIGALRM) and exit if it has not stopped ``TIMEOUT_GRACE`` s later."""
        self._timing = (task_id, timeout)
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            signal.signal(signal.SIGALRM, self._interrupt)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        with self._watch:
            self._deadline = time.monotonic() + timeout + TIMEOUT_GRACE
            self._watch.notify()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._guard, name="mwpy-watchdog", daemon=True)
            self._watchdog.start()

    def _disarm(self) -> None:
        self._timing = None  # first: an alarm that fires now finds nothing to interrupt
        if threading.current_thread() is threading.main_thread():
            signal.setitimer(signal.ITIMER_REAL, 0)
        with self._watch:
            self._deadline = None

    def _interrupt(self, signum: int, frame: object) -> None:
        timing = self._timing
        if timing is not None:
            raise TaskTimeoutError(
                f"the task ran past its timeout of {timing[1]:g} s (interrupted on {self._slave_id})"
            )

    def _guard(self) -> None:
        """The watchdog: a task that ignored its interruption for the grace period ends this process."""
        with self._watch:
            while not self._stop.is_set():
                deadline = self._deadline
                if deadline is None:
                    self._watch.wait(1.0)
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._watch.wait(left)
                    continue
                timing = self._timing
                if timing is None:  # it just finished
                    self._deadline = None
                    continue
                self._give_up(*timing)

    def _give_up(self, task_id: int, timeout: float) -> None:
        """Report the stuck task as timed out (best effort), then exit so a fresh slave replaces this one."""
        reason = (
            f"the task ran past its timeout of {timeout:g} s and did not stop within {TIMEOUT_GRACE:g} s "
            f"of being interrupted; slave {self._slave_id} exits (status {int(ExitCode.TASK_STUCK)}) to be replaced"
        )
        try:
            raise TaskTimeoutError(reason)
        except TaskTimeoutError as exc:
            failure = codec.encode_error(exc)
        self._rescue((task_id, False, failure, timeout + TIMEOUT_GRACE))
        log.error("task %d: %s", task_id, reason)
        self._audit(f"TASK {task_id} STUCK: {reason}")
        self._audit.flush()
        print(f"mwpy slave: {reason}", file=sys.stderr, flush=True)
        os._exit(int(ExitCode.TASK_STUCK))

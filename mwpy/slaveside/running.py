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
from typing import Final

from mwpy import (
    calls,  # noqa: F401 (registers the built-in task algorithms: an Executor's calls, map chunks)
    names,
    safe_text,
)
from mwpy.errors import SharedObjectError, TaskTimeoutError
from mwpy.observe.audit import Audit
from mwpy.task import registry
from mwpy.wire import codec, protocol
from mwpy.wire.codec import DataPlane, decode_arguments_with
from mwpy.wire.protocol import ExitCode, ResultItem, TaskItem

log = safe_text.logger("mwpy.slave")

#: Characters of a task's output left unsent when it ends that ride with its result; more go before it.
WITH_RESULT = 64 * 1024
#: Seconds the output pump waits for more lines to share a frame once a whole line was written.
LIVE_WAIT = 0.02
#: Characters of a stream in one frame of output (fewer if the master's frames are small).
CHUNK = 256 * 1024

#: The algorithms whose large values stay on the slave (an Executor's calls: their futures fetch on demand); a
#: master algorithm's tasks stay there when the master says so (``Tasks.hold``: their futures are arguments).
HELD: Final = frozenset({names.CALL, names.CALL_FUNCTION})

#: Seconds a task past its timeout has to stop after its TaskTimeoutError before the slave exits (status 8).
TIMEOUT_GRACE = 5.0


class _Capture(io.TextIOBase):
    """One stream of the running task's output (its ``sys.stdout`` or ``sys.stderr``): text waits in
    ``pending`` until the pump sends its whole lines, or the task ends."""

    def __init__(self, printer: _Printer) -> None:
        self._printer = printer
        self.pending: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if type(text) is not str:
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        printer = self._printer
        with printer.lock:
            self.pending.append(text)
            if not printer.due and "\n" in text:  # a whole line to show: the pump wakes (once per round)
                printer.wake()
        return len(text)

    def take(self, *, whole_lines: bool) -> str:
        """The pending text (only up to its last newline if ``whole_lines``); the caller holds the lock."""
        if not self.pending:
            return ""
        text = "".join(self.pending)
        cut = text.rfind("\n") + 1 if whole_lines else len(text)
        self.pending = [text[cut:]] if cut < len(text) else []
        return text[:cut]


class _Printer:
    """What tasks print, on its way to the master as it is written: a thread (the pump) sends the whole lines
    written within LIVE_WAIT of each other in one frame (a Results message with no result), so a line reaches
    the caller's screen within a fraction of a second, not when the task ends. What is left when the task
    ends rides with its result if it is short, else goes the same way first.

    The pump sends under the lock the task's writes take, so a task's output arrives in order and before its
    result; a task that prints faster than the link carries waits for it.
    """

    def __init__(self, send: Callable[[int, str, str], None], *, chunk: int) -> None:
        self._send = send
        self._chunk = chunk
        self.lock = threading.Lock()
        self.wakeup = threading.Condition(self.lock)
        self.due = False
        self._task_id: int | None = None
        self._streams = (_Capture(self), _Capture(self))
        self._pump: threading.Thread | None = None
        self._stop = False

    def begin(self, task_id: int) -> tuple[_Capture, _Capture]:
        """The streams the task ``task_id`` prints to (empty: a task interrupted in :meth:`end` left nothing)."""
        printed, warned = self._streams
        if self._pump is None and not (printed.pending or warned.pending):  # the hot path: no other thread, no text
            self._task_id = task_id
            return self._streams
        with self.lock:
            self._task_id = task_id
            for stream in self._streams:
                stream.pending.clear()
        return self._streams

    def wake(self) -> None:
        """A whole line waits: wake the pump, started with the first (the caller holds the lock)."""
        self.due = True
        if self._pump is None:
            self._pump = threading.Thread(target=self._run, name="mwpy-output", daemon=True)
            self._pump.start()
        self.wakeup.notify()

    def end(self) -> tuple[str, str] | None:
        """The task ended: what it printed that has not gone yet, to ride with its result (None: nothing)."""
        printed, warned = self._streams
        if self._pump is None and not (printed.pending or warned.pending):  # nothing printed, no frame being sent
            self._task_id = None
            return None
        with self.lock:
            task_id, self._task_id = self._task_id, None  # due stays: the next task's lines join the pump's round
            out, err = (stream.take(whole_lines=False) for stream in self._streams)
            if not (out or err) or task_id is None:
                return None
            if len(out) + len(err) <= WITH_RESULT:
                return out, err
            self._chunks(task_id, out, err)
        return None

    def stop(self) -> None:
        with self.lock:
            self._stop = True
            self.wakeup.notify()

    def _run(self) -> None:
        with self.lock:
            while not self._stop:
                if not self.due:
                    self.wakeup.wait()
                    continue
                until = time.monotonic() + LIVE_WAIT  # lines written meanwhile share the frame (no wake-up cuts it)
                while (left := until - time.monotonic()) > 0 and not self._stop:
                    self.wakeup.wait(left)
                self.due = False
                task_id = self._task_id
                if task_id is not None:
                    out, err = (stream.take(whole_lines=True) for stream in self._streams)
                    if out or err:
                        self._chunks(task_id, out, err)

    def _chunks(self, task_id: int, out: str, err: str) -> None:
        """Send ``out`` and ``err`` in frames of a chunk's characters a stream at most (the caller holds the lock)."""
        size = self._chunk
        while out or err:
            self._send(task_id, out[:size], err[:size])
            out, err = out[size:], err[size:]


class Runner:
    """Runs the slave's tasks one at a time (on the main thread), keeping what each printed for its result.

    ``rescue(result)`` sends a result at once: the watchdog's, for a task stuck past its timeout, just before
    the process exits. ``printed(task_id, stdout, stderr)`` sends what a running task printed.
    """

    def __init__(
        self,
        slave_id: str,
        *,
        max_out: int,
        store: tuple[str, int],
        audit: Audit,
        rescue: Callable[[ResultItem], None],
        printed: Callable[[int, str, str], None],
    ) -> None:
        self._slave_id = slave_id
        self._max_out = max_out
        self._store = store  # where a result too large for a frame goes
        self._audit = audit
        self._rescue = rescue
        self._printer = _Printer(printed, chunk=max(1024, min(CHUNK, max_out // 10)))  # 4 bytes a char at most
        #: What its tasks' shared objects, files and large values go through (start-up sets it).
        self.data: DataPlane | None = None
        #: What the finished tasks printed last, if anything, by task id (sent with their results).
        self.outputs: dict[int, tuple[str, str]] = {}
        #: Task id -> seconds, for queued tasks that have a timeout.
        self.timeouts: dict[int, float] = {}
        #: Queued tasks whose value, if large, stays here (the master said so: their futures are arguments).
        self.holds: set[int] = set()
        #: A task's own code runs now: the soft-kill signal interrupts it.
        self.in_task = False
        self._timing: tuple[int, float] | None = None  # (task id, timeout) of the running task, if it has one
        self._deadline: float | None = None  # when the watchdog gives up on the running task
        self._watch = threading.Condition()
        self._watchdog: threading.Thread | None = None
        self._stop = threading.Event()

    def run(self, item: TaskItem) -> ResultItem:
        task_id = item[0]
        if item[1] == names.RELAY:
            return self._relay(task_id, item[2])
        hold = task_id in self.holds if self.holds else False
        if hold:
            self.holds.discard(task_id)
        timeout = self.timeouts.pop(task_id, None) if self.timeouts else None
        if timeout is None:
            return self._call(item, hold)
        self._arm(task_id, timeout)
        try:
            return self._call(item, hold)
        finally:
            self._disarm()

    def stop(self) -> None:
        """End the watchdog and the output pump (the slave hangs up)."""
        self._stop.set()
        self._printer.stop()

    def _call(self, item: TaskItem, hold: bool) -> ResultItem:
        task_id, name, blob = item
        started = time.perf_counter()
        try:
            algorithm = registry.require(name)
            args, kwargs = decode_arguments_with(blob, self.data)
            printed, warned = self._printer.begin(task_id)
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
                left = self._printer.end()  # also waits for a frame of its output being sent (order)
                if left is not None:
                    self.outputs[task_id] = left
            elapsed = time.perf_counter() - started
            out = codec.encode_result(value, self._store, self.data, hold=hold or name in HELD)
        except (Exception, SystemExit) as exc:
            elapsed = time.perf_counter() - started
            return (task_id, False, codec.encode_error(exc), elapsed)
        if not protocol.fits(len(out), self._max_out):
            reason = f"the result takes {len(out)} bytes; the master accepts frames of at most {self._max_out}"
            return (task_id, False, codec.encode_failure("ResultTooLarge", reason), elapsed)
        return (task_id, True, out, elapsed)

    def _relay(self, task_id: int, blob: bytes) -> ResultItem:
        """mwpy's own step, not an algorithm: send a value this slave holds to its master's file service (a
        peer could not fetch it from here); the result is its hash and size."""
        started = time.perf_counter()
        try:
            if self.data is None:
                raise SharedObjectError("this slave holds no values")
            out = codec.encode_value(self.data.relay(codec.decode_value(blob), self._store))
        except Exception as exc:
            return (task_id, False, codec.encode_error(exc), time.perf_counter() - started)
        return (task_id, True, out, time.perf_counter() - started)

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

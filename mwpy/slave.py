"""The slave: connects to its master, proves membership, runs tasks until told to stop.

The slave is a plain blocking client. Tasks the master pipelines to it wait in
the kernel's socket buffer and a local queue while it computes; results go
back in groups (``--mw-slave-result-group``) or as soon as the queue runs dry.
A background thread sends heartbeats while a long task runs, so the master can
tell a busy slave from a dead one. A task that raises produces a failed result
and never kills the slave.

Exit statuses are documented in docs/exit-codes.md: 0 only after an orderly
shutdown (or a resource file saying the computation is finished), non-zero
otherwise, so that Condor's ``on_exit_remove`` keeps the job queued.

Condor's soft-kill signal (SIGTERM for vanilla jobs: vacate, preemption,
``condor_rm``) makes a connected slave leave gracefully: the running task is
interrupted, finished results go out, the tasks still queued here go back to
the master at once (``HandBack``) and the slave exits ``EVICTED`` (non-zero:
a vacated job stays queued; a removed one leaves anyway).

This module does socket I/O and runs tasks; which frame is legal when, and how
a result is encoded, is :class:`mwpy.wire.session.SlaveSession`'s and
:mod:`mwpy.wire.protocol`'s business.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import select
import signal
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from mwpy import (
    calls,  # noqa: F401 (registers the built-in task algorithms: an Executor's calls, map chunks)
    safe_text,
)
from mwpy._version import __version__
from mwpy.errors import ProtocolError, TaskTimeoutError
from mwpy.job_ad import machine_ad_text, own_job_id
from mwpy.lifetime import PLANNED_LEAVE, Lifetime, Retirement
from mwpy.net.spin import Spinner
from mwpy.observe.audit import Audit
from mwpy.options import DEFAULT_SPIN_US
from mwpy.resources import Resources
from mwpy.task import registry
from mwpy.wire import codec, protocol
from mwpy.wire.codec import DataPlane, decode_arguments_with
from mwpy.wire.protocol import ExitCode, ResultItem, TaskItem
from mwpy.wire.session import HandshakeReply, SlaveSession, SlaveState

__all__ = ["Endpoint", "ExitCode", "Slave", "SlaveExit", "SlaveStatus", "connect"]

log = safe_text.logger(__name__)

_RECV_SIZE = 256 * 1024
#: Characters of a task's stdout (and as many of its stderr) kept for its result; the rest is cut.
MAX_OUTPUT = 64 * 1024

#: Seconds between two looks at the peak memory (the heartbeat thread), and the growth that is reported early.
MEMORY_LOOK = 1.0
MEMORY_GROWTH = 1.1

#: Seconds finished results may wait on the slave for more to share their frame (while tasks run this short).
RESULT_HOLD = 0.002
#: Seconds between the heartbeat thread's looks at held results while holds keep beginning: a result behind a
#: task that turns out long waits at most this much more than RESULT_HOLD.
RESCUE_LOOK = 0.02

#: Seconds a task past its timeout has to stop after its TaskTimeoutError before the slave exits (status 8).
TIMEOUT_GRACE = 5.0


class _Evicted(BaseException):
    """Raised into a running task by the soft-kill signal (a BaseException: tasks' ``except Exception`` let it by)."""


class _HoldWatch:
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


class SlaveExit(Exception):
    """The slave must stop with ``code``; ``reason`` says why in one line."""

    def __init__(self, code: ExitCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@attrs.frozen
class Endpoint:
    """Where the master is and how to prove membership to it."""

    host: str
    port: int
    member_id: str
    secret: bytes
    #: Set when the master speaks TLS: the SHA-256 fingerprint its certificate must have.
    tls_fingerprint: str | None = None


@attrs.frozen
class SlaveStatus:
    """What a slave loop variant reports (CL-MW's six slave-loop values)."""

    master_disconnected: bool
    explicit_shutdown: bool
    results_done: int
    tasks_pending: int
    results_pending: int
    result_group: int
    exit_code: int


class Slave:
    """A connected slave: the object a slave algorithm receives."""

    def __init__(
        self,
        sock: socket.socket,
        session: SlaveSession,
        welcome: protocol.Welcome,
        audit: Audit,
        *,
        spin_us: int = DEFAULT_SPIN_US,
    ) -> None:
        self._sock = sock
        self._session = session  # may already hold frames sent right after Welcome
        self._audit = audit
        self.slave_id = welcome.slave_id
        self.result_group = welcome.result_group
        self._max_out = welcome.max_frame
        self._store = (welcome.store_host, welcome.store_port)  # where a result too large for a frame goes
        #: The counters of this process's cache of shared objects (hits, misses, bytes fetched, evictions),
        #: sent with the heartbeats once they change (the program sets it: only it knows the cache).
        self.cache_counts: Callable[[], tuple[int, int, int, int]] = lambda: (0, 0, 0, 0)
        #: What its tasks' shared objects, files and large values go through (the program sets it).
        self.data: DataPlane | None = None
        # Reads land in one buffer: recv(256 KiB) would mmap and munmap 256 KiB per call (see master.py).
        self._buffer = bytearray(_RECV_SIZE)
        self._view = memoryview(self._buffer)
        self._queue: deque[TaskItem] = deque()
        self._results: list[ResultItem] = []
        self._outputs: dict[int, tuple[str, str]] = {}  # what the tasks in _results printed, if anything
        self._held_since = 0.0  # monotonic clock: when the oldest result in _results was ready
        # The heartbeat thread sends results held past RESULT_HOLD while the main thread runs a long task (a
        # result never waits behind one); the watch's lock guards _results and _held_since.
        self._hold = _HoldWatch()
        self._done = 0
        self._shutdown: int | None = None
        self._lost: str | None = None
        self._timeouts: dict[int, float] = {}  # task id -> seconds, for queued tasks that have a timeout
        self._timing: tuple[int, float] | None = None  # (task id, timeout) of the running task, if it has one
        self._deadline: float | None = None  # when the watchdog gives up on the running task
        self._watch = threading.Condition()
        self._watchdog: threading.Thread | None = None
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._spinner = Spinner(spin_us)
        # One lock for reads and writes: the heartbeat thread writes while the main thread
        # reads, and an SSL object must not be used by two threads at once.
        self._io_lock = threading.Lock()
        self._last_send = time.monotonic()
        self._stop = threading.Event()
        self._evicted: int | None = None  # the soft-kill signal received, if any
        self._in_task = False  # a task's own code runs now: the soft-kill signal interrupts it
        self._retirement: Retirement | None = None  # with a lifetime: whether the next task ends before it
        self.retired: str | None = None  # why the slave left by plan at the end of its lifetime, if it did
        self._previous_handler: Any = None
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller.register(self._wake_read, select.POLLIN)
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous_handler = signal.signal(signal.SIGTERM, self._soft_kill)
        self._heartbeats = threading.Thread(
            target=self._beat, args=(welcome.heartbeat_interval,), name="mwpy-heartbeat", daemon=True
        )
        self._heartbeats.start()
        self._process_frames()

    # ------------------------------------------------------------------ loop variants

    def loop_until_shutdown(self) -> int:
        """Work until the master says stop; 0 after an orderly shutdown, else a non-zero status."""
        while self._shutdown is None and self._lost is None:  # leaving on a soft-kill signal sets _lost
            self._work(None)  # no SlaveStatus per round: nobody would read it
        return self.status().exit_code

    def loop(self, timeout: float | None = 0.05) -> SlaveStatus:
        """Run the tasks queued now (waiting up to ``timeout`` for some if none are), then return."""
        self._work(timeout)
        self._flush()  # the slave algorithm gets control back: no result waits on it
        return self.status()

    def _work(self, timeout: float | None) -> None:
        self._await(timeout)
        for _ in range(len(self._queue)):
            if not self._queue or not self._step():  # a Cancel read between two tasks may have emptied it
                break

    def loop_once(self, timeout: float = 0.0001) -> SlaveStatus:
        """Run at most one task (waiting up to ``timeout`` for one), then return."""
        self._await(timeout)
        if self._queue:
            self._step()
        self._flush()  # the slave algorithm gets control back: no result waits on it
        return self.status()

    def _await(self, timeout: float | None) -> None:
        """Read the master's messages, waiting up to ``timeout`` if idle, but not past the time to leave by plan."""
        idle = not self._queue
        self._receive(timeout if self._retirement is None or not idle else self._retirement.wait(timeout), wait=idle)
        if not self._queue and self._retirement is not None:
            self._due(None)

    def retire_by(self, lifetime: Lifetime) -> None:
        """Leave by plan before ``lifetime`` ends: take only tasks that end in time (mwpy/lifetime.py)."""
        self._retirement = Retirement(lifetime)

    def status(self) -> SlaveStatus:
        if self._shutdown is not None:
            code = self._shutdown
        elif self._evicted is not None:
            code = ExitCode.EVICTED
        elif self.retired is not None:  # a planned leave: 0, so that Condor does not run the job again
            code = ExitCode.OK
        elif self._lost is not None:
            code = ExitCode.MASTER_LOST
        else:
            code = ExitCode.OK
        return SlaveStatus(
            master_disconnected=self._lost is not None,
            explicit_shutdown=self._shutdown is not None,
            results_done=self._done,
            tasks_pending=len(self._queue),
            results_pending=len(self._results),
            result_group=self.result_group,
            exit_code=int(code),
        )

    def pilot_state(self) -> tuple[str, int]:
        """What the slave does now, for Condor's views (mwpy/net/chirp.py): its state and the results it sent."""
        if self._lost is not None or self._shutdown is not None or self._evicted is not None:
            return "draining", self._done
        return ("working" if self._in_task or self._queue else "idle"), self._done

    def close(self) -> None:
        """Stop heartbeats and hang up."""
        self._stop.set()
        self._hold.wake()  # the heartbeat thread waits on it
        with self._io_lock:
            self._sock.close()
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ leaving on a soft-kill signal

    def _soft_kill(self, signum: int, frame: object) -> None:
        """SIGTERM: leave as soon as it is safe; a running task is interrupted (it goes back to the master)."""
        if self._evicted is not None:
            return
        self._evicted = signum
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")  # cuts a wait for the master's next message short
        if self._in_task:
            raise _Evicted

    def _leave(self) -> None:
        """Leave on the soft-kill signal (Condor's eviction), handing back what this slave holds."""
        name = signal.Signals(self._evicted or signal.SIGTERM).name
        self.give_back(f"on a soft-kill signal ({name})", label=name)

    def _due(self, algorithm: str | None) -> bool:
        """Leave by plan if a task of ``algorithm`` (None: no task) would not end in time; whether it left."""
        judge = self._retirement
        if judge is None or judge.fits(algorithm) or self._lost is not None or self._shutdown is not None:
            return False
        self.retired = judge.reason(algorithm)
        self.give_back(f"{PLANNED_LEAVE}{self.retired}", label="LIFETIME")
        return True

    def give_back(self, why: str = "as the slave algorithm raised", *, label: str = "ALGORITHM RAISED") -> None:
        """Send finished results, hand the queued tasks back, and hang up (the master re-queues them at once).

        A slave that leaves this way is not dead to the master: none of its tasks
        is blamed for it (issue 21's allowed failures count slaves killed *by* a task).
        ``why`` completes "left ..." in the master's log; ``label`` starts this slave's audit line.
        """
        if self._lost is not None or self._shutdown is not None:
            return
        self._flush()
        queued = [item[0] for item in self._queue]
        self._queue.clear()
        self._timeouts.clear()
        self._audit(f"{label}: leaving; {len(queued)} queued tasks handed back to the master")
        with self._io_lock:
            self._write(self._session.send(protocol.HandBack(queued, why)))
        self._stop.set()
        self._lost = f"left {why}"
        self._audit.flush()

    # ------------------------------------------------------------------ work

    def _step(self) -> bool:
        """Run one queued task and pass on results as needed; False once the slave must stop."""
        if self._retirement is not None and self._due(self._queue[0][1]):
            return False
        item = self._queue.popleft()
        try:
            result = self._run(item)
        except _Evicted:  # interrupted: no result; the master re-queues it when this slave leaves
            self._outputs.pop(item[0], None)
            self._leave()
            return False
        if self._retirement is not None:
            self._retirement.ran(item[1], result[3])
        now = time.monotonic()
        with self._hold.lock:
            results = self._results
            results.append(result)
            if len(results) == 1:
                self._held_since = now
        if self._evicted is not None:
            self._leave()
            return False
        if (
            len(results) >= self.result_group
            or not result[1]  # a failure goes out at once: the master decides on retries, the user sees it
            or result[3] >= RESULT_HOLD
            or now - self._held_since >= RESULT_HOLD
        ):
            self._flush()  # a full group, or results held long enough, go out first: the master may be waiting
        if self._queue:
            self._receive(0.0, wait=False)  # between queued tasks: more tasks, or a Shutdown, may be waiting
        if self._results and not self._queue:
            self._flush()  # the queue ran dry (the next wait reads whatever comes)
        elif len(self._results) == 1:  # a hold begins and the next task runs: the heartbeat thread watches it
            self._hold.begins()
        return self._shutdown is None and self._lost is None

    def _run(self, item: TaskItem) -> ResultItem:
        task_id = item[0]
        timeout = self._timeouts.pop(task_id, None) if self._timeouts else None
        if timeout is None:
            return self._call(item)
        self._arm(task_id, timeout)
        try:
            return self._call(item)
        finally:
            self._disarm()

    def _call(self, item: TaskItem) -> ResultItem:
        task_id, name, blob = item
        started = time.perf_counter()
        try:
            algorithm = registry.require(name)
            args, kwargs = decode_arguments_with(blob, self.data)
            printed, warned = _Capture(), _Capture()
            # sys.stdout/stderr swapped by hand: contextlib.redirect_* cost 2 µs a task, a no-op task's whole run.
            saved = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = printed, warned
            try:
                self._in_task = True
                try:
                    value = algorithm.fn(*args, **kwargs)
                finally:
                    self._in_task = False
            finally:
                sys.stdout, sys.stderr = saved
                if printed.size or warned.size:
                    self._outputs[task_id] = (printed.text(), warned.text())
            elapsed = time.perf_counter() - started
            out = codec.encode_result(value, self._store, self.data)
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
            raise TaskTimeoutError(f"the task ran past its timeout of {timing[1]:g} s (interrupted on {self.slave_id})")

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
            f"of being interrupted; slave {self.slave_id} exits (status {int(ExitCode.TASK_STUCK)}) to be replaced"
        )
        try:
            raise TaskTimeoutError(reason)
        except TaskTimeoutError as exc:
            failure = codec.encode_error(exc)
        # The main thread is stuck in the task: the results it held are finished work, and go along.
        with self._hold.lock:
            self._results.append((task_id, False, failure, timeout + TIMEOUT_GRACE))
        with contextlib.suppress(Exception):
            self._flush()
        log.error("task %d: %s", task_id, reason)
        self._audit(f"TASK {task_id} STUCK: {reason}")
        self._audit.flush()
        print(f"mwpy slave: {reason}", file=sys.stderr, flush=True)
        os._exit(int(ExitCode.TASK_STUCK))

    def _flush(self) -> None:
        """Send the results held (from the main thread, or the heartbeat thread when they waited too long)."""
        if not self._results:
            return
        with self._hold.lock:
            results, self._results = self._results, []
            self._done += len(results)
        # Only these results' output: the main thread may be writing the next task's (no lock on that path).
        outputs = {r[0]: self._outputs.pop(r[0]) for r in results if r[0] in self._outputs} if self._outputs else {}
        if not results or self._lost is not None:
            return
        if len(results) == 1:  # _run made sure every single result fits in a frame (and output is capped)
            self._send_results(results, outputs)
        else:
            sizes = [len(r[2]) + _output_size(outputs.get(r[0])) for r in results]
            for start, stop in protocol.pack(sizes, self.result_group, self._max_out):
                part = results[start:stop]
                self._send_results(part, {r[0]: outputs[r[0]] for r in part if r[0] in outputs} if outputs else None)
        if self._audit.packets:
            self._audit(f"MASTER <- {len(results)} results")

    # ------------------------------------------------------------------ I/O

    def _receive(self, timeout: float | None, *, wait: bool) -> None:
        """Read whatever the master sent; block up to ``timeout`` first if ``wait``."""
        if self._lost is not None or self._shutdown is not None:
            return
        # Waiting, the next task may be microseconds away: the spinner polls a moment before sleeping
        # (mwpy/net/spin.py); poll returns at once if something is waiting, so there is no need to ask twice.
        ready = self._tls_pending() or bool(self._spinner.wait(self._poll, timeout)) if wait else self._readable()
        if self._evicted is not None:  # the soft-kill signal (it also woke the poll): leave instead of reading
            self._leave()
            return
        while ready:
            try:
                with self._io_lock:
                    size = self._sock.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return
            except OSError as exc:
                self._lose(f"read error: {exc}")
                return
            if not size:
                self._lose("the master closed the connection")
                return
            self._session.receive_data(self._view[:size])
            if not self._process_frames():
                return
            # A short read of a plain socket took all the kernel had: asking poll again would only say no.
            ready = (size == _RECV_SIZE or isinstance(self._sock, ssl.SSLSocket)) and self._readable()

    def _poll(self, timeout: float | None) -> list[tuple[int, int]]:
        return self._poller.poll(None if timeout is None else int(timeout * 1000))

    def _tls_pending(self) -> bool:
        """TLS holds decrypted bytes the kernel does not know of (poll will not report them)."""
        return isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0

    def _readable(self) -> bool:
        """Data waits to be read (TLS may hold decrypted bytes the kernel does not know of)."""
        return self._tls_pending() or bool(self._poller.poll(0))

    def _process_frames(self) -> bool:
        """Handle every complete frame received; False once nothing more should be read."""
        session = self._session
        try:
            # Nothing after a Shutdown is read: the session would refuse it, and the slave is leaving anyway.
            while self._shutdown is None and (msg := session.next_event()) is not None:
                self._handle(msg)
        except ProtocolError as exc:
            self._lose(f"protocol error: {exc}")
            return False
        return self._shutdown is None

    def _handle(self, msg: object) -> None:
        """A message the session let through in the READY state: Tasks, Shutdown or Heartbeat."""
        if isinstance(msg, protocol.Tasks):
            self._queue.extend(msg.items)
            if msg.timeouts:
                self._timeouts.update(msg.timeouts)
            if self._audit.packets:
                self._audit(f"MASTER -> {len(msg.items)} tasks")
        elif isinstance(msg, protocol.Cancel):
            self._cancel(msg.task_ids)
        elif isinstance(msg, protocol.Shutdown):
            self._audit("MASTER -> SHUTDOWN" if msg.exit_code == 0 else f"MASTER -> LEAVE (exit {msg.exit_code})")
            self._flush()
            self._shutdown = msg.exit_code
            self._queue.clear()

    def _cancel(self, task_ids: list[int]) -> None:
        """Drop the named tasks still queued here and tell the master which ones (the others ran or run)."""
        doomed = set(task_ids)
        kept = [item for item in self._queue if item[0] not in doomed]
        dropped = [item[0] for item in self._queue if item[0] in doomed]
        self._queue = deque(kept)
        for task_id in dropped:
            self._timeouts.pop(task_id, None)
        self._audit(f"MASTER -> CANCEL {len(task_ids)} tasks ({len(dropped)} dropped unstarted)")
        with self._io_lock:
            self._write(self._session.send(protocol.Cancelled(dropped)))

    def _lose(self, reason: str) -> None:
        self._lost = reason
        self._audit(f"MASTER LOST ({reason})")

    def _send_results(self, items: list[ResultItem], outputs: dict[int, tuple[str, str]] | None = None) -> None:
        with self._io_lock:  # the session's sequence number and the socket are shared with the heartbeat thread
            self._write(self._session.send_results(items, outputs))

    def _write(self, data: bytes) -> None:
        """Send a sealed frame (the caller holds the I/O lock)."""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            if self._lost is None:
                self._lose(f"write error: {exc}")
            return
        self._last_send = time.monotonic()

    def _beat(self, interval: float) -> None:
        """Heartbeats when nothing else went out for ``interval``, and at once when the peak memory grew or the
        cache's counters changed (within :data:`MEMORY_LOOK` s: the event log and the metrics show them).

        The master publishes the largest peak a slave reported, and the
        overseer asks Condor for that much memory for new slave jobs: a peak
        reached by a task that then gets the job held must be reported quickly.
        """
        reported, cache_reported = 0, (0, 0, 0, 0)
        look = min(interval / 2, MEMORY_LOOK)
        next_look = time.monotonic() + look
        while not self._stop.is_set():
            if self._hold.wait(next_look, self._held_state):
                self._flush()  # results held behind a task that runs long: they go now
            if self._stop.is_set() or time.monotonic() < next_look:
                continue
            next_look = time.monotonic() + look
            peak, cache = peak_memory(), self.cache_counts()
            grew = peak > reported * MEMORY_GROWTH or cache != cache_reported
            if (grew or time.monotonic() - self._last_send >= interval) and self._lost is None:
                with self._io_lock:
                    self._write(self._session.send(protocol.Heartbeat(peak, cache)))
                reported, cache_reported = peak, cache
            if self._lost is not None and self._in_task and self._evicted is None:
                _leave_lost_master(self._audit, self._lost)

    def _held_state(self) -> tuple[bool, float]:
        """Whether results are held, and since when (read under the watch's lock)."""
        return bool(self._results), self._held_since


def _leave_lost_master(audit: Audit, lost: str) -> None:
    """The connection died (``lost``) while a task runs: leave now rather than hold the slot until the task ends.

    The task's result has nowhere to go (the master queued the task again when
    the connection dropped, or is gone), and a pilot whose master is gone must
    not outlive it (issue 24): the job stays queued and its next run finds the
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


def peak_memory() -> int:
    """Bytes: this process's peak resident set size so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _output_size(streams: tuple[str, str] | None) -> int:
    return 0 if streams is None else 4 * (len(streams[0]) + len(streams[1])) + 16  # UTF-8: at most 4 bytes a char


def connect(
    endpoint: Endpoint,
    *,
    audit: Audit,
    max_frame: int,
    timeout: float,
    patience: float,
    spin_us: int = DEFAULT_SPIN_US,
    shape: Resources | None = None,
    leave_at: float = 0.0,
) -> Slave:
    """Connect and authenticate, saying what we offer (``shape``); keep trying for ``patience`` seconds while
    nobody answers.

    ``leave_at``: when (Unix time) the slave will leave by plan, 0.0 for never (the master is told in Hello).
    """
    address = f"{endpoint.host}:{endpoint.port}"
    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
            break
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise SlaveExit(ExitCode.UNREACHABLE, f"cannot reach the master at {address}: {exc}") from None
            time.sleep(delay)  # the master may be starting or restarting: back off and retry
            delay = min(delay * 2, 2.0)
    try:
        if endpoint.tls_fingerprint is not None:
            sock = _start_tls(sock, endpoint.tls_fingerprint, address)
        slave = _handshake(sock, endpoint, audit, max_frame, address, spin_us=spin_us, shape=shape, leave_at=leave_at)
    except BaseException:
        sock.close()
        raise
    return slave


def _start_tls(sock: socket.socket, fingerprint: str, address: str) -> ssl.SSLSocket:
    try:
        tls = protocol.tls_client_context().wrap_socket(sock)
    except (OSError, ssl.SSLError) as exc:
        raise SlaveExit(ExitCode.REFUSED, f"TLS with the master at {address} failed: {exc}") from None
    if not protocol.certificate_matches(tls, fingerprint):
        tls.close()
        raise SlaveExit(
            ExitCode.REFUSED, f"the master at {address} presented a TLS certificate with the wrong fingerprint"
        )
    return tls


def _handshake(
    sock: socket.socket,
    endpoint: Endpoint,
    audit: Audit,
    max_frame: int,
    address: str,
    *,
    spin_us: int,
    shape: Resources | None,
    leave_at: float,
) -> Slave:
    """Run the slave's side of the handshake over a blocking socket (in timeout mode)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    local = "{}:{}".format(*sock.getsockname()[:2])
    offer = () if shape is None else attrs.astuple(shape)
    host, pid = socket.gethostname(), os.getpid()
    hello = protocol.Hello(
        endpoint.member_id, host, pid, __version__, max_frame, own_job_id(), offer, leave_at, machine_ad_text()
    )
    session = SlaveSession(endpoint.secret, hello)
    welcome: protocol.Welcome | None = None
    try:
        while welcome is None:
            event = session.next_event()
            if event is None:
                session.receive_data(_read_some(sock, session, address))
            elif isinstance(event, HandshakeReply):
                sock.sendall(event.data)
            elif isinstance(event, protocol.Welcome):
                welcome = event
    except ProtocolError as exc:
        raise SlaveExit(ExitCode.REFUSED, f"{address}: {exc}") from None
    sock.settimeout(None)
    audit(f"MASTER <- CONNECTED TO {address} FROM {local}")
    audit(f"MASTER -> ID {welcome.slave_id}")
    audit.flush()
    return Slave(sock, session, welcome, audit, spin_us=spin_us)


def _read_some(sock: socket.socket, session: SlaveSession, address: str) -> bytes:
    """Bytes for the handshake; an end before Welcome says what the peer did at which step."""
    try:
        data = sock.recv(_RECV_SIZE)
    except TimeoutError:
        raise SlaveExit(ExitCode.REFUSED, _silent(session.state, address, sock.gettimeout())) from None
    except OSError as exc:
        raise SlaveExit(ExitCode.REFUSED, f"{address}: connection failed during the handshake: {exc}") from None
    if data:
        return data
    if session.state is SlaveState.PROVING:  # a master hangs up on a proof it cannot check: another secret
        raise SlaveExit(ExitCode.REFUSED, f"the master at {address} refused our proof of membership (wrong secret?)")
    if session.state is SlaveState.CONNECTED:
        raise SlaveExit(ExitCode.REFUSED, f"{address} hung up without a challenge: not an mwpy master?")
    raise SlaveExit(ExitCode.REFUSED, f"the master at {address} hung up after the proofs, before its Welcome")


def _silent(state: SlaveState, address: str, timeout: float | None) -> str:
    """A peer that stopped talking, by handshake step: silence is not a refused proof."""
    within = f"within {timeout:g} s" if timeout is not None else "in time"
    if state is SlaveState.CONNECTED:
        return f"no challenge from {address} {within}: not an mwpy master?"
    if state is SlaveState.PROVING:
        return f"no answer from {address} to our proof of membership {within}"
    return f"no Welcome from the master at {address} {within} after the proofs"

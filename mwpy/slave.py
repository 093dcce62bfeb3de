"""The slave: connects to its master, proves membership, runs tasks until told to stop.

The slave is a plain blocking client. Tasks the master pipelines to it wait in
the kernel's socket buffer and a local queue while it computes; results go
back in groups (``--mw-slave-result-group``) or as soon as the queue runs dry.
A task that raises produces a failed result and never kills the slave.

Exit statuses are documented in docs/exit-codes.md: 0 only after an orderly
shutdown (or a resource file saying the computation is finished), non-zero
otherwise, so that Condor's ``on_exit_remove`` keeps the job queued.

Condor's soft-kill signal makes a connected slave leave gracefully: the
running task is interrupted, finished results go out, the tasks still queued
here go back to the master at once (``HandBack``) and the slave exits
``EVICTED`` (non-zero: a vacated job stays queued; a removed one leaves anyway).

A slave started from a resource file outlives a master that vanishes (no
Shutdown) for ``--mw-master-lease`` seconds: its running task goes on, the
results of its keyed tasks are kept (``held``), and once a restarted master
answers at the address the file names, the slave connects again and hands them
over by key (``Handover``; mwpy/slaveside/lease.py waits, the master adopts them).

This module composes the slave's parts (mwpy/slaveside/): the socket
(``connection``), the task runs (``running``), heartbeats and signals
(``lifecycle``); which frame is legal when, and how a result is encoded, is
:class:`mwpy.wire.session.SlaveSession`'s and :mod:`mwpy.wire.protocol`'s business.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import deque
from collections.abc import Callable

import attrs

from mwpy.errors import ProtocolError
from mwpy.lifetime import PLANNED_LEAVE, Lifetime, Retirement
from mwpy.observe.audit import Audit
from mwpy.options import DEFAULT_SPIN_US
from mwpy.resources import Resources
from mwpy.slaveside.connection import Endpoint, Link, SlaveExit, open_link
from mwpy.slaveside.lifecycle import RESULT_HOLD, Evicted, Heartbeats, HoldWatch, SoftKill
from mwpy.slaveside.running import Runner
from mwpy.wire import protocol
from mwpy.wire.codec import DataPlane
from mwpy.wire.protocol import ExitCode, HeldItem, ResultItem, TaskItem
from mwpy.wire.session import SlaveSession

#: Seconds a slave that outlives its master keeps a keyed result it sent (the master journals it within a pass).
SENT_KEPT = 10.0

__all__ = ["Endpoint", "ExitCode", "Slave", "SlaveExit", "SlaveStatus", "connect"]


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
        held: dict[str, HeldItem] | None = None,
        resumed: bool = False,
        lease: float = 0.0,
    ) -> None:
        """``held``: the results of keyed tasks kept from a master that vanished (None: this slave does not
        outlive its master); ``resumed``: this master is its successor, told first what this slave kept (a
        Handover, even of nothing: the master then runs the tasks it waited for this slave for); ``lease``: for
        how many seconds from the loss of its master it does (``--mw-master-lease``)."""
        self._audit = audit
        self.held = held
        self._closed = False
        self._lease = lease
        self._lost_at: float | None = None  # monotonic: when the master was lost
        self._keyed = False
        #: Keyed results sent lately (when, item): a master that dies may not have read, or journaled, them.
        self._sent: deque[tuple[float, HeldItem]] = deque()
        self._sent_size = 0  # bytes of their values
        #: (key, algorithm) of the keyed tasks queued or running here, by task id.
        self._keys: dict[int, tuple[str, str]] = {}
        self.slave_id = welcome.slave_id
        #: This slave's address on the interface that reaches its master: where its peers fetch what it holds.
        self.host: str = sock.getsockname()[0]
        self.result_group = welcome.result_group
        self._max_out = welcome.max_frame
        self._link = Link(sock, session, spin_us=spin_us, lost=self._lose)
        self._queue: deque[TaskItem] = deque()
        self._results: list[ResultItem] = []
        self._held_since = 0.0  # monotonic clock: when the oldest result in _results was ready
        # The heartbeat thread sends results held past RESULT_HOLD while the main thread runs a long task (a
        # result never waits behind one); the watch's lock guards _results and _held_since.
        self._hold = HoldWatch()
        self._done = 0
        self._shutdown: int | None = None
        self._lost: str | None = None
        self._retirement: Retirement | None = None  # with a lifetime: whether the next task ends before it
        self.retired: str | None = None  # why the slave left by plan at the end of its lifetime, if it did
        store = (welcome.store_host, welcome.store_port)  # where a result too large for a frame goes
        self._runner = Runner(
            self.slave_id, max_out=self._max_out, store=store, audit=audit, rescue=self._rescue, printed=self._printed
        )
        self._kill = SoftKill(self._link.wake, lambda: self._runner.in_task)
        self._heartbeats = Heartbeats(
            welcome.heartbeat_interval, self._link, self._hold, audit, flush=self._flush, held=self._held_state,
            lost=lambda: self._lost,
            stranded=lambda: self._runner.in_task and self._kill.signum is None and not self.outlives,
        )  # fmt: skip
        if resumed and held is not None:
            self._hand_over(held)
        self._process_frames()

    @property
    def cache_counts(self) -> Callable[[], tuple[int, int, int, int]]:
        """The counters of this process's cache of shared objects (hits, misses, bytes fetched, evictions),
        sent with the heartbeats once they change (start-up sets it: only it knows the cache)."""
        return self._heartbeats.cache_counts

    @cache_counts.setter
    def cache_counts(self, counts: Callable[[], tuple[int, int, int, int]]) -> None:
        self._heartbeats.cache_counts = counts

    @property
    def data(self) -> DataPlane | None:
        """What its tasks' shared objects, files and large values go through (start-up sets it)."""
        return self._runner.data

    @data.setter
    def data(self, data: DataPlane | None) -> None:
        self._runner.data = data

    # ------------------------------------------------------------------ loop variants

    def loop_until_shutdown(self) -> int:
        """Work until the master says stop; 0 after an orderly shutdown, else a non-zero status."""
        while self._shutdown is None and self._lost is None:  # leaving on a soft-kill signal sets _lost
            self._work(None)  # no SlaveStatus per round: nobody would read it
        if self._lost is not None:
            self._flush()  # a master that vanished: the results of keyed tasks are kept (held), the rest dropped
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

    @property
    def outlives(self) -> bool:
        """Whether this slave outlives a master that vanishes: it can find a restarted one (``held`` is not
        None) and was given keyed tasks (the master keeps a journal: a restarted one waits for this slave)."""
        return self.held is not None and self._keyed and self.lease_left() > 0

    def lease_left(self) -> float:
        """Seconds left of the lease (all of it while the master is there)."""
        return self._lease - (0.0 if self._lost_at is None else time.monotonic() - self._lost_at)

    def retire_by(self, lifetime: Lifetime) -> None:
        """Leave by plan before ``lifetime`` ends: take only tasks that end in time (mwpy/lifetime.py)."""
        self._retirement = Retirement(lifetime)

    def status(self) -> SlaveStatus:
        if self._shutdown is not None:
            code = self._shutdown
        elif self._kill.signum is not None:
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
        if self._lost is not None or self._shutdown is not None or self._kill.signum is not None:
            return "draining", self._done
        return ("working" if self._runner.in_task or self._queue else "idle"), self._done

    def close(self) -> None:
        """Stop heartbeats and hang up (once: a slave that outlived its master was closed before its successor)."""
        if self._closed:
            return
        self._closed = True
        self._heartbeats.stop()
        self._runner.stop()
        self._link.close()
        self._kill.restore()

    # ------------------------------------------------------------------ leaving

    def _leave(self) -> None:
        """Leave on the soft-kill signal (Condor's eviction), handing back what this slave holds."""
        name = self._kill.name()
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
        is blamed for it (the allowed failures count slaves killed *by* a task).
        ``why`` completes "left ..." in the master's log; ``label`` starts this slave's audit line.
        """
        if self._lost is not None or self._shutdown is not None:
            return
        self._flush()
        queued = [item[0] for item in self._queue]
        self._queue.clear()
        self._runner.timeouts.clear()
        self._runner.holds.clear()
        self._audit(f"{label}: leaving; {len(queued)} queued tasks handed back to the master")
        self._link.send(protocol.HandBack(queued, why))
        self._heartbeats.stop()
        self._runner.stop()
        self._lost = f"left {why}"
        self._audit.flush()

    def _lose(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            self._lost_at = time.monotonic()
            self._audit(f"MASTER LOST ({reason})")
            if self.held is not None and self._keyed:  # what went out lately may never have arrived: kept too
                self.held.update((item[0], item) for _, item in self._sent)

    def _hand_over(self, held: dict[str, HeldItem]) -> None:
        """Tell a restarted master what this slave kept (in frames that fit; one, empty, when it kept nothing)."""
        self._audit(f"MASTER <- HANDOVER of {len(held)} results kept while the master was gone")
        items = list(held.values())
        sizes = [len(item[2][2]) + len(item[0]) + len(item[1]) for item in items]
        for start, stop in protocol.pack(sizes, len(items), self._max_out) if items else [(0, 0)]:
            self._link.send(protocol.Handover(items[start:stop]))
        held.clear()

    def _note_sent(self, results: list[ResultItem]) -> None:
        """Keep the keyed results just sent for a while (SENT_KEPT s, at most a frame's worth): should the master
        vanish before it journaled them, they are handed to its successor (a duplicate is dropped there)."""
        keys, sent, now = self._keys, self._sent, time.monotonic()
        for r in results:
            if r[1] and r[0] in keys:
                sent.append((now, (*keys[r[0]], r)))
                self._sent_size += len(r[2])
        while sent and (now - sent[0][0] > SENT_KEPT or self._sent_size > self._max_out // 2):
            self._sent_size -= len(sent.popleft()[1][2][2])

    # ------------------------------------------------------------------ work

    def _step(self) -> bool:
        """Run one queued task and pass on results as needed; False once the slave must stop."""
        if self._retirement is not None and self._due(self._queue[0][1]):
            return False
        item = self._queue.popleft()
        try:
            result = self._runner.run(item)
        except Evicted:  # interrupted: no result; the master re-queues it when this slave leaves
            self._runner.outputs.pop(item[0], None)
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
        if self._kill.signum is not None:
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

    def _rescue(self, result: ResultItem) -> None:
        """The watchdog's result for a stuck task: it goes at once, with the finished work held (best effort)."""
        with self._hold.lock:
            self._results.append(result)
        with contextlib.suppress(Exception):  # the process exits next, whatever happened here
            self._flush()

    def _printed(self, task_id: int, stdout: str, stderr: str) -> None:
        """What a running task printed goes now (a Results message with no result: the output pump's)."""
        if self._lost is None:
            self._link.send_results([], {task_id: (stdout, stderr)})

    def _flush(self) -> None:
        """Send the results held (from the main thread, or the heartbeat thread when they waited too long)."""
        if not self._results:
            return
        with self._hold.lock:
            results, self._results = self._results, []
            self._done += len(results)
        # Only these results' output: the main thread may be writing the next task's (no lock on that path).
        printed = self._runner.outputs
        outputs = {r[0]: printed.pop(r[0]) for r in results if r[0] in printed} if printed else {}
        if ((self._lost is not None or self._keys) and self._keep(results)) or not results:
            return
        if len(results) == 1:  # the runner made sure every single result fits in a frame (and its output is short)
            self._link.send_results(results, outputs)
        else:
            sizes = [len(r[2]) + _output_size(outputs.get(r[0])) for r in results]
            for start, stop in protocol.pack(sizes, self.result_group, self._max_out):
                part = results[start:stop]
                self._link.send_results(part, {r[0]: outputs[r[0]] for r in part if r[0] in outputs} or None)
        if self._audit.packets:
            self._audit(f"MASTER <- {len(results)} results")

    def _keep(self, results: list[ResultItem]) -> bool:
        """Keyed tasks' successes among ``results``: kept for a restarted master if the master is lost (then True:
        nothing goes out), else noted as sent lately."""
        keys = self._keys
        if self._lost is not None:
            if self.held is not None and self._keyed:
                self.held.update((keys[r[0]][0], (*keys[r[0]], r)) for r in results if r[1] and r[0] in keys)
            return True
        if self.held is not None:
            self._note_sent(results)
        for r in results:
            keys.pop(r[0], None)
        return False

    def _held_state(self) -> tuple[bool, float]:
        """Whether results are held, and since when (read under the watch's lock)."""
        return bool(self._results), self._held_since

    # ------------------------------------------------------------------ the master's messages

    def _receive(self, timeout: float | None, *, wait: bool) -> None:
        """Read whatever the master sent; block up to ``timeout`` first if ``wait``."""
        if self._lost is not None or self._shutdown is not None:
            return
        link = self._link
        ready = link.wait(timeout) if wait else link.readable()
        if self._kill.signum is not None:  # the soft-kill signal (it also woke the poll): leave instead of reading
            self._leave()
            return
        while ready:
            size = link.receive()
            if size is None or not size or not self._process_frames():
                return
            ready = link.more(size)

    def _process_frames(self) -> bool:
        """Handle every complete frame received; False once nothing more should be read."""
        session = self._link.session
        try:
            # Nothing after a Shutdown is read: the session would refuse it, and the slave is leaving anyway.
            while session.inbox and self._shutdown is None and (msg := session.next_event()) is not None:
                self._handle(msg)
        except ProtocolError as exc:
            self._lose(f"protocol error: {exc}")
            return False
        return self._shutdown is None

    def _handle(self, msg: object) -> None:
        """A message the session let through in the READY state: Tasks, Cancel, Shutdown or Heartbeat."""
        if isinstance(msg, protocol.Tasks):
            self._queue.extend(msg.items)
            if msg.timeouts:
                self._runner.timeouts.update(msg.timeouts)
            if msg.hold:
                self._runner.holds.update(msg.hold)
            if msg.keys:
                self._keyed = True
                algorithms = {item[0]: item[1] for item in msg.items}
                self._keys.update(
                    (task_id, (key, algorithms[task_id]))
                    for task_id, key in msg.keys.items()
                    if task_id in algorithms and type(key) is str
                )
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
            self._runner.timeouts.pop(task_id, None)
            self._runner.holds.discard(task_id)
        self._audit(f"MASTER -> CANCEL {len(task_ids)} tasks ({len(dropped)} dropped unstarted)")
        self._link.send(protocol.Cancelled(dropped))


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
    held: dict[str, HeldItem] | None = None,
    resumed: bool = False,
    lease: float = 0.0,
) -> Slave:
    """Connect and authenticate, saying what we offer (``shape``); keep trying for ``patience`` seconds while
    nobody answers. ``leave_at``: when (Unix time) the slave will leave by plan, 0.0 for never."""
    sock, session, welcome = open_link(
        endpoint, audit=audit, max_frame=max_frame, timeout=timeout, patience=patience, shape=shape, leave_at=leave_at
    )
    return Slave(sock, session, welcome, audit, spin_us=spin_us, held=held, resumed=resumed, lease=lease)

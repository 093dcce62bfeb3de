"""The master's event loop: one selector, every slave connection, tasks out and results in.

Single-threaded and hand-driven: :meth:`Engine.step` is one pass (hand out
tasks → ``select`` → accept, read, write → hand out tasks again → timers →
journal commit → audit flush); the user-facing :class:`mwpy.master.Master`
runs passes when the master algorithm calls ``loop()``. Why selectors and not
asyncio is explained in docs/design.md.

Each connection is a :class:`_Peer`: a socket, an output buffer and a
:class:`~mwpy.wire.session.MasterSession` that decides what the bytes mean and
what may be sent. This module only moves bytes and applies the scheduler's
decisions; it knows nothing of the resource file (a tick callback does that)
nor of how results reach the master algorithm (a delivery callback does).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import pickle
import resource
import selectors
import socket
import ssl
import time
from collections.abc import Callable

import attrs

from mwpy.core.journal import Journal
from mwpy.core.scheduler import Scheduler
from mwpy.errors import ProtocolError, TaskTimeoutError
from mwpy.net.spin import Spinner
from mwpy.observe import events as ev
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.options import Options
from mwpy.task import Result, Task, TaskError, task_exception
from mwpy.wire import protocol
from mwpy.wire.protocol import ExitCode, Results
from mwpy.wire.session import HandshakeReply, MasterSession, MasterState, Refused

log = logs.logger(__name__)

#: Bytes read from a socket per call.
RECV_SIZE = 256 * 1024
#: How often timers (client timeouts, resource file) are looked at, in seconds.
TICK = 0.25
#: The soonest a tick asked for by news (a slave came or went) follows the previous one. Ticks cost
#: O(slaves): one per arrival would make a storm of N arrivals cost O(N²) (docs/scaling.md).
SOON_TICK = 0.05
#: How long the master stops accepting when it has no descriptor left for a new socket. The kernel's
#: backlog holds the callers meanwhile; a listener left readable would spin the loop (docs/scaling.md).
ACCEPT_PAUSE = 1.0
#: accept() errors that mean "out of descriptors or memory", not "this one caller went away".
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Failures that would recur on any slave: handed over at once, never retried.
_NOT_RETRIED = frozenset({"ResultTooLarge", "ResultDecodeError"})
#: Beyond a task's timeout and the slave's own grace (slave.TIMEOUT_GRACE), how long the master waits
#: before it gives up on the slave running the task (stopped, or stuck and its watchdog too).
MASTER_TIMEOUT_GRACE = 10.0
#: How long the master waits for slaves to acknowledge a shutdown.
SHUTDOWN_GRACE = 5.0

Deliver = Callable[[Task, Result], None]
#: The selector's mark for the wake-up socket (see Engine.wake).
_WAKE = object()


class _Peer:
    """One TCP connection to a (would-be) slave."""

    __slots__ = (
        "sock", "address", "session", "out", "sid", "last_heard",
        "max_out", "tasks_out", "results_in", "writing", "handshaking",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, address: str, session: MasterSession, now: float) -> None:
        self.sock: socket.socket | None = sock
        self.address = address
        self.session = session
        self.out = bytearray()
        self.sid: str | None = None
        self.last_heard = now
        self.max_out = 0
        self.tasks_out = 0
        self.results_in = 0
        self.writing = False
        self.handshaking = False  # TLS handshake still under way


def timeout_error(message: str) -> TaskError:
    """A TaskTimeoutError as a task failure: what a future raises for a task that ran too long."""
    exc = TaskTimeoutError(message)
    return TaskError("TaskTimeoutError", message, "", pickle.dumps(exc, protocol.PICKLE_PROTOCOL))


def decode_result(
    task: Task, sid: str, ok: bool, blob: bytes, compute_time: float, *, journaled: bool = False
) -> Result:
    """Turn a wire result into a Result; a value the master cannot unpickle becomes an error."""
    tag = task.policy.tag
    if ok:  # the hot path, without decode_outcome's call (which reports a value that does not unpickle)
        try:
            value = pickle.loads(blob)
        except Exception:
            pass
        else:
            return Result(task.task_id, task.algorithm, sid, tag, compute_time, value=value, journaled=journaled)
    value, failure = protocol.decode_outcome(ok, blob)
    if failure is None:
        return Result(task.task_id, task.algorithm, sid, tag, compute_time, value=value, journaled=journaled)
    return Result(task.task_id, task.algorithm, sid, tag, compute_time, error=TaskError(*failure))


def _retryable(task: Task, result: Result) -> bool:
    """Whether the policy's ``retry_on`` (if any) covers the exception the task raised."""
    kinds = task.policy.retry_on
    if kinds is None:
        return True
    exc = task_exception(result)
    return isinstance(exc, kinds)


class Engine:
    """Listens, accepts, authenticates and serves slaves for one master."""

    def __init__(
        self,
        options: Options,
        *,
        audit: Audit,
        secret: bytes,
        sched: Scheduler,
        journal: Journal | None,
        deliver: Deliver,
        on_tick: Callable[[float], None],
        events: ev.EventWriter | None = None,
    ) -> None:
        self._options = options
        self._audit = audit
        self._secret = secret
        self._sched = sched
        self._journal = journal
        self._deliver = deliver
        self._on_tick = on_tick
        self._events = events
        #: A failed task's output is worth seeing where the master runs (``mwpy local`` shows its stderr): capped.
        self._failed_output = logs.FailedOutput(log, raw=options.raw_task_output)
        self._peers: set[_Peer] = set()
        self._by_sid: dict[str, _Peer] = {}
        #: Condor job id (CLUSTER.PROC) by slave id, for the connected slaves that reported one.
        self._jobs: dict[str, str] = {}
        #: condor_jobs() as last computed, None once a slave with a job came or went (read every tick).
        self._job_list: list[str] | None = None
        # Every read lands in this one buffer and is copied into the peer's session.
        # sock.recv(256 KiB) would allocate 256 KiB per call, above glibc's mmap threshold:
        # an mmap, page faults and an munmap per read, half a one-task round trip on loopback.
        self._recv_buffer = bytearray(RECV_SIZE)
        self._recv_view = memoryview(self._recv_buffer)
        self._slave_numbers = itertools.count()
        self._heartbeat_interval = options.client_timeout / 4
        #: Bytes: the largest peak memory a slave reported (its Heartbeats), 0 while none did.
        self.peak_memory = 0
        self._next_tick = 0.0
        self._last_tick = float("-inf")
        #: While out of descriptors: when to listen again (None: listening).
        self._accept_resumes: float | None = None
        self._descriptors_warned = False
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        self.tls_fingerprint: str | None = None
        if options.tls_cert:
            self._tls, self.tls_fingerprint = protocol.tls_server_context(options.tls_cert, options.tls_key)
        _raise_file_limit()
        self._selector = selectors.DefaultSelector()
        self._spinner = Spinner(options.spin_us)
        #: The address the master listens on: its --mw-master-host, or "" for every interface.
        self.bind = options.master_host or ""
        self._listener = self._listen()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        # Another thread (mwpy.Executor's submitters) can cut a select short through this pair.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
        self.host = options.master_host or socket.gethostname()
        self.port: int = self._listener.getsockname()[1]

    # ------------------------------------------------------------------ one pass

    def step(self, wait: float) -> None:
        """One pass of the loop, waiting at most ``wait`` seconds in ``select``."""
        self._dispatch()
        now = time.monotonic()
        wait = max(0.0, min(wait, self._next_tick - now))
        # With tasks out a result may be microseconds away: poll a moment before sleeping (mwpy/net/spin.py).
        select = self._selector.select
        ready = self._spinner.wait(select, wait) if self._sched.running_total else select(wait)
        for key, mask in ready:
            peer = key.data
            if peer is None:
                self._accept()
                continue
            if peer is _WAKE:
                self._drain_wakeups()
                continue
            if peer.handshaking:
                self._tls_handshake(peer)
                continue
            if mask & selectors.EVENT_READ:
                self._read(peer)
            if mask & selectors.EVENT_WRITE and peer.sock is not None:
                self._send(peer)
        self._dispatch()
        now = time.monotonic()
        if now >= self._next_tick:
            self._tick(now)
        if self._journal is not None:
            self._journal.commit()  # durable before the master algorithm sees the results
        if self._events is not None:
            self._events.flush()  # a clock read, a write at most every FLUSH_INTERVAL
        self._audit.flush()

    def wake(self) -> None:
        """Cut the current (or next) ``select`` short; the only method safe to call from another thread."""
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (nothing to wake)
            self._wake_writer.send(b"\0")

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_reader.recv(4096):
                pass

    def tick_soon(self) -> None:
        """Look at timers (and the resource file) soon: something they report changed."""
        self._next_tick = min(self._next_tick, self._last_tick + SOON_TICK)

    # ------------------------------------------------------------------ network

    def _listen(self) -> socket.socket:
        host = self.bind
        port = self._options.master_port or 0
        try:
            sock = socket.create_server((host, port), backlog=1024)
        except OSError as exc:
            raise OSError(f"cannot listen on {host or '*'}:{port}: {exc.strerror or exc}") from None
        sock.setblocking(False)
        return sock

    def _accept(self) -> None:
        now = time.monotonic()
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause_accepting(now, exc)
                else:  # this caller gave up (ECONNABORTED...): the next one is served on the next pass
                    self._audit(f"ACCEPT FAILED {exc}")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = f"{addr[0]}:{addr[1]}"
            if self._closed:
                sock.close()
                continue
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            options = self._options
            session = MasterSession(
                self._secret,
                options.member_id,
                max_receive=options.max_read_buffer_size,
                max_send=options.max_write_buffer_size,
            )
            peer = _Peer(sock, address, session, now)
            self._peers.add(peer)
            self._selector.register(sock, selectors.EVENT_READ, peer)
            self._audit(f"NEW-CLIENT -> {address}")
            if self._tls is None:
                self._queue(peer, session.challenge())
            else:
                peer.handshaking = True
                self._tls_handshake(peer)

    def _pause_accepting(self, now: float, exc: OSError) -> None:
        """Out of descriptors: stop watching the listener for a while instead of spinning on it.

        The callers wait in the kernel's backlog (their connect() has completed) and
        are accepted once a slave leaves or the pause ends; the connected slaves are
        served meanwhile.
        """
        self._selector.unregister(self._listener)
        self._accept_resumes = now + ACCEPT_PAUSE
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        why = f"{exc.strerror or exc} with {len(self._peers)} connections open (descriptor limit {soft})"
        self._audit(f"ACCEPT PAUSED {ACCEPT_PAUSE:g} s: {why}")
        if not self._descriptors_warned:
            self._descriptors_warned = True
            log.warning("cannot accept more slaves: %s; raise the limit (ulimit -n) to serve more", why)

    def _resume_accepting(self) -> None:
        self._accept_resumes = None
        self._selector.register(self._listener, selectors.EVENT_READ, None)

    def _tls_handshake(self, peer: _Peer) -> None:
        """Advance a non-blocking TLS handshake; once done, the mwpy handshake starts."""
        sock = peer.sock
        assert isinstance(sock, ssl.SSLSocket)
        want_write = False
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLWantWriteError:
            want_write = True
        except OSError as exc:
            self._lose(peer, f"TLS handshake failed: {exc}")
            return
        else:  # last_heard stays at accept: TLS and the proof share one client timeout (docs/security.md)
            peer.handshaking = False
            self._queue(peer, peer.session.challenge())
            return
        self._want_write(peer, sock, want_write)

    def _read(self, peer: _Peer) -> None:
        size = self._recv(peer)
        if not size:
            return
        session = peer.session
        if session.state is not MasterState.PROVING:  # unproven peers get one client timeout in all
            peer.last_heard = time.monotonic()
        session.receive_data(self._recv_view[:size])
        self._handle_events(peer)

    def _recv(self, peer: _Peer) -> int | None:
        """Bytes now in the read buffer; ``None`` when there are none yet or the peer is gone."""
        sock = peer.sock
        assert sock is not None
        try:
            size = sock.recv_into(self._recv_buffer)
            if size and isinstance(sock, ssl.SSLSocket):
                while sock.pending():  # plaintext TLS already decrypted: select will not report it
                    peer.session.receive_data(self._recv_view[:size])
                    size = sock.recv_into(self._recv_buffer)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        except OSError as exc:
            self._lose(peer, f"read error: {exc}")
            return None
        if not size:
            self._lose(peer, "EOF")
            return None
        return size

    def _handle_events(self, peer: _Peer) -> None:
        """Act on every complete message the peer sent; a protocol violation drops it."""
        session = peer.session
        try:
            while peer.sock is not None and (event := session.next_event()) is not None:
                if type(event) is Results:  # the hot path first, and without an isinstance chain
                    self._take_results(peer, event)
                elif isinstance(event, HandshakeReply):
                    self._queue(peer, event.data)
                elif isinstance(event, protocol.Hello):
                    self._greet(peer, event)
                elif isinstance(event, Refused):
                    self._refuse(peer, event)
                elif type(event) is protocol.Cancelled:
                    self._take_back(peer, event)
                elif type(event) is protocol.HandBack:
                    self._handed_back(peer, event)
                elif type(event) is protocol.Heartbeat and event.peak_memory:
                    self._note_memory(peer, event.peak_memory)
                # Heartbeat: hearing from the slave (last_heard) was the point
        except ProtocolError as exc:
            self._lose(peer, f"protocol error: {exc}")

    def _refuse(self, peer: _Peer, refused: Refused) -> None:
        self._audit(f"REFUSED {peer.address} [{refused.hello.member_id!r}]: {refused.reason}")
        self._queue(peer, refused.data)
        self._close(peer)

    def _greet(self, peer: _Peer, hello: protocol.Hello) -> None:
        session = peer.session
        sid = f"slave-{next(self._slave_numbers)}"
        options = self._options
        welcome = protocol.Welcome(
            sid, options.slave_result_group, self._heartbeat_interval, options.max_read_buffer_size
        )
        data = session.send(welcome)
        peer.sid = sid
        peer.max_out = session.max_send
        self._by_sid[sid] = peer
        kind = self._sched.join(sid)
        self._queue(peer, data)
        job = hello.condor_job or None
        if job is not None:
            self._jobs[sid] = job
            self._job_list = None
        in_job = f", Condor job {job}" if job else ""
        log.info("%s connected from %s (host %s, pid %s%s) as %s", sid, peer.address, hello.host, hello.pid,
                 in_job, kind.value)  # fmt: skip
        self._audit(
            f'{sid} {peer.address} -> ["{hello.member_id}"] connecting [{kind.value}] '
            f"(host {hello.host}, pid {hello.pid}{in_job}, mwpy {hello.mwpy_version})"
        )
        if self._events is not None:
            self._events.emit(
                ev.SlaveConnected(
                    t=self._events.now(), slave=sid, host=hello.host, address=peer.address, group=kind.value, job=job
                )
            )
        self.tick_soon()

    def _take_results(self, peer: _Peer, msg: Results) -> None:
        sid = peer.sid
        assert sid is not None
        sched = self._sched
        peer.results_in += len(msg.items)
        if self._audit.packets:
            self._audit(f"{sid} -> {len(msg.items)} results")
        holes: list[str] = []
        for task_id, ok, blob, compute_time in msg.items:
            task = sched.finish(sid, task_id, compute_time)
            if task is None:
                self._audit(f"{sid} -> result for task {task_id} it does not hold (ignored)")
                continue
            result = decode_result(task, sid, ok, blob, compute_time)
            if msg.outputs and task_id in msg.outputs:
                stdout, stderr = msg.outputs[task_id]
                result = attrs.evolve(result, stdout=stdout, stderr=stderr)
            if result.error is None:
                holes += self._succeeded(sid, task, blob, compute_time)
            elif self._runs_again(sid, task, result, compute_time):
                continue
            sched.complete(task)
            if result.error is not None and (result.stdout or result.stderr):
                self._show_failed_output(result)
            self._deliver(task, result)
        for hole in holes:
            self._expel(hole)

    def _show_failed_output(self, result: Result) -> None:
        error = result.error
        assert error is not None
        self._failed_output.show(
            task=result.task_id,
            algorithm=result.algorithm,
            slave=result.slave_id,
            error=error.type,
            message=error.message,
            streams={"stdout": result.stdout, "stderr": result.stderr},
        )

    def _succeeded(self, sid: str, task: Task, blob: bytes, compute_time: float) -> list[str]:
        """Book a success (journal, event log); the black holes it reveals."""
        holes = self._sched.succeeded(sid, task)
        if task.policy.key is not None and self._journal is not None:
            self._journal.record(task.policy.key, task.algorithm, blob, sid, compute_time)
        if self._events is not None:
            self._events.task_finished(sid, task.algorithm, "ok", compute_time, task.sent_at - task.queued_at)
        return holes

    def _runs_again(self, sid: str, task: Task, result: Result, compute_time: float) -> bool:
        """Whether a task that raised is queued to run again (its policy asks and it could succeed elsewhere)."""
        error = result.error
        assert error is not None
        again = error.type not in _NOT_RETRIED and _retryable(task, result) and self._sched.failed(sid, task)
        if again:
            self._audit(f"{sid} -> task {task.task_id} failed ({error.type}); queued to run again")
        if self._events is not None:
            self._record_failure(sid, task, result, compute_time, retried=again)
        return again

    def _record_failure(self, sid: str, task: Task, result: Result, run: float, *, retried: bool) -> None:
        """A task that raised, in the event log: its time counts as lost, its traceback and output are kept."""
        assert self._events is not None
        error = result.error
        assert error is not None
        streams = [(name, text) for name, text in (("stdout", result.stdout), ("stderr", result.stderr)) if text]
        both = "".join(f"--- {name}:\n{text}" for name, text in streams)
        output = streams[0][1] if len(streams) == 1 else both or None  # what the task printed, labelled if both
        outcome: ev.Outcome = "retried" if retried else "error"
        self._events.task_finished(sid, task.algorithm, outcome, run, task.sent_at - task.queued_at)
        self._events.task_failed(
            task=task.task_id,
            slave=sid,
            algorithm=task.algorithm,
            error=error.type,
            message=error.message,
            traceback=error.traceback,
            retried=retried,
            output=output,
        )

    def _slave_left(self, sid: str, cause: str, why: str, lost: list[Task], unrunnable: int) -> None:
        """A slave's departure in the event log, with what became of the tasks it held."""
        events = self._events
        assert events is not None
        now = events.now()
        events.emit(ev.SlaveDisconnected(t=now, slave=sid, cause=cause, reason=why, in_flight=len(lost)))
        if len(lost) > unrunnable:
            events.emit(ev.TasksRequeued(t=now, slave=sid, n=len(lost) - unrunnable))
        if unrunnable:
            events.emit(ev.TasksUnrunnable(t=now, n=unrunnable, reason=f"{sid} vanished", slave=sid))

    def condor_jobs(self) -> list[str]:
        """The Condor job ids of the connected slaves (sorted): the resource file publishes them."""
        if self._job_list is None:
            self._job_list = sorted(set(self._jobs.values()), key=lambda job: tuple(map(int, job.split("."))))
        return self._job_list

    def cancel(self, sid: str, task_ids: list[int]) -> None:
        """Ask ``sid`` to drop these queued tasks (cancelled futures); it answers with Cancelled."""
        peer = self._by_sid.get(sid)
        if peer is None or peer.session.state is not MasterState.READY:
            return  # gone or leaving: whatever comes back is dropped by the cancelled futures
        self._audit(f"{sid} <- CANCEL {len(task_ids)} tasks")
        self._queue(peer, peer.session.send(protocol.Cancel(task_ids)))

    def _take_back(self, peer: _Peer, msg: protocol.Cancelled) -> None:
        sid = peer.sid
        if sid is None:
            return
        taken = [task_id for task_id in msg.task_ids if self._sched.withdraw(sid, task_id) is not None]
        self._audit(f"{sid} -> CANCELLED {len(taken)} tasks unstarted")

    def _handed_back(self, peer: _Peer, msg: protocol.HandBack) -> None:
        """The slave is leaving (a soft-kill signal: vacate, preemption, condor_rm): requeue, then drop it.

        Its finished results came before this message; the tasks it names never
        started and are queued again first, at once. Dropping the connection
        re-queues whatever else it held (the task it was running) as for a
        slave that vanished, without waiting for its EOF or a timeout.
        """
        sid = peer.sid
        if sid is None:
            return
        back = self._sched.hand_back(sid, msg.task_ids)
        self._audit(f"{sid} -> HANDED BACK {back} tasks unstarted (leaving: soft-kill signal)")
        log.info("%s is leaving (soft-kill signal) and handed back %d tasks unstarted", sid, back)
        if self._events is not None and back:
            self._events.emit(ev.TasksRequeued(t=self._events.now(), slave=sid, n=back))
        self._lose(peer, f"left on a soft-kill signal, {back} tasks handed back")

    def _note_memory(self, peer: _Peer, peak: int) -> None:
        """A slave's peak memory so far (bytes): the largest any slave needed is published."""
        if peak > self.peak_memory:
            self.peak_memory = peak
            self.tick_soon()

    def _expel(self, sid: str) -> None:
        """Send a black-hole slave away with a non-zero status; its tasks go to others."""
        peer = self._by_sid.pop(sid, None)
        if peer is None:
            return
        if self._jobs.pop(sid, None) is not None:
            self._job_list = None
        unrunnable = self._sched.num_unrunnable
        lost = self._sched.leave(sid)
        why = f"told to leave: {self._options.slave_max_failures} of its failed tasks succeeded elsewhere (black hole)"
        self._audit(f"{sid} -> {why}; {len(lost)} tasks in flight go to other slaves")
        if self._events is not None:
            self._slave_left(sid, "expelled", why, lost, self._sched.num_unrunnable - unrunnable)
        peer.sid = None
        self._queue(peer, peer.session.send(protocol.Shutdown(int(ExitCode.TOLD_TO_LEAVE))))
        self.tick_soon()

    def _dispatch(self) -> None:
        if self._closed:
            return  # every slave has been told to shut down: its session takes no more Tasks
        sched = self._sched
        for sid in sched.ready():
            tasks = sched.take(sid)
            if tasks:
                self._send_tasks(self._by_sid[sid], tasks)

    def _send_tasks(self, peer: _Peer, tasks: list[Task]) -> None:
        sid = peer.sid
        assert sid is not None
        if len(tasks) == 1 and protocol.fits(len(tasks[0].payload), peer.max_out):  # one task in flight: no packing
            self._send_batch(peer, sid, tasks)
            self._send(peer)
            return
        sizes = [len(t.payload) for t in tasks]
        if not protocol.fits(max(sizes), peer.max_out):
            tasks = [t for t in tasks if self._fits_or_fail(sid, peer.max_out, t)]
            if not tasks:
                return
            sizes = [len(t.payload) for t in tasks]
        group = self._sched.task_group
        # Group 0 (the default): the tasks due now share frames (a frame and a MAC per batch), up to the frame size.
        for start, stop in protocol.pack(sizes, group or len(tasks), peer.max_out):
            self._send_batch(peer, sid, tasks[start:stop])
        self._send(peer)  # one system call for the whole batch, not one per frame

    def _send_batch(self, peer: _Peer, sid: str, batch: list[Task]) -> None:
        """Queue one Tasks frame carrying ``batch`` (which fits in it)."""
        timeouts = self._timeouts(batch)
        peer.out += peer.session.send_tasks([(t.task_id, t.algorithm, t.payload) for t in batch], timeouts)
        peer.tasks_out += len(batch)
        if self._audit.packets:
            self._audit(f"{sid} <- {len(batch)} tasks ({self._sched.task_group or 'auto'} grouping)")
        if self._events is not None:
            self._events.tasks_dispatched(sid, len(batch))

    def _timeouts(self, tasks: list[Task]) -> dict[int, float] | None:
        """The timeouts of the tasks that have one, by task id (None, and nothing on the wire, when none has)."""
        sched = self._sched
        if not sched.may_time_out:
            return None
        timeouts = {}
        for task in tasks:
            timeout = sched.timeout_of(task)
            if timeout is not None:
                timeouts[task.task_id] = timeout
        return timeouts

    def _time_out(self, now: float) -> None:
        """Fail each task past its timeout (and grace) and drop the slave that holds it."""
        for sid, task in self._sched.overdue(now, MASTER_TIMEOUT_GRACE):
            peer = self._by_sid.get(sid)
            timeout = self._sched.timeout_of(task)
            self._sched.abandon(sid, task)
            self._sched.complete(task)
            message = f"the task ran past its timeout of {timeout:g} s on {sid}, which stopped answering for it"
            self._deliver(task, Result(task.task_id, task.algorithm, sid, task.policy.tag, now - task.sent_at,
                                       error=timeout_error(message)))  # fmt: skip
            log.warning("task %d ran past its timeout of %g s on %s: failed, slave dropped", task.task_id, timeout, sid)
            if peer is not None:
                self._lose(peer, f"task {task.task_id} ran past its timeout of {timeout:g} s")

    def _fits_or_fail(self, sid: str, max_frame: int, task: Task) -> bool:
        """A task too big for this slave's frames fails with a clear error instead of being sent."""
        if protocol.fits(len(task.payload), max_frame):
            return True
        self._sched.finish(sid, task.task_id, 0.0)
        self._sched.complete(task)
        message = f"{len(task.payload)} bytes of arguments; {sid} accepts frames of at most {max_frame} bytes"
        error = TaskError("TaskTooLarge", message, "")
        self._deliver(task, Result(task.task_id, task.algorithm, sid, task.policy.tag, 0.0, error=error))
        return False

    def _queue(self, peer: _Peer, data: bytes) -> None:
        peer.out += data
        self._send(peer)

    def _send(self, peer: _Peer) -> None:
        sock = peer.sock
        if sock is None:
            return
        if peer.handshaking:
            return  # the TLS handshake owns the socket until it is done
        if peer.out:
            try:
                sent = sock.send(peer.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                sent = 0
            except OSError as exc:
                self._lose(peer, f"write error: {exc}")
                return
            del peer.out[:sent]
        self._want_write(peer, sock, bool(peer.out))

    def _want_write(self, peer: _Peer, sock: socket.socket, want: bool) -> None:
        if want != peer.writing:
            peer.writing = want
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self._selector.modify(sock, events, peer)

    def _close(self, peer: _Peer) -> None:
        sock, peer.sock = peer.sock, None
        if sock is None:
            return
        self._peers.discard(peer)
        self._selector.unregister(sock)
        sock.close()
        if self._accept_resumes is not None and not self._closed:
            self._resume_accepting()  # a descriptor is free: the next caller in the backlog may have it

    def _lose(self, peer: _Peer, why: str) -> None:
        """A connection ended: close it and apply task policies to what its slave held."""
        if peer.sock is None:
            return
        self._close(peer)
        sid = peer.sid
        if sid is None:
            self._audit(f"EOF -> {peer.address} ({why})")
            return
        del self._by_sid[sid]
        if self._jobs.pop(sid, None) is not None:
            self._job_list = None
        unrunnable = self._sched.num_unrunnable
        lost = self._sched.leave(sid)
        log.log(
            logging.WARNING if lost else logging.INFO, "%s disconnected (%s); %d tasks in flight", sid, why, len(lost)
        )
        self._audit(
            f"{sid} -> disconnected ({why}; {peer.tasks_out} tasks sent, {peer.results_in} results back"
            f"{f', {len(lost)} in flight' if lost else ''})"
        )
        if self._events is not None:
            cause = "shutdown" if self._closed else ev.cause_of(why)
            self._slave_left(sid, cause, why, lost, self._sched.num_unrunnable - unrunnable)
        self.tick_soon()

    # ------------------------------------------------------------------ timers

    def _tick(self, now: float) -> None:
        self._next_tick = now + TICK
        self._last_tick = now
        if self._accept_resumes is not None and now >= self._accept_resumes and not self._closed:
            self._resume_accepting()
        silent_since = now - self._options.client_timeout
        for peer in [p for p in self._peers if p.last_heard < silent_since]:
            self._lose(peer, f"silent for {self._options.client_timeout:g} s (client timeout)")
        self._time_out(now)
        self._on_tick(now)

    # ------------------------------------------------------------------ the end

    def shutdown(self) -> None:
        """Tell every slave to shut down, wait briefly for them to hang up, then close everything."""
        self._closed = True
        for peer in list(self._peers):
            if peer.session.state is MasterState.READY and peer.sid is not None:
                self._audit(f"{peer.sid} <- SHUTDOWN")
                self._queue(peer, peer.session.send(protocol.Shutdown(0)))
            elif peer.session.state is not MasterState.CLOSING:
                self._lose(peer, "computation finished")
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while self._peers and time.monotonic() < deadline:
            self.step(min(TICK, deadline - time.monotonic()))
        for peer in list(self._peers):
            self._lose(peer, "computation finished")
        self.close()

    def close(self) -> None:
        """Stop listening and release the selector (connections must be closed already)."""
        self._closed = True
        self._selector.close()
        self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()


def _raise_file_limit() -> None:
    """Many slaves means many sockets: lift the soft descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

"""The master: accepts slaves, hands them tasks, collects results, writes the resource file.

It is single-threaded. The master algorithm drives it by calling :meth:`Master.loop`
(or :meth:`Master.loop_once`), which multiplexes every socket with
:mod:`selectors`; between those calls the slaves keep working from the window of
tasks queued on them. Why selectors and not asyncio is explained in
docs/design.md: the user's master algorithm is ordinary blocking code that
calls into the loop, and a hand-driven selector costs less per event than
re-entering an asyncio loop.
"""

from __future__ import annotations

import enum
import functools
import itertools
import os
import pickle
import resource
import selectors
import socket
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from mwpy import bundle, protocol, resource_file
from mwpy.audit import Audit
from mwpy.errors import ProtocolError
from mwpy.journal import Journal
from mwpy.options import Options
from mwpy.protocol import Channel, FrameReader
from mwpy.scheduler import Scheduler, SlaveKind
from mwpy.slave import ExitCode
from mwpy.task import (
    Policy,
    Result,
    Task,
    TaskAlgorithm,
    TaskError,
    TaskFailedError,
    encode_arguments,
)

#: Bytes read from a socket per call.
_RECV_SIZE = 256 * 1024
#: How often timers (client timeouts, resource file) are looked at, in seconds.
_TICK = 0.25
#: Shortest time between two resource-file writes caused by a change.
_DEBOUNCE = 1.0
#: Failures that would recur on any slave: handed over at once, never retried.
_NOT_RETRIED = frozenset({"ResultTooLarge", "ResultDecodeError"})
#: File name of the slave bundle built by --mw-slave-bundle.
BUNDLE_NAME = "mwpy.pyz"
#: Interpreter slaves started through the bundle use unless --mw-slave-executable says otherwise.
DEFAULT_BUNDLE_PYTHON = "/usr/bin/python3"
#: How long the master waits for slaves to acknowledge a shutdown.
_SHUTDOWN_GRACE = 5.0


@attrs.frozen
class LoopEvents:
    """What :meth:`Master.loop` found for the master algorithm (CL-MW's four counts)."""

    results: int = 0
    unrunnable: int = 0
    connected_ordered: int = 0
    disconnected_ordered: int = 0

    def __bool__(self) -> bool:
        return bool(self.results or self.unrunnable or self.connected_ordered or self.disconnected_ordered)


class _State(enum.Enum):
    PROVING = "proving"  # challenge sent, waiting for the slave's proof
    GREETING = "greeting"  # authenticated, waiting for Hello
    READY = "ready"  # a slave with an id, taking tasks
    CLOSING = "closing"  # told to shut down, waiting for it to hang up


class _Peer:
    """One TCP connection to a (would-be) slave."""

    __slots__ = (
        "sock", "address", "state", "reader", "out", "channel", "nonce", "sid",
        "last_heard", "max_out", "tasks_out", "results_in", "writing", "handshaking",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, address: str, nonce: bytes, now: float) -> None:
        self.sock: socket.socket | None = sock
        self.address = address
        self.state = _State.PROVING
        self.reader = FrameReader(protocol.MAX_HANDSHAKE_FRAME)
        self.out = bytearray()
        self.channel: Channel | None = None
        self.nonce = nonce
        self.sid: str | None = None
        self.last_heard = now
        self.max_out = 0
        self.tasks_out = 0
        self.results_in = 0
        self.writing = False
        self.handshaking = False  # TLS handshake still under way


class Master:
    """The running master: the object a master algorithm receives.

    Task algorithms submit through it (``hello.submit(...)`` finds it), the
    algorithm drives it with :meth:`loop` and drains what it reports with
    :meth:`results`, :meth:`unrunnable_tasks`, :meth:`connected_ordered_slaves`
    and :meth:`disconnected_ordered_slaves`.
    """

    def __init__(self, options: Options, *, audit: Audit, secret: bytes, program: str) -> None:
        self._options = options
        self._audit = audit
        self._secret = secret
        self._program = os.path.abspath(program)
        self._sched = Scheduler(
            task_group=options.slave_task_group,
            fixed_window=options.slave_window,
            task_attempts=options.task_attempts,
            black_hole_failures=options.slave_max_failures,
        )
        self._results: list[Result] = []
        self._peers: set[_Peer] = set()
        self._by_sid: dict[str, _Peer] = {}
        # Every read lands in this one buffer and is copied into the peer's FrameReader.
        # sock.recv(256 KiB) would allocate 256 KiB per call, above glibc's mmap threshold:
        # an mmap, page faults and an munmap per read, half a one-task round trip on loopback.
        self._recv_buffer = bytearray(_RECV_SIZE)
        self._recv_view = memoryview(self._recv_buffer)
        self._slave_numbers = itertools.count()
        self._heartbeat_interval = options.client_timeout / 4
        self._next_tick = 0.0
        self._resource_next = 0.0
        self._resource_written = 0.0
        self._resource_key: tuple[int, dict[str, int]] | None = None
        self._finished = False
        self._bundle = self._build_bundle()
        self._slave_executable, self._slave_files, self._slave_arguments = self._how_to_start_a_slave()
        self._journal = Journal(options.journal) if options.journal else None
        self._tls: ssl.SSLContext | None = None
        self._tls_fingerprint: str | None = None
        if options.tls_cert:
            self._tls, self._tls_fingerprint = protocol.tls_server_context(options.tls_cert, options.tls_key)
        _raise_file_limit()
        self._selector = selectors.DefaultSelector()
        self._listener = self._listen()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self.host = options.master_host or socket.gethostname()
        self.port: int = self._listener.getsockname()[1]
        audit(f'INIT MASTER "{options.member_id}"')
        self._write_resource_file(time.monotonic(), self._sched.slaves_needed, self._sched.connected())
        audit(f"MASTER READY {self.host}:{self.port}")
        audit.flush()

    # ------------------------------------------------------------------ task submission

    def _submit(
        self,
        algorithm: TaskAlgorithm[Any, Any],
        policy: Policy,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sink: Callable[[Result], None] | None = None,
    ) -> int:
        if self._finished:
            raise RuntimeError("the computation has finished; no more tasks can be submitted")
        algorithm.check_arguments(args, kwargs)
        payload = encode_arguments(algorithm.name, args, kwargs)
        if not protocol.fits(len(payload), self._options.max_write_buffer_size):
            raise ValueError(
                f"the arguments of task {algorithm.name!r} take {len(payload)} bytes, more than a frame "
                f"of --mw-max-write-buffer-size {self._options.max_write_buffer_size} bytes can carry"
            )
        task = Task(self._sched.new_id(), algorithm.name, payload, policy, sink=sink)
        entry = None if policy.key is None or self._journal is None else self._journal.lookup(policy.key)
        if entry is not None:
            replay = _decode_result(task, entry.slave_id, True, entry.value, entry.compute_time, journaled=True)
            self._deliver(task, replay)
        else:
            self._sched.add(task)
        return task.task_id

    # ------------------------------------------------------------------ the event loop

    def loop(self, timeout: float | None = None) -> LoopEvents:
        """Do network I/O until there is something to report, or ``timeout`` seconds pass.

        Returns the counts of results, unrunnable tasks, newly connected and
        newly disconnected ordered slaves waiting to be drained (all zero on
        timeout).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        sched = self._sched
        while True:
            # Plain truth tests first: a LoopEvents record is built only when it is returned.
            if self._results or sched.has_news():
                return self._events()
            wait = _TICK
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return self._events()
            self._pass(wait)

    def loop_once(self, timeout: float = 0.05) -> LoopEvents:
        """One pass of network I/O (waiting at most ``timeout`` seconds); reports as :meth:`loop`."""
        self._pass(timeout)
        return self._events()

    def _events(self) -> LoopEvents:
        return LoopEvents(len(self._results), *self._sched.news_counts())

    def _run_until(self, done: Callable[[], bool]) -> None:
        """Run passes until ``done()`` (used by the convenience API's private result sinks)."""
        while not done():
            self._pass(_TICK)

    def _pass(self, wait: float) -> None:
        self._dispatch()
        now = time.monotonic()
        wait = max(0.0, min(wait, self._next_tick - now))
        for key, mask in self._selector.select(wait):
            peer = key.data
            if peer is None:
                self._accept()
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
        self._audit.flush()

    # ------------------------------------------------------------------ what the algorithm drains

    def results(self) -> list[Result]:
        """All results that arrived since the last call (CL-MW's get-results)."""
        results, self._results = self._results, []
        return results

    def unrunnable_tasks(self) -> list[Task]:
        """Tasks whose policy made them unrunnable since the last call."""
        return self._sched.drain_unrunnable()

    def connected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that connected since the last call."""
        return self._sched.drain_connected_ordered()

    def disconnected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that disconnected since the last call."""
        return self._sched.drain_disconnected_ordered()

    @property
    def num_runnable_tasks(self) -> int:
        """Tasks waiting or running on slaves."""
        return self._sched.pending_total

    @property
    def num_unrunnable_tasks(self) -> int:
        """Unrunnable tasks not yet drained with :meth:`unrunnable_tasks`."""
        return self._sched.num_unrunnable

    # ------------------------------------------------------------------ slave groups

    def allocate_slaves(self, amount: int = 1000, kind: SlaveKind | str = SlaveKind.UNORDERED) -> None:
        """Want ``amount`` more slaves of ``kind`` (ordered, intermingle or unordered)."""
        self._sched.allocate(amount, SlaveKind(kind))
        self._tick_soon()

    def deallocate_slaves(self, amount: int = 0, kind: SlaveKind | str = SlaveKind.UNORDERED) -> None:
        """Want ``amount`` fewer slaves of ``kind``; no slave is disconnected."""
        self._sched.deallocate(amount, SlaveKind(kind))
        self._tick_soon()

    def free_slave(self, sid: str) -> None:
        """Move an ordered slave to the unordered group once its ordered tasks in flight are done."""
        self._sched.free(sid)
        self._tick_soon()

    def slave_kind(self, sid: str) -> SlaveKind | None:
        """The group of a connected slave, or ``None`` if it is not connected."""
        return self._sched.kind_of(sid)

    def connected_slaves(self) -> dict[str, SlaveKind]:
        """Every connected slave (of any group) and its group, now."""
        return self._sched.slaves()

    # ------------------------------------------------------------------ target numbers

    @property
    def target_number(self) -> int:
        """The general target number: pending tasks of any algorithm to keep (advisory)."""
        return self._sched.general_target

    @target_number.setter
    def target_number(self, value: int) -> None:
        self._sched.general_target = max(0, value)

    def pending_tasks(self) -> int:
        """Tasks of any algorithm known to the master and not yet answered."""
        return self._sched.pending_total

    def upto_target_number(self) -> int:
        """How many tasks to create now to reach the general target number."""
        return max(0, self._sched.general_target - self._sched.pending_total)

    def target_number_for(self, algorithm: str) -> int:
        return self._sched.target_for(algorithm)

    def set_target_number_for(self, algorithm: str, value: int) -> None:
        self._sched.set_target_for(algorithm, value)

    def pending_tasks_for(self, algorithm: str) -> int:
        return self._sched.pending_for(algorithm)

    # ------------------------------------------------------------------ convenience

    def as_completed(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
    ) -> Iterator[Result]:
        """Run ``algorithm`` over the zipped ``iterables``; yield each Result as it arrives.

        Input is consumed lazily, keeping at most ``window`` tasks in the
        master, so an endless iterable streams with bounded memory. Results of
        these tasks go only to this iterator, never to :meth:`results`.
        Each result's ``tag`` is the position of its arguments in the input;
        ``key(*args)`` names each task for the journal (``--mw-journal``).
        """
        for _, result in self._stream(algorithm, iterables, window, key):
            yield result

    def map(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
    ) -> Iterator[Any]:
        """Like the builtin ``map`` (and ``Executor.map``), run on the slaves: values in input order.

        A task that raised makes the iterator raise :class:`TaskFailedError`.
        """
        early: dict[int, Result] = {}
        next_index = 0
        for index, result in self._stream(algorithm, iterables, window, key):
            early[index] = result
            while next_index in early:
                ready = early.pop(next_index)
                next_index += 1
                if ready.error is not None:
                    raise TaskFailedError(ready)
                yield ready.value

    def _stream(
        self,
        algorithm: TaskAlgorithm[..., Any],
        iterables: tuple[Iterable[Any], ...],
        window: int,
        key: Callable[..., str] | None,
    ) -> Iterator[tuple[int, Result]]:
        """Submit lazily, at most ``window`` outstanding; yield (input position, result)."""
        if window < 1:
            raise ValueError("window must be at least 1")
        arrived: deque[tuple[int, Result]] = deque()
        items = enumerate(zip(*iterables, strict=False))
        outstanding = 0
        exhausted = False
        while True:
            while not exhausted and outstanding < window:
                item = next(items, None)
                if item is None:
                    exhausted = True
                    break
                index, args = item
                policy = Policy(tag=index, key=None if key is None else key(*args))
                self._submit(algorithm, policy, args, {}, sink=functools.partial(_put, arrived, index))
                outstanding += 1
            if not arrived:
                if exhausted and not outstanding:
                    return
                self._run_until(lambda: bool(arrived))
            outstanding -= 1
            yield arrived.popleft()

    # ------------------------------------------------------------------ network

    def _listen(self) -> socket.socket:
        host = self._options.master_host or ""
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
            except OSError as exc:  # e.g. out of file descriptors: keep serving the others
                self._audit(f"ACCEPT FAILED {exc}")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = f"{addr[0]}:{addr[1]}"
            if self._finished:
                sock.close()
                continue
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            nonce = protocol.new_nonce()
            peer = _Peer(sock, address, nonce, now)
            self._peers.add(peer)
            self._selector.register(sock, selectors.EVENT_READ, peer)
            self._audit(f"NEW-CLIENT -> {address}")
            if self._tls is None:
                self._queue(peer, protocol.challenge(nonce))
            else:
                peer.handshaking = True
                self._tls_handshake(peer)

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
        else:
            peer.handshaking = False
            peer.last_heard = time.monotonic()
            self._queue(peer, protocol.challenge(peer.nonce))
            return
        self._want_write(peer, sock, want_write)

    def _read(self, peer: _Peer) -> None:
        sock = peer.sock
        assert sock is not None
        try:
            size = sock.recv_into(self._recv_buffer)
            if size and isinstance(sock, ssl.SSLSocket):
                while sock.pending():  # plaintext TLS already decrypted: select will not report it
                    peer.reader.feed(self._recv_view[:size])
                    size = sock.recv_into(self._recv_buffer)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._lose(peer, f"read error: {exc}")
            return
        if not size:
            self._lose(peer, "EOF")
            return
        if peer.state is not _State.PROVING:  # unproven peers get one client timeout in all, however they dribble
            peer.last_heard = time.monotonic()
        peer.reader.feed(self._recv_view[:size])
        try:
            while peer.sock is not None and (body := peer.reader.next()) is not None:
                self._handle(peer, body)
        except ProtocolError as exc:
            self._lose(peer, f"protocol error: {exc}")

    def _handle(self, peer: _Peer, body: bytes) -> None:
        if peer.state is _State.PROVING:
            self._check_proof(peer, body)
            return
        assert peer.channel is not None
        msg = peer.channel.open(body)
        if peer.state is _State.READY:
            if isinstance(msg, protocol.Results):
                protocol.check_results(msg)
                self._take_results(peer, msg)
            elif not isinstance(msg, protocol.Heartbeat):
                raise ProtocolError(f"unexpected {type(msg).__name__} from a slave")
        elif peer.state is _State.GREETING:
            if not isinstance(msg, protocol.Hello):
                raise ProtocolError(f"expected Hello, got {type(msg).__name__}")
            protocol.check_hello(msg)
            self._greet(peer, msg)

    def _check_proof(self, peer: _Peer, body: bytes) -> None:
        if len(body) != protocol.RESPONSE_SIZE:
            raise ProtocolError("malformed handshake")
        slave_nonce, proof = body[: protocol.NONCE_SIZE], body[protocol.NONCE_SIZE :]
        expected = protocol.slave_proof(self._secret, peer.nonce, slave_nonce)
        if not protocol.proofs_match(expected, proof):
            raise ProtocolError("wrong proof of membership (not a slave of this computation)")
        self._queue(peer, protocol.frame(protocol.master_proof(self._secret, peer.nonce, slave_nonce)))
        peer.channel = protocol.session(self._secret, peer.nonce, slave_nonce, is_master=True)
        peer.reader.max_size = self._options.max_read_buffer_size
        peer.state = _State.GREETING

    def _greet(self, peer: _Peer, hello: protocol.Hello) -> None:
        assert peer.channel is not None
        if hello.member_id != self._options.member_id:
            reason = f"member id {hello.member_id!r} does not match this master's"
            self._audit(f"REFUSED {peer.address} [{hello.member_id!r}]: {reason}")
            self._queue(peer, peer.channel.seal(protocol.Refuse(reason)))
            self._send(peer)
            self._close(peer)
            return
        sid = f"slave-{next(self._slave_numbers)}"
        peer.sid = sid
        peer.max_out = min(self._options.max_write_buffer_size, hello.max_frame)
        peer.state = _State.READY
        self._by_sid[sid] = peer
        kind = self._sched.join(sid)
        self._queue(
            peer,
            peer.channel.seal(
                protocol.Welcome(
                    sid, self._options.slave_result_group, self._heartbeat_interval, self._options.max_read_buffer_size
                )
            ),
        )
        self._audit(
            f'{sid} {peer.address} -> ["{hello.member_id}"] connecting [{kind.value}] '
            f"(host {hello.host}, pid {hello.pid}, mwpy {hello.mwpy_version})"
        )
        self._tick_soon()

    def _take_results(self, peer: _Peer, msg: protocol.Results) -> None:
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
            result = _decode_result(task, sid, ok, blob, compute_time)
            if result.error is None:
                holes += sched.succeeded(sid, task)
                if task.policy.key is not None and self._journal is not None:
                    self._journal.record(task.policy.key, task.algorithm, blob, sid, compute_time)
            elif result.error.type not in _NOT_RETRIED and sched.failed(sid, task):
                self._audit(f"{sid} -> task {task_id} failed ({result.error.type}); queued to run again")
                continue
            sched.complete(task)
            self._deliver(task, result)
        for hole in holes:
            self._expel(hole)

    def _expel(self, sid: str) -> None:
        """Send a black-hole slave away with a non-zero status; its tasks go to others."""
        peer = self._by_sid.pop(sid, None)
        if peer is None or peer.channel is None:
            return
        lost = self._sched.leave(sid)
        self._audit(
            f"{sid} -> told to leave: {self._options.slave_max_failures} of its failed tasks succeeded "
            f"elsewhere (black hole); {len(lost)} tasks in flight go to other slaves"
        )
        peer.state = _State.CLOSING
        peer.sid = None
        self._queue(peer, peer.channel.seal(protocol.Shutdown(ExitCode.TOLD_TO_LEAVE)))
        self._tick_soon()

    def _deliver(self, task: Task, result: Result) -> None:
        if task.sink is None:
            self._results.append(result)
        else:
            task.sink(result)

    def _dispatch(self) -> None:
        sched = self._sched
        for sid in sched.ready():
            tasks = sched.take(sid)
            if tasks:
                self._send_tasks(self._by_sid[sid], tasks)

    def _send_tasks(self, peer: _Peer, tasks: list[Task]) -> None:
        channel = peer.channel
        sid = peer.sid
        assert channel is not None
        assert sid is not None
        sizes = [len(t.payload) for t in tasks]
        if not protocol.fits(max(sizes), peer.max_out):
            tasks = [t for t in tasks if self._fits_or_fail(sid, peer.max_out, t)]
            if not tasks:
                return
            sizes = [len(t.payload) for t in tasks]
        for start, stop in protocol.pack(sizes, self._sched.task_group, peer.max_out):
            items = [(t.task_id, t.algorithm, t.payload) for t in tasks[start:stop]]
            peer.out += channel.seal(protocol.Tasks(items))
            if self._audit.packets:
                self._audit(f"{sid} <- {stop - start} tasks ({self._sched.task_group} grouping)")
        peer.tasks_out += len(tasks)
        self._send(peer)  # one system call for the whole batch, not one per frame

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
        lost = self._sched.leave(sid)
        self._audit(
            f"{sid} -> disconnected ({why}; {peer.tasks_out} tasks sent, {peer.results_in} results back"
            f"{f', {len(lost)} in flight' if lost else ''})"
        )
        self._tick_soon()

    # ------------------------------------------------------------------ timers and the resource file

    def _tick_soon(self) -> None:
        self._next_tick = 0.0

    def _tick(self, now: float) -> None:
        self._next_tick = now + _TICK
        silent_since = now - self._options.client_timeout
        for peer in [p for p in self._peers if p.last_heard < silent_since]:
            self._lose(peer, f"silent for {self._options.client_timeout:g} s (client timeout)")
        self._maybe_write_resource_file(now)

    def _maybe_write_resource_file(self, now: float) -> None:
        needed, connected = self._sched.slaves_needed, self._sched.connected()
        changed = (needed, connected) != self._resource_key and now - self._resource_written >= _DEBOUNCE
        if changed or now >= self._resource_next:
            self._write_resource_file(now, needed, connected)

    def _write_resource_file(self, now: float, needed: int, connected: dict[str, int]) -> None:
        path = self._options.resource_file
        sched = self._sched
        self._resource_key = (needed, connected)
        self._resource_written = now
        self._resource_next = now + self._options.resource_file_update_interval
        if path is None:
            return
        record = resource_file.ResourceFile(
            computation_status=resource_file.FINISHED if self._finished else resource_file.IN_PROGRESS,
            timestamp=time.time(),
            update_interval=self._options.resource_file_update_interval,
            member_id=self._options.member_id,
            master_host=self.host,
            master_port=self.port,
            slaves_needed=needed,
            slave_executable=self._slave_executable,
            slave_files=self._slave_files,
            slave_arguments=self._slave_arguments,
            master_pid=os.getpid(),
            tasks_done=sched.done_total,
            tasks_pending=sched.queued_total,
            tasks_running=sched.running_total,
            slaves_connected=connected,
            secret=None if self._options.secret_file else self._secret.hex(),
            tls_fingerprint=self._tls_fingerprint,
        )
        try:
            resource_file.write(path, record)
        except OSError as exc:
            self._audit(f"RESOURCE FILE NOT WRITTEN {path}: {exc}")

    def _build_bundle(self) -> str | None:
        if not self._options.slave_bundle:
            return None
        folder = os.path.dirname(os.path.abspath(self._options.resource_file or self._program))
        return str(bundle.build(os.path.join(folder, BUNDLE_NAME)))

    def _how_to_start_a_slave(self) -> tuple[str, list[str], list[str]]:
        """Executable, files and arguments of a slave, as the resource file advertises them."""
        options = self._options
        executable = options.slave_executable or (DEFAULT_BUNDLE_PYTHON if self._bundle else sys.executable)
        files = [self._program, *(os.path.abspath(f) for f in options.slave_files)]
        arguments = [os.path.basename(self._program), "--mw-slave"]
        if self._bundle:
            files.insert(0, self._bundle)
            arguments.insert(0, BUNDLE_NAME)
        if options.resource_file:
            arguments += ["--mw-resource-file", os.path.basename(options.resource_file)]
        if options.secret_file:
            files.append(os.path.abspath(options.secret_file))
            arguments += ["--mw-secret-file", os.path.basename(options.secret_file)]
        return executable, files, [*arguments, *options.slave_arguments]

    # ------------------------------------------------------------------ the end

    def finish(self) -> None:
        """Tell every slave to shut down, wait briefly for them, mark the computation finished."""
        if self._finished:
            return
        self._finished = True
        for peer in list(self._peers):
            if peer.state is _State.READY and peer.channel is not None:
                self._audit(f"{peer.sid} <- SHUTDOWN")
                peer.state = _State.CLOSING
                self._queue(peer, peer.channel.seal(protocol.Shutdown(0)))
            elif peer.state is not _State.CLOSING:
                self._lose(peer, "computation finished")
        deadline = time.monotonic() + _SHUTDOWN_GRACE
        while self._peers and time.monotonic() < deadline:
            self._pass(min(_TICK, deadline - time.monotonic()))
        for peer in list(self._peers):
            self._lose(peer, "computation finished")
        self._selector.unregister(self._listener)
        self._listener.close()
        self._selector.close()
        if self._journal is not None:
            self._journal.close()
        self._write_resource_file(time.monotonic(), 0, self._sched.connected())
        self._audit(f'FINI SHUTDOWN "{self._options.member_id}"')
        self._audit.flush()


def _put(queue: deque[tuple[int, Result]], index: int, result: Result) -> None:
    queue.append((index, result))


def _decode_result(
    task: Task, sid: str, ok: bool, blob: bytes, compute_time: float, *, journaled: bool = False
) -> Result:
    """Turn a wire result into a Result; a value the master cannot unpickle becomes an error."""
    tag = task.policy.tag
    try:
        decoded = pickle.loads(blob)
    except Exception as exc:
        error = TaskError("ResultDecodeError", f"the master cannot unpickle the result: {exc!r}", "")
        return Result(task.task_id, task.algorithm, sid, tag, compute_time, error=error)
    if ok:
        return Result(task.task_id, task.algorithm, sid, tag, compute_time, value=decoded, journaled=journaled)
    kind, message, trace = decoded
    return Result(task.task_id, task.algorithm, sid, tag, compute_time, error=TaskError(kind, message, trace))


def _raise_file_limit() -> None:
    """Many slaves means many sockets: lift the soft descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

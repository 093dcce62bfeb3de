"""Fan-in load generator: one process holding many slave connections that speak the real protocol.

Scenario 4 needs 10,000 slaves on a 2-core machine; 10,000 slave processes
would measure the kernel's scheduler, not the master. Each connection here does
what ``mwpy.slave`` does on the wire: it answers the master's challenge with
an HMAC proof, checks the master's proof, says Hello, waits for Welcome,
answers every Tasks frame with Results frames (grouped by the Welcome's
result group, values really unpickled and pickled), sends heartbeats at the
Welcome's interval and hangs up on Shutdown. The master cannot tell these
from real slaves, so the master's real server path is what is measured. The
conversation itself is ``mwpy.wire.session.SlaveSession``'s, as in a real slave;
this module only multiplexes the sockets.

Connections are opened without blocking, spread evenly over ``--arrival``
seconds (0: all at once), so a connection *storm* is what the master sees.
Each one is timed from ``connect()`` to the master's Welcome; one the master
refuses (RST, a Refuse, a failed proof) or does not admit within
``--handshake-deadline`` seconds is counted, never retried, and ``--report``
writes the counts and the admission times as JSON.

Usage: ``python -m benchmarks.loadgen RESOURCE_FILE CONNECTIONS [--arrival S] [--report PATH]``.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pickle
import random
import resource
import selectors
import socket
import sys
import time
from typing import Any

from mwpy import resource_file
from mwpy._version import __version__
from mwpy.errors import ProtocolError
from mwpy.wire import protocol
from mwpy.wire.protocol import PICKLE_PROTOCOL, ResultItem
from mwpy.wire.session import HandshakeReply, SlaveSession, SlaveState

_RECV_SIZE = 256 * 1024
#: Every read lands here: ``recv(256 KiB)`` would mmap and munmap a fresh 256 KiB buffer per call.
_RECV_BUFFER = bytearray(_RECV_SIZE)
_RECV_VIEW = memoryview(_RECV_BUFFER)
MAX_FRAME = 64 * 1024 * 1024
#: How often heartbeats and handshake deadlines are looked at, in seconds.
CHECK_EVERY = 0.25


class Connection:
    """One simulated slave."""

    __slots__ = (
        "sock", "session", "out", "result_group", "started", "admitted", "connecting",
        "heartbeat_interval", "last_send", "next_beat", "writing", "tasks_done", "shutdown",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, session: SlaveSession, started: float) -> None:
        self.sock = sock
        self.session = session
        self.out = bytearray()
        self.result_group = 1
        self.started = started
        self.admitted: float | None = None  # when Welcome arrived
        self.connecting = True  # the non-blocking connect() has not completed yet
        self.heartbeat_interval = 0.0
        self.last_send = started
        self.next_beat = float("inf")
        self.writing = True
        self.tasks_done = 0
        self.shutdown = False


class LoadGenerator:
    """Opens ``count`` connections over ``arrival`` seconds and drives them all from one selector loop."""

    def __init__(
        self,
        endpoint: tuple[str, int],
        member_id: str,
        secret: bytes,
        count: int,
        *,
        arrival: float = 0.0,
        handshake_deadline: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.secret = secret
        self.count = count
        self.arrival = arrival
        self.handshake_deadline = handshake_deadline
        self.hello = protocol.Hello(member_id, socket.gethostname(), os.getpid(), __version__, MAX_FRAME)
        self.selector = selectors.DefaultSelector()
        self.opened = 0
        self.open = 0
        self.admission_seconds: list[float] = []
        self.first_start: float | None = None
        self.last_admitted: float | None = None
        #: Why connections failed before they were admitted: refused (RST or a Refuse), timed out, other errors.
        self.refused = 0
        self.timed_out = 0
        self.failed = 0
        #: Admitted connections that ended before the master's Shutdown.
        self.lost = 0
        self.errors: dict[str, int] = {}

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Open every connection, serve until the master has shut each one down; the number of tasks answered."""
        done = 0
        started = time.monotonic()
        next_check = started + CHECK_EVERY
        while self.open or self.opened < self.count:
            now = time.monotonic()
            due = self._open_due(now, started)
            wait = CHECK_EVERY if self.opened >= self.count else max(0.0, min(CHECK_EVERY, due - now))
            for key, mask in self.selector.select(wait):
                conn: Connection = key.data
                if conn.connecting:
                    self._connected(conn)
                    continue
                if mask & selectors.EVENT_READ:
                    done += self._read(conn)
                if mask & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                    self._flush(conn)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + CHECK_EVERY
                self._timers(now)
        return done

    def _open_due(self, now: float, started: float) -> float:
        """Start every connection whose turn has come; when the next one is due."""
        spacing = self.arrival / self.count
        while self.opened < self.count:
            due = started + self.opened * spacing
            if due > now:
                return due
            self._open(now)
        return now

    def _open(self, now: float) -> None:
        self.opened += 1
        if self.first_start is None:
            self.first_start = now
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(self.endpoint)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._failed_early(code)
            return
        conn = Connection(sock, SlaveSession(self.secret, self.hello), now)
        self.selector.register(sock, selectors.EVENT_WRITE, conn)
        self.open += 1

    def _connected(self, conn: Connection) -> None:
        """The non-blocking connect() finished: from now on the master talks first (its challenge)."""
        code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._close(conn)
            self._failed_early(code)
            return
        conn.connecting = False
        conn.writing = False
        self.selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _failed_early(self, code: int) -> None:
        if code in (errno.ECONNREFUSED, errno.ECONNRESET):
            self.refused += 1
        elif code == errno.ETIMEDOUT:
            self.timed_out += 1
        else:
            self.failed += 1
        name = errno.errorcode.get(code, str(code))
        self.errors[name] = self.errors.get(name, 0) + 1

    # ------------------------------------------------------------------ protocol

    def _read(self, conn: Connection) -> int:
        try:
            size = conn.sock.recv_into(_RECV_BUFFER)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            self._hung_up(conn, exc.errno or 0)
            return 0
        if not size:
            self._hung_up(conn, errno.ECONNRESET)
            return 0
        session = conn.session
        session.receive_data(_RECV_VIEW[:size])
        results: list[ResultItem] = []
        try:
            while not conn.shutdown and (event := session.next_event()) is not None:
                self._handle(conn, event, results)
        except ProtocolError as exc:  # a Refuse or a failed proof (MembershipError) among them
            self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            self._hung_up(conn, errno.ECONNREFUSED)
            return 0
        group = conn.result_group
        for start in range(0, len(results), group):
            conn.out += session.send_results(results[start : start + group])
        conn.tasks_done += len(results)
        if conn.out:
            conn.last_send = time.monotonic()
            self._flush(conn)
        if conn.shutdown:
            self._close(conn)
        return len(results)

    def _handle(self, conn: Connection, event: object, results: list[ResultItem]) -> None:
        if isinstance(event, protocol.Tasks):
            results.extend(_answer(item) for item in event.items)
            return
        if isinstance(event, protocol.Shutdown):
            conn.shutdown = True
            return
        now = time.monotonic()
        if isinstance(event, HandshakeReply):
            conn.out += event.data
        elif isinstance(event, protocol.Welcome):
            conn.admitted = now
            self.admission_seconds.append(now - conn.started)
            self.last_admitted = now
            conn.result_group = event.result_group
            conn.heartbeat_interval = event.heartbeat_interval
            # Real slaves connect at scattered times, so an idle master hears a steady N / interval beats
            # a second: spread the first beats over one interval and let the first one go out whatever
            # was sent last, or the first interval would carry half the beats of every later one.
            conn.next_beat = now + random.uniform(0, event.heartbeat_interval)
            conn.last_send = float("-inf")
            return
        conn.last_send = now

    def _hung_up(self, conn: Connection, code: int) -> None:
        """The master closed the connection (or it broke): refused before Welcome, lost after it."""
        if conn.admitted is None:
            self._close(conn)
            self._failed_early(code)
        else:
            self._close(conn, lost=not conn.shutdown)

    def _timers(self, now: float) -> None:
        """Heartbeats of admitted connections; handshakes past their deadline are given up."""
        give_up = now - self.handshake_deadline
        for key in list(self.selector.get_map().values()):
            conn: Connection = key.data
            if conn.admitted is None:
                if conn.started < give_up:
                    self._close(conn)
                    self.timed_out += 1
                    self.errors["handshake deadline"] = self.errors.get("handshake deadline", 0) + 1
                continue
            if conn.session.state is not SlaveState.READY or now < conn.next_beat:
                continue
            conn.next_beat = now + conn.heartbeat_interval
            if now - conn.last_send >= conn.heartbeat_interval / 2:
                conn.out += conn.session.send(protocol.Heartbeat())
                conn.last_send = now
                self._flush(conn)

    # ------------------------------------------------------------------ sockets

    def _flush(self, conn: Connection) -> None:
        if conn.sock.fileno() < 0:
            return
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._hung_up(conn, exc.errno or 0)
                return
            del conn.out[:sent]
        want = bool(conn.out)
        if want != conn.writing:
            conn.writing = want
            self.selector.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0), conn)

    def _close(self, conn: Connection, *, lost: bool = False) -> None:
        if conn.sock.fileno() < 0:
            return
        self.selector.unregister(conn.sock)
        conn.sock.close()
        self.open -= 1
        self.lost += int(lost)

    # ------------------------------------------------------------------ the report

    def report(self, tasks: int) -> dict[str, Any]:
        """What happened to every connection, and how long admission took (JSON-ready)."""
        times = sorted(self.admission_seconds)
        report: dict[str, Any] = {
            "connections": self.count,
            "arrival_seconds": self.arrival,
            "handshake_deadline": self.handshake_deadline,
            "admitted": len(times),
            "refused": self.refused,
            "timed_out": self.timed_out,
            "failed": self.failed,
            "lost": self.lost,
            "errors": self.errors,
            "tasks": tasks,
        }
        if times:
            report.update(
                admission_p50_s=times[len(times) // 2],
                admission_p99_s=times[min(len(times) - 1, len(times) * 99 // 100)],
                admission_max_s=times[-1],
            )
        if self.first_start is not None and self.last_admitted is not None:
            report["storm_seconds"] = self.last_admitted - self.first_start
        return report

    @property
    def ok(self) -> bool:
        return len(self.admission_seconds) == self.count and self.lost == 0


def _answer(item: protocol.TaskItem) -> ResultItem:
    """What a slave does with one echo task: unpickle the arguments, pickle the value back."""
    task_id, _name, blob = item
    started = time.perf_counter()
    args, _kwargs = pickle.loads(blob)
    out = pickle.dumps(args[0], PICKLE_PROTOCOL)
    return (task_id, True, out, time.perf_counter() - started)


def raise_file_limit(needed: int) -> None:
    """Lift the soft descriptor limit to the hard one; say so when even that is short of ``needed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < needed:
        print(f"loadgen: {needed} descriptors needed, the hard limit is {hard} (ulimit -Hn)", file=sys.stderr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("resource_file")
    parser.add_argument("connections", type=int)
    parser.add_argument("--arrival", type=float, default=0.0, help="open the connections evenly over S seconds")
    parser.add_argument(
        "--handshake-deadline", type=float, default=10.0, help="give up on a connection not admitted within S seconds"
    )
    parser.add_argument("--report", help="write what happened to every connection here, as JSON")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.arrival < 0 or args.handshake_deadline <= 0:
        parser.error("CONNECTIONS and --handshake-deadline must be positive, --arrival not negative")
    record = resource_file.read(args.resource_file)
    if record.secret is None:
        print("the resource file carries no secret", file=sys.stderr)
        return 2
    raise_file_limit(args.connections + 16)
    generator = LoadGenerator(
        (record.master_host, record.master_port),
        record.member_id,
        bytes.fromhex(record.secret),
        args.connections,
        arrival=args.arrival,
        handshake_deadline=args.handshake_deadline,
    )
    done = generator.run()
    report = generator.report(done)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as out:
            json.dump(report, out)
    print(f"loadgen: {json.dumps(report)}", file=sys.stderr)
    return 0 if generator.ok else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

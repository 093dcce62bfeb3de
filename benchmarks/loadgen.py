"""Fan-in load generator: one process holding many slave connections that speak the real protocol.

Scenario 4 needs 500+ slaves on a 2-core machine; 500 slave processes would
measure the kernel's scheduler, not the master. Each connection here does
what ``mwpy.slave`` does on the wire: it answers the master's challenge with
an HMAC proof, checks the master's proof, says Hello, waits for Welcome,
answers every Tasks frame with Results frames (grouped by the Welcome's
result group, values really unpickled and pickled), sends heartbeats at the
Welcome's interval and hangs up on Shutdown. The master cannot tell these
from real slaves, so the master's real server path is what is measured. The
conversation itself is ``mwpy.session.SlaveSession``'s, as in a real slave;
this module only multiplexes the sockets.

Usage: ``python -m benchmarks.loadgen RESOURCE_FILE CONNECTIONS``.
"""

from __future__ import annotations

import os
import pickle
import random
import resource
import selectors
import socket
import sys
import time

from mwpy import protocol, resource_file
from mwpy._version import __version__
from mwpy.protocol import PICKLE_PROTOCOL, ResultItem
from mwpy.session import HandshakeReply, SlaveSession, SlaveState

_RECV_SIZE = 256 * 1024
#: Every read lands here: ``recv(256 KiB)`` would mmap and munmap a fresh 256 KiB buffer per call.
_RECV_BUFFER = bytearray(_RECV_SIZE)
_RECV_VIEW = memoryview(_RECV_BUFFER)
MAX_FRAME = 64 * 1024 * 1024


class Connection:
    """One simulated slave."""

    __slots__ = (
        "sock", "session", "out", "result_group",
        "heartbeat_interval", "last_send", "next_beat", "writing", "tasks_done", "shutdown",
    )  # fmt: skip

    def __init__(self, sock: socket.socket, session: SlaveSession) -> None:
        self.sock = sock
        self.session = session
        self.out = bytearray()
        self.result_group = 1
        self.heartbeat_interval = 0.0
        self.last_send = time.monotonic()
        self.next_beat = float("inf")
        self.writing = False
        self.tasks_done = 0
        self.shutdown = False


class LoadGenerator:
    """Drives every connection from one selector loop."""

    def __init__(self, endpoint: tuple[str, int], member_id: str, secret: bytes, count: int) -> None:
        self.member_id = member_id
        self.secret = secret
        self.selector = selectors.DefaultSelector()
        self.open = 0
        self.lost = 0
        hello = protocol.Hello(member_id, socket.gethostname(), os.getpid(), __version__, MAX_FRAME)
        for _ in range(count):
            sock = socket.create_connection(endpoint, timeout=30)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.selector.register(sock, selectors.EVENT_READ, Connection(sock, SlaveSession(secret, hello)))
            self.open += 1

    def run(self) -> int:
        """Serve until the master has shut every connection down; the number of tasks answered."""
        done = 0
        next_check = time.monotonic() + 0.5
        while self.open:
            for key, mask in self.selector.select(0.5):
                conn: Connection = key.data
                if mask & selectors.EVENT_READ:
                    done += self._read(conn)
                if mask & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                    self._flush(conn)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.5
                self._heartbeats(now)
        return done

    # ------------------------------------------------------------------ protocol

    def _read(self, conn: Connection) -> int:
        try:
            size = conn.sock.recv_into(_RECV_BUFFER)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            size = 0
        if not size:
            self._close(conn, lost=not conn.shutdown)
            return 0
        session = conn.session
        session.receive_data(_RECV_VIEW[:size])
        results: list[ResultItem] = []
        while not conn.shutdown and (event := session.next_event()) is not None:
            self._handle(conn, event, results)
        group = conn.result_group
        for start in range(0, len(results), group):
            conn.out += session.send_results(results[start : start + group])
        conn.tasks_done += len(results)
        if conn.out:
            conn.last_send = time.monotonic()
            self._flush(conn)
        if conn.shutdown:
            self._close(conn, lost=False)
        return len(results)

    def _handle(self, conn: Connection, event: object, results: list[ResultItem]) -> None:
        if isinstance(event, protocol.Tasks):
            results.extend(_answer(item) for item in event.items)
            return
        if isinstance(event, protocol.Shutdown):
            conn.shutdown = True
            return
        if isinstance(event, HandshakeReply):
            conn.out += event.data
        elif isinstance(event, protocol.Welcome):
            conn.result_group = event.result_group
            conn.heartbeat_interval = event.heartbeat_interval
            # Real slaves connect at scattered times; spread the first beats so every window sees its share.
            conn.next_beat = time.monotonic() + random.uniform(0, event.heartbeat_interval)
        conn.last_send = time.monotonic()

    def _heartbeats(self, now: float) -> None:
        for key in list(self.selector.get_map().values()):
            conn: Connection = key.data
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
            except OSError:
                self._close(conn, lost=True)
                return
            del conn.out[:sent]
        want = bool(conn.out)
        if want != conn.writing:
            conn.writing = want
            self.selector.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0), conn)

    def _close(self, conn: Connection, *, lost: bool) -> None:
        if conn.sock.fileno() < 0:
            return
        self.selector.unregister(conn.sock)
        conn.sock.close()
        self.open -= 1
        self.lost += int(lost)


def _answer(item: protocol.TaskItem) -> ResultItem:
    """What a slave does with one echo task: unpickle the arguments, pickle the value back."""
    task_id, _name, blob = item
    started = time.perf_counter()
    args, _kwargs = pickle.loads(blob)
    out = pickle.dumps(args[0], PICKLE_PROTOCOL)
    return (task_id, True, out, time.perf_counter() - started)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.loadgen RESOURCE_FILE CONNECTIONS", file=sys.stderr)
        return 2
    record = resource_file.read(argv[0])
    if record.secret is None:
        print("the resource file carries no secret", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    generator = LoadGenerator(
        (record.master_host, record.master_port), record.member_id, bytes.fromhex(record.secret), int(argv[1])
    )
    done = generator.run()
    print(f"loadgen: {argv[1]} connections answered {done} tasks; {generator.lost} lost", file=sys.stderr)
    return 0 if generator.lost == 0 else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

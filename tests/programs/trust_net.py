"""Network tools for the trust-and-survival tests: raw mwpy peers, a recording TCP proxy, a booby-trapped pickle.

Not an mwpy program: the tests import it. Everything here speaks to real
sockets; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import pickle
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from mwpy.wire import protocol
from mwpy.wire.protocol import Channel, FrameReader

#: How long any raw peer here waits for the master to answer before the test fails.
ANSWER_TIMEOUT = 20.0


# ---------------------------------------------------------------------- booby trap


class Touch:
    """Unpickling this creates ``path``: a marker file proves someone unpickled bytes they should not have."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "a"))


def booby_trap(marker: Path) -> bytes:
    """A pickle that creates ``marker`` when loaded."""
    return pickle.dumps(Touch(str(marker)))


# ---------------------------------------------------------------------- raw peers


def read_frame(sock: socket.socket, reader: FrameReader, timeout: float = ANSWER_TIMEOUT) -> bytes:
    """The next frame body from ``sock``; ``ConnectionError`` if the peer hangs up first."""
    sock.settimeout(timeout)
    while (body := reader.next()) is None:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the peer closed the connection")
        reader.feed(data)
    return body


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT)


def challenged(port: int) -> tuple[socket.socket, bytes]:
    """A fresh connection to the master and the nonce of the challenge it sent."""
    sock = connect(port)
    try:
        nonce = protocol.parse_challenge(read_frame(sock, FrameReader(protocol.MAX_HANDSHAKE_FRAME)))
    except BaseException:
        sock.close()
        raise
    return sock, nonce


@attrs.define
class Session:
    """A raw connection that proved membership (with the real secret): a hostile insider."""

    sock: socket.socket
    channel: Channel
    reader: FrameReader

    def send(self, msg: protocol.Message) -> None:
        self.sock.sendall(self.channel.seal(msg))

    def receive(self, timeout: float = ANSWER_TIMEOUT) -> protocol.Message:
        return self.channel.open(read_frame(self.sock, self.reader, timeout))


def authenticate(port: int, secret: bytes) -> Session:
    """Connect and run the proof of membership as a slave does; stop before Hello."""
    sock, master_nonce = challenged(port)
    try:
        reader = FrameReader(protocol.MAX_HANDSHAKE_FRAME)
        slave_nonce = protocol.new_nonce()
        sock.sendall(protocol.frame(slave_nonce + protocol.slave_proof(secret, master_nonce, slave_nonce)))
        proof = read_frame(sock, reader)
        assert protocol.proofs_match(protocol.master_proof(secret, master_nonce, slave_nonce), proof)
        reader.max_size = 1 << 24
    except BaseException:
        sock.close()
        raise
    return Session(sock, protocol.derive_channel(secret, master_nonce, slave_nonce, is_master=False), reader)


def hung_up(sock: socket.socket, timeout: float) -> bool:
    """Read and discard until the peer closes the connection (True) or ``timeout`` s pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def still_open(socks: Iterable[socket.socket], timeout: float) -> list[socket.socket]:
    """Wait until the peer closed every socket in ``socks`` or ``timeout`` s pass; those still open."""
    selector = selectors.DefaultSelector()
    open_ = set()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        open_.add(sock)
    deadline = time.monotonic() + timeout
    try:
        while open_ and (remaining := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(remaining):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                try:
                    data = ready.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(ready)
                    open_.discard(ready)
    finally:
        selector.close()
    return list(open_)


def local_port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------------- proxy

#: Sees each whole mwpy frame (header included) going one way and returns the bytes to pass on instead.
#: Arguments: direction ("c2s" client to server, "s2c" server to client), the frame's index in that
#: direction, the frame.
Tamper = Callable[[str, int, bytes], bytes]


@attrs.define(eq=False)
class Relayed:
    """One connection through a :class:`Proxy`: the bytes each side sent, as received."""

    c2s: bytearray = attrs.Factory(bytearray)
    s2c: bytearray = attrs.Factory(bytearray)


class Proxy:
    """A TCP proxy on loopback in front of ``127.0.0.1:target``, recording every byte both ways.

    With ``tamper``, traffic is cut into mwpy frames (plain connections only)
    and each frame goes through ``tamper`` on its way: a man in the middle.
    """

    def __init__(self, target: int, tamper: Tamper | None = None) -> None:
        self.target = target
        self.tamper = tamper
        self.connections: list[Relayed] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = local_port(self._listener)
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            relayed = Relayed()
            self.connections.append(relayed)
            self._sockets += [client, server]
            for src, dst, direction, record in (
                (client, server, "c2s", relayed.c2s),
                (server, client, "s2c", relayed.s2c),
            ):
                threading.Thread(
                    target=self._pump, args=(src, dst, direction, record), name=f"proxy-{direction}", daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str, record: bytearray) -> None:
        pending = bytearray()
        count = 0
        try:
            while data := src.recv(65536):
                record += data
                if self.tamper is None:
                    dst.sendall(data)
                    continue
                pending += data
                while len(pending) >= protocol.HEADER.size:
                    end = protocol.HEADER.size + protocol.HEADER.unpack_from(pending)[0]
                    if len(pending) < end:
                        break
                    whole = bytes(pending[:end])
                    del pending[:end]
                    dst.sendall(self.tamper(direction, count, whole))
                    count += 1
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def connected(sock: socket.socket) -> bool:
    """Whether the peer has not closed ``sock``, which holds nothing unread (looked at without waiting)."""
    timeout = sock.gettimeout()
    sock.settimeout(0.0)  # in timeout mode, recv would first wait for the socket to become readable
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(timeout)
    return bool(data)

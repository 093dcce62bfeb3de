"""The slave's socket to its master: connect (retrying while nobody answers), TLS, the handshake, frames in and out.

A plain blocking client: which frame is legal when is
:class:`mwpy.wire.session.SlaveSession`'s business, what the frames mean the
slave's (:mod:`mwpy.slave`). The heartbeat thread writes while the main thread
reads, so every use of the socket holds one lock (an SSL object must not be
used by two threads at once).
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import attrs

from mwpy._version import __version__
from mwpy.errors import ProtocolError
from mwpy.job_ad import machine_ad_text, own_job_id
from mwpy.net import ports
from mwpy.net.spin import Spinner
from mwpy.observe.audit import Audit
from mwpy.resources import Resources
from mwpy.wire import protocol
from mwpy.wire.protocol import ExitCode, ResultItem
from mwpy.wire.session import HandshakeReply, SlaveSession, SlaveState

if TYPE_CHECKING:  # loaded with TLS's first use (mwpy/wire/protocol.py)
    import ssl

RECV_SIZE = 256 * 1024


class SlaveExit(Exception):
    """The slave must stop with ``code``; ``reason`` says why in one line."""

    def __init__(self, code: ExitCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Endpoint(NamedTuple):
    """Where the master is and how to prove membership to it."""

    host: str
    port: int
    member_id: str
    secret: bytes
    #: Set when the master speaks TLS: the SHA-256 fingerprint its certificate must have.
    tls_fingerprint: str | None = None


class Link:
    """A connected, authenticated socket: reads into the session, writes sealed frames, wakes on a signal.

    ``lost(reason)`` is called once a read or write fails or the master hangs up.
    """

    def __init__(
        self, sock: socket.socket, session: SlaveSession, *, spin_us: int, lost: Callable[[str], None]
    ) -> None:
        self.sock = sock
        self.session = session  # may already hold frames sent right after Welcome
        self._lost = lost
        # Reads land in one buffer: recv(256 KiB) would mmap and munmap 256 KiB per call (see master.py).
        self._buffer = bytearray(RECV_SIZE)
        self._view = memoryview(self._buffer)
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._look = functools.partial(self._poller.poll, 0)  # a spin's look: poll's own call, no wrapper of ours
        #: Whether TLS may hold decrypted bytes the kernel does not know of (then poll does not report them).
        self._tls = isinstance(sock, protocol.TLS_SOCKETS)
        self._spinner = Spinner(spin_us)
        self.lock = threading.Lock()
        self.last_send = time.monotonic()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller.register(self._wake_read, select.POLLIN)

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` for the master (or :meth:`wake`); whether anything may be there to read.

        The next task may be microseconds away: the spinner polls a moment before sleeping
        (mwpy/net/spin.py); poll returns at once if something is waiting, so there is no need to ask twice.
        """
        return (self._tls and self._tls_pending()) or bool(self._spinner.wait(self._poll, timeout, self._look))

    def readable(self) -> bool:
        """Data waits to be read (TLS may hold decrypted bytes the kernel does not know of)."""
        return (self._tls and self._tls_pending()) or bool(self._poller.poll(0))

    def receive(self) -> int | None:
        """Read what the kernel has into the session: bytes read, 0 when the link is lost, None if nothing was there.

        After a read of ``n`` bytes, :meth:`more` says whether to read again.
        """
        try:
            with self.lock:
                size = self.sock.recv_into(self._buffer)
        except protocol.WANT_READ:
            return None
        except OSError as exc:
            self._lost(f"read error: {exc}")
            return 0
        if not size:
            self._lost("the master closed the connection")
            return 0
        self.session.receive_data(self._view[:size])
        return size

    def more(self, size: int) -> bool:
        """After a read of ``size`` bytes: more may wait (a short read of a plain socket took all the kernel had)."""
        return (size == RECV_SIZE or self._tls) and self.readable()

    def send(self, message: protocol.Message) -> None:
        with self.lock:  # the session's sequence number and the socket are shared with the heartbeat thread
            self._write(self.session.send(message))

    def send_results(self, items: list[ResultItem], outputs: dict[int, tuple[str, str]] | None = None) -> None:
        with self.lock:
            self._write(self.session.send_results(items, outputs))

    def _write(self, data: bytes) -> None:
        """Send a sealed frame (the caller holds the lock)."""
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self._lost(f"write error: {exc}")
            return
        self.last_send = time.monotonic()

    def wake(self) -> None:
        """Cut a :meth:`wait` short (safe in a signal handler)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")

    def close(self) -> None:
        with self.lock:
            self.sock.close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _poll(self, timeout: float | None) -> list[tuple[int, int]]:
        return self._poller.poll(None if timeout is None else int(timeout * 1000))

    def _tls_pending(self) -> bool:
        """TLS holds decrypted bytes the kernel does not know of (poll will not report them)."""
        return isinstance(self.sock, protocol.TLS_SOCKETS) and self.sock.pending() > 0


def open_link(
    endpoint: Endpoint,
    *,
    audit: Audit,
    max_frame: int,
    timeout: float,
    patience: float,
    shape: Resources | None = None,
    leave_at: float = 0.0,
) -> tuple[socket.socket, SlaveSession, protocol.Welcome]:
    """Connect and authenticate, saying what we offer (``shape``); keep trying for ``patience`` seconds while
    nobody answers.

    ``leave_at``: when (Unix time) the slave will leave by plan, 0.0 for never (the master is told in Hello).
    """
    address = f"{endpoint.host}:{endpoint.port}"
    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            sock = ports.connect(endpoint.host, endpoint.port, timeout)
            break
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise SlaveExit(ExitCode.UNREACHABLE, f"cannot reach the master at {address}: {exc}") from None
            time.sleep(delay)  # the master may be starting or restarting: back off and retry
            delay = min(delay * 2, 2.0)
    try:
        if endpoint.tls_fingerprint is not None:
            sock = _start_tls(sock, endpoint.tls_fingerprint, address)
        session, welcome = _handshake(sock, endpoint, audit, max_frame, address, shape=shape, leave_at=leave_at)
    except BaseException:
        sock.close()
        raise
    return sock, session, welcome


def _start_tls(sock: socket.socket, fingerprint: str, address: str) -> ssl.SSLSocket:
    try:
        tls = protocol.tls_client_context().wrap_socket(sock)
    except OSError as exc:  # ssl.SSLError is one
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
    shape: Resources | None,
    leave_at: float,
) -> tuple[SlaveSession, protocol.Welcome]:
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
    return session, welcome


def _read_some(sock: socket.socket, session: SlaveSession, address: str) -> bytes:
    """Bytes for the handshake; an end before Welcome says what the peer did at which step."""
    try:
        data = sock.recv(RECV_SIZE)
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

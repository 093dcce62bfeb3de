"""The master's sockets: one listener, its peers, an epoll, TLS and a wake-up pair; bytes in and out.

What the bytes mean is the engine's business (mwpy/net/engine.py) and each
peer's :class:`~mwpy.wire.session.MasterSession`'s; this module only keeps
the connections: accepts them (pausing while descriptors run out), steps
their TLS handshakes, reads into one shared buffer, writes whatever a peer's
output buffer holds with one ``send``, and closes them. A connection that
breaks is reported to the engine (``on_lost``) with its cause.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from mwpy.core import facts
from mwpy.core.facts import Cause, Facts
from mwpy.names import MASTER_BACKLOG
from mwpy.net import ports
from mwpy.net.poller import Poller
from mwpy.options import Options
from mwpy.wire import protocol
from mwpy.wire.session import MasterSession

if TYPE_CHECKING:  # loaded with TLS's first use (mwpy/wire/protocol.py)
    import ssl

#: Bytes read from a socket per call.
RECV_SIZE = 256 * 1024
#: How long the master stops accepting when it has no descriptor left for a new socket. The kernel's
#: backlog holds the callers meanwhile; a listener left readable would spin the loop (docs/scaling.md).
ACCEPT_PAUSE = 1.0
#: accept() errors that mean "out of descriptors or memory", not "this one caller went away".
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: The poller's marks for the listener and the wake-up socket (a peer's mark is the Peer).
LISTENER = object()
WAKE = object()


class Peer:
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
        #: The slave id once it proved membership (None before, and once sent away).
        self.sid: str | None = None
        self.last_heard = now
        self.max_out = 0
        self.tasks_out = 0
        self.results_in = 0
        self.writing = False
        self.handshaking = False  # TLS handshake still under way


class Connections:
    """Every connection of one master, and the listener that brings new ones."""

    def __init__(
        self,
        options: Options,
        secret: bytes,
        facts: Facts,
        on_lost: Callable[[Peer, Cause, str], None],
        *,
        listener: socket.socket | None = None,
    ) -> None:
        """``listener``: a socket listening already, to take instead of making one (mwpy.Executor's slaves start
        connecting to it before the master exists)."""
        self._options = options
        self._secret = secret
        self._facts = facts
        self._on_lost = on_lost
        self.peers: set[Peer] = set()
        # Every read lands in this one buffer and is copied into the peer's session.
        # sock.recv(256 KiB) would allocate 256 KiB per call, above glibc's mmap threshold:
        # an mmap, page faults and an munmap per read, half a one-task round trip on loopback.
        self._buffer = bytearray(RECV_SIZE)
        self._view = memoryview(self._buffer)
        #: While out of descriptors: when to listen again (None: listening).
        self.accept_resumes: float | None = None
        self._descriptors_warned = False
        #: Set once the computation is finished: callers are turned away, no listening resumes.
        self.closed = False
        self._tls: ssl.SSLContext | None = None
        self.tls_fingerprint: str | None = None
        if options.tls_cert:
            self._tls, self.tls_fingerprint = protocol.tls_server_context(options.tls_cert, options.tls_key)
        _raise_file_limit()
        #: Every socket of this master, each marked with what it stands for (mwpy/net/poller.py).
        self.poller = Poller()
        #: The address the master listens on: its --mw-master-host, or "" for every interface.
        self.bind = options.master_host or ""
        self._listener = self._listen() if listener is None else listener
        self._listener.setblocking(False)
        self.poller.register(self._listener, LISTENER)
        # Another thread (mwpy.Executor's submitters) can cut a select short through this pair.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self.poller.register(self._wake_reader, WAKE)
        self.host = options.master_host or socket.gethostname()
        self.port: int = self._listener.getsockname()[1]

    def _listen(self) -> socket.socket:
        host = self.bind
        port = self._options.master_port or 0
        try:
            sock = ports.listen(host, self._options.master_port_range, "the master", port=port, backlog=MASTER_BACKLOG)
        except OSError as exc:
            raise OSError(f"cannot listen on {host or '*'}:{port}: {exc.strerror or exc}") from None
        return sock

    # ------------------------------------------------------------------ coming in

    def accept(self, now: float) -> None:
        """Take every caller waiting in the backlog; each starts its handshake (TLS first, when on)."""
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause_accepting(now, exc)
                else:  # this caller gave up (ECONNABORTED...): the next one is served on the next pass
                    self._facts(facts.AcceptFailed(str(exc)))
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.closed:
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
            peer = Peer(sock, f"{addr[0]}:{addr[1]}", session, now)
            self.peers.add(peer)
            self.poller.register(sock, peer)
            self._facts(facts.Accepted(peer.address))
            if self._tls is None:
                self.queue(peer, session.challenge())
            else:
                peer.handshaking = True
                self.tls_handshake(peer)

    def _pause_accepting(self, now: float, exc: OSError) -> None:
        """Out of descriptors: stop watching the listener for a while instead of spinning on it.

        The callers wait in the kernel's backlog (their connect() has completed) and
        are accepted once a slave leaves or the pause ends; the connected slaves are
        served meanwhile.
        """
        self.poller.unregister(self._listener)
        self.accept_resumes = now + ACCEPT_PAUSE
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        why = f"{exc.strerror or exc} with {len(self.peers)} connections open (descriptor limit {soft})"
        self._facts(facts.AcceptPaused(ACCEPT_PAUSE, why, first=not self._descriptors_warned))
        self._descriptors_warned = True

    def resume_accepting(self) -> None:
        self.accept_resumes = None
        self.poller.register(self._listener, LISTENER)

    def tls_handshake(self, peer: Peer) -> None:
        """Advance a non-blocking TLS handshake; once done, the mwpy handshake starts."""
        sock = peer.sock
        assert isinstance(sock, protocol.TLS_SOCKETS)
        import ssl  # noqa: PLC0415 (loaded with TLS: mwpy/wire/protocol.py)

        want_write = False
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLWantWriteError:
            want_write = True
        except OSError as exc:
            self._on_lost(peer, "error", f"TLS handshake failed: {exc}")
            return
        else:  # last_heard stays at accept: TLS and the proof share one client timeout (docs/security.md)
            peer.handshaking = False
            self.queue(peer, peer.session.challenge())
            return
        self._want_write(peer, sock, want_write)

    def receive(self, peer: Peer) -> bool:
        """Read what ``peer`` sent into its session; False when nothing came (or the peer is gone)."""
        sock = peer.sock
        assert sock is not None
        try:
            size = sock.recv_into(self._buffer)
            if size and isinstance(sock, protocol.TLS_SOCKETS):
                while sock.pending():  # plaintext TLS already decrypted: select will not report it
                    peer.session.receive_data(self._view[:size])
                    size = sock.recv_into(self._buffer)
        except protocol.WOULD_BLOCK:
            return False
        except OSError as exc:
            self._on_lost(peer, "error", f"read error: {exc}")
            return False
        if not size:
            self._on_lost(peer, "eof", "EOF")
            return False
        peer.session.receive_data(self._view[:size])
        return True

    def drain_wakeups(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_reader.recv(4096):
                pass

    def wake(self) -> None:
        """Cut the current (or next) ``select`` short; safe from any thread."""
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (nothing to wake)
            self._wake_writer.send(b"\0")

    # ------------------------------------------------------------------ going out

    def queue(self, peer: Peer, data: bytes) -> None:
        """Add ``data`` to what ``peer`` is sent, and send what the socket takes now."""
        peer.out += data
        self.send(peer)

    def send(self, peer: Peer) -> None:
        sock = peer.sock
        if sock is None or peer.handshaking:  # gone, or the TLS handshake owns the socket until it is done
            return
        if peer.out:
            try:
                sent = sock.send(peer.out)
            except protocol.WOULD_BLOCK:
                sent = 0
            except OSError as exc:
                self._on_lost(peer, "error", f"write error: {exc}")
                return
            del peer.out[:sent]
        if bool(peer.out) is not peer.writing:  # asked here, not there: most sends leave nothing behind
            self._want_write(peer, sock, not peer.writing)

    def _want_write(self, peer: Peer, sock: socket.socket, want: bool) -> None:
        if want != peer.writing:
            peer.writing = want
            self.poller.modify(sock, write=want)

    # ------------------------------------------------------------------ ending

    def close(self, peer: Peer) -> None:
        sock, peer.sock = peer.sock, None
        if sock is None:
            return
        self.peers.discard(peer)
        self.poller.unregister(sock)
        sock.close()
        if self.accept_resumes is not None and not self.closed:
            self.resume_accepting()  # a descriptor is free: the next caller in the backlog may have it

    def close_all(self) -> None:
        """Stop listening and release the poller (connections must be closed already)."""
        self.closed = True
        self.poller.close()
        self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()


def _raise_file_limit() -> None:
    """Many slaves means many sockets: lift the soft descriptor limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

"""The file service's server: one selector thread for every handshake, a bounded set of workers for proven peers.

The component it serves (:class:`~mwpy.data.service.FileService`: what is
offered, what is taken, how each request is answered, by the table of
:mod:`mwpy.data.grammar`) knows no socket loop; this class adds the loop, so
any process that holds the computation's secret can serve (the master, or a
slave serving another slave; tests/test_file_service.py shows the latter).

When the master speaks TLS (``--mw-tls-cert``) the file service does too,
with the same certificate: a slave checks it against the fingerprint it
pinned for the master. A peer that has not proved membership holds no thread
and is dropped one client timeout after it connected, and nothing a peer
sends can make the service stop accepting for good; only a proven peer's
request makes it start a worker, up to its bound.
"""

from __future__ import annotations

import contextlib
import errno
import queue
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Final

from mwpy import safe_text
from mwpy.data.link import Link, Proving, no_delay
from mwpy.data.service import FileService, FileServiceError
from mwpy.net.ports import PortRange, listen

if TYPE_CHECKING:  # loaded with TLS's first use (mwpy/wire/protocol.py)
    import ssl

log = safe_text.logger(__name__)

#: The server's default client timeout (the master passes its ``--mw-client-timeout``): a peer that has not
#: proved membership this long after it connected is dropped, and so is a proven one this silent mid-request.
CLIENT_TIMEOUT: Final = 60.0
#: Connections held at most (proving, idle or being served); past it the service makes room or waits.
MAX_CONNECTIONS: Final = 4096
#: Threads serving requests at most (one fetch or upload each at a time): the first starts with the service,
#: the others as requests find none free (an Executor's master makes its service as its first slave is greeted:
#: eight threads started then took the interpreter from the first task's round trip).
WORKERS: Final = 8
#: Seconds a peer may prove itself undisturbed; after that it is the first dropped when room is needed.
EVICT_AFTER: Final = 1.0
#: Seconds the service stops accepting when it has no room and none can be made (callers wait in the backlog).
ACCEPT_PAUSE: Final = 0.25
#: Connections accepted at most per pass of the selector loop, so those already connected keep their turn.
ACCEPT_BURST: Final = 16
#: Requests a worker serves in a row for one peer whose next request has already arrived, before the
#: connection goes back to the selector thread and the other peers get their turn.
REQUEST_BURST: Final = 16
#: Seconds between two looks at the deadlines of peers still proving themselves.
TICK: Final = 0.25
#: The selector's marks for the listening socket and the workers' wake-up socket.
_LISTENER = object()
_WAKE = object()
#: accept() errors that mean "out of descriptors or memory", not "this one caller went away".
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class FileServer(FileService):
    """A :class:`~mwpy.data.service.FileService` on a port: its files fetched by hash, uploads taken.

    One selector thread accepts connections and runs every handshake
    (:class:`Proving`); up to ``workers`` threads serve requests of proven
    peers, one request at a time each: the first is started here, the others
    by the selector thread when a request finds none free (one that cannot be
    started is no failure: those running serve the request in turn); an idle
    proven connection waits in the selector, costing a descriptor. So neither
    a thread limit nor a flood can stop the service: out of descriptors (``EMFILE``) or at
    ``max_connections``, it drops the oldest peer still proving itself (once
    that one had :data:`EVICT_AFTER` seconds, far more than an honest slave
    needs), or stops accepting for a moment while callers wait in the
    kernel's backlog. With ``tls`` (the master's context, so the same
    certificate and fingerprint) every connection speaks TLS first.
    """

    def __init__(
        self,
        secret: bytes,
        member_id: str,
        host: str = "127.0.0.1",
        bind: str | None = None,
        ports: PortRange | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        client_timeout: float = CLIENT_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        workers: int = WORKERS,
    ) -> None:
        """Listen on ``bind`` (default: ``host``; "" for every interface), in ``ports`` if given; slaves are
        told ``host``.

        ``client_timeout``: a peer that has not proved membership that long after it connected is
        dropped, and so is a proven one silent that long in the middle of a request.
        """
        super().__init__()
        self._secret = secret
        self._member_id = member_id
        self._tls = tls
        self._client_timeout = client_timeout
        self._max_connections = max_connections
        self._listener = listen(host if bind is None else bind, ports, "the file service", backlog=1024)
        self._listener.setblocking(False)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        # The selector thread's own state (no lock: only that thread touches it).
        self._selector = selectors.DefaultSelector()
        self._proving: dict[socket.socket, Proving] = {}  # in the order they connected
        self._open = 0  # connections held: proving, idle, or with a worker
        self._accept_resumes: float | None = None  # while not accepting: when to try again
        # Between the selector thread and the workers.
        self._requests: queue.SimpleQueue[Link | None] = queue.SimpleQueue()
        self._served: queue.SimpleQueue[tuple[Link, bool]] = queue.SimpleQueue()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
        self._front = threading.Thread(target=self._run, name="mwpy-filestore", daemon=True)
        # The workers: started by the selector thread alone (after the first, here), up to ``workers``.
        self._workers: list[threading.Thread] = []
        self._max_workers = workers
        #: Workers idle less requests queued for them (negative: requests wait); guarded by _free_lock.
        self._free = 0
        self._free_lock = threading.Lock()
        try:
            self._start_worker()  # before the selector thread, which starts the others: one at a time
            self._front.start()
        except RuntimeError as exc:  # no thread to be had: say so now, not a dead service later
            self._stop_workers()
            self.close()
            raise FileServiceError(f"cannot start the file service: {exc}") from None

    def close(self) -> None:
        """Stop: the port is closed and every connection dropped when this returns (transfers under way end)."""
        self._closed = True
        self._wake()  # the selector thread stops, and stops the workers
        front = self._front
        if front.is_alive() and front is not threading.current_thread():
            front.join(timeout=5.0)
        with contextlib.suppress(OSError):
            self._listener.close()
        with contextlib.suppress(queue.Empty):
            while True:  # handed back after the selector thread stopped
                self._served.get_nowait()[0].sock.close()

    # ------------------------------------------------------------------ the selector thread

    def _run(self) -> None:
        failed = False
        try:
            while not self._closed:
                try:
                    self._pass()
                except Exception:  # a bug must not take the service down with it: the next pass goes on
                    if not failed:  # said once: a bug that recurs every pass must not flood the log
                        log.exception("file service: a pass of its loop failed")
                    failed = True
        finally:
            self._shut_down()

    def _pass(self) -> None:
        for key, _ in self._selector.select(TICK):
            peer = key.data
            if peer is _LISTENER:
                self._accept(time.monotonic())
            elif peer is _WAKE:
                self._take_back()
            elif isinstance(peer, Proving):
                self._prove(peer)
            else:
                self._selector.unregister(peer.sock)
                self._hand(peer)
        now = time.monotonic()
        for sock, peer in list(self._proving.items()):  # in the order they connected: the oldest first
            if peer.deadline > now:
                break
            self._drop(sock)
        if self._accept_resumes is not None and now >= self._accept_resumes:
            self._resume_accepting()

    def _accept(self, now: float) -> None:
        for _ in range(ACCEPT_BURST):  # then the peers already here get their turn
            if self._open >= self._max_connections and not self._evict(now):
                self._pause_accepting(now)
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES and not self._evict(now):
                    self._pause_accepting(now)
                    return
                continue  # out of descriptors and one freed, or this caller gave up (ECONNABORTED...)
            self._open += 1
            try:
                sock.setblocking(False)
                no_delay(sock)
                if self._tls is not None:
                    sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                self._open -= 1
                sock.close()
                continue
            peer = Proving(sock, now + self._client_timeout, self._secret, self._member_id)
            self._proving[sock] = peer
            self._selector.register(sock, selectors.EVENT_READ, peer)
            self._prove(peer)

    def _prove(self, peer: Proving) -> None:
        if peer.sock not in self._proving:
            return  # dropped earlier in this pass (evicted to make room) although the selector reported it
        try:
            link = peer.step()
        except Exception:  # a broken or hostile peer costs only its own connection, whatever it sent
            self._drop(peer.sock)
            return
        if link is None:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if peer.wants_write else 0)
            self._selector.modify(peer.sock, events, peer)
            return
        del self._proving[peer.sock]
        self._selector.modify(peer.sock, selectors.EVENT_READ, link)
        if link.has_buffered():  # its first request came with its hello
            self._selector.unregister(link.sock)
            self._hand(link)

    def _take_back(self) -> None:
        """Connections the workers are done with: idle again in the selector, or closed."""
        with contextlib.suppress(OSError):
            while self._wake_reader.recv(4096):
                pass
        while True:
            try:
                link, keep = self._served.get_nowait()
            except queue.Empty:
                return
            if not keep or self._closed:
                self._close(link.sock)
            elif link.has_buffered():
                self._hand(link)
            else:
                self._selector.register(link.sock, selectors.EVENT_READ, link)

    def _evict(self, now: float) -> bool:
        """Make room: drop the oldest peer still proving itself, if it has had its chance (False if none has)."""
        for sock, peer in self._proving.items():
            if now - (peer.deadline - self._client_timeout) >= EVICT_AFTER:
                self._drop(sock)
                return True
            return False
        return False

    def _pause_accepting(self, now: float) -> None:
        if self._accept_resumes is None:
            self._selector.unregister(self._listener)
        self._accept_resumes = now + ACCEPT_PAUSE

    def _resume_accepting(self) -> None:
        if self._accept_resumes is not None and not self._closed:
            self._accept_resumes = None
            self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)

    def _drop(self, sock: socket.socket) -> None:
        del self._proving[sock]
        self._selector.unregister(sock)
        self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        sock.close()
        self._open -= 1
        self._resume_accepting()  # a descriptor and a place are free

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"\0")

    def _shut_down(self) -> None:
        self._stop_workers()  # only this thread starts them: none starts after this
        for key in list(self._selector.get_map().values()):
            if key.data is not _LISTENER and key.data is not _WAKE:
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    # ------------------------------------------------------------------ the workers

    def _hand(self, link: Link) -> None:
        """A proven peer's request, to a worker (selector thread): a free one, else one started now while fewer
        than ``workers`` run; else it waits for the first done."""
        self._requests.put(link)
        with self._free_lock:
            self._free -= 1
            starting = self._free < 0 and len(self._workers) < self._max_workers
        if starting:
            with contextlib.suppress(RuntimeError):  # no thread to be had: those running serve it in turn
                self._start_worker()

    def _stop_workers(self) -> None:
        for _ in self._workers:
            self._requests.put(None)

    def _start_worker(self) -> None:
        """One more worker, free (raises RuntimeError if no thread can be had)."""
        worker = threading.Thread(target=self._serve_requests, name="mwpy-filestore-worker", daemon=True)
        worker.start()
        self._workers.append(worker)
        with self._free_lock:
            self._free += 1

    def _serve_requests(self) -> None:
        while (link := self._requests.get()) is not None:
            keep = self._serve_burst(link)
            with self._free_lock:  # free before its peer's next request is handed out: no worker started for it
                self._free += 1
            if self._closed:
                link.sock.close()
                continue
            self._served.put((link, keep))
            self._wake()

    def _serve_burst(self, link: Link) -> bool:
        """Serve the peer's requests while the next one has already arrived (a slave sends a job's outputs one
        after the other, then reads the answers), up to :data:`REQUEST_BURST`: one hand-over between the
        selector thread and a worker for them all, not one each (about 0.4 ms each on an idle machine).
        Whether the connection stays open."""
        for _ in range(REQUEST_BURST):
            if not self._serve(link):
                return False
            if self._closed or not link.has_arrived():
                break
        return True

    def _serve(self, link: Link) -> bool:
        """Serve one request of a proven peer; whether its connection stays open for the next."""
        try:
            link.sock.settimeout(self._client_timeout)
            self.serve(link)
            link.sock.setblocking(False)
        except Exception:  # a broken or hostile peer costs only its own connection, whatever it sent
            return False
        return True

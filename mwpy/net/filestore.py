"""A content-addressed file service beside the master: slaves fetch inputs by hash and send outputs back.

Why a second connection rather than files inside task messages: a task frame
is held whole in memory on both sides, and a file shared by many jobs would
cross the wire once per job. Here an input is named by its SHA-256; a slave
fetches it once, keeps it in its cache (:mod:`mwpy.net.cache`) and checks
the hash of every byte it received. Uploads travel in frames of
:data:`CHUNK` bytes; a fetched file's content travels unframed, right after
its sealed size (``sendfile`` on plain TCP: the kernel copies the file to the
socket), and the slave hashes it as it lands in the file, one pass, so a
local transfer runs near memory speed. That content needs no per-chunk tag:
the slave asked for it by hash on the authenticated channel and uses none of
it before the whole matches that hash; the end frame after it is sealed as
every frame is. Neither side ever holds a whole file.

Authentication reuses :mod:`mwpy.wire.protocol` unchanged: the same challenge,
proofs (HMAC-SHA256 over both nonces under the computation's secret) and
per-frame MACs under keys derived from that handshake; the first sealed frame
names the member id, which must be the master's. Nothing received is
unpickled: headers are JSON, chunks are bytes.

The conversation (every frame is a 4-byte length and a body; after the
handshake a body is a kind byte, a payload and a MAC tag)::

    server                                  client
    challenge(nonce_m)               ─►
                                     ◄─     nonce_s + slave_proof
    master_proof                     ─►
                                     ◄─     H {"member_id"}
    then, any number of times:
                                     ◄─     G {"sha256"}                 fetch
    S {"size"}, size raw bytes, E    ─►     (or X {"error"})
                                     ◄─     P {"job","name","size","executable"}, D chunk..., E {"sha256"}
    K {}                             ─►     (or X {"error"})             upload
                                     ◄─     J {"job","usage"}            a running job's usage (mwpy jobs)
    K {"stop": null|"hold"|"remove"} ─►
                                     ◄─     R {"size"}, D chunk..., E {"sha256"}
    K {}                             ─►     (or X {"error"})             a task's large result

When the master speaks TLS (``--mw-tls-cert``) the file service does too,
with the same certificate: a slave checks it against the fingerprint it
pinned for the master. The server (:class:`FileServer`) runs every handshake
in one selector thread and serves proven peers from a fixed set of worker
threads, so a peer that has not proved membership holds no thread and is
dropped one client timeout after it connected, and nothing a peer sends can
make the service start a thread or stop accepting for good.

Outputs are the part a hostile slave could abuse, so the server decides where
they land (:func:`place_output`) and which names it takes
(:func:`check_output_allowed`): only what the job may produce (the
``transfer_output_files`` entries and their trees, or top-level files that
are not hidden when that command is absent), never a name with a control
character, only below the job's ``initialdir``, never through a symbolic
link, never over one of the job's own inputs or the run's own files
(submit file, summary, journal, resource file), written to a temporary name
and renamed into place once the hash matches.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import queue
import select
import selectors
import socket
import ssl
import stat
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

import attrs

from mwpy import safe_files, safe_text, strict_json
from mwpy.errors import MwpyError, ProtocolError
from mwpy.net.ports import PortRange, listen
from mwpy.wire import protocol

log = safe_text.logger(__name__)

#: Bytes per data frame.
CHUNK = 1 << 20
#: Bytes per read (and per send under TLS) of a fetched file's unframed content.
RAW_CHUNK = 4 << 20
#: The largest frame either side accepts once authenticated (a chunk, its kind byte, its tag).
MAX_FRAME = CHUNK + 64
#: Seconds a slave waits for the file service to answer.
IO_TIMEOUT = 120.0
#: The server's default client timeout (the master passes its ``--mw-client-timeout``): a peer that has not
#: proved membership this long after it connected is dropped, and so is a proven one this silent mid-request.
CLIENT_TIMEOUT = 60.0
#: Connections held at most (proving, idle or being served); past it the service makes room or waits.
MAX_CONNECTIONS = 4096
#: Threads serving requests (one fetch or upload each at a time), all started with the service.
WORKERS = 8
#: Seconds a peer may prove itself undisturbed; after that it is the first dropped when room is needed.
EVICT_AFTER = 1.0
#: Seconds the service stops accepting when it has no room and none can be made (callers wait in the backlog).
ACCEPT_PAUSE = 0.25
#: Connections accepted at most per pass of the selector loop, so those already connected keep their turn.
ACCEPT_BURST = 16
#: Requests a worker serves in a row for one peer whose next request has already arrived, before the
#: connection goes back to the selector thread and the other peers get their turn.
REQUEST_BURST = 16
#: Seconds between two looks at the deadlines of peers still proving themselves.
TICK = 0.25
#: The largest frame a peer may send before its member id is known (the sealed hello).
MAX_HELLO_FRAME = 1024
#: How many (path, inode, size, mtime) -> hash entries the master remembers, so shared inputs are hashed once.
HASH_MEMORY = 1024
#: Prefix of the temporary names outputs are written under before the rename.
UPLOAD_PREFIX = ".mwpy-upload-"
#: Default caps on what one job may send back (``mwpy jobs --max-output-bytes/--max-output-files``).
MAX_OUTPUT_BYTES = 16 << 30
MAX_OUTPUT_FILES = 10_000
#: The largest task result a slave may store on the master (a pickled value; frames carry up to 64 MiB).
MAX_RESULT_BYTES = 16 << 30


class FileServiceError(MwpyError):
    """A fetch or an upload failed: the peer refused, the hash did not match, the connection broke."""


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------- the authenticated link


class _Link:
    """One authenticated connection: framed, every frame sealed and checked with :mod:`mwpy.wire.protocol`'s MACs.

    ``buffered`` holds bytes already read past the handshake (a request the
    client sent right behind its hello); reads take them first.
    """

    def __init__(self, sock: socket.socket, channel: protocol.Channel, buffered: bytes = b"") -> None:
        self.sock = sock
        self._channel = channel
        self._buffered = bytearray(buffered)

    def send(self, kind: bytes, payload: bytes | memoryview = b"") -> None:
        self.sock.sendall(self._channel.seal_body(kind + bytes(payload)))

    def send_json(self, kind: bytes, value: dict[str, Any]) -> None:
        self.send(kind, json.dumps(value).encode())

    def receive(self) -> tuple[bytes, bytes]:
        (size,) = protocol.HEADER.unpack(self._read_exact(protocol.HEADER.size))
        if size > MAX_FRAME:
            raise ProtocolError(f"frame of {size} bytes exceeds the limit of {MAX_FRAME}")
        data = self._channel.verify_body(self._read_exact(size))
        return data[:1], data[1:]

    def receive_raw(self, size: int) -> Iterator[memoryview]:
        """The next ``size`` bytes as they arrive, unframed (a fetched file's content): views of one buffer,
        each valid until the next is taken, so the bytes are received in place and copied nowhere else."""
        if self._buffered:
            ahead = bytes(self._buffered[:size])
            del self._buffered[:size]
            size -= len(ahead)
            yield memoryview(ahead)
        buffer = memoryview(bytearray(min(size, RAW_CHUNK)))
        while size:
            got = self.sock.recv_into(buffer, min(size, RAW_CHUNK))
            if not got:
                raise ProtocolError("connection closed")
            size -= got
            yield buffer[:got]

    def receive_json(self, *kinds: bytes) -> tuple[bytes, dict[str, Any]]:
        kind, payload = self.receive()
        if kind not in kinds:
            raise ProtocolError(f"unexpected frame {kind!r}")
        return kind, _header(payload)

    def has_buffered(self) -> bool:
        """Whether a request may already be here without the socket showing it (read ahead, or held by TLS)."""
        return bool(self._buffered) or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0)

    def has_arrived(self) -> bool:
        """Whether the peer's next request (or its hang-up) is already here: buffered, or readable right now."""
        if self.has_buffered():
            return True
        waiting = select.poll()
        waiting.register(self.sock, select.POLLIN)
        return bool(waiting.poll(0))

    def _read_exact(self, size: int) -> bytes:
        data = self._buffered[:size]
        del self._buffered[:size]
        while len(data) < size:
            got = self.sock.recv(min(size - len(data), CHUNK))
            if not got:
                raise ProtocolError("connection closed")
            data += got
        return bytes(data)


def _header(payload: bytes) -> dict[str, Any]:
    """A frame's JSON header (strict: no NaN, no duplicate keys, no nesting deep enough to exhaust the stack)."""
    try:
        value = strict_json.loads(payload) if payload else {}
    except ValueError:
        raise ProtocolError("undecodable header") from None
    if not isinstance(value, dict):
        raise ProtocolError("undecodable header")
    return value


def _no_delay(sock: socket.socket) -> None:
    """Small frames go out at once: a header, a last chunk and an end frame would otherwise wait for
    the peer's delayed acknowledgement (Nagle's algorithm), some 40 ms per file."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        got = sock.recv(min(size - len(data), 1 << 20))
        if not got:
            raise ProtocolError("connection closed")
        data += got
    return bytes(data)


def _read_frame(sock: socket.socket, max_size: int) -> bytes:
    (size,) = protocol.HEADER.unpack(_read_exact(sock, protocol.HEADER.size))
    if size > max_size:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_size}")
    return _read_exact(sock, size)


class _Proving:
    """The server's side of the handshake on a non-blocking socket, one step per readable (or writable) event.

    TLS first when the service has it, then the challenge, the slave's proof,
    our proof and the sealed hello naming the member id, as the table at the
    top of this module says. Driven by the service's one selector thread: a
    peer that has not proved membership holds a descriptor and a few hundred
    bytes, never a thread, and :attr:`deadline` (one client timeout after it
    connected, TLS included) ends it.
    """

    def __init__(self, sock: socket.socket, deadline: float, secret: bytes, member_id: str) -> None:
        self.sock = sock
        self.deadline = deadline
        self._secret = secret
        self._member_id = member_id
        self._tls = isinstance(sock, ssl.SSLSocket)  # still to finish
        self._nonce = protocol.new_nonce()
        self._out = bytearray()
        self._in = bytearray()
        self._channel: protocol.Channel | None = None
        self._challenged = False
        self.wants_write = False

    def step(self) -> _Link | None:
        """Advance as far as the bytes at hand allow; the link once the peer has proved membership.

        Raises :class:`ProtocolError` or ``OSError`` when the peer failed (it is then dropped).
        """
        if self._tls and not self._finish_tls():
            return None
        if not self._challenged:
            self._challenged = True
            self._out += protocol.challenge(self._nonce)
        self._receive()
        link = self._advance()
        self._flush()
        return link

    def _finish_tls(self) -> bool:
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.wants_write = False
            return False
        except ssl.SSLWantWriteError:
            self.wants_write = True
            return False
        self._tls = False
        return True

    def _receive(self) -> None:
        """Read what the handshake can use, no more: a request sent right behind the hello stays for the link."""
        while len(self._in) < _HANDSHAKE_BYTES:
            try:
                got = self.sock.recv(_HANDSHAKE_BYTES - len(self._in))
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not got:
                raise ProtocolError("connection closed")
            self._in += got

    def _frame(self, max_size: int) -> bytes | None:
        if len(self._in) < protocol.HEADER.size:
            return None
        (size,) = protocol.HEADER.unpack_from(self._in)
        if size > max_size:
            raise ProtocolError(f"frame of {size} bytes before the proof of membership")
        end = protocol.HEADER.size + size
        if len(self._in) < end:
            return None
        body = bytes(self._in[protocol.HEADER.size : end])
        del self._in[:end]
        return body

    def _advance(self) -> _Link | None:
        if self._channel is None:
            response = self._frame(protocol.MAX_HANDSHAKE_FRAME)
            if response is None:
                return None
            if len(response) != protocol.RESPONSE_SIZE:
                raise ProtocolError("bad handshake")
            slave_nonce, proof = response[: protocol.NONCE_SIZE], response[protocol.NONCE_SIZE :]
            if not protocol.proofs_match(protocol.slave_proof(self._secret, self._nonce, slave_nonce), proof):
                raise ProtocolError("the peer does not know the computation's secret")
            self._out += protocol.frame(protocol.master_proof(self._secret, self._nonce, slave_nonce))
            self._channel = protocol.derive_channel(self._secret, self._nonce, slave_nonce, is_master=True)
        body = self._frame(MAX_HELLO_FRAME)
        if body is None:
            return None
        data = self._channel.verify_body(body)
        if data[:1] != b"H":
            raise ProtocolError(f"unexpected frame {data[:1]!r}")
        member_id = _header(data[1:]).get("member_id")
        if member_id != self._member_id:
            raise ProtocolError(f"member id {member_id!r} is not this computation's")
        if self._out:  # the peer sends its hello only once it has read our whole proof
            raise ProtocolError("hello before the proof was read")
        return _Link(self.sock, self._channel, bytes(self._in))

    def _flush(self) -> None:
        if self._out:
            try:
                sent = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                sent = 0
            del self._out[:sent]
        self.wants_write = bool(self._out)


#: The most bytes read while a peer proves itself: its proof's frame and its hello's, both at their limits.
_HANDSHAKE_BYTES = 2 * protocol.HEADER.size + protocol.MAX_HANDSHAKE_FRAME + MAX_HELLO_FRAME


def _client_handshake(sock: socket.socket, secret: bytes, member_id: str) -> _Link:
    master_nonce = protocol.parse_challenge(_read_frame(sock, protocol.MAX_HANDSHAKE_FRAME))
    slave_nonce = protocol.new_nonce()
    sock.sendall(protocol.frame(slave_nonce + protocol.slave_proof(secret, master_nonce, slave_nonce)))
    proof = _read_frame(sock, protocol.MAX_HANDSHAKE_FRAME)
    if not protocol.proofs_match(protocol.master_proof(secret, master_nonce, slave_nonce), proof):
        raise ProtocolError("the file service failed to prove it is this computation's master")
    link = _Link(sock, protocol.derive_channel(secret, master_nonce, slave_nonce, is_master=False))
    link.send_json(b"H", {"member_id": member_id})
    return link


# ---------------------------------------------------------------------- where outputs may land


@attrs.frozen
class Destination:
    """Where one job's outputs may land: below ``initialdir``, never over ``protected`` (real paths).

    ``outputs`` are the upload names ``transfer_output_files`` gives
    (:func:`output_upload_name`): only they and the trees below them are
    taken; None (the command is absent) takes top-level files that are not
    hidden. ``streams`` maps the upload names of the job's stdout and stderr
    to the paths the submit file gave them (the master's choice, not the slave's).
    """

    initialdir: str
    protected: frozenset[str]
    streams: tuple[tuple[str, str], ...] = ()
    max_bytes: int = MAX_OUTPUT_BYTES
    max_files: int = MAX_OUTPUT_FILES
    outputs: tuple[str, ...] | None = None


class OutputRefused(MwpyError):
    """A slave asked to write an output where it may not (outside initialdir, over an input, ...)."""


def output_upload_name(entry: str) -> str:
    """The name a ``transfer_output_files`` entry comes back under: its last component (a file, or a folder's root)."""
    return os.path.basename(os.path.normpath(entry))


def _shown(name: str) -> str:
    """An output name quoted in a refusal (which the slave reports, and mwpy jobs may print): one safe line."""
    return "'" + safe_text.one_line(name[:200]) + ("...'" if len(name) > 200 else "'")


def check_output_name(name: str) -> list[str]:
    """The components of a relative output name; refuse absolute paths, ``..``, ``.``, empty parts, controls."""
    if not name or name.startswith("/") or "\\" in name:
        raise OutputRefused(f"output name {_shown(name)} is not a relative path")
    if not safe_text.is_plain(name):  # a newline or an ESC in a file name is a trap for whoever lists the folder
        raise OutputRefused(f"output name {_shown(name)} has control characters")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OutputRefused(f"output name {_shown(name)} may not contain '..', '.' or empty parts")
    if any(part.startswith(UPLOAD_PREFIX) for part in parts):
        raise OutputRefused(f"output name {_shown(name)} uses mwpy's temporary prefix")
    return parts


def check_output_allowed(dest: Destination, name: str) -> None:
    """Refuse an output the job may not produce: one ``transfer_output_files`` does not name (nor a tree below
    a name), or, without that command, anything but a top-level file that is not hidden."""
    parts = check_output_name(name)
    if dest.outputs is None:
        if len(parts) > 1:
            raise OutputRefused(f"output {_shown(name)} is not a top-level file (transfer_output_files names none)")
        if name.startswith("."):
            raise OutputRefused(f"output {_shown(name)} is a hidden file transfer_output_files does not name")
        return
    if not any(name == entry or name.startswith(entry + "/") for entry in dest.outputs):
        raise OutputRefused(f"output {_shown(name)} is not one transfer_output_files names")


def _open_parent(dest: Destination, parts: list[str]) -> int:
    """A descriptor of the output's folder below initialdir, made as needed, never through a symbolic link."""
    fd = os.open(dest.initialdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                raise OutputRefused(f"output folder {part!r} is a symbolic link or not a folder") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def place_output(dest: Destination, name: str, chunks: Iterator[bytes], sha256: str | None = None) -> Path:
    """Write ``chunks`` as ``initialdir/name`` (temporary name, then rename); return the final path.

    ``sha256`` (when given) is checked before the rename; a mismatch leaves nothing behind.
    """
    parts = check_output_name(name)
    final = Path(dest.initialdir, *parts)
    parent = _open_parent(dest, parts)
    try:
        real = os.path.join(os.path.realpath(f"/proc/self/fd/{parent}"), parts[-1])
        if real in dest.protected or os.path.realpath(final) in dest.protected:
            raise OutputRefused(f"output {_shown(name)} would overwrite one of the job's inputs or the run's own files")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode):
                raise OutputRefused(f"output {_shown(name)} is a folder on the submit side")
        digest = hashlib.sha256()
        with safe_files.replacing(parts[-1], mode=None, dir_fd=parent, prefix=UPLOAD_PREFIX) as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise FileServiceError(f"output {_shown(name)}: content does not match its hash")
    finally:
        os.close(parent)
    return final


# ---------------------------------------------------------------------- the server (on the master)


@attrs.define
class Counters:
    """What crossed the wire, for the run summary and the tests: fetches and bytes per input hash."""

    fetches: Counter[str] = attrs.field(factory=Counter)
    bytes_sent: int = 0
    uploads: int = 0
    bytes_received: int = 0
    refused: int = 0
    #: Large task results stored by slaves (``results_stored``) and their bytes (also in ``bytes_received``).
    results_stored: int = 0
    result_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "fetches": dict(self.fetches),
            "bytes_sent": self.bytes_sent,
            "uploads": self.uploads,
            "bytes_received": self.bytes_received,
            "refused": self.refused,
            "results_stored": self.results_stored,
            "result_bytes": self.result_bytes,
        }


class FileServer:
    """The master's side: serves published files by hash, receives outputs for jobs in flight.

    One selector thread accepts connections and runs every handshake
    (:class:`_Proving`); a fixed set of :data:`WORKERS` threads, started
    here, serves requests of proven peers, one request at a time each; an
    idle proven connection waits in the selector, costing a descriptor. No
    thread is ever started after this returns, so neither a thread limit nor
    a flood can stop the service: out of descriptors (``EMFILE``) or at
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
        self._secret = secret
        self._member_id = member_id
        self._tls = tls
        self._client_timeout = client_timeout
        self._max_connections = max_connections
        self._listener = listen(host if bind is None else bind, ports, "the file service", backlog=1024)
        self._listener.setblocking(False)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._published: dict[str, tuple[str, int]] = {}  # hash -> (path, size)
        self._users: Counter[str] = Counter()  # hash -> jobs in flight that read it
        # (path, inode, size, mtime) -> hash, the most recent HASH_MEMORY files: a shared file is hashed once.
        self._hashes: OrderedDict[tuple[str, int, int, int], str] = OrderedDict()
        self._destinations: dict[str, Destination] = {}  # job token -> where its outputs may land
        self._reads: dict[str, tuple[str, ...]] = {}  # job token -> the hashes it reads
        self._budget: dict[str, tuple[int, int]] = {}  # job token -> (files, bytes) received so far
        self._run_files: frozenset[str] = frozenset()  # real paths no output may replace, whatever the job
        self.counters = Counters()
        #: Asked with a running job's token and usage (numbers): "hold"/"remove" stops the job (mwpy jobs' policy).
        self.checks: Callable[[str, dict[str, float]], str | None] | None = None
        #: Where slaves' large results land, named by their hash once it matched (None: results not taken).
        self.results: Path | None = None
        self._stored: Counter[str] = Counter()  # hash -> results stored under it and not taken yet
        self._closed = False
        # The selector thread's own state (no lock: only that thread touches it).
        self._selector = selectors.DefaultSelector()
        self._proving: dict[socket.socket, _Proving] = {}  # in the order they connected
        self._open = 0  # connections held: proving, idle, or with a worker
        self._accept_resumes: float | None = None  # while not accepting: when to try again
        # Between the selector thread and the workers.
        self._requests: queue.SimpleQueue[_Link | None] = queue.SimpleQueue()
        self._served: queue.SimpleQueue[tuple[_Link, bool]] = queue.SimpleQueue()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
        self._threads = [
            threading.Thread(target=self._serve_requests, name="mwpy-filestore-worker", daemon=True)
            for _ in range(workers)
        ]
        self._threads.append(threading.Thread(target=self._run, name="mwpy-filestore", daemon=True))
        try:
            for thread in self._threads:
                thread.start()
        except RuntimeError as exc:  # no thread to be had: say so now, not a dead service later
            self.close()
            raise FileServiceError(f"cannot start the file service: {exc}") from None

    def publish(self, path: str) -> tuple[str, int]:
        """Make ``path`` fetchable; return its hash and size (hashed once while it is unchanged)."""
        info = os.stat(path)
        key = (path, info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            known = self._hashes.get(key)
        digest = known or sha256_of(path)
        with self._lock:
            self._hashes[key] = digest
            self._hashes.move_to_end(key)
            if len(self._hashes) > HASH_MEMORY:
                self._hashes.popitem(last=False)
            self._published[digest] = (path, info.st_size)
        return digest, info.st_size

    def offer(self, path: str, digest: str, size: int) -> None:
        """Make ``path`` fetchable as ``digest`` (hashed by its writer) for the rest of the run (shared objects)."""
        with self._lock:
            self._published[digest] = (path, size)
            self._users[digest] += 1  # never unpublished by forget(): no job reads it

    def withdraw(self, digest: str) -> bool:
        """One :meth:`offer` of ``digest`` is over; whether that was the last (then it is no longer fetchable)."""
        with self._lock:
            self._users[digest] -= 1
            if self._users[digest] > 0:
                return False
            del self._users[digest]
            self._published.pop(digest, None)
            return True

    def protect(self, *paths: str) -> None:
        """No output of any job may replace these files (the run's own: submit file, summary, journal...)."""
        with self._lock:
            self._run_files |= {os.path.realpath(path) for path in paths}

    def expect(self, token: str, destination: Destination, reads: tuple[str, ...] = ()) -> None:
        """Accept outputs for job ``token`` and keep the files it ``reads`` (hashes) published, until :meth:`forget`."""
        with self._lock:
            self._destinations[token] = destination
            self._reads[token] = reads
            self._users.update(reads)

    def forget(self, token: str) -> None:
        """The job is over: no more outputs, and files no job in flight reads are unpublished (memory stays bounded)."""
        with self._lock:
            self._destinations.pop(token, None)
            self._budget.pop(token, None)
            for digest in self._reads.pop(token, ()):
                self._users[digest] -= 1
                if self._users[digest] <= 0:
                    del self._users[digest]
                    self._published.pop(digest, None)

    def take_result(self, digest: str) -> bytes | None:
        """The bytes of a result stored under ``digest`` (None: none is); its file goes once every result stored
        under that hash was taken, so tasks returning equal values each get theirs."""
        with self._lock:
            if self.results is None or not self._stored[digest]:
                return None
            path = self.results / digest
        try:
            return path.read_bytes()
        finally:
            with self._lock:
                self._stored[digest] -= 1
                if not self._stored[digest]:
                    del self._stored[digest]
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop: the port is closed and every connection dropped when this returns (transfers under way end)."""
        self._closed = True
        for _ in self._threads:
            self._requests.put(None)
        self._wake()
        front = self._threads[-1]
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
            elif isinstance(peer, _Proving):
                self._prove(peer)
            else:
                self._selector.unregister(peer.sock)
                self._requests.put(peer)
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
                _no_delay(sock)
                if self._tls is not None:
                    sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                self._open -= 1
                sock.close()
                continue
            peer = _Proving(sock, now + self._client_timeout, self._secret, self._member_id)
            self._proving[sock] = peer
            self._selector.register(sock, selectors.EVENT_READ, peer)
            self._prove(peer)

    def _prove(self, peer: _Proving) -> None:
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
            self._requests.put(link)

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
                self._requests.put(link)
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
        for key in list(self._selector.get_map().values()):
            if key.data is not _LISTENER and key.data is not _WAKE:
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    # ------------------------------------------------------------------ the workers

    def _serve_requests(self) -> None:
        while (link := self._requests.get()) is not None:
            keep = self._serve_burst(link)
            if self._closed:
                link.sock.close()
                continue
            self._served.put((link, keep))
            self._wake()

    def _serve_burst(self, link: _Link) -> bool:
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

    def _serve(self, link: _Link) -> bool:
        """Serve one request of a proven peer; whether its connection stays open for the next."""
        try:
            link.sock.settimeout(self._client_timeout)
            kind, header = link.receive_json(b"G", b"P", b"J", b"R")
            if kind == b"G":
                self._send_file(link, str(header.get("sha256")))
            elif kind == b"J":
                link.send_json(b"K", {"stop": self._check(header)})
            elif kind == b"R":
                self._receive_result(link, header)
            else:
                self._receive_file(link, header)
            link.sock.setblocking(False)
        except Exception:  # a broken or hostile peer costs only its own connection, whatever it sent
            return False
        return True

    def _check(self, header: dict[str, Any]) -> str | None:
        """A running job's usage, for the master's periodic policy; only for a job in flight, numbers only."""
        token, usage = str(header.get("job")), header.get("usage")
        with self._lock:
            known = token in self._destinations
        if not known or not isinstance(usage, dict) or self.checks is None:
            return None
        numbers = {str(k): float(v) for k, v in usage.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.checks(token, numbers)

    def _send_file(self, link: _Link, digest: str) -> None:
        with self._lock:
            entry = self._published.get(digest)
        if entry is None:
            link.send_json(b"X", {"error": f"no published file has hash {digest[:16]}"})
            return
        path, size = entry
        try:
            source: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed below, after the header is sent)
        except OSError as exc:
            link.send_json(b"X", {"error": f"{path}: {exc.strerror}"})
            return
        with source:
            link.send_json(b"S", {"size": size})
            sent = _send_raw(link.sock, source, size)
            if sent != size:  # changed since it was offered: the slave must not wait for bytes that never come
                raise FileServiceError(f"{path}: {sent} bytes, not {size}")
            # Counted before the end marker: once the slave has the whole file (and may answer its task), the
            # counters say so — a reader right after that answer must not see the fetch missing.
            with self._lock:
                self.counters.fetches[digest] += 1
                self.counters.bytes_sent += sent
            link.send(b"E")

    def _receive_file(self, link: _Link, header: dict[str, Any]) -> None:
        ending: dict[str, Any] = {}
        try:
            dest, name, size = self._destination(header)
            path = place_output(dest, name, _checked(_upload_chunks(link, size, ending), ending))
            if header.get("executable"):
                path.chmod(0o755)
        except (OutputRefused, FileServiceError, OSError) as exc:
            self._refuse(link, ending, exc)
            return
        with self._lock:
            self.counters.uploads += 1
            self.counters.bytes_received += size
        link.send_json(b"K", {})

    def _receive_result(self, link: _Link, header: dict[str, Any]) -> None:
        """A task's result too large for a frame: written under its hash once the hash matched, then answered."""
        ending: dict[str, Any] = {}
        size = header.get("size")
        try:
            if self.results is None or not isinstance(size, int) or not 0 <= size <= MAX_RESULT_BYTES:
                raise OutputRefused(f"no result of {str(size)[:20]} bytes is taken here")
            temporary = _write_checked(self.results, _upload_chunks(link, size, ending), ending)
        except (OutputRefused, FileServiceError, OSError) as exc:
            self._refuse(link, ending, exc)
            return
        digest = str(ending["sha256"])  # _write_checked matched it to the content
        with self._lock:  # the rename and the count together: take_result() never removes a file just renamed
            os.replace(temporary, self.results / digest)
            self._stored[digest] += 1
            self.counters.results_stored += 1
            self.counters.result_bytes += size
            self.counters.bytes_received += size
        link.send_json(b"K", {})

    def _refuse(self, link: _Link, ending: dict[str, Any], exc: Exception) -> None:
        """An upload not taken: counted, the rest of it read (the conversation stays in step), the reason sent."""
        with self._lock:
            self.counters.refused += 1
        if not ending:
            _drain(link)
        link.send_json(b"X", {"error": str(exc)})

    def _destination(self, header: dict[str, Any]) -> tuple[Destination, str, int]:
        """Where an upload may land, checked against what the job may produce and its budget; refuse the rest."""
        token, name, size = header.get("job"), header.get("name"), header.get("size")
        with self._lock:
            dest = self._destinations.get(str(token))
            run_files = self._run_files
        if dest is None:
            raise OutputRefused(f"job {str(token)[:40]!r} is not expecting outputs")
        if not isinstance(name, str) or not isinstance(size, int) or size < 0:
            raise OutputRefused("malformed upload header")
        streams = dict(dest.streams)
        if name not in streams:
            check_output_allowed(dest, name)
        with self._lock:
            if not self._charge(str(token), size, dest):
                raise OutputRefused(f"job {token} sent more than {dest.max_bytes} bytes or {dest.max_files} files")
        if name in streams:  # stdout, stderr (checked before any job), a remap: its folder made as Condor makes it
            folder, name = os.path.split(streams[name])
            os.makedirs(folder, exist_ok=True)
            dest = attrs.evolve(dest, initialdir=folder)
        return attrs.evolve(dest, protected=dest.protected | run_files), name, size

    def _charge(self, token: str, size: int, dest: Destination) -> bool:
        """Count one more output of ``size`` bytes against job ``token``'s budget, if it fits (lock held)."""
        files, total = self._budget.get(token, (0, 0))
        if files + 1 > dest.max_files or total + size > dest.max_bytes:
            return False
        self._budget[token] = (files + 1, total + size)
        return True


#: The selector's marks for the listening socket and the workers' wake-up socket.
_LISTENER = object()
_WAKE = object()
#: accept() errors that mean "out of descriptors or memory", not "this one caller went away".
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _send_raw(sock: socket.socket, source: BinaryIO, size: int) -> int:
    """Send ``size`` bytes of ``source`` unframed; how many went. On plain TCP ``sendfile`` (the kernel copies
    from the page cache to the socket); under TLS, whose records need the bytes in this process, large reads."""
    if not isinstance(sock, ssl.SSLSocket):
        return sock.sendfile(source, 0, size)
    sent = 0
    while sent < size and (chunk := source.read(min(RAW_CHUNK, size - sent))):
        sock.sendall(chunk)
        sent += len(chunk)
    return sent


def _upload_chunks(link: _Link, size: int, ending: dict[str, Any]) -> Iterator[bytes]:
    """An upload's data frames, up to its end frame (whose header lands in ``ending``)."""
    received = 0
    while True:
        kind, payload = link.receive()
        if kind == b"E":
            ending.update(_header(payload) if payload else {"end": True})
            return
        if kind != b"D":
            raise ProtocolError(f"unexpected frame {kind!r} in an upload")
        received += len(payload)
        if received > size:
            raise OutputRefused("an output is longer than announced")
        yield payload


def _checked(chunks: Iterator[bytes], ending: dict[str, Any]) -> Iterator[bytes]:
    """The upload's chunks; after the last, the hash the slave announced must match what arrived."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
    if ending.get("sha256") != digest.hexdigest():
        raise FileServiceError("an output's content does not match its hash")


def _write_checked(folder: Path, chunks: Iterator[bytes], ending: dict[str, Any]) -> str:
    """Write an upload into ``folder`` under a temporary name; that name, once its content matched the hash
    the peer announced (in ``ending``)."""
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=UPLOAD_PREFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in _checked(chunks, ending):
                out.write(chunk)
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def _drain(link: _Link) -> None:
    """Read the rest of a refused upload, so the conversation stays in step."""
    while True:
        kind, _ = link.receive()
        if kind == b"E":
            return


# ---------------------------------------------------------------------- the client (on a slave)


class FileClient:
    """A slave's connection to the file service (opened on first use, kept for the slave's life).

    ``tls_fingerprint`` (the one the slave pinned for its master) makes it speak TLS and accept only
    that certificate, as the slave does with the master itself.
    """

    def __init__(self, host: str, port: int, secret: bytes, member_id: str, tls_fingerprint: str | None = None) -> None:
        self.address = (host, port)
        self._secret = secret
        self._member_id = member_id
        self._fingerprint = tls_fingerprint
        self._link: _Link | None = None

    def _connected(self) -> _Link:
        if self._link is None:
            try:
                sock = socket.create_connection(self.address, timeout=IO_TIMEOUT)
            except OSError as exc:
                raise FileServiceError(f"cannot reach the file service at {self.address}: {exc}") from None
            _no_delay(sock)
            try:
                if self._fingerprint is not None:
                    sock = self._start_tls(sock)
                self._link = _client_handshake(sock, self._secret, self._member_id)
            except (ProtocolError, OSError) as exc:
                sock.close()
                raise FileServiceError(f"file service handshake failed: {exc}") from None
        return self._link

    def _start_tls(self, sock: socket.socket) -> ssl.SSLSocket:
        assert self._fingerprint is not None
        tls = protocol.tls_client_context().wrap_socket(sock)
        if not protocol.certificate_matches(tls, self._fingerprint):
            tls.close()
            raise ProtocolError("the file service presented a TLS certificate with the wrong fingerprint")
        return tls

    def close(self) -> None:
        if self._link is not None:
            self._link.sock.close()
            self._link = None

    def fetch(self, digest: str, target: Path) -> int:
        """Write the file with hash ``digest`` to ``target`` (a temporary name, renamed once verified)."""
        try:
            return self._fetch(digest, target)
        except (ProtocolError, OSError) as exc:
            self.close()
            raise FileServiceError(f"fetching {digest[:16]}: {exc}") from None

    def _fetch(self, digest: str, target: Path) -> int:
        link = self._connected()
        link.send_json(b"G", {"sha256": digest})
        kind, header = link.receive_json(b"S", b"X")
        if kind == b"X":
            raise FileServiceError(str(header.get("error")))
        size = header.get("size")
        if not isinstance(size, int) or size < 0:
            raise ProtocolError("malformed fetch header")
        check = hashlib.sha256()
        with safe_files.replacing(target, mode=None, prefix=UPLOAD_PREFIX) as out:
            for piece in link.receive_raw(size):
                check.update(piece)
                out.write(piece)
            link.receive_json(b"E")
            if check.hexdigest() != digest:
                raise FileServiceError(f"{digest[:16]}: the content received does not match its hash")
        return size

    def check(self, token: str, usage: dict[str, float]) -> str | None:
        """Report a running job's usage; the master's answer: ``"hold"``/``"remove"`` to stop it, else None.

        A master that cannot be reached stops nothing: the job goes on, as a job goes on when its shadow is away.
        """
        try:
            link = self._connected()
            link.send_json(b"J", {"job": token, "usage": usage})
            _, answer = link.receive_json(b"K")
        except (FileServiceError, ProtocolError, OSError):
            self.close()
            return None
        stop = answer.get("stop")
        return stop if stop in ("hold", "remove") else None

    def upload(self, token: str, name: str, path: Path) -> None:
        """Send the file ``path`` as job ``token``'s output ``name``; raise if the master refuses it."""
        try:
            self._upload(token, name, path)
        except (ProtocolError, OSError) as exc:
            self.close()
            raise FileServiceError(f"sending {name}: {exc}") from None

    def upload_all(self, token: str, outputs: list[tuple[str, Path]]) -> list[str | None]:
        """Send job ``token``'s outputs one after the other, then read the master's answers (in order, as it
        handles them): one round trip for all, not one each. An error (a line) or None per output."""
        try:
            link = self._connected()
            sent: list[str | None] = []  # None: sent; else why it could not be
            for name, path in outputs:
                try:
                    source = open(path, "rb")  # noqa: SIM115 (closed once sent)
                except OSError as exc:
                    sent.append(f"{name}: cannot be read on the slave: {exc.strerror}")
                    continue
                with source:
                    self._send_upload(link, token, name, source)
                sent.append(None)
            errors: list[str | None] = []
            for (name, _), unread in zip(outputs, sent, strict=True):
                if unread is not None:
                    errors.append(unread)
                    continue
                kind, answer = link.receive_json(b"K", b"X")
                errors.append(None if kind == b"K" else f"{name}: {answer.get('error')}")
            return errors
        except (ProtocolError, OSError) as exc:
            self.close()
            return [f"{name}: sending: {exc}" for name, _ in outputs]

    def store(self, source: IO[bytes], size: int) -> str:
        """Send ``source``'s ``size`` bytes (a task's result too large for a frame, a file it returned); their
        SHA-256, under which the master keeps them once it checked them."""
        try:
            link = self._connected()
            link.send_json(b"R", {"size": size})
            digest = hashlib.sha256()
            for chunk in iter(lambda: source.read(CHUNK), b""):
                digest.update(chunk)
                link.send(b"D", chunk)
            link.send_json(b"E", {"sha256": digest.hexdigest()})
            kind, answer = link.receive_json(b"K", b"X")
        except (ProtocolError, OSError) as exc:
            self.close()
            raise FileServiceError(f"storing a result: {exc}") from None
        if kind == b"X":
            raise FileServiceError(str(answer.get("error")))
        return digest.hexdigest()

    def _upload(self, token: str, name: str, path: Path) -> None:
        link = self._connected()
        with open(path, "rb") as source:
            self._send_upload(link, token, name, source)
        kind, answer = link.receive_json(b"K", b"X")
        if kind == b"X":
            raise FileServiceError(str(answer.get("error")))

    @staticmethod
    def _send_upload(link: _Link, token: str, name: str, source: BinaryIO) -> None:
        """One output's frames: its header, its chunks, its end with the hash of what was sent."""
        info = os.fstat(source.fileno())
        executable = bool(info.st_mode & stat.S_IXUSR)
        link.send_json(b"P", {"job": token, "name": name, "size": info.st_size, "executable": executable})
        digest = hashlib.sha256()
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
            link.send(b"D", chunk)
        link.send_json(b"E", {"sha256": digest.hexdigest()})

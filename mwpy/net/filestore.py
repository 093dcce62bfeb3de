"""A content-addressed file service beside the master: slaves fetch inputs by hash and send outputs back.

Why a second connection rather than files inside task messages: a task frame
is held whole in memory on both sides, and a file shared by many jobs would
cross the wire once per job. Here an input is named by its SHA-256; a slave
fetches it once, keeps it in its :class:`InputCache` for the life of the slave
and checks the hash of every byte it received. Files travel in chunks of
:data:`CHUNK` bytes: neither side ever holds a whole file.

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
    S {"size"}, D chunk..., E        ─►     (or X {"error"})
                                     ◄─     P {"job","name","size","executable"}, D chunk..., E {"sha256"}
    K {}                             ─►     (or X {"error"})             upload
                                     ◄─     J {"job","usage"}            a running job's usage (mwpy jobs)
    K {"stop": null|"hold"|"remove"} ─►

Outputs are the part a hostile slave could abuse, so the server decides where
they land (:func:`place_output`): only below the job's ``initialdir``, never
through a symbolic link, never over one of the job's own inputs, written to a
temporary name and renamed into place once the hash matches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from mwpy import safe_files
from mwpy.errors import MwpyError, ProtocolError
from mwpy.net.ports import PortRange, listen
from mwpy.wire import protocol

#: Bytes per data frame.
CHUNK = 1 << 20
#: The largest frame either side accepts once authenticated (a chunk, its kind byte, its tag).
MAX_FRAME = CHUNK + 64
#: Seconds a peer may stay silent in the middle of a conversation.
IO_TIMEOUT = 120.0
#: How many (path, inode, size, mtime) -> hash entries the master remembers, so shared inputs are hashed once.
HASH_MEMORY = 1024
#: Prefix of the temporary names outputs are written under before the rename.
UPLOAD_PREFIX = ".mwpy-upload-"
#: Default caps on what one job may send back (``mwpy jobs --max-output-bytes/--max-output-files``).
MAX_OUTPUT_BYTES = 16 << 30
MAX_OUTPUT_FILES = 10_000


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
    """One authenticated connection: framed, every frame sealed and checked with :mod:`mwpy.wire.protocol`'s MACs."""

    def __init__(self, sock: socket.socket, channel: protocol.Channel) -> None:
        self.sock = sock
        self._channel = channel

    def send(self, kind: bytes, payload: bytes | memoryview = b"") -> None:
        self.sock.sendall(self._channel.seal_body(kind + bytes(payload)))

    def send_json(self, kind: bytes, value: dict[str, Any]) -> None:
        self.send(kind, json.dumps(value).encode())

    def receive(self) -> tuple[bytes, bytes]:
        data = self._channel.verify_body(_read_frame(self.sock, MAX_FRAME))
        return data[:1], data[1:]

    def receive_json(self, *kinds: bytes) -> tuple[bytes, dict[str, Any]]:
        kind, payload = self.receive()
        if kind not in kinds:
            raise ProtocolError(f"unexpected frame {kind!r}")
        try:
            value = json.loads(payload) if payload else {}
        except ValueError:
            raise ProtocolError("undecodable header") from None
        if not isinstance(value, dict):
            raise ProtocolError("undecodable header")
        return kind, value


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


def _server_handshake(sock: socket.socket, secret: bytes, member_id: str) -> _Link:
    master_nonce = protocol.new_nonce()
    sock.sendall(protocol.challenge(master_nonce))
    response = _read_frame(sock, protocol.MAX_HANDSHAKE_FRAME)
    if len(response) != protocol.RESPONSE_SIZE:
        raise ProtocolError("bad handshake")
    slave_nonce, proof = response[: protocol.NONCE_SIZE], response[protocol.NONCE_SIZE :]
    if not protocol.proofs_match(protocol.slave_proof(secret, master_nonce, slave_nonce), proof):
        raise ProtocolError("the peer does not know the computation's secret")
    sock.sendall(protocol.frame(protocol.master_proof(secret, master_nonce, slave_nonce)))
    link = _Link(sock, protocol.derive_channel(secret, master_nonce, slave_nonce, is_master=True))
    _, hello = link.receive_json(b"H")
    if hello.get("member_id") != member_id:
        raise ProtocolError(f"member id {hello.get('member_id')!r} is not this computation's")
    return link


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

    ``streams`` maps the upload names of the job's stdout and stderr to the
    paths the submit file gave them (the master's choice, not the slave's).
    """

    initialdir: str
    protected: frozenset[str]
    streams: tuple[tuple[str, str], ...] = ()
    max_bytes: int = MAX_OUTPUT_BYTES
    max_files: int = MAX_OUTPUT_FILES


class OutputRefused(MwpyError):
    """A slave asked to write an output where it may not (outside initialdir, over an input, ...)."""


def check_output_name(name: str) -> list[str]:
    """The components of a relative output name; refuse absolute paths, ``..``, ``.``, empty parts, NUL."""
    if not name or name.startswith("/") or "\x00" in name or "\\" in name:
        raise OutputRefused(f"output name {name!r} is not a relative path")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OutputRefused(f"output name {name!r} may not contain '..', '.' or empty parts")
    if any(part.startswith(UPLOAD_PREFIX) for part in parts):
        raise OutputRefused(f"output name {name!r} uses mwpy's temporary prefix")
    return parts


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
            raise OutputRefused(f"output {name!r} would overwrite one of the job's input files")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode):
                raise OutputRefused(f"output {name!r} is a folder on the submit side")
        digest = hashlib.sha256()
        with safe_files.replacing(parts[-1], mode=None, dir_fd=parent, prefix=UPLOAD_PREFIX) as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise FileServiceError(f"output {name!r}: content does not match its hash")
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "fetches": dict(self.fetches),
            "bytes_sent": self.bytes_sent,
            "uploads": self.uploads,
            "bytes_received": self.bytes_received,
            "refused": self.refused,
        }


class FileServer:
    """The master's side: serves published files by hash, receives outputs for jobs in flight."""

    def __init__(
        self,
        secret: bytes,
        member_id: str,
        host: str = "127.0.0.1",
        bind: str | None = None,
        ports: PortRange | None = None,
    ) -> None:
        """Listen on ``bind`` (default: ``host``; "" for every interface), in ``ports`` if given; slaves are told
        ``host``."""
        self._secret = secret
        self._member_id = member_id
        self._listener = listen(host if bind is None else bind, ports, "the file service")
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
        self.counters = Counters()
        #: Asked with a running job's token and usage (numbers): "hold"/"remove" stops the job (mwpy jobs' policy).
        self.checks: Callable[[str, dict[str, float]], str | None] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="mwpy-filestore", daemon=True)
        self._thread.start()

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

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="mwpy-filestore-peer", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(IO_TIMEOUT)
            _no_delay(sock)
            try:
                link = _server_handshake(sock, self._secret, self._member_id)
                while True:
                    kind, header = link.receive_json(b"G", b"P", b"J")
                    if kind == b"G":
                        self._send_file(link, str(header.get("sha256")))
                    elif kind == b"J":
                        link.send_json(b"K", {"stop": self._check(header)})
                    else:
                        self._receive_file(link, header)
            except (MwpyError, OSError, ValueError, TypeError):
                return  # a broken or hostile peer costs only its own connection

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
            sent = 0
            for chunk in iter(lambda: source.read(CHUNK), b""):
                link.send(b"D", chunk)
                sent += len(chunk)
            link.send(b"E")
        with self._lock:
            self.counters.fetches[digest] += 1
            self.counters.bytes_sent += sent

    def _receive_file(self, link: _Link, header: dict[str, Any]) -> None:
        ending: dict[str, Any] = {}
        try:
            dest, name, size = self._destination(header)
            path = place_output(dest, name, _checked(_upload_chunks(link, size, ending), ending))
            if header.get("executable"):
                path.chmod(0o755)
        except (OutputRefused, FileServiceError, OSError) as exc:
            with self._lock:
                self.counters.refused += 1
            if not ending:
                _drain(link)
            link.send_json(b"X", {"error": str(exc)})
            return
        with self._lock:
            self.counters.uploads += 1
            self.counters.bytes_received += size
        link.send_json(b"K", {})

    def _destination(self, header: dict[str, Any]) -> tuple[Destination, str, int]:
        """Where an upload may land, checked against the job's budget; refuse what is not allowed."""
        token, name, size = header.get("job"), header.get("name"), header.get("size")
        with self._lock:
            dest = self._destinations.get(str(token))
            if dest is None:
                raise OutputRefused(f"job {token!r} is not expecting outputs")
            if not isinstance(name, str) or not isinstance(size, int) or size < 0:
                raise OutputRefused("malformed upload header")
            if not self._charge(str(token), size, dest):
                raise OutputRefused(f"job {token} sent more than {dest.max_bytes} bytes or {dest.max_files} files")
        streams = dict(dest.streams)
        if name in streams:
            folder, name = os.path.split(streams[name])
            dest = attrs.evolve(dest, initialdir=folder)
        return dest, name, size

    def _charge(self, token: str, size: int, dest: Destination) -> bool:
        """Count one more output of ``size`` bytes against job ``token``'s budget, if it fits (lock held)."""
        files, total = self._budget.get(token, (0, 0))
        if files + 1 > dest.max_files or total + size > dest.max_bytes:
            return False
        self._budget[token] = (files + 1, total + size)
        return True


def _upload_chunks(link: _Link, size: int, ending: dict[str, Any]) -> Iterator[bytes]:
    """An upload's data frames, up to its end frame (whose header lands in ``ending``)."""
    received = 0
    while True:
        kind, payload = link.receive()
        if kind == b"E":
            ending.update(json.loads(payload) if payload else {"end": True})
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


def _drain(link: _Link) -> None:
    """Read the rest of a refused upload, so the conversation stays in step."""
    while True:
        kind, _ = link.receive()
        if kind == b"E":
            return


# ---------------------------------------------------------------------- the client (on a slave)


class FileClient:
    """A slave's connection to the file service (opened on first use, kept for the slave's life)."""

    def __init__(self, host: str, port: int, secret: bytes, member_id: str) -> None:
        self.address = (host, port)
        self._secret = secret
        self._member_id = member_id
        self._link: _Link | None = None

    def _connected(self) -> _Link:
        if self._link is None:
            try:
                sock = socket.create_connection(self.address, timeout=IO_TIMEOUT)
            except OSError as exc:
                raise FileServiceError(f"cannot reach the file service at {self.address}: {exc}") from None
            _no_delay(sock)
            try:
                self._link = _client_handshake(sock, self._secret, self._member_id)
            except (ProtocolError, OSError) as exc:
                sock.close()
                raise FileServiceError(f"file service handshake failed: {exc}") from None
        return self._link

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
        check = hashlib.sha256()
        received = 0
        with safe_files.replacing(target, mode=None, prefix=UPLOAD_PREFIX) as out:
            while True:
                kind, payload = link.receive()
                if kind == b"E":
                    break
                if kind != b"D":
                    raise ProtocolError(f"unexpected frame {kind!r}")
                check.update(payload)
                out.write(payload)
                received += len(payload)
            if check.hexdigest() != digest:
                raise FileServiceError(f"{digest[:16]}: the content received does not match its hash")
        return received

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


class InputCache:
    """A slave's inputs by hash, each fetched once and kept until the slave ends.

    Condor delivers an input with its permission bits (an executable script
    stays executable, a ``0640`` file stays ``0640``); jobs get hard links to
    the cached file, so each ``(hash, mode)`` has its own cached copy (made
    from one already here, not fetched again). A job that writes to its input
    or changes its mode changes the cached file: the next job that needs it
    sees the size, time or mode differ and gets a clean copy.
    """

    def __init__(self, folder: Path, client: FileClient) -> None:
        self.folder = folder
        self.client = client
        folder.mkdir(parents=True, exist_ok=True)
        self._known: dict[Path, tuple[int, int, int]] = {}  # cached file -> (size, mtime, mode) as cached
        self._copies: dict[str, list[Path]] = {}  # hash -> its cached files (one per mode)
        self.fetched_bytes = 0  # what crossed the wire into this cache

    def get(self, digest: str, mode: int = 0o444) -> Path:
        """The cached file with hash ``digest`` and permission bits ``mode`` (fetched if no intact copy is here)."""
        path = self.folder / f"{digest}.{mode & 0o7777:o}"
        if self._intact(path):
            return path
        with contextlib.suppress(OSError):
            path.unlink()  # a job wrote to its copy: make a clean one
        other = next((copy for copy in self._copies.get(digest, ()) if copy != path and self._intact(copy)), None)
        if other is None:
            self.fetched_bytes += self.client.fetch(digest, path)
        else:
            with safe_files.replacing(path, mode=None, prefix=UPLOAD_PREFIX) as out, other.open("rb") as source:
                shutil.copyfileobj(source, out)
        path.chmod(mode & 0o7777)
        info = path.stat()
        self._known[path] = (info.st_size, info.st_mtime_ns, info.st_mode)
        if path not in self._copies.setdefault(digest, []):
            self._copies[digest].append(path)
        return path

    def _intact(self, path: Path) -> bool:
        known = self._known.get(path)
        if known is None:
            return False
        try:
            info = path.stat()
        except OSError:
            return False
        return (info.st_size, info.st_mtime_ns, info.st_mode) == known

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

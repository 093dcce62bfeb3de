"""A client of the file service: fetch by hash into a file, send outputs, results and usage reports.

A slave keeps one per service it talks to (its master's; another slave's);
the grammar it speaks is :mod:`mwpy.data.grammar`'s, the handshake
:mod:`mwpy.data.link`'s. Uploads travel in frames of
:data:`~mwpy.data.grammar.CHUNK` bytes; a fetched file's content arrives
unframed and is hashed as it lands in the file, one pass, so a local
transfer runs near memory speed. Neither side ever holds a whole file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, Final

from mwpy import safe_files
from mwpy.data.grammar import ANSWERS, CHUNK, DATA, END, FETCH, OUTPUT, REFUSED, RESULT, TAKEN, USAGE
from mwpy.data.landing import UPLOAD_PREFIX
from mwpy.data.link import Link, client_handshake, no_delay
from mwpy.data.service import FileServiceError
from mwpy.errors import ProtocolError
from mwpy.net import ports
from mwpy.wire import protocol

if TYPE_CHECKING:  # loaded with TLS's first use (mwpy/wire/protocol.py)
    import ssl

#: What writing a fetched file may fail with on this side: not the service's trouble (raised as OSError).
_LOCAL_ERRORS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})
#: Seconds a client waits for the file service to answer.
IO_TIMEOUT: Final = 120.0


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
        self._link: Link | None = None

    def _connected(self) -> Link:
        if self._link is None:
            try:
                sock = ports.connect(*self.address, IO_TIMEOUT)
            except OSError as exc:
                raise FileServiceError(f"cannot reach the file service at {self.address}: {exc}") from None
            no_delay(sock)
            try:
                if self._fingerprint is not None:
                    sock = self._start_tls(sock)
                self._link = client_handshake(sock, self._secret, self._member_id)
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
            if isinstance(exc, OSError) and exc.errno in _LOCAL_ERRORS:  # this side's disk, not the service
                raise OSError(exc.errno, f"fetching {digest[:16]}: {exc.strerror}") from None
            raise FileServiceError(f"fetching {digest[:16]}: {exc}") from None

    def _fetch(self, digest: str, target: Path) -> int:
        link = self._connected()
        link.send_json(FETCH, {"sha256": digest})
        kind, header = link.receive_json(*ANSWERS[FETCH])
        if kind == REFUSED:
            raise FileServiceError(str(header.get("error")))
        size = header.get("size")
        if not isinstance(size, int) or size < 0:
            raise ProtocolError("malformed fetch header")
        check = hashlib.sha256()
        with safe_files.replacing(target, mode=None, prefix=UPLOAD_PREFIX) as out:
            for piece in link.receive_raw(size):
                check.update(piece)
                out.write(piece)
            link.receive_json(END)
            if check.hexdigest() != digest:
                raise FileServiceError(f"{digest[:16]}: the content received does not match its hash")
        return size

    def check(self, token: str, usage: dict[str, float]) -> str | None:
        """Report a running job's usage; the master's answer: ``"hold"``/``"remove"`` to stop it, else None.

        A master that cannot be reached stops nothing: the job goes on, as a job goes on when its shadow is away.
        """
        try:
            link = self._connected()
            link.send_json(USAGE, {"job": token, "usage": usage})
            _, answer = link.receive_json(*ANSWERS[USAGE])
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
                kind, answer = link.receive_json(*ANSWERS[OUTPUT])
                errors.append(None if kind == TAKEN else f"{name}: {answer.get('error')}")
            return errors
        except (ProtocolError, OSError) as exc:
            self.close()
            return [f"{name}: sending: {exc}" for name, _ in outputs]

    def store(self, source: IO[bytes], size: int) -> str:
        """Send ``source``'s ``size`` bytes (a task's result too large for a frame, a file it returned); their
        SHA-256, under which the master keeps them once it checked them."""
        try:
            link = self._connected()
            link.send_json(RESULT, {"size": size})
            digest = hashlib.sha256()
            for chunk in iter(lambda: source.read(CHUNK), b""):
                digest.update(chunk)
                link.send(DATA, chunk)
            link.send_json(END, {"sha256": digest.hexdigest()})
            kind, answer = link.receive_json(TAKEN, REFUSED)
        except (ProtocolError, OSError) as exc:
            self.close()
            raise FileServiceError(f"storing a result: {exc}") from None
        if kind == REFUSED:
            raise FileServiceError(str(answer.get("error")))
        return digest.hexdigest()

    def _upload(self, token: str, name: str, path: Path) -> None:
        link = self._connected()
        with open(path, "rb") as source:
            self._send_upload(link, token, name, source)
        kind, answer = link.receive_json(TAKEN, REFUSED)
        if kind == REFUSED:
            raise FileServiceError(str(answer.get("error")))

    @staticmethod
    def _send_upload(link: Link, token: str, name: str, source: BinaryIO) -> None:
        """One output's frames: its header, its chunks, its end with the hash of what was sent."""
        info = os.fstat(source.fileno())
        executable = bool(info.st_mode & stat.S_IXUSR)
        link.send_json(OUTPUT, {"job": token, "name": name, "size": info.st_size, "executable": executable})
        digest = hashlib.sha256()
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
            link.send(DATA, chunk)
        link.send_json(END, {"sha256": digest.hexdigest()})

"""The file service's authenticated link: the handshake on both sides and sealed frames after it.

Authentication reuses :mod:`mwpy.wire.protocol` unchanged: the same challenge,
proofs (HMAC-SHA256 over both nonces under the computation's secret) and
per-frame MACs under keys derived from that handshake; the first sealed frame
names the member id, which must be the computation's. Whoever holds the
secret may serve (a master, or a slave serving what it holds to another
slave) and whoever holds it may fetch: the roles are the server's and the
client's, not the master's and the slave's::

    server                                  client
    challenge(nonce_s)               ─►
                                     ◄─     nonce_c + client_proof
    server_proof                     ─►
                                     ◄─     H {"member_id"}

A fetched file's content travels unframed after its sealed size
(``sendfile`` on plain TCP): the client asked for it by hash on this
authenticated channel and uses none of it before the whole matches that
hash; the end frame after it is sealed as every frame is.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from typing import Any, BinaryIO, Final

from mwpy.data import grammar
from mwpy.data.grammar import MAX_FRAME, MAX_HELLO_FRAME, Conversation, header
from mwpy.errors import ProtocolError
from mwpy.wire import protocol

#: Bytes per read (and per send under TLS) of a fetched file's unframed content.
RAW_CHUNK: Final = 4 << 20


class Link:
    """One authenticated connection: framed, every frame sealed and checked with :mod:`mwpy.wire.protocol`'s MACs.

    ``buffered`` holds bytes already read past the handshake (a request the
    client sent right behind its hello); reads take them first.
    """

    def __init__(self, sock: socket.socket, channel: protocol.Channel, buffered: bytes = b"") -> None:
        self.sock = sock
        self._channel = channel
        #: Where the peer's requests are (the server's side; :mod:`mwpy.data.grammar`).
        self.conversation = Conversation()
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
        return kind, header(payload)

    def has_buffered(self) -> bool:
        """Whether a request may already be here without the socket showing it (read ahead, or held by TLS)."""
        return bool(self._buffered) or (isinstance(self.sock, protocol.TLS_SOCKETS) and self.sock.pending() > 0)

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
            got = self.sock.recv(min(size - len(data), grammar.CHUNK))
            if not got:
                raise ProtocolError("connection closed")
            data += got
        return bytes(data)


def no_delay(sock: socket.socket) -> None:
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


class Proving:
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
        self._tls = isinstance(sock, protocol.TLS_SOCKETS)  # still to finish
        self._nonce = protocol.new_nonce()
        self._out = bytearray()
        self._in = bytearray()
        self._channel: protocol.Channel | None = None
        self._challenged = False
        self.wants_write = False

    def step(self) -> Link | None:
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
        assert isinstance(sock, protocol.TLS_SOCKETS)
        import ssl  # noqa: PLC0415 (loaded with TLS: mwpy/wire/protocol.py)

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
            except protocol.WOULD_BLOCK:
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

    def _advance(self) -> Link | None:
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
        if data[:1] != grammar.HELLO:
            raise ProtocolError(f"unexpected frame {data[:1]!r}")
        member_id = header(data[1:]).get("member_id")
        if member_id != self._member_id:
            raise ProtocolError(f"member id {member_id!r} is not this computation's")
        if self._out:  # the peer sends its hello only once it has read our whole proof
            raise ProtocolError("hello before the proof was read")
        return Link(self.sock, self._channel, bytes(self._in))

    def _flush(self) -> None:
        if self._out:
            try:
                sent = self.sock.send(self._out)
            except protocol.WOULD_BLOCK:
                sent = 0
            del self._out[:sent]
        self.wants_write = bool(self._out)


#: The most bytes read while a peer proves itself: its proof's frame and its hello's, both at their limits.
_HANDSHAKE_BYTES = 2 * protocol.HEADER.size + protocol.MAX_HANDSHAKE_FRAME + MAX_HELLO_FRAME


def client_handshake(sock: socket.socket, secret: bytes, member_id: str) -> Link:
    master_nonce = protocol.parse_challenge(_read_frame(sock, protocol.MAX_HANDSHAKE_FRAME))
    slave_nonce = protocol.new_nonce()
    sock.sendall(protocol.frame(slave_nonce + protocol.slave_proof(secret, master_nonce, slave_nonce)))
    proof = _read_frame(sock, protocol.MAX_HANDSHAKE_FRAME)
    if not protocol.proofs_match(protocol.master_proof(secret, master_nonce, slave_nonce), proof):
        raise ProtocolError("the file service failed to prove it is this computation's master")
    link = Link(sock, protocol.derive_channel(secret, master_nonce, slave_nonce, is_master=False))
    link.send_json(grammar.HELLO, {"member_id": member_id})
    return link


def send_raw(sock: socket.socket, source: BinaryIO, size: int) -> int:
    """Send ``size`` bytes of ``source`` unframed; how many went. On plain TCP ``sendfile`` (the kernel copies
    from the page cache to the socket); under TLS, whose records need the bytes in this process, large reads."""
    if not isinstance(sock, protocol.TLS_SOCKETS):
        return sock.sendfile(source, 0, size)
    sent = 0
    while sent < size and (chunk := source.read(min(RAW_CHUNK, size - sent))):
        sock.sendall(chunk)
        sent += len(chunk)
    return sent

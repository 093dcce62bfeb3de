"""The master/slave conversation as sans-IO session objects: bytes in, events out; messages in, bytes out.

:mod:`mwpy.wire.protocol` defines the words (messages, frames, proofs, tags); this
module defines the grammar: which frame is legal in which state, on each side.
A session never touches a socket or a clock, so both sides can be driven in
memory (tests/test_protocol_sessions.py does, through every order, legal or
not) and the master's event loop and the slave's blocking client only move
bytes and schedule work.

Use, on either side::

    session.receive_data(data)            # bytes from the socket
    while (event := session.next_event()) is not None:
        ...                               # a message record, or a handshake event
    sock.send(session.send(msg))          # bytes to write

``next_event`` raises :class:`~mwpy.errors.ProtocolError` (or its subclass
:class:`~mwpy.errors.MembershipError` for a wrong proof or a refusal) for
anything out of order, oversized, unauthenticated or malformed; the caller
drops the connection. Nothing is unpickled before the peer has proved
membership: handshake frames have fixed layouts.

Events are the decoded message records themselves (no wrapper object per
frame on the Tasks/Results path), plus two handshake events:
:class:`HandshakeReply` (send these bytes now) and :class:`Refused` (the master
turned a slave with another member id away). Task and result batches have
direct encoders (:meth:`MasterSession.send_tasks`, :meth:`SlaveSession.send_results`)
that skip building a record.

The legal transitions are data (``MASTER_RECEIVES`` and friends below): a
``(state, message kind) -> next state`` table per side and direction.
"""

from __future__ import annotations

import enum
from typing import TypeVar

import attrs

from mwpy.errors import MembershipError, ProtocolError
from mwpy.wire import protocol
from mwpy.wire.protocol import (
    Cancel,
    Cancelled,
    Channel,
    FrameReader,
    HandBack,
    Handover,
    Heartbeat,
    Hello,
    Message,
    Refuse,
    Results,
    Shutdown,
    Tasks,
    Welcome,
)


class MasterState(enum.Enum):
    """Where a master's connection to one (would-be) slave stands."""

    PROVING = "proving"  # challenge sent, waiting for the slave's proof
    GREETING = "greeting"  # the slave proved membership; waiting for Hello
    GREETED = "greeted"  # Hello received; the master owes Welcome or Refuse
    READY = "ready"  # a slave with an id, taking tasks
    CLOSING = "closing"  # told to shut down; what it still sends is authenticated and dropped
    CLOSED = "closed"  # refused; nothing more may pass


class SlaveState(enum.Enum):
    """Where a slave's connection to its master stands."""

    CONNECTED = "connected"  # waiting for the master's challenge
    PROVING = "proving"  # our proof sent, waiting for the master's
    GREETING = "greeting"  # Hello sent, waiting for Welcome or Refuse
    READY = "ready"  # running tasks
    SHUTDOWN = "shutdown"  # told to stop; only results still to flush may go out
    CLOSED = "closed"  # refused; nothing more may pass


_M = MasterState
_S = SlaveState

#: (state, kind of a message the master receives) -> next state. Anything else is a protocol error.
MASTER_RECEIVES: dict[tuple[MasterState, int], MasterState] = {
    (_M.GREETING, Hello.kind): _M.GREETED,
    (_M.READY, Results.kind): _M.READY,
    (_M.READY, Heartbeat.kind): _M.READY,
    (_M.READY, Cancelled.kind): _M.READY,
    (_M.READY, HandBack.kind): _M.READY,  # the engine drops the connection once the tasks are queued again
    (_M.READY, Handover.kind): _M.READY,  # a slave that outlived its previous master: what it held
    (_M.CLOSING, Results.kind): _M.CLOSING,
    (_M.CLOSING, Heartbeat.kind): _M.CLOSING,
    (_M.CLOSING, Cancelled.kind): _M.CLOSING,
    (_M.CLOSING, HandBack.kind): _M.CLOSING,  # told to leave already: its tasks went elsewhere
    (_M.CLOSING, Handover.kind): _M.CLOSING,  # the computation ended: the results it held are not asked for
}
#: (state, kind of a message the master sends) -> next state.
MASTER_SENDS: dict[tuple[MasterState, int], MasterState] = {
    (_M.GREETED, Welcome.kind): _M.READY,
    (_M.GREETED, Refuse.kind): _M.CLOSED,
    (_M.READY, Tasks.kind): _M.READY,
    (_M.READY, Heartbeat.kind): _M.READY,
    (_M.READY, Cancel.kind): _M.READY,
    (_M.READY, Shutdown.kind): _M.CLOSING,
}
#: (state, kind of a message the slave receives) -> next state.
SLAVE_RECEIVES: dict[tuple[SlaveState, int], SlaveState] = {
    (_S.GREETING, Welcome.kind): _S.READY,
    (_S.GREETING, Refuse.kind): _S.CLOSED,
    (_S.READY, Tasks.kind): _S.READY,
    (_S.READY, Heartbeat.kind): _S.READY,
    (_S.READY, Cancel.kind): _S.READY,
    (_S.READY, Shutdown.kind): _S.SHUTDOWN,
}
#: (state, kind of a message the slave sends) -> next state. Hello goes out as part of the handshake.
SLAVE_SENDS: dict[tuple[SlaveState, int], SlaveState] = {
    (_S.READY, Results.kind): _S.READY,
    (_S.READY, Heartbeat.kind): _S.READY,
    (_S.READY, Cancelled.kind): _S.READY,
    (_S.READY, HandBack.kind): _S.SHUTDOWN,  # the last message: the slave leaves
    (_S.READY, Handover.kind): _S.READY,  # right after Welcome, from a slave that outlived its previous master
    (_S.SHUTDOWN, Results.kind): _S.SHUTDOWN,  # results finished before the Shutdown arrived
    (_S.SHUTDOWN, Heartbeat.kind): _S.SHUTDOWN,  # the heartbeat thread may race the Shutdown
}


_State = TypeVar("_State", MasterState, SlaveState)


def _by_state(table: dict[tuple[_State, int], _State], states: type[_State]) -> dict[_State, dict[int, _State]]:
    """A transition table split per state: the hot path then looks up a message kind (an int) only."""
    split: dict[_State, dict[int, _State]] = {state: {} for state in states}
    for (state, kind), after in table.items():
        split[state][kind] = after
    return split


_MASTER_RECEIVES = _by_state(MASTER_RECEIVES, MasterState)
_SLAVE_RECEIVES = _by_state(SLAVE_RECEIVES, SlaveState)


@attrs.frozen
class HandshakeReply:
    """Send ``data`` now: the next handshake frame. ``proven``: the peer has proved membership."""

    data: bytes
    proven: bool


@attrs.frozen
class Refused:
    """Master side: a proven slave said Hello with another member id; send ``data`` (a Refuse) and hang up."""

    hello: Hello
    reason: str
    data: bytes


Event = Message | HandshakeReply | Refused


class MasterSession:
    """The master's side of one connection.

    ``secret`` and ``member_id`` say who may join; ``max_receive`` is the
    largest frame body accepted after the proof (``--mw-max-read-buffer-size``),
    ``max_send`` the largest the master writes (``--mw-max-write-buffer-size``).
    ``nonce`` is for tests; by default a fresh random one.
    """

    __slots__ = (
        "state", "max_send", "_receives", "_secret", "_member_id", "_nonce", "_reader", "_channel", "_max_receive",
        "receive_data", "inbox",
    )  # fmt: skip

    def __init__(
        self, secret: bytes, member_id: str, *, max_receive: int, max_send: int, nonce: bytes | None = None
    ) -> None:
        self.state = MasterState.PROVING
        self._receives = _MASTER_RECEIVES[self.state]  # kind -> next state, for the current state
        #: The largest frame the slave accepts and the master may write: known once Hello arrived.
        self.max_send = max_send
        self._secret = secret
        self._member_id = member_id
        self._nonce = protocol.new_nonce() if nonce is None else nonce
        self._reader = FrameReader(protocol.MAX_HANDSHAKE_FRAME)
        #: ``receive_data(data)``: bytes read from the slave; frames over the current size limit fail in
        #: :meth:`next_event`. ``inbox``: what was received and not yet taken (empty: no event can be waiting).
        self.receive_data, self.inbox = self._reader.feed, self._reader.buffer
        self._channel: Channel | None = None
        self._max_receive = max_receive

    def challenge(self) -> bytes:
        """The first frame of the connection (send it once the transport, e.g. TLS, is up)."""
        return protocol.challenge(self._nonce)

    def next_event(self) -> Event | None:
        """The next event, or ``None`` until more bytes arrive. Raises ProtocolError on any violation."""
        while (body := self._reader.next()) is not None:
            channel = self._channel
            if channel is None:  # not proven yet: a fixed-layout frame, never unpickled
                return self._check_proof(body)
            if self.state is MasterState.CLOSED:
                raise ProtocolError("the connection is closed")
            msg = channel.open(body)
            after = self._receives.get(msg.kind)
            if after is None:
                if self.state is MasterState.GREETING:
                    raise ProtocolError(f"expected Hello, got {type(msg).__name__}")
                raise ProtocolError(f"unexpected {type(msg).__name__} from a slave ({self.state.value})")
            if type(msg) is Results:  # the hot path: no state change, no further test
                protocol.check_results(msg)
                if after is MasterState.CLOSING:
                    continue  # told to leave: authenticated, checked, dropped
                return msg
            event = self._move(msg, after)
            if event is not None:
                return event
        return None

    def _move(self, msg: Message, after: MasterState) -> Event | None:
        """Apply a message that changes (or may change) the state; ``None`` for one to drop."""
        if after is not self.state:
            self._to(after)
        if isinstance(msg, Cancelled | HandBack):
            protocol.check_task_ids(msg)
        elif isinstance(msg, Heartbeat):
            protocol.check_heartbeat(msg)
        elif isinstance(msg, Handover):
            protocol.check_handover(msg)
        if after is MasterState.CLOSING:
            return None
        if isinstance(msg, Hello):
            return self._greeted(msg)
        return msg

    def _to(self, state: MasterState) -> None:
        self.state = state
        self._receives = _MASTER_RECEIVES[state]

    def _check_proof(self, body: bytes) -> HandshakeReply:
        if len(body) != protocol.RESPONSE_SIZE:
            raise ProtocolError("malformed handshake")
        slave_nonce, proof = body[: protocol.NONCE_SIZE], body[protocol.NONCE_SIZE :]
        expected = protocol.slave_proof(self._secret, self._nonce, slave_nonce)
        if not protocol.proofs_match(expected, proof):
            raise MembershipError("wrong proof of membership (not a slave of this computation)")
        self._channel = protocol.derive_channel(self._secret, self._nonce, slave_nonce, is_master=True)
        self._reader.max_size = self._max_receive
        self._to(MasterState.GREETING)
        return HandshakeReply(protocol.frame(protocol.master_proof(self._secret, self._nonce, slave_nonce)), True)

    def _greeted(self, hello: Hello) -> Hello | Refused:
        protocol.check_hello(hello)
        if hello.member_id != self._member_id:
            reason = f"member id {hello.member_id!r} does not match this master's"
            return Refused(hello, reason, self.send(Refuse(reason)))
        self.max_send = min(self.max_send, hello.max_frame)
        return hello

    def send(self, msg: Message) -> bytes:
        """The frame carrying ``msg``; ProtocolError if the master may not send it now."""
        after = MASTER_SENDS.get((self.state, msg.kind))
        if after is None or self._channel is None:
            raise ProtocolError(f"the master cannot send {type(msg).__name__} while {self.state.value}")
        data = self._channel.seal(msg)
        self._to(after)
        return data

    def send_tasks(
        self,
        items: list[protocol.TaskItem],
        timeouts: dict[int, float] | None = None,
        keys: dict[int, str] | None = None,
        hold: list[int] | None = None,
    ) -> bytes:
        """A Tasks frame, encoded directly: the dispatch hot path (the caller packs items to fit ``max_send``)."""
        channel = self._channel
        if self.state is not MasterState.READY or channel is None:
            raise ProtocolError(f"the master cannot send Tasks while {self.state.value}")
        return channel.seal_body(protocol.tasks_body(items, timeouts, keys, hold))


class SlaveSession:
    """The slave's side of its connection: ``hello`` is what it will say once both sides are proven.

    ``hello.max_frame`` is the largest frame body it accepts after the proof.
    """

    __slots__ = (
        "state", "max_send", "_receives", "_secret", "_hello", "_nonce", "_master_nonce", "_reader", "_channel",
        "receive_data", "inbox",
    )  # fmt: skip

    def __init__(self, secret: bytes, hello: Hello, *, nonce: bytes | None = None) -> None:
        protocol.check_hello(hello)
        self.state = SlaveState.CONNECTED
        self._receives = _SLAVE_RECEIVES[self.state]  # kind -> next state, for the current state
        #: The largest frame the master accepts: known once Welcome arrived.
        self.max_send = 0
        self._secret = secret
        self._hello = hello
        self._nonce = protocol.new_nonce() if nonce is None else nonce
        self._master_nonce = b""
        self._reader = FrameReader(protocol.MAX_HANDSHAKE_FRAME)
        #: ``receive_data(data)``: bytes read from the master. ``inbox``: what was received and not yet taken.
        self.receive_data, self.inbox = self._reader.feed, self._reader.buffer
        self._channel: Channel | None = None

    def next_event(self) -> Event | None:
        """The next event, or ``None`` until more bytes arrive. Raises ProtocolError on any violation.

        A Refuse raises :class:`MembershipError`; a wrong master proof too.
        """
        try:
            body = self._reader.next()
        except ProtocolError as exc:
            if self.state is SlaveState.PROVING:  # e.g. a frame too big to be a proof where the proof belongs
                raise MembershipError(f"the peer failed to prove it is this computation's master ({exc})") from None
            raise
        if body is None:
            return None
        channel = self._channel
        if channel is None:  # not proven yet: fixed-layout frames, never unpickled
            return self._handshake(body)
        if self.state is SlaveState.CLOSED:
            raise ProtocolError("the connection is closed")
        msg = channel.open(body)
        after = self._receives.get(msg.kind)
        if after is None:
            raise ProtocolError(f"unexpected {type(msg).__name__} from the master ({self.state.value})")
        if type(msg) is Tasks:  # the hot path: no state change
            if type(msg.items) is not list or type(msg.timeouts) is not dict or type(msg.keys) is not dict:
                raise ProtocolError("malformed Tasks message")
            return msg
        return self._move(msg, after)

    def _handshake(self, body: bytes) -> HandshakeReply:
        """The master's challenge (answered with our proof), then its own proof."""
        if self.state is SlaveState.CONNECTED:
            self._master_nonce = protocol.parse_challenge(body)
            proof = protocol.slave_proof(self._secret, self._master_nonce, self._nonce)
            self._to(SlaveState.PROVING)
            return HandshakeReply(protocol.frame(self._nonce + proof), False)
        return self._check_proof(body)

    def _move(self, msg: Message, after: SlaveState) -> Message:
        """Apply a message that changes (or may change) the state, after checking its fields."""
        if after is not self.state:
            self._to(after)
        if isinstance(msg, Welcome):
            _check_welcome(msg)
            self.max_send = msg.max_frame
        elif isinstance(msg, Refuse):
            raise MembershipError(f"the master refused this slave: {msg.reason}")
        elif isinstance(msg, Shutdown) and not (isinstance(msg.exit_code, int) and 0 <= msg.exit_code <= 255):
            raise ProtocolError("malformed Shutdown message")
        elif isinstance(msg, Cancel):
            protocol.check_task_ids(msg)
        return msg

    def _to(self, state: SlaveState) -> None:
        self.state = state
        self._receives = _SLAVE_RECEIVES[state]

    def _check_proof(self, body: bytes) -> HandshakeReply:
        expected = protocol.master_proof(self._secret, self._master_nonce, self._nonce)
        if len(body) != protocol.CONFIRM_SIZE or not protocol.proofs_match(expected, body):
            raise MembershipError("the peer failed to prove it is this computation's master")
        self._channel = protocol.derive_channel(self._secret, self._master_nonce, self._nonce, is_master=False)
        self._reader.max_size = self._hello.max_frame
        self._to(SlaveState.GREETING)
        return HandshakeReply(self._channel.seal(self._hello), True)

    def send(self, msg: Message) -> bytes:
        """The frame carrying ``msg``; ProtocolError if the slave may not send it now."""
        after = SLAVE_SENDS.get((self.state, msg.kind))
        if after is None or self._channel is None:
            raise ProtocolError(f"the slave cannot send {type(msg).__name__} while {self.state.value}")
        data = self._channel.seal(msg)
        self._to(after)
        return data

    def send_results(
        self, items: list[protocol.ResultItem], outputs: dict[int, tuple[str, str]] | None = None
    ) -> bytes:
        """A Results frame, encoded directly (the caller packs items to fit ``max_send``)."""
        channel = self._channel
        if (self.state is not SlaveState.READY and self.state is not SlaveState.SHUTDOWN) or channel is None:
            raise ProtocolError(f"the slave cannot send Results while {self.state.value}")
        return channel.seal_body(protocol.results_body(items, outputs))


def _check_welcome(msg: Welcome) -> None:
    if not (
        type(msg.slave_id) is str
        and type(msg.result_group) is int
        and msg.result_group > 0
        and isinstance(msg.heartbeat_interval, int | float)
        and msg.heartbeat_interval > 0
        and type(msg.max_frame) is int
        and msg.max_frame > 0
        and type(msg.store_host) is str
        and type(msg.store_port) is int
    ):
        raise ProtocolError("malformed Welcome message")

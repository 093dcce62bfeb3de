"""The sessions (mwpy.wire.session) refusing what a peer may not say, with the words a user reads (docs/mutation.md).

tests/test_protocol_sessions.py checks that every illegal order raises; these
check the edges of what a master may tell a slave (Welcome's numbers, the
Shutdown status) and the exact messages: a refusal ends up in the audit log
and in a slave's last line, so its text is behaviour too. Everything goes
through the sessions' public calls; the hostile peer is a session that sends
what its table allows but its content does not.
"""

from __future__ import annotations

import pytest

from mwpy.errors import MembershipError, ProtocolError
from mwpy.wire import codec, protocol
from mwpy.wire.protocol import Heartbeat, Hello, Results, Shutdown, Tasks, Welcome
from mwpy.wire.session import Event, HandshakeReply, MasterSession, MasterState, Refused, SlaveSession, SlaveState

SECRET = b"s" * 32
MEMBER = "member-1"
LIMIT = 4096


def events(session: MasterSession | SlaveSession, data: bytes) -> list[Event]:
    session.receive_data(data)
    found: list[Event] = []
    while (event := session.next_event()) is not None:
        found.append(event)
    return found


def through_hello(
    member_id: str = MEMBER, max_frame: int = LIMIT, master_nonce: bytes | None = None, slave_nonce: bytes | None = None
) -> tuple[MasterSession, SlaveSession, Event]:
    """Both sides through the proofs and the slave's Hello; the master's event for it (the Hello, or Refused)."""
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=master_nonce)
    slave = SlaveSession(SECRET, Hello(member_id, "host", 1, "1.0", max_frame), nonce=slave_nonce)
    [reply] = events(slave, master.challenge())
    assert isinstance(reply, HandshakeReply)
    [proof] = events(master, reply.data)
    assert isinstance(proof, HandshakeReply)
    [sealed_hello] = events(slave, proof.data)
    assert isinstance(sealed_hello, HandshakeReply)
    [said] = events(master, sealed_hello.data)
    return master, slave, said


def greeted(
    max_frame: int = LIMIT, master_nonce: bytes | None = None, slave_nonce: bytes | None = None
) -> tuple[MasterSession, SlaveSession]:
    """Both sides through the proofs and the Hello: the master owes the slave its Welcome."""
    master, slave, said = through_hello(MEMBER, max_frame, master_nonce, slave_nonce)
    assert isinstance(said, Hello)
    assert (master.state, slave.state) == (MasterState.GREETED, SlaveState.GREETING)
    return master, slave


def ready() -> tuple[MasterSession, SlaveSession]:
    master, slave = greeted()
    events(slave, master.send(Welcome("slave-1", 2, 0.5, LIMIT)))
    return master, slave


# ---------------------------------------------------------------------- what a Welcome may say


@pytest.mark.parametrize(
    "welcome",
    [
        Welcome("slave-1", 1, 0.5, LIMIT),  # the smallest result group
        Welcome("slave-1", 4, 1, LIMIT),  # a whole number of seconds
        Welcome("slave-1", 4, 1e-3, 1),  # the smallest interval and frame anyone would send, still legal
    ],
)
def test_a_welcome_with_positive_numbers_is_taken(welcome: Welcome) -> None:
    master, slave = greeted()
    assert events(slave, master.send(welcome)) == [welcome]
    assert slave.state is SlaveState.READY
    assert slave.max_send == welcome.max_frame  # the slave's frames now fit the master's limit


@pytest.mark.parametrize(
    "welcome",
    [
        Welcome(1, 4, 0.5, LIMIT),  # type: ignore[arg-type]
        Welcome("slave-1", "4", 0.5, LIMIT),  # type: ignore[arg-type]
        Welcome("slave-1", 0, 0.5, LIMIT),
        Welcome("slave-1", 4, "0.5", LIMIT),  # type: ignore[arg-type]
        Welcome("slave-1", 4, 0.0, LIMIT),
        Welcome("slave-1", 4, -1.0, LIMIT),
        Welcome("slave-1", 4, 0.5, float(LIMIT)),  # type: ignore[arg-type]
        Welcome("slave-1", 4, 0.5, 0),
    ],
    ids=["id", "group type", "group 0", "interval type", "interval 0", "interval < 0", "frame type", "frame 0"],
)
def test_a_welcome_with_a_wrong_field_is_refused(welcome: Welcome) -> None:
    master, slave = greeted()
    with pytest.raises(ProtocolError, match=r"^malformed Welcome message$"):
        events(slave, master.send(welcome))


# ---------------------------------------------------------------------- what a Shutdown may say


@pytest.mark.parametrize("code", [0, 7, 255])
def test_a_shutdown_with_an_exit_status_is_taken(code: int) -> None:
    master, slave = ready()
    assert events(slave, master.send(Shutdown(code))) == [Shutdown(code)]
    assert slave.state is SlaveState.SHUTDOWN


@pytest.mark.parametrize("code", [-1, 256, "7"])
def test_a_shutdown_with_no_exit_status_is_refused(code: object) -> None:
    master, slave = ready()
    with pytest.raises(ProtocolError, match=r"^malformed Shutdown message$"):
        events(slave, master.send(Shutdown(code)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- sends out of turn, in the user's words


def test_the_master_says_what_it_may_not_send_and_when() -> None:
    master, _ = greeted()
    with pytest.raises(ProtocolError, match=r"^the master cannot send Tasks while greeted$"):
        master.send_tasks([(1, "f", b"")])
    with pytest.raises(ProtocolError, match=r"^the master cannot send Heartbeat while greeted$"):
        master.send(Heartbeat())
    fresh = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    with pytest.raises(ProtocolError, match=r"^the master cannot send Welcome while proving$"):
        fresh.send(Welcome("slave-1", 1, 1.0, LIMIT))
    with pytest.raises(ProtocolError, match=r"^the master cannot send Tasks while proving$"):
        fresh.send_tasks([])


def test_the_slave_says_what_it_may_not_send_and_when() -> None:
    master, slave = greeted()  # proven, but not welcome yet: it holds no task to answer
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Results while greeting$"):
        slave.send_results([(1, True, b"", 0.1)])
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Heartbeat while greeting$"):
        slave.send(Heartbeat())
    fresh = SlaveSession(SECRET, Hello(MEMBER, "host", 1, "1.0", LIMIT))
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Results while connected$"):
        fresh.send_results([])
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Results while connected$"):
        fresh.send(Results([]))
    events(slave, master.send(Welcome("slave-1", 2, 0.5, LIMIT)))
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Hello while ready$"):
        slave.send(Hello(MEMBER, "host", 1, "1.0", LIMIT))


# ---------------------------------------------------------------------- a master that cannot prove itself


def test_a_wrong_master_proof_is_a_membership_error_in_plain_words() -> None:
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(SECRET, Hello(MEMBER, "host", 1, "1.0", LIMIT))
    events(slave, master.challenge())
    with pytest.raises(MembershipError, match=r"^the peer failed to prove it is this computation's master$"):
        events(slave, protocol.frame(b"\x00" * protocol.MAC_SIZE))
    too_big = SlaveSession(SECRET, Hello(MEMBER, "host", 1, "1.0", LIMIT))
    events(too_big, master.challenge())
    size = protocol.MAX_HANDSHAKE_FRAME + 1
    with pytest.raises(
        MembershipError,
        match=rf"^the peer failed to prove it is this computation's master \(frame of {size} bytes exceeds the limit",
    ):
        events(too_big, protocol.HEADER.pack(size))


def test_a_slave_s_limit_on_frames_holds_once_it_is_welcome() -> None:
    master, slave = greeted(max_frame=200)
    assert master.max_send == 200  # the master learnt it from the Hello
    events(slave, master.send(Welcome("slave-1", 2, 0.5, LIMIT)))
    big = master.send_tasks([(1, "f", b"x" * 300)])
    with pytest.raises(ProtocolError, match=r"^frame of \d+ bytes exceeds the limit of 200$"):
        events(slave, big)


def test_tasks_and_results_pass_once_both_sides_are_ready() -> None:
    master, slave = ready()
    assert events(slave, master.send_tasks([(1, "f", b"a")], {1: 3.0})) == [Tasks([(1, "f", b"a")], {1: 3.0})]
    result = (1, True, codec.encode_value("done"), 0.25)
    assert events(master, slave.send_results([result], {1: ("out", "")})) == [Results([result], {1: ("out", "")})]


# ---------------------------------------------------------------------- a peer that breaks the order


MASTER_NONCE = b"\x01" * protocol.NONCE_SIZE
SLAVE_NONCE = b"\x02" * protocol.NONCE_SIZE


def test_the_nonces_given_are_the_ones_used() -> None:
    """Fixed nonces make a handshake reproducible (a peer built from another copy derives the same keys)."""
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    assert master.challenge() == protocol.challenge(MASTER_NONCE)
    slave = SlaveSession(SECRET, Hello(MEMBER, "host", 1, "1.0", LIMIT), nonce=SLAVE_NONCE)
    [reply] = events(slave, master.challenge())
    assert isinstance(reply, HandshakeReply)
    assert reply.data == protocol.frame(SLAVE_NONCE + protocol.slave_proof(SECRET, MASTER_NONCE, SLAVE_NONCE))
    assert reply.proven is False  # the slave has proved itself; the master has not yet
    [proof] = events(master, reply.data)
    assert isinstance(proof, HandshakeReply)
    assert proof.data == protocol.frame(protocol.master_proof(SECRET, MASTER_NONCE, SLAVE_NONCE))


def test_a_proven_slave_that_says_anything_but_hello_first_is_refused() -> None:
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    proof = protocol.slave_proof(SECRET, MASTER_NONCE, SLAVE_NONCE)
    events(master, protocol.frame(SLAVE_NONCE + proof))
    assert master.state is MasterState.GREETING
    insider = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    with pytest.raises(ProtocolError, match=r"^expected Hello, got Heartbeat$"):
        events(master, insider.seal(Heartbeat()))


def test_a_ready_master_names_the_message_a_slave_may_not_send() -> None:
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    slave = SlaveSession(SECRET, Hello(MEMBER, "host", 1, "1.0", LIMIT), nonce=SLAVE_NONCE)
    [reply] = events(slave, master.challenge())
    assert isinstance(reply, HandshakeReply)
    events(master, reply.data)
    insider = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    events(master, insider.seal(Hello(MEMBER, "host", 1, "1.0", LIMIT)))
    master.send(Welcome("slave-1", 2, 0.5, LIMIT))
    with pytest.raises(ProtocolError, match=r"^unexpected Hello from a slave \(ready\)$"):
        events(master, insider.seal(Hello(MEMBER, "host", 1, "1.0", LIMIT)))


def test_a_refused_connection_takes_no_more_frames() -> None:
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    events(master, protocol.frame(SLAVE_NONCE + protocol.slave_proof(SECRET, MASTER_NONCE, SLAVE_NONCE)))
    insider = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    [refused] = events(master, insider.seal(Hello("stranger", "host", 1, "1.0", LIMIT)))
    assert isinstance(refused, Refused)
    assert refused.reason == "member id 'stranger' does not match this master's"
    assert master.state is MasterState.CLOSED
    with pytest.raises(ProtocolError, match=r"^the connection is closed$"):
        events(master, insider.seal(Heartbeat()))


def test_a_slave_response_of_the_wrong_size_or_proof_is_refused_in_plain_words() -> None:
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    with pytest.raises(ProtocolError, match=r"^malformed handshake$"):
        events(master, protocol.frame(SLAVE_NONCE))
    master = MasterSession(SECRET, MEMBER, max_receive=LIMIT, max_send=LIMIT, nonce=MASTER_NONCE)
    wrong = protocol.slave_proof(b"w" * 32, MASTER_NONCE, SLAVE_NONCE)
    with pytest.raises(MembershipError, match=r"^wrong proof of membership \(not a slave of this computation\)$"):
        events(master, protocol.frame(SLAVE_NONCE + wrong))


def test_a_slave_may_send_nothing_before_it_knows_the_master_s_limit() -> None:
    master, slave = greeted()
    assert slave.max_send == 0  # no result fits until the Welcome says how big a frame may be
    events(slave, master.send(Welcome("slave-1", 2, 0.5, 1234)))
    assert slave.max_send == 1234


def test_a_slave_names_the_message_its_master_may_not_send_now() -> None:
    for bad in (Tasks("not a list"), Tasks([], "not a dict")):  # type: ignore[arg-type]
        master, slave = ready()
        with pytest.raises(ProtocolError, match=r"^malformed Tasks message$"):
            events(slave, master.send(bad))
    master, slave = greeted(master_nonce=MASTER_NONCE, slave_nonce=SLAVE_NONCE)
    events(slave, master.send(Welcome("slave-1", 2, 0.5, LIMIT)))
    insider = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    insider.seal(Heartbeat())  # the Welcome was the master's first sealed frame
    with pytest.raises(ProtocolError, match=r"^unexpected Hello from the master \(ready\)$"):
        events(slave, insider.seal(Hello(MEMBER, "host", 1, "1.0", LIMIT)))


def test_a_refused_slave_sends_and_takes_nothing_more() -> None:
    master, slave, refused = through_hello("stranger", master_nonce=MASTER_NONCE, slave_nonce=SLAVE_NONCE)
    assert isinstance(refused, Refused)
    assert refused.reason == "member id 'stranger' does not match this master's"
    assert master.state is MasterState.CLOSED
    with pytest.raises(MembershipError, match=r"^the master refused this slave: member id 'stranger' does not match"):
        events(slave, refused.data)
    assert slave.state is SlaveState.CLOSED
    with pytest.raises(ProtocolError, match=r"^the slave cannot send Results while closed$"):
        slave.send_results([])
    insider = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    insider.seal(Heartbeat())  # the Refuse went out as the master's first sealed frame
    with pytest.raises(ProtocolError, match=r"^the connection is closed$"):
        events(slave, insider.seal(Heartbeat()))


def test_a_master_told_a_slave_to_leave_still_checks_everything_it_gets() -> None:
    """After Shutdown, results and heartbeats are authenticated and dropped, all of them, and a bad frame
    among them still ends the connection."""
    master, slave = ready()
    events(slave, master.send(Shutdown(0)))
    late = slave.send_results([(1, True, b"", 0.1)]) + slave.send_results([(2, True, b"", 0.1)])
    tampered = bytearray(slave.send(Heartbeat()))
    tampered[-1] ^= 1
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        events(master, late + bytes(tampered))

"""The sans-IO sessions (mwpy.wire.session) in memory, without sockets: every order, legal or hostile.

A Hypothesis state machine owns a MasterSession, a SlaveSession and the two
byte streams between them. Its rules deliver bytes in arbitrary chunks, send
tasks, results, heartbeats and the shutdown, and try sends that are illegal
in the current state; at any point one hostile rule may inject an attack into
one side's stream (garbage, an oversized header, a replayed or reordered
frame, a forged frame carrying a booby-trapped pickle, or a correctly tagged
message that is out of order). The attacked side must raise ProtocolError
(MembershipError for a wrong proof) and must never unpickle anything it has
not authenticated.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mwpy
from mwpy import options as mwpy_options
from mwpy.errors import ComputationFinishedError, ConfigurationError, MembershipError, NotInMasterError, ProtocolError
from mwpy.master import Master
from mwpy.observe.audit import Audit
from mwpy.slave import ExitCode as FromSlave
from mwpy.task import current_master, registry, task
from mwpy.task_records import DEFAULT_POLICY
from mwpy.wire import codec, protocol
from mwpy.wire.protocol import Cancel, Cancelled, Heartbeat, Hello, Refuse, Results, Shutdown, Tasks, Welcome
from mwpy.wire.session import (
    MASTER_RECEIVES,
    MASTER_SENDS,
    SLAVE_RECEIVES,
    SLAVE_SENDS,
    HandshakeReply,
    MasterSession,
    MasterState,
    Refused,
    SlaveSession,
    SlaveState,
)

LIMIT = 4096
MEMBER = "member-1"

# ---------------------------------------------------------------------- booby trap

_SPRUNG: list[str] = []


def _spring(*args: Any) -> None:
    _SPRUNG.append("unpickled")


class _Trap:
    """Unpickling this calls ``_spring``: proof that someone unpickled bytes they should not have."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_spring, ())


TRAP = pickle.dumps(_Trap())


@pytest.fixture(autouse=True)
def _no_trap_sprung() -> Iterator[None]:
    _SPRUNG.clear()
    yield
    assert not _SPRUNG, "something unpickled an unauthenticated payload"


# ---------------------------------------------------------------------- helpers


def hello(member_id: str = MEMBER) -> Hello:
    return Hello(member_id, "host", 1, "0", LIMIT)


def welcome() -> Welcome:
    return Welcome("slave-0", 3, 1.0, LIMIT)


def frame_with_tag(body: bytes) -> bytes:
    """A frame shaped like an authenticated one, with a random tag."""
    return protocol.HEADER.pack(len(body) + protocol.TAG_SIZE) + body + os.urandom(protocol.TAG_SIZE)


def events(session: MasterSession | SlaveSession, data: bytes) -> list[Any]:
    session.receive_data(data)
    found = []
    while (event := session.next_event()) is not None:
        found.append(event)
    return found


def drain(session: MasterSession | SlaveSession) -> None:
    """Take every event the session can produce now."""
    while session.next_event() is not None:
        pass


def connected_pair(member_id: str = MEMBER, secret: bytes = b"s" * 32) -> tuple[MasterSession, SlaveSession]:
    """A master and a slave session through the handshake, both READY."""
    master = MasterSession(secret, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(secret, hello(member_id))
    [reply] = events(slave, master.challenge())
    assert isinstance(reply, HandshakeReply)
    assert not reply.proven
    [proof] = events(master, reply.data)
    assert isinstance(proof, HandshakeReply)
    assert proof.proven
    [sealed_hello] = events(slave, proof.data)
    assert isinstance(sealed_hello, HandshakeReply)
    assert sealed_hello.proven
    [said] = events(master, sealed_hello.data)
    assert said == hello(member_id)
    [welcomed] = events(slave, master.send(welcome()))
    assert welcomed == welcome()
    assert (master.state, slave.state) == (MasterState.READY, SlaveState.READY)
    return master, slave


# ---------------------------------------------------------------------- plain cases


def test_a_whole_conversation_in_memory() -> None:
    master, slave = connected_pair()
    assert master.max_send == LIMIT
    assert slave.max_send == LIMIT
    items = [(1, "sq", pickle.dumps(((2,), {}))), (2, "sq", pickle.dumps(((3,), {})))]
    assert events(slave, master.send_tasks(items)) == [Tasks(items)]
    results = [(1, True, codec.encode_value(4), 0.5), (2, False, codec.encode_failure("E", "m"), 0.1)]
    assert events(master, slave.send_results(results)) == [Results(results)]
    assert events(master, slave.send(Heartbeat())) == [Heartbeat()]
    assert events(slave, master.send(Heartbeat())) == [Heartbeat()]
    assert events(slave, master.send(Shutdown(0))) == [Shutdown(0)]
    assert slave.state is SlaveState.SHUTDOWN
    assert master.state is MasterState.CLOSING
    late = slave.send_results([(3, True, codec.encode_value(9), 0.1)])  # finished before the Shutdown came
    assert events(master, late) == []  # authenticated, checked and dropped
    with pytest.raises(ProtocolError):
        master.send_tasks(items)


def test_cancel_and_cancelled_pass_in_ready_and_are_checked() -> None:
    master, slave = connected_pair()
    items = [(1, "sq", b""), (2, "sq", b"")]
    events(slave, master.send_tasks(items, {2: 1.5}))
    assert events(slave, master.send(Cancel([2]))) == [Cancel([2])]
    assert events(master, slave.send(Cancelled([2]))) == [Cancelled([2])]
    events(slave, master.send(Cancel([1])))
    shutdown = master.send(Shutdown(0))  # crosses the slave's answer on the wire
    with pytest.raises(ProtocolError):
        master.send(Cancel([1]))  # nothing is asked back from a slave told to leave
    assert events(master, slave.send(Cancelled([]))) == []  # a late answer: authenticated, checked, dropped
    assert events(slave, shutdown) == [Shutdown(0)]
    for bad in (Cancel("1"), Cancel([1.0])):  # type: ignore[arg-type, list-item]
        master, slave = connected_pair()
        sender = master._channel
        assert sender is not None
        with pytest.raises(ProtocolError, match="malformed Cancel"):
            events(slave, sender.seal(bad))
    master, slave = connected_pair()
    sender = slave._channel
    assert sender is not None
    with pytest.raises(ProtocolError, match="malformed Cancelled"):
        events(master, sender.seal(Cancelled(["x"])))  # type: ignore[list-item]


def test_timeouts_and_outputs_travel_only_when_present() -> None:
    master, slave = connected_pair()
    items = [(1, "sq", b"")]
    [plain] = events(slave, master.send_tasks(items))
    assert plain.timeouts == {}
    [timed] = events(slave, master.send_tasks(items, {1: 2.5}))
    assert timed.timeouts == {1: 2.5}
    assert plain.hold == timed.hold == []  # no value stays on the slave unless the master names its task
    [held] = events(slave, master.send_tasks(items, None, None, [1]))
    assert (held.timeouts, held.keys, held.hold) == ({}, {}, [1])
    result = [(1, True, codec.encode_value(1), 0.1)]
    [printed] = events(master, slave.send_results(result, {1: ("out", "err")}))
    assert printed.outputs == {1: ("out", "err")}
    sender = slave._channel
    assert sender is not None
    with pytest.raises(ProtocolError, match="malformed output"):
        events(master, sender.seal(Results(result, {1: ("out",)})))  # type: ignore[dict-item]


def test_frames_split_anywhere_come_out_whole() -> None:
    master, slave = connected_pair()
    data = b"".join(master.send_tasks([(i, "sq", b"x" * i)]) for i in range(1, 20))
    slave.receive_data(data[:3])
    assert slave.next_event() is None  # a partial header: wait, no error
    got = []
    for i in range(3, len(data), 7):
        slave.receive_data(data[i : i + 7])
        while (event := slave.next_event()) is not None:
            got.append(event)
    assert [e.items[0][0] for e in got if isinstance(e, Tasks)] == list(range(1, 20))
    assert len(got) == 19


def test_the_wrong_secret_is_a_membership_error_on_both_sides() -> None:
    master = MasterSession(b"right" * 8, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(b"wrong" * 8, hello())
    [reply] = events(slave, master.challenge())
    assert isinstance(reply, HandshakeReply)
    with pytest.raises(MembershipError, match="wrong proof of membership"):
        events(master, reply.data)
    # The other way: a master that does not know the secret cannot prove itself to the slave.
    impostor = MasterSession(b"wrong" * 8, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    honest = SlaveSession(b"right" * 8, hello())
    [reply] = events(honest, impostor.challenge())
    slave_nonce = reply.data[protocol.HEADER.size : protocol.HEADER.size + protocol.NONCE_SIZE]
    forged = protocol.frame(protocol.master_proof(b"wrong" * 8, impostor.challenge()[9:], slave_nonce))
    with pytest.raises(MembershipError, match="failed to prove"):
        events(honest, forged + frame_with_tag(bytes([Tasks.kind]) + TRAP))


def test_another_member_id_is_refused_and_the_slave_sees_a_membership_error() -> None:
    master = MasterSession(b"s" * 32, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(b"s" * 32, hello("someone-else"))
    [reply] = events(slave, master.challenge())
    [proof] = events(master, reply.data)
    [sealed_hello] = events(slave, proof.data)
    [refused] = events(master, sealed_hello.data)
    assert isinstance(refused, Refused)
    assert refused.hello.member_id == "someone-else"
    assert "does not match" in refused.reason
    assert master.state is MasterState.CLOSED
    with pytest.raises(MembershipError, match="refused this slave"):
        events(slave, refused.data)


def test_a_tiny_max_frame_of_the_slave_bounds_what_the_master_sends() -> None:
    master = MasterSession(b"s" * 32, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(b"s" * 32, Hello(MEMBER, "h", 1, "0", 100))
    [reply] = events(slave, master.challenge())
    [proof] = events(master, reply.data)
    [sealed_hello] = events(slave, proof.data)
    events(master, sealed_hello.data)
    assert master.max_send == 100


@pytest.mark.parametrize("job", ["41.3", ""], ids=["condor", "outside-condor"])
def test_the_master_learns_the_condor_job_id_the_slave_says_hello_with(job: str) -> None:
    """Guards: Hello carries the slave's Condor job id (protocol 3), so the master can publish it."""
    master = MasterSession(b"s" * 32, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    slave = SlaveSession(b"s" * 32, Hello(MEMBER, "h", 1, "0", LIMIT, job))
    [reply] = events(slave, master.challenge())
    [proof] = events(master, reply.data)
    [sealed_hello] = events(slave, proof.data)
    [said] = events(master, sealed_hello.data)
    assert isinstance(said, Hello)
    assert said.condor_job == job


def test_a_master_of_another_protocol_version_is_named_before_anything_is_sent() -> None:
    """Guards: versions must match exactly (docs/design.md); protocol 6 added Welcome's file service."""
    slave = SlaveSession(b"s" * 32, hello())
    older = protocol.frame(protocol.MAGIC + bytes([5]) + protocol.new_nonce())
    with pytest.raises(ProtocolError, match=f"master speaks protocol 5, this slave speaks {protocol.PROTOCOL_VERSION}"):
        events(slave, older)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (Hello(MEMBER, "h", 1, "0", 0), "malformed Hello"),
        (Hello(MEMBER, "h", "pid", "0", 10), "malformed Hello"),  # type: ignore[arg-type]
        (Hello(MEMBER, "h", 1, "0", 10, "41"), "malformed Hello"),  # a job id is CLUSTER.PROC
        (Hello(MEMBER, "h", 1, "0", 10, "41.3; rm -rf"), "malformed Hello"),
        (Hello(MEMBER, "h", 1, "0", 10, 41.3), "malformed Hello"),  # type: ignore[arg-type]
        (Hello(MEMBER, "h", 1, "0", 10, "", (1, 2, 3, 4)), "malformed Hello"),  # a shape has five fields
        (Hello(MEMBER, "h", 1, "0", 10, "", (1, -2, 0, 0, "")), "malformed Hello"),  # no negative memory
        (Hello(MEMBER, "h", 1, "0", 10, "", (1, 2, 0, True, "")), "malformed Hello"),  # counts are ints
        (Hello(MEMBER, "h", 1, "0", 10, "", (1, 2, 0, 0, None)), "malformed Hello"),  # requirements is text
        (Hello(MEMBER, "h", 1, "0", 10, "", (), float("nan")), "malformed Hello"),  # when a slave leaves: a time
        (Hello(MEMBER, "h", 1, "0", 10, "", (), -1.0), "malformed Hello"),
        (Hello(MEMBER, "h", 1, "0", 10, "", (), "soon"), "malformed Hello"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_hello_is_a_protocol_error(bad: Hello, error: str) -> None:
    master = MasterSession(b"s" * 32, MEMBER, max_receive=LIMIT, max_send=LIMIT)
    challenge = master.challenge()
    slave = SlaveSession(b"s" * 32, hello())
    [reply] = events(slave, challenge)
    events(master, reply.data)
    # The slave's keys, as a hostile insider with the secret would derive them, to seal a Hello of its own.
    master_nonce = challenge[-protocol.NONCE_SIZE :]
    slave_nonce = reply.data[protocol.HEADER.size : protocol.HEADER.size + protocol.NONCE_SIZE]
    channel = protocol.derive_channel(b"s" * 32, master_nonce, slave_nonce, is_master=False)
    with pytest.raises(ProtocolError, match=error):
        events(master, channel.seal(bad))


def test_malformed_results_and_welcome_are_protocol_errors() -> None:
    master, slave = connected_pair()
    channel = slave._channel
    assert channel is not None
    with pytest.raises(ProtocolError, match="malformed result"):
        events(master, channel.seal(Results([(1, True, b"x", float("nan"))])))
    master, slave = connected_pair()
    for bad in (Shutdown(300), Tasks("not a list")):  # type: ignore[arg-type]
        master, slave = connected_pair()
        sender = master._channel
        assert sender is not None
        with pytest.raises(ProtocolError, match="malformed"):
            events(slave, sender.seal(bad))


def test_a_tls_certificate_that_cannot_be_read_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--mw-tls-cert"):
        protocol.tls_server_context(str(tmp_path / "missing.pem"), None)


def test_exit_code_lives_in_the_protocol_layer_and_is_re_exported() -> None:
    assert mwpy.ExitCode is protocol.ExitCode is FromSlave
    assert int(protocol.ExitCode.TOLD_TO_LEAVE) == 7


# ---------------------------------------------------------------------- the state machine

ATTACKS = ["garbage", "oversize", "replay", "reorder", "forged", "out of order"]


class Conversation(RuleBasedStateMachine):
    """Two sessions and the bytes between them, driven through legal and hostile orders."""

    def __init__(self) -> None:
        super().__init__()
        self.master = MasterSession(b"k" * 32, MEMBER, max_receive=LIMIT, max_send=LIMIT)
        self.slave: SlaveSession | None = None
        self.m2s = bytearray(self.master.challenge())
        self.s2m = bytearray()
        self.to_slave_log: list[bytes] = [bytes(self.m2s)]  # every whole frame, for replays
        self.to_master_log: list[bytes] = []
        self.tasks_sent: list[protocol.TaskItem] = []
        self.tasks_got: list[protocol.TaskItem] = []
        self.results_sent: list[protocol.ResultItem] = []
        self.results_got: list[protocol.ResultItem] = []
        self.refused = False
        self.dead = False
        self.next_id = 0

    @initialize(same_member=st.sampled_from([True, True, True, False]))
    def start(self, same_member: bool) -> None:
        self.slave = SlaveSession(b"k" * 32, hello(MEMBER if same_member else "stranger"))

    # ---------------------------------------------------------------- plumbing

    @property
    def s(self) -> SlaveSession:
        assert self.slave is not None
        return self.slave

    def _emit_to_slave(self, data: bytes) -> None:
        self.m2s += data
        self.to_slave_log.append(data)

    def _emit_to_master(self, data: bytes) -> None:
        self.s2m += data
        self.to_master_log.append(data)

    def _deliver_to_slave(self, n: int) -> None:
        data, self.m2s = bytes(self.m2s[:n]), self.m2s[n:]
        slave = self.s
        slave.receive_data(data)
        try:
            while slave.state is not SlaveState.SHUTDOWN and (event := slave.next_event()) is not None:
                if isinstance(event, HandshakeReply):
                    self._emit_to_master(event.data)
                elif isinstance(event, Tasks):
                    self.tasks_got += event.items
                else:
                    assert isinstance(event, Welcome | Heartbeat | Shutdown), event
        except MembershipError:
            refused = self.refused  # the only legal way a slave hears "no": a Refuse
            assert refused
            self.dead = True

    def _deliver_to_master(self, n: int) -> None:
        data, self.s2m = bytes(self.s2m[:n]), self.s2m[n:]
        master = self.master
        master.receive_data(data)
        while (event := master.next_event()) is not None:
            if isinstance(event, HandshakeReply):
                self._emit_to_slave(event.data)
            elif isinstance(event, Hello):
                self._emit_to_slave(master.send(welcome()))
            elif isinstance(event, Refused):
                self.refused = True
                self._emit_to_slave(event.data)
            elif isinstance(event, Results):
                self.results_got += event.items
            else:
                assert isinstance(event, Heartbeat), event

    def _flush(self) -> None:
        while (self.m2s or self.s2m) and not self.dead:
            if self.m2s:
                self._deliver_to_slave(len(self.m2s))
            if self.s2m and not self.dead:
                self._deliver_to_master(len(self.s2m))

    # ---------------------------------------------------------------- legal moves

    @precondition(lambda self: not self.dead)
    @rule(n=st.integers(1, 300))
    def to_slave(self, n: int) -> None:
        self._deliver_to_slave(n)

    @precondition(lambda self: not self.dead)
    @rule(n=st.integers(1, 300))
    def to_master(self, n: int) -> None:
        self._deliver_to_master(n)

    @precondition(lambda self: not self.dead)
    @rule()
    def pump(self) -> None:
        """Deliver everything both ways until both sides are quiet (whole frames, so progress is quick)."""
        self._flush()

    @precondition(lambda self: not self.dead and self.master.state is MasterState.READY)
    @rule(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5))
    def master_sends_tasks(self, sizes: list[int]) -> None:
        items = []
        for size in sizes:
            self.next_id += 1
            items.append((self.next_id, "sq", os.urandom(size)))
        self._emit_to_slave(self.master.send_tasks(items))
        self.tasks_sent += items

    @precondition(lambda self: not self.dead and self.tasks_got[len(self.results_sent) :])
    @rule(data=st.data())
    def slave_sends_results(self, data: st.DataObject) -> None:
        if self.s.state not in (SlaveState.READY, SlaveState.SHUTDOWN):
            return
        todo = self.tasks_got[len(self.results_sent) :]
        count = data.draw(st.integers(1, len(todo)))
        items = [(task_id, True, codec.encode_value(task_id), 0.001) for task_id, _, _ in todo[:count]]
        self._emit_to_master(self.s.send_results(items))
        self.results_sent += items

    @precondition(lambda self: not self.dead and self.master.state is MasterState.READY)
    @rule(count=st.integers(1, 4))
    def round_trip(self, count: int) -> None:
        """Tasks out, delivered, answered, results delivered: the common case, as one step."""
        items = [(self.next_id + i + 1, "sq", b"") for i in range(count)]
        self.next_id += count
        self._emit_to_slave(self.master.send_tasks(items))
        self.tasks_sent += items
        self._flush()
        todo = self.tasks_got[len(self.results_sent) :]
        if todo and self.s.state is SlaveState.READY:
            answers = [(task_id, True, codec.encode_value(task_id), 0.001) for task_id, _, _ in todo]
            self._emit_to_master(self.s.send_results(answers))
            self.results_sent += answers
            self._flush()

    @precondition(lambda self: not self.dead)
    @rule(from_master=st.booleans())
    def heartbeat(self, from_master: bool) -> None:
        if from_master and (self.master.state, Heartbeat.kind) in MASTER_SENDS:
            self._emit_to_slave(self.master.send(Heartbeat()))
        elif not from_master and (self.s.state, Heartbeat.kind) in SLAVE_SENDS:
            self._emit_to_master(self.s.send(Heartbeat()))

    @precondition(lambda self: not self.dead and self.master.state is MasterState.READY and self.results_got)
    @rule(code=st.sampled_from([0, 7]))
    def shutdown(self, code: int) -> None:
        self._emit_to_slave(self.master.send(Shutdown(code)))

    @precondition(lambda self: not self.dead)
    @rule(msg=st.sampled_from([Welcome("x", 1, 1.0, 10), Refuse("no"), Tasks([]), Heartbeat(), Shutdown(0)]))
    def master_send_is_checked(self, msg: protocol.Message) -> None:
        """The master's sends follow its table: a message it may not send now raises and changes nothing."""
        before = self.master.state
        if (before, msg.kind) not in MASTER_SENDS:
            with pytest.raises(ProtocolError):
                self.master.send(msg)
            assert self.master.state is before

    @precondition(lambda self: not self.dead)
    @rule(msg=st.sampled_from([Hello(MEMBER, "h", 1, "0", 9), Results([]), Heartbeat()]))
    def slave_send_is_checked(self, msg: protocol.Message) -> None:
        before = self.s.state
        if (before, msg.kind) not in SLAVE_SENDS:
            with pytest.raises(ProtocolError):
                self.s.send(msg)
            assert self.s.state is before

    # ---------------------------------------------------------------- the hostile stream

    @precondition(lambda self: not self.dead)
    @rule(
        attack=st.sampled_from(ATTACKS),
        at_master=st.booleans(),
        flush_first=st.booleans(),
        garbage=st.binary(min_size=1, max_size=200),
    )
    def attack(self, attack: str, at_master: bool, flush_first: bool, garbage: bytes) -> None:
        """Inject one attack into one side's stream; that side must raise and unpickle nothing."""
        if flush_first:
            self._flush()
        target: MasterSession | SlaveSession = self.master if at_master else self.s
        # Only at a frame boundary (nothing pending for the target), in whatever state it is: handshake included.
        if self.dead or (self.s2m if at_master else self.m2s) or target.inbox:
            return
        if target.state in (MasterState.CLOSED, SlaveState.CLOSED, SlaveState.SHUTDOWN):
            return
        stream = self._attack_stream(attack, at_master, garbage)
        if stream is None:
            return
        event(f"{attack} at the {'master' if at_master else 'slave'} while {target.state.value}")
        target.receive_data(stream)
        with pytest.raises(ProtocolError):
            drain(target)
        self.dead = True

    def _attack_stream(self, attack: str, at_master: bool, garbage: bytes) -> bytes | None:
        """The bytes of ``attack`` against one side now, or None if it does not apply in this state."""
        return self._ATTACK_BUILDERS[attack](self, at_master, garbage)

    def _sides(self, at_master: bool) -> tuple[MasterSession | SlaveSession, MasterSession | SlaveSession]:
        """(target, sender) of an attack on the master's side or on the slave's."""
        return (self.master, self.s) if at_master else (self.s, self.master)

    def _limit(self, at_master: bool) -> int:
        """The largest frame the target accepts now (the handshake's limit until it has a channel)."""
        target, _ = self._sides(at_master)
        return protocol.MAX_HANDSHAKE_FRAME if target._channel is None else LIMIT

    def _garbage(self, at_master: bool, garbage: bytes) -> bytes | None:
        return protocol.HEADER.pack(len(garbage)) + garbage

    def _oversize(self, at_master: bool, garbage: bytes) -> bytes | None:
        return protocol.HEADER.pack(self._limit(at_master) + 1)

    def _replay(self, at_master: bool, garbage: bytes) -> bytes | None:
        log = self.to_master_log if at_master else self.to_slave_log
        if not log or len(log[-1]) - protocol.HEADER.size > self._limit(at_master):
            return None
        return log[-1]

    def _reorder(self, at_master: bool, garbage: bytes) -> bytes | None:
        _, sender = self._sides(at_master)
        if (sender.state, Heartbeat.kind) not in (SLAVE_SENDS if at_master else MASTER_SENDS):
            return None
        first, second = sender.send(Heartbeat()), sender.send(Heartbeat())
        return second + first

    def _forged(self, at_master: bool, garbage: bytes) -> bytes | None:
        return frame_with_tag(bytes([Tasks.kind if not at_master else Results.kind]) + TRAP)

    def _out_of_order(self, at_master: bool, garbage: bytes) -> bytes | None:
        """A correctly tagged message the target may not receive now."""
        target, sender = self._sides(at_master)
        channel = sender._channel
        if channel is None or target._channel is None:
            return None
        table: dict[Any, Any] = MASTER_RECEIVES if at_master else SLAVE_RECEIVES
        candidates: list[protocol.Message] = [
            Hello(MEMBER, "h", 1, "0", 9),
            welcome(),
            Refuse("r"),
            Tasks([]),
            Results([]),
            Shutdown(0),
        ]
        illegal = [m for m in candidates if (target.state, m.kind) not in table]
        return channel.seal(illegal[len(garbage) % len(illegal)])

    #: How to build each attack in ATTACKS: (self, at_master, garbage) -> the bytes, or None when it does not apply.
    _ATTACK_BUILDERS: ClassVar[dict[str, Callable[[Conversation, bool, bytes], bytes | None]]] = {
        "garbage": _garbage,
        "oversize": _oversize,
        "replay": _replay,
        "reorder": _reorder,
        "forged": _forged,
        "out of order": _out_of_order,
    }

    @precondition(lambda self: self.dead)
    @rule()
    def dropped(self) -> None:
        """The attacked side dropped the connection: nothing is left to do (a rule so the run may go on)."""

    # ---------------------------------------------------------------- what must hold

    @invariant()
    def delivered_in_order_exactly_once(self) -> None:
        assert self.tasks_got == self.tasks_sent[: len(self.tasks_got)]
        assert self.results_got == self.results_sent[: len(self.results_got)]
        assert not _SPRUNG

    def teardown(self) -> None:
        if self.slave is None:
            return
        closing = self.master.state is MasterState.CLOSING
        self._flush()
        if self.dead:
            return
        assert self.tasks_got == self.tasks_sent
        if not closing and self.master.state is not MasterState.CLOSING:
            assert self.results_got == self.results_sent
        if self.master.state is MasterState.READY or self.s.state is SlaveState.READY:
            assert (self.master.state, self.s.state) == (MasterState.READY, SlaveState.READY)


Conversation.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None, database=None)
test_every_order_of_a_conversation = Conversation.TestCase


# ---------------------------------------------------------------------- current master and registry


def test_with_master_makes_it_current_and_restores_the_previous_one(tmp_path: Path) -> None:
    @task(name="test_protocol_sessions.double")
    def double(x: int) -> int:
        return 2 * x

    resource = str(tmp_path / "resource.json")
    options, _ = mwpy_options.parse(["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", resource])
    program = tmp_path / "program.py"
    program.write_text("")
    with contextlib.closing(Audit(str(tmp_path / "audit"))) as audit:
        assert current_master() is None
        with Master(options, audit=audit, secret=b"s" * 32, program=str(program)) as outer:
            assert current_master() is outer
            with Master(options, audit=audit, secret=b"s" * 32, program=str(program)) as inner:
                assert current_master() is inner
                assert double.submit(1).task_id == 1
            assert current_master() is outer
            with pytest.raises(ComputationFinishedError):
                inner._submit(double, DEFAULT_POLICY, (1,), {})  # a finished master, still reachable
            assert double.pending_tasks() == 0
        assert current_master() is None
        with pytest.raises(NotInMasterError):
            double.submit(2)


def test_the_task_registry_can_be_snapshotted_cleared_and_restored() -> None:
    saved = registry.snapshot()
    try:

        @task(name="test_protocol_sessions.temporary")
        def temporary() -> None:
            """Registered only for this test."""

        assert "test_protocol_sessions.temporary" in registry
        assert registry.get("test_protocol_sessions.temporary") is temporary
        registry.clear()
        assert len(registry) == 0
        assert registry.get("test_protocol_sessions.temporary") is None
    finally:
        registry.restore(saved)
    assert "test_protocol_sessions.temporary" not in registry
    assert list(registry) == list(saved)

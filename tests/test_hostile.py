"""Hostile input never hurts the computation (security.md, "What is protected").

Every test runs a live computation — tests/programs/trust_stream.py as a real
master process streaming tasks with an exactly checkable answer to two real
slaves — and attacks it over real sockets: garbage, oversized and truncated
frames, wrong and replayed proofs, silent peers, floods, a man in the middle,
fuzzed insiders. Each test then lets the computation end and checks that every
result arrived exactly once with the right value. Each docstring names the
protection the test guards; the test fails if that protection is removed.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import socket
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mwpy import ExitCode, resource_file
from mwpy.wire import protocol
from mwpy.wire.protocol import FrameReader
from tests.programs import trust_net
from tests.programs.trust_net import Proxy, Session, authenticate, challenged, hung_up, local_port, read_frame
from tests.programs.trust_stream import expected
from tests.support import (
    PYTHON,
    TRUST_STREAM,
    Live,
    resource_record,
    spawn,
    spawn_slave,
    start_live,
    wait_until,
)

STREAM = TRUST_STREAM
#: The masters' --mw-client-timeout here, in seconds: small, so silent peers go quickly.
CLIENT_TIMEOUT = 3
#: Generous deadline for anything to happen on a loaded machine.
DEADLINE = 60.0
#: The master's peak RSS may grow by this much during an attack (KiB); the attacks send far more.
MEMORY_SLACK_KIB = 32 * 1024


@pytest.fixture
def live(tmp_path: Path) -> Live:
    return start_live(tmp_path, client_timeout=CLIENT_TIMEOUT)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def forged_frame(kind: int, payload: bytes) -> bytes:
    """A frame with a message body but a tag made up by someone who does not know the keys."""
    body = bytes([kind]) + payload
    return protocol.HEADER.pack(len(body) + protocol.TAG_SIZE) + body + os.urandom(protocol.TAG_SIZE)


# ---------------------------------------------------------------------- unauthenticated peers


GARBAGE = {
    "random bytes": os.urandom(4096),
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: master\r\n\r\n",
    "a zero-length frame": protocol.HEADER.pack(0),
    "a Hello before any proof": forged_frame(protocol.Hello.kind, pickle.dumps(("m", "h", 1, "0", 1 << 20))),
}


def test_garbage_is_cut_off_at_once_and_the_computation_goes_on(live: Live) -> None:
    """Guards: the handshake accepts only a 64-byte proof frame; anything else drops the connection at once.

    If the master skipped or tolerated malformed handshake frames, these
    connections would stay open and the test would fail.
    """
    for name, garbage in GARBAGE.items():
        sock, _ = challenged(live.port)
        with sock:
            sock.sendall(garbage)
            assert hung_up(sock, DEADLINE), name
            assert live.audit.peer_dropped(local_port(sock)).startswith("protocol error"), name
    live.progresses()
    live.finish()


def test_gigabyte_frame_header_is_refused_before_anything_is_buffered(live: Live) -> None:
    """Guards: before the proof, a frame over 64 bytes (68 with its header) drops the connection at once.

    The attacker announces a 4 GiB frame and pushes 64 MiB after the header;
    the master's peak RSS must not grow by anything near that.
    """
    before = live.peak_rss_kib()
    sock, _ = challenged(live.port)
    with sock:
        chunk = os.urandom(1 << 20)
        try:
            sock.sendall(protocol.HEADER.pack(2**32 - 1))
            for _ in range(64):
                sock.sendall(chunk)
        except OSError:
            pass  # the master hung up on us, as it should
        assert hung_up(sock, DEADLINE)
        assert f"exceeds the limit of {protocol.MAX_HANDSHAKE_FRAME}" in live.audit.peer_dropped(local_port(sock))
    live.progresses()
    assert live.peak_rss_kib() - before < MEMORY_SLACK_KIB
    live.finish()


def test_silent_and_stalled_peers_are_dropped_after_the_client_timeout(live: Live) -> None:
    """Guards: --mw-client-timeout drops peers that never speak or stop mid-frame, before and after the proof.

    Without the timeout, these connections would stay open forever and the
    test would fail waiting for the master to hang up.
    """
    idle, _ = challenged(live.port)
    mute = trust_net.connect(live.port)  # does not even read the challenge
    cut_off, _ = challenged(live.port)
    cut_off.sendall(protocol.HEADER.pack(protocol.RESPONSE_SIZE) + os.urandom(10))
    insider = authenticate(live.port, live.secret)  # proves membership, then never says Hello
    stalled = authenticate(live.port, live.secret)  # says half a Hello, then nothing
    hello = stalled.channel.seal(protocol.Hello(live.record.member_id, "h", 1, "0", 1 << 20))
    stalled.sock.sendall(hello[: len(hello) // 2])
    socks = [idle, mute, cut_off, insider.sock, stalled.sock]
    live.progresses()  # the computation goes on while they hang around
    assert trust_net.still_open(socks, DEADLINE) == []
    for sock in socks:
        assert live.audit.peer_dropped(local_port(sock)) == f"silent for {CLIENT_TIMEOUT} s (client timeout)"
        sock.close()
    live.finish()


def test_peer_dribbling_its_proof_is_dropped_one_client_timeout_after_connecting(live: Live) -> None:
    """Guards: an unproven peer gets one client timeout in all, however it spreads its bytes out.

    It sends its 64-byte proof frame a byte every half second (a slowloris).
    If every byte restarted the client timeout, the connection would last
    until the frame was complete, half a minute here (over an hour with the
    default 60 s); the master must drop it while it is still dribbling.
    """
    sock, _ = challenged(live.port)
    with sock:
        sock.sendall(protocol.HEADER.pack(protocol.RESPONSE_SIZE))
        for _ in range(protocol.RESPONSE_SIZE - 1):  # never the last byte
            try:
                sock.sendall(b"x")
            except OSError:
                break
            if hung_up(sock, 0.5):
                break
        else:
            raise AssertionError("the master let an unproven peer dribble for 30 s")
        assert live.audit.peer_dropped(local_port(sock)) == f"silent for {CLIENT_TIMEOUT} s (client timeout)"
    live.finish()


def test_wrong_proof_is_refused_without_an_answer(live: Live) -> None:
    """Guards: the master checks the slave's proof of membership (HMAC over both nonces with the secret).

    Neither a random proof nor one made with another secret gets the master's
    own proof back; both connections are dropped at once.
    """
    for secret in (None, os.urandom(32)):
        sock, master_nonce = challenged(live.port)
        with sock:
            slave_nonce = protocol.new_nonce()
            proof = os.urandom(32) if secret is None else protocol.slave_proof(secret, master_nonce, slave_nonce)
            sock.sendall(protocol.frame(slave_nonce + proof))
            sock.settimeout(DEADLINE)
            assert sock.recv(65536) == b"", "the master answered a wrong proof"
            assert live.audit.peer_dropped(local_port(sock)).startswith("protocol error: wrong proof of membership")
    live.finish()


def test_replayed_handshake_of_a_real_slave_is_refused(live: Live) -> None:
    """Guards: every connection gets a fresh master nonce, so a recorded proof is useless elsewhere.

    A real slave connects through a recording proxy; everything it sent is
    replayed on a new connection. With a fixed nonce the master would accept
    the proof and answer with its own.
    """
    proxy = Proxy(live.port)
    try:
        watched = spawn_slave(STREAM, live.workdir, "--mw-master-port", str(proxy.port))
        live.slaves.append(watched)
        live.audit.sid_of(watched.pid)
        live.progresses()
        recorded = bytes(proxy.connections[0].c2s)
        replay(live, recorded)
        live.finish()
    finally:
        proxy.close()


def replay(live: Live, recorded: bytes) -> None:
    assert len(recorded) > protocol.HEADER.size + protocol.RESPONSE_SIZE  # the proof, Hello and more
    assert protocol.HEADER.unpack_from(recorded)[0] == protocol.RESPONSE_SIZE
    sock, _ = challenged(live.port)
    with sock:
        sock.sendall(recorded)
        sock.settimeout(DEADLINE)
        assert sock.recv(65536) == b"", "the master accepted a replayed proof"
        assert live.audit.peer_dropped(local_port(sock)).startswith("protocol error: wrong proof of membership")


def test_flood_of_300_hostile_connections_neither_stalls_nor_bloats_the_master(tmp_path: Path) -> None:
    """Guards: the master's loop never blocks on one peer, and each unproven peer costs a few bytes.

    300 connections at once — silent, garbage, cut off mid-frame. Results
    must keep coming while the silent ones are still connected (a loop that
    blocked on one would stall until the client timeout), then every one is
    dropped, and the master's peak RSS stays flat.
    """
    timeout = 20  # long enough to see progress while the flood is connected, even on a loaded machine
    live = start_live(tmp_path, client_timeout=timeout)
    before = live.peak_rss_kib()
    socks: list[socket.socket] = []
    kinds: dict[int, str] = {}
    for i in range(300):
        kind = ("silent", "garbage", "cut off")[i % 3]
        sock = challenged(live.port)[0] if kind == "silent" else trust_net.connect(live.port)
        socks.append(sock)
        if kind == "garbage":
            sock.sendall(os.urandom(1024))
        elif kind == "cut off":
            sock.sendall(protocol.HEADER.pack(protocol.RESPONSE_SIZE) + b"\0" * 10)
        kinds[local_port(sock)] = kind
    live.progresses(5)
    silent = [sock for sock in socks if kinds[local_port(sock)] == "silent"]
    assert all(trust_net.connected(sock) for sock in silent), "the master was stalled until the client timeout"
    assert trust_net.still_open(socks, DEADLINE) == []
    for port, kind in kinds.items():
        reason = live.audit.peer_dropped(port)
        if kind == "garbage":
            assert reason.startswith("protocol error"), (kind, reason)
        else:
            assert reason == f"silent for {timeout} s (client timeout)", (kind, reason)
    for sock in socks:
        sock.close()
    assert live.peak_rss_kib() - before < MEMORY_SLACK_KIB
    assert psutil.Process(live.master.pid).num_fds() < 100  # every hostile descriptor was released
    live.progresses()
    live.finish()


def test_insider_cannot_answer_tasks_held_by_other_slaves(live: Live) -> None:
    """Guards: the master takes a result only from the slave that holds its task, on that connection.

    A peer with the secret joins, takes its one task, then sends wrong
    results for every task id around it — those the real slaves are running
    among them — several times over. Every one must be ignored.
    """
    session = authenticate(live.port, live.secret)
    with session.sock:
        session.send(protocol.Hello(live.record.member_id, "insider", os.getpid(), "0", 1 << 20))
        welcome = session.receive()
        assert isinstance(welcome, protocol.Welcome)
        tasks = session.receive()
        assert isinstance(tasks, protocol.Tasks)
        held = {task_id for task_id, _, _ in tasks.items}
        near = max(held)
        fake = [(t, True, pickle.dumps(-1), 0.0) for t in range(max(1, near - 50), near + 50) if t not in held]
        for _ in range(5):
            session.send(protocol.Results(fake))
        ignored = f"{welcome.slave_id} -> result for task "
        wait_until(
            lambda: sum(line.startswith(ignored) for line in live.audit.lines()) == 5 * len(fake),
            DEADLINE,
            "the master to ignore every result the insider sent",
        )
    live.progresses()
    live.finish()


def test_an_absurd_peak_memory_never_reaches_the_resource_file(live: Live) -> None:
    """Guards: a Heartbeat's peak memory is bounded by what a slave could have (names.MAX_PEAK_MEMORY).

    An insider reporting 1 EiB once made the master publish it and the overseer ask Condor for its memory cap
    for every new slave job. A plausible peak (2 GiB) is published; the absurd one drops its sender and the
    resource file keeps the plausible one."""
    plausible = 2 << 30
    for peak in (plausible, 1 << 60):
        session = authenticate(live.port, live.secret)
        with session.sock:
            session.send(protocol.Hello(live.record.member_id, "insider", os.getpid(), "0", 1 << 20))
            welcome = session.receive()
            assert isinstance(welcome, protocol.Welcome)
            session.send(protocol.Heartbeat(peak))
            if peak == plausible:
                wait_until(
                    lambda: resource_record_of(live).slave_peak_memory == plausible,
                    DEADLINE,
                    "the plausible peak in the resource file",
                )
            else:
                why = live.audit.slave_dropped(welcome.slave_id, DEADLINE)
                assert "more than any machine has" in why
    assert resource_record_of(live).slave_peak_memory == plausible


@pytest.mark.parametrize("cache", [(1, -1, 0, 0), (1, 2, 3), (1, 2, 3, "4"), [1, 2, 3, 4]])
def test_malformed_cache_counters_in_a_heartbeat_drop_their_sender(live: Live, cache: Any) -> None:
    """Guards: the cache counters a Heartbeat carries (issue 22) are four non-negative ints, or nothing is read."""
    session = authenticate(live.port, live.secret)
    with session.sock:
        session.send(protocol.Hello(live.record.member_id, "insider", os.getpid(), "0", 1 << 20))
        welcome = session.receive()
        assert isinstance(welcome, protocol.Welcome)
        session.send(protocol.Heartbeat(0, cache))
        assert "its cache counters" in live.audit.slave_dropped(welcome.slave_id, DEADLINE)
    live.progresses()
    live.finish()


def resource_record_of(live: Live) -> resource_file.ResourceFile:
    return resource_file.read(live.workdir / "resource.json")


# ---------------------------------------------------------------------- a man in the middle


def test_frames_forged_on_the_path_are_refused_before_unpickling(live: Live) -> None:
    """Guards: every frame after the handshake carries an HMAC tag checked before its body is unpickled.

    A man in the middle injects a booby-trapped pickle after the real
    Welcome (toward a slave) and after the real Hello (toward the master):
    had either side unpickled it, the marker file would exist.
    """
    marker = live.workdir / "unpickled"
    trap = forged_frame(protocol.Tasks.kind, trust_net.booby_trap(marker))

    def to_slave(direction: str, index: int, frame: bytes) -> bytes:
        return frame + trap if (direction, index) == ("s2c", 2) else frame  # frame 2: Welcome

    def to_master(direction: str, index: int, frame: bytes) -> bytes:
        return frame + trap if (direction, index) == ("c2s", 1) else frame  # frame 1: Hello

    proxies = [Proxy(live.port, to_slave), Proxy(live.port, to_master)]
    try:
        victims = [spawn_slave(STREAM, live.workdir, "--mw-master-port", str(p.port)) for p in proxies]
        assert victims[0].wait(DEADLINE) == ExitCode.MASTER_LOST
        sid = live.audit.sid_of(victims[1].pid)
        dropped = live.audit.slave_dropped(sid)
        assert victims[1].wait(DEADLINE) == ExitCode.MASTER_LOST
        assert not marker.exists(), "a forged frame was unpickled"
        assert "frame failed authentication" in victims[0].out()
        assert dropped.startswith("protocol error: frame failed authentication")
    finally:
        for proxy in proxies:
            proxy.close()
    live.progresses()
    live.finish()
    assert not marker.exists()


def test_frames_replayed_within_a_connection_are_refused(live: Live) -> None:
    """Guards: frame tags cover a per-direction sequence number, so a genuine frame sent twice is refused.

    Without sequence numbers a duplicated Tasks frame would run twice and a
    duplicated result frame would be taken in silence; the connections would live.
    """

    def twice(which: tuple[str, int]) -> trust_net.Tamper:
        def tamper(direction: str, index: int, frame: bytes) -> bytes:
            return frame * 2 if (direction, index) == which else frame

        return tamper

    # s2c frame 3: the first Tasks; c2s frame 2: the first frame after Hello (results or a heartbeat)
    proxies = [Proxy(live.port, twice(("s2c", 3))), Proxy(live.port, twice(("c2s", 2)))]
    try:
        victims = [spawn_slave(STREAM, live.workdir, "--mw-master-port", str(p.port)) for p in proxies]
        assert victims[0].wait(DEADLINE) == ExitCode.MASTER_LOST
        assert "frame failed authentication" in victims[0].out()
        sid = live.audit.sid_of(victims[1].pid)
        assert live.audit.slave_dropped(sid).startswith("protocol error: frame failed authentication")
        assert victims[1].wait(DEADLINE) == ExitCode.MASTER_LOST
    finally:
        for proxy in proxies:
            proxy.close()
    live.progresses()
    live.finish()


# ---------------------------------------------------------------------- a fake master


@pytest.mark.parametrize("proof", ["random", "wrong secret", "none"])
def test_fake_master_cannot_make_a_slave_unpickle_anything(tmp_path: Path, proof: str) -> None:
    """Guards: a slave checks the master's proof before sending or reading anything more.

    A server that sends a valid challenge but cannot prove membership follows
    its proof with a booby-trapped pickle. The slave must exit 5 (refused)
    without unpickling it and without saying Hello (the server hears nothing more).
    """
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)  # a secret others can read is refused
    marker = tmp_path / "unpickled"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(DEADLINE)
        slave = spawn(
            [
                PYTHON,
                str(STREAM),
                "--mw-slave",
                "--mw-master-host",
                "127.0.0.1",
                "--mw-master-port",
                str(local_port(listener)),
                "--mw-secret-file",
                str(secret),
                "--mw-client-timeout",
                "20",
            ],
            tmp_path,
            "slave",
        )
        conn, _ = listener.accept()
    with conn:
        master_nonce = protocol.new_nonce()
        conn.sendall(protocol.challenge(master_nonce))
        answer = read_frame(conn, FrameReader(protocol.MAX_HANDSHAKE_FRAME))
        slave_nonce = answer[: protocol.NONCE_SIZE]
        if proof == "random":
            sent = protocol.frame(os.urandom(protocol.MAC_SIZE))
        elif proof == "wrong secret":
            sent = protocol.frame(protocol.master_proof(os.urandom(32), master_nonce, slave_nonce))
        else:
            sent = b""
        conn.sendall(sent + forged_frame(protocol.Tasks.kind, trust_net.booby_trap(marker)))
        heard = bytearray()
        conn.settimeout(DEADLINE)
        try:
            while data := conn.recv(65536):
                heard += data
        except ConnectionResetError:
            pass
    assert slave.wait(DEADLINE) == ExitCode.REFUSED
    assert heard == b"", "the slave kept talking to a master that did not prove membership"
    assert not marker.exists()
    message = one_line(slave.err())
    assert "prove" in message or "proof" in message or "not an mwpy master" in message


# ---------------------------------------------------------------------- damaged resource files


def resource_text(**changes: Any) -> str:
    """A fresh, valid resource file (master on a closed port) with ``changes`` applied to its JSON."""
    record = resource_record(master_port=9)
    return json.dumps({**json.loads(resource_file.dumps(record)), **changes})


DAMAGED: dict[str, tuple[dict[str, Any] | str | bytes | None, str]] = {
    "a newer version": ({"version": 2}, "version 2"),
    "a JSON array": ("[1, 2, 3]", "not a JSON object"),
    "an empty file": ("", "not JSON"),
    "binary junk": (b"\xff\xfe\x00garbage", "cannot read"),
    "a folder": (None, "cannot read"),
    "a secret that is not hex": ({"secret": "not hex!"}, "secret"),
    "a fingerprint that is not hex": ({"tls_fingerprint": "\u00e9" * 64}, "tls_fingerprint"),
    "a fingerprint too short": ({"tls_fingerprint": "ab" * 8}, "tls_fingerprint"),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_damaged_resource_file_gives_one_line_and_status_6(tmp_path: Path, name: str) -> None:
    """Guards: a slave validates the whole resource file before using it (exit 6, one line, no traceback).

    Cases test_core_slave.py does not cover. The file is fresh and names a
    closed port, so a file that slipped through validation would end
    otherwise (status 3 after retrying for 10 s, or a traceback).
    """
    content, problem = DAMAGED[name]
    rf = tmp_path / "resource.json"
    if content is None:
        rf.mkdir()
    elif isinstance(content, dict):
        rf.write_text(resource_text(**content))
    else:
        rf.write_bytes(content.encode() if isinstance(content, str) else content)
    slave = spawn([PYTHON, str(STREAM), "--mw-slave", "--mw-resource-file", str(rf)], tmp_path, "slave")
    assert slave.wait(DEADLINE) == ExitCode.BAD_RESOURCE_FILE, slave.err()
    assert problem in one_line(slave.err())


# ---------------------------------------------------------------------- fuzzing


JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=16),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
KINDS = [protocol.Hello.kind, protocol.Welcome.kind, protocol.Refuse.kind, protocol.Tasks.kind]
KINDS += [protocol.Results.kind, protocol.Heartbeat.kind, protocol.Shutdown.kind]
HOSTILE_TIMES = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, 5e-324, 1e-9])


@st.composite
def raw_streams(draw: st.DrawFn) -> list[bytes]:
    """Bytes an outsider sends: random, or shaped like frames of any announced size."""
    framed = st.builds(
        lambda size, body: protocol.HEADER.pack(size) + body,
        st.integers(0, 2**32 - 1) | st.integers(0, 100),
        st.binary(max_size=100),
    )
    return draw(st.lists(st.binary(min_size=1, max_size=200) | framed, min_size=1, max_size=4))


@attrs.frozen
class Insider:
    """A peer that knows the secret and misbehaves after proving membership."""

    hello: str  # "good", "bad" or "none"
    bad_hello: tuple[Any, ...]
    actions: list[tuple[str, Any]]
    answer_time: float | None  # answer the task it holds (correctly) with this compute time


@st.composite
def insiders(draw: st.DrawFn) -> Insider:
    # well-formed results for task ids near those the real slaves hold (the insider holds none of them)
    result = st.tuples(st.integers(-12, 12), st.booleans(), JUNK.map(pickle.dumps), st.floats(0, 1e6))
    action = st.one_of(
        st.tuples(st.just("results"), st.lists(result, min_size=1, max_size=5)),
        st.tuples(st.just("results"), st.lists(result | JUNK, max_size=5)),
        st.tuples(st.just("message"), st.tuples(st.sampled_from(KINDS) | st.integers(0, 255), JUNK)),
        st.tuples(st.just("sealed junk"), st.tuples(st.sampled_from(KINDS), st.binary(max_size=40))),
        st.tuples(st.just("bad tag"), st.binary(max_size=40)),
        st.tuples(st.just("heartbeat"), st.none()),
    )
    return Insider(
        hello=draw(st.sampled_from(["good", "good", "bad", "none"])),
        bad_hello=draw(st.tuples(JUNK, JUNK, JUNK, JUNK, JUNK) | st.lists(JUNK, max_size=7).map(tuple)),
        actions=draw(st.lists(action, max_size=5)),
        answer_time=draw(st.none() | HOSTILE_TIMES),
    )


def seal_raw(session: Session, body: bytes) -> bytes:
    """A correctly tagged frame around any body (what an insider can always produce)."""
    return session.channel.seal_body(body)


def play_insider(live: Live, insider: Insider) -> None:
    session = authenticate(live.port, live.secret)
    with session.sock:
        held = _insider_hello(live, session, insider)
        near = max(held, default=0)
        try:
            for what, detail in insider.actions:
                _insider_act(session, what, detail, near, held)
            if held and insider.answer_time is not None:
                answers = [(t, True, pickle.dumps(expected(i)), insider.answer_time) for t, i in held.items()]
                session.send(protocol.Results(answers))
        except OSError:
            pass  # the master hung up on us: that is its right


def _insider_hello(live: Live, session: Session, insider: Insider) -> dict[int, int]:
    """Say hello as the insider chose (well, badly or not at all); the tasks it was given (id: argument)."""
    held: dict[int, int] = {}
    if insider.hello == "good":
        session.send(protocol.Hello(live.record.member_id, "fuzz", os.getpid(), "0", 1 << 20))
        assert isinstance(session.receive(), protocol.Welcome)
        tasks = session.receive()  # the master always has work queued: one task (window 1)
        assert isinstance(tasks, protocol.Tasks)
        for task_id, _, payload in tasks.items:
            held[task_id] = pickle.loads(payload)[0][0]
    elif insider.hello == "bad":
        session.sock.sendall(seal_raw(session, bytes([protocol.Hello.kind]) + pickle.dumps(insider.bad_hello)))
    return held


def _insider_act(session: Session, what: str, detail: Any, near: int, held: dict[int, int]) -> None:
    """One misdeed of the insider after its hello."""
    if what == "results":
        items = [
            (near + item[0], *item[1:]) if type(item) is tuple and len(item) == 4 else item for item in detail
        ]  # task ids near the ones real slaves hold right now
        items = [i for i in items if not (type(i) is tuple and i and type(i[0]) is int and i[0] in held)]
        session.sock.sendall(seal_raw(session, bytes([protocol.Results.kind]) + pickle.dumps((items,))))
    elif what == "message":
        session.sock.sendall(seal_raw(session, bytes([detail[0]]) + pickle.dumps(detail[1])))
    elif what == "sealed junk":
        session.sock.sendall(seal_raw(session, bytes([detail[0]]) + detail[1]))
    elif what == "bad tag":
        session.sock.sendall(forged_frame(protocol.Results.kind, detail))
    else:
        session.send(protocol.Heartbeat())


#: Wrong results for the 25 task ids around the one the insider holds (those the real slaves run among them).
WRONG_RESULTS_AROUND = [(offset, True, pickle.dumps(-1), 0.0) for offset in range(-12, 13)]


def test_fuzzed_outsiders_and_insiders_never_corrupt_the_computation(tmp_path: Path) -> None:
    """Guards: frame limits, tag checks, message shape checks (Hello, Results, unexpected kinds), and
    the rule that a result counts only from the slave holding its task.

    Random byte streams from outsiders, and insiders (who know the secret)
    sending malformed Hellos, Results for tasks they do not hold (with wrong
    values), any message kind, undecodable bodies, bad tags, and correct
    answers with absurd compute times. The master must survive every one and
    the computation's answer must stay exact.
    """
    # An insider that takes a task and hangs up is a slave dying with it: after --mw-allowed-failures such deaths
    # the task fails by design (KilledSlaveError), and 50 examples can hand one task to four of them in a row.
    # What this test guards is that nothing an insider sends corrupts a value or the master, so deaths are not
    # bounded here.
    live = start_live(tmp_path, "--mw-allowed-failures", "1000", client_timeout=CLIENT_TIMEOUT)

    @settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(attack=raw_streams() | insiders())
    @example(attack=Insider("good", (), [], math.nan))  # a NaN compute time once crashed the master
    @example(
        attack=Insider("good", (), [("results", [(t, True, pickle.dumps(-1), 0.0) for t in range(-12, 13)])], None)
    )
    def attack_once(attack: list[bytes] | Insider) -> None:
        if isinstance(attack, Insider):
            play_insider(live, attack)
        else:
            with trust_net.connect(live.port) as sock:
                try:
                    for chunk in attack:
                        sock.sendall(chunk)
                except OSError:
                    pass
        assert live.master.alive(), live.master.err()

    attack_once()
    live.progresses()
    live.finish()

"""The wire vocabulary (mwpy.wire.protocol) in this process, at its edges (docs/mutation.md).

Real masters and slaves exercise the protocol in child processes, where
mutation testing cannot see; tests/test_protocol_sessions.py drives both
sessions in memory, but both sides share every helper, so a change to a proof
label, a size limit or an encoding passes there as long as it is the same on
both ends. These tests pin what a peer built from another copy of mwpy (same
protocol version) relies on: the documented frame and proof formats, the
limits at their exact edges, the exact refusal messages (the audit log and the
slave's last line quote them), and how values and failures travel.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
import socket
import ssl
import struct
import threading
import warnings
from pathlib import Path

import pytest

from mwpy.errors import ConfigurationError, ProtocolError
from mwpy.wire import protocol
from mwpy.wire.protocol import Heartbeat, Hello, Results, Shutdown

ROOT = Path(__file__).resolve().parents[1]
CERT = ROOT / "tests" / "data" / "tls-cert.pem"
KEY = ROOT / "tests" / "data" / "tls-key.pem"
#: SHA-256 of tests/data/tls-cert.pem (``openssl x509 -noout -fingerprint -sha256``).
CERT_FINGERPRINT = "545d4ef767555970b8c5443410d77277bf1359dd4dcde498ae32ccb096ca0184"

SECRET = bytes(range(32))
MASTER_NONCE = b"\x01" * protocol.NONCE_SIZE
SLAVE_NONCE = b"\x02" * protocol.NONCE_SIZE


def spec_mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def spec_tag(key: bytes, data: bytes) -> bytes:
    """A frame's tag since protocol 4: keyed BLAKE2b (RFC 7693) with a 16-byte digest."""
    return hashlib.blake2b(data, key=key, digest_size=16).digest()


# ---------------------------------------------------------------------- the documented formats


def test_the_handshake_proofs_and_keys_follow_the_documented_format() -> None:
    """HMAC-SHA256 of the secret over a label and both nonces; a peer of another build must agree."""
    assert protocol.challenge(MASTER_NONCE) == struct.pack("!I", 37) + b"MWPY\x0c" + MASTER_NONCE
    assert protocol.parse_challenge(b"MWPY\x0c" + MASTER_NONCE) == MASTER_NONCE
    nonces = MASTER_NONCE + SLAVE_NONCE
    assert protocol.slave_proof(SECRET, MASTER_NONCE, SLAVE_NONCE) == spec_mac(SECRET, b"mwpy slave proof" + nonces)
    assert protocol.master_proof(SECRET, MASTER_NONCE, SLAVE_NONCE) == spec_mac(SECRET, b"mwpy master proof" + nonces)
    # Pinned too, so that a mistake shared by this test and the code cannot hide.
    assert protocol.slave_proof(SECRET, MASTER_NONCE, SLAVE_NONCE).hex().startswith("a254ecf84049a461")
    assert protocol.master_proof(SECRET, MASTER_NONCE, SLAVE_NONCE).hex().startswith("f14fa0f81284b0f1")
    assert protocol.proofs_match(b"x" * 32, b"x" * 32)
    assert not protocol.proofs_match(b"x" * 32, b"y" * 32)


def test_every_frame_carries_a_tag_over_its_sequence_number_and_body() -> None:
    """4-byte length, kind and pickled fields, then the 16-byte keyed BLAKE2b of (seq || body)."""
    nonces = MASTER_NONCE + SLAVE_NONCE
    m2s = spec_mac(SECRET, b"mwpy key m2s" + nonces)
    s2m = spec_mac(SECRET, b"mwpy key s2m" + nonces)
    master = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    slave = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    for seq in range(2):
        body = bytes([Heartbeat.kind]) + pickle.dumps((0, (0, 0, 0, 0)), protocol.PICKLE_PROTOCOL)  # peak, cache
        tag = spec_tag(m2s, struct.pack("!Q", seq) + body)
        frame = master.seal(Heartbeat())
        assert frame == struct.pack("!I", len(body) + 16) + body + tag
        assert slave.open(frame[4:]) == Heartbeat()
    body = protocol.results_body([(1, True, b"v", 0.5)])
    frame = slave.seal_body(body)
    assert frame[4:] == body + spec_tag(s2m, struct.pack("!Q", 0) + body)
    assert master.open(frame[4:]) == Results([(1, True, b"v", 0.5)])


def test_every_message_record_travels_as_itself() -> None:
    master = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    slave = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    to_slave: list[protocol.Message] = [
        protocol.Welcome("s1", 3, 0.25, 4096),
        protocol.Refuse("why"),
        protocol.Tasks([(1, "f", b"a")], {1: 2.0}),
        Heartbeat(),
        Shutdown(7),
        protocol.Cancel([1, 2]),
    ]
    for msg in to_slave:
        assert slave.open(master.seal(msg)[4:]) == msg
    to_master: list[protocol.Message] = [
        Hello("m", "h", 1, "1.0", 4096),
        Results([], {1: ("o", "e")}),
        protocol.Cancelled([3]),
    ]
    for msg in to_master:
        assert master.open(slave.seal(msg)[4:]) == msg


def test_a_challenge_from_something_else_is_refused_with_its_reason() -> None:
    good = b"MWPY\x0c" + MASTER_NONCE
    for bad in (b"HTTP\x0a" + MASTER_NONCE, good[:-1], good + b"x"):
        with pytest.raises(ProtocolError, match=r"^the peer is not an mwpy master$"):
            protocol.parse_challenge(bad)
    with pytest.raises(ProtocolError, match=r"^master speaks protocol 13, this slave speaks 12$"):
        protocol.parse_challenge(b"MWPY\x0d" + MASTER_NONCE)


def test_frames_at_the_size_limit_pass_and_one_byte_more_is_refused() -> None:
    reader = protocol.FrameReader(10)
    reader.feed(protocol.frame(b"x" * 10)[:3])
    assert reader.next() is None  # not even a whole header yet
    reader.feed(protocol.frame(b"x" * 10)[3:-1])
    assert reader.next() is None  # the header, not the whole body
    reader.feed(b"x" + protocol.frame(b""))
    assert reader.next() == b"x" * 10
    assert reader.next() == b""
    assert reader.next() is None
    reader.feed(protocol.HEADER.pack(11))
    with pytest.raises(ProtocolError, match=r"^frame of 11 bytes exceeds the limit of 10$"):
        reader.next()


def test_a_frame_too_short_to_hold_a_tag_or_a_payload_is_refused() -> None:
    nonces = MASTER_NONCE + SLAVE_NONCE
    s2m = spec_mac(SECRET, b"mwpy key s2m" + nonces)
    with pytest.raises(ProtocolError, match=r"^frame too short$"):
        protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True).open(b"\x05" * protocol.TAG_SIZE)
    kind_only = bytes([Heartbeat.kind])  # shortest frame that can carry a tag: authenticated, but no payload
    tagged = kind_only + spec_tag(s2m, struct.pack("!Q", 0) + kind_only)
    with pytest.raises(ProtocolError, match=r"^undecodable frame: "):
        protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True).open(tagged)


# ---------------------------------------------------------------------- splitting groups into frames


def test_an_item_fits_when_it_and_the_overheads_make_the_frame_exactly() -> None:
    limit = 1000
    edge = limit - protocol.ITEM_OVERHEAD - protocol.FRAME_OVERHEAD
    assert protocol.fits(edge, limit)
    assert not protocol.fits(edge + 1, limit)


def test_pack_splits_by_group_and_by_frame_size_in_order() -> None:
    item = protocol.ITEM_OVERHEAD
    frame = protocol.FRAME_OVERHEAD
    assert list(protocol.pack([], 3, 10_000)) == []
    assert list(protocol.pack([10] * 7, 3, 10_000)) == [(0, 3), (3, 6), (6, 7)]  # by group
    # Frames of exactly two 100-byte items: a third would pass the limit by one byte.
    limit = frame + 2 * (100 + item)
    assert list(protocol.pack([100] * 5, 10, limit)) == [(0, 2), (2, 4), (4, 5)]
    assert list(protocol.pack([100] * 3, 10, limit - 1)) == [(0, 1), (1, 2), (2, 3)]
    assert list(protocol.pack([100, 30, 100], 10, limit)) == [(0, 2), (2, 3)]


# ---------------------------------------------------------------------- checks of what a peer sends


def test_a_results_message_of_the_wrong_shape_is_refused_naming_what_is_wrong() -> None:
    ok = (1, True, b"v", 0.5)
    protocol.check_results(Results([ok, (2, False, b"", 0.0)], {1: ("o", "e")}))  # zero compute time is fine
    for items in ("x", (ok,)):
        with pytest.raises(ProtocolError, match=r"^malformed Results message$"):
            protocol.check_results(Results(items))  # type: ignore[arg-type]
    for item in (
        [1, True, b"v", 0.5],
        (1, True, b"v"),
        (1, True, b"v", 0.5, 0),
        ("1", True, b"v", 0.5),
        (1, 1, b"v", 0.5),
        (1, True, "v", 0.5),
        (1, True, b"v", 1),
        (1, True, b"v", -0.001),
        (1, True, b"v", float("nan")),
    ):
        with pytest.raises(ProtocolError, match=r"^malformed result in a Results message$"):
            protocol.check_results(Results([ok, item]))  # type: ignore[list-item]
    with pytest.raises(ProtocolError, match=r"^malformed Results message$"):
        protocol.check_results(Results([ok], [(1, ("o", "e"))]))  # type: ignore[arg-type]
    for outputs in ({"1": ("o", "e")}, {1: ["o", "e"]}, {1: ("o",)}, {1: (b"o", "e")}, {1: ("o", None)}):
        with pytest.raises(ProtocolError, match=r"^malformed output in a Results message$"):
            protocol.check_results(Results([ok], outputs))  # type: ignore[arg-type]


def test_a_hello_of_the_wrong_shape_is_refused() -> None:
    protocol.check_hello(Hello("m", "h", 1, "1.0", 1))
    for bad in (
        Hello(1, "h", 1, "1.0", 10),  # type: ignore[arg-type]
        Hello("m", None, 1, "1.0", 10),  # type: ignore[arg-type]
        Hello("m", "h", "1", "1.0", 10),  # type: ignore[arg-type]
        Hello("m", "h", 1, 1.0, 10),  # type: ignore[arg-type]
        Hello("m", "h", 1, "1.0", 10.0),  # type: ignore[arg-type]
        Hello("m", "h", 1, "1.0", 0),
    ):
        with pytest.raises(ProtocolError, match=r"^malformed Hello message$"):
            protocol.check_hello(bad)


def test_cancel_lists_must_be_lists_of_task_ids() -> None:
    protocol.check_task_ids(protocol.Cancel([]))
    protocol.check_task_ids(protocol.Cancelled([1, 2]))
    for bad in ((1,), [1, "2"], [True]):
        with pytest.raises(ProtocolError, match=r"^malformed Cancelled message$"):
            protocol.check_task_ids(protocol.Cancelled(bad))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- TLS


def test_the_master_s_tls_context_uses_the_separate_key_and_reports_the_fingerprint() -> None:
    context, fingerprint = protocol.tls_server_context(str(CERT), str(KEY))
    assert fingerprint == CERT_FINGERPRINT
    assert isinstance(context, ssl.SSLContext)


def test_a_certificate_that_is_not_ascii_pem_is_refused_at_reading(tmp_path: Path) -> None:
    broken = tmp_path / "cert.pem"
    broken.write_bytes(CERT.read_bytes() + "Résumé: a comment after the block\n".encode())
    with pytest.raises(ConfigurationError, match=rf"^--mw-tls-cert: cannot use {broken}: .*codec can't decode"):
        protocol.tls_server_context(str(broken), str(KEY))


def test_a_slave_completes_tls_with_the_master_and_pins_its_certificate_by_fingerprint() -> None:
    """The slave's context checks no CA and no host name; the fingerprint check is what trusts the master."""
    server_context, fingerprint = protocol.tls_server_context(str(CERT), str(KEY))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a context without a protocol: deprecated, a warning on every start
        client_context = protocol.tls_client_context()
    assert client_context.minimum_version is ssl.TLSVersion.TLSv1_2
    server_side, client_side = socket.socketpair()
    with server_side, client_side:
        server_side.settimeout(30)
        client_side.settimeout(30)
        served: list[ssl.SSLSocket | BaseException] = []

        def serve() -> None:
            try:
                served.append(server_context.wrap_socket(server_side, server_side=True))
            except (OSError, ValueError) as exc:
                served.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        client = client_context.wrap_socket(client_side)  # no server_hostname: the fingerprint does the trusting
        thread.join(30)
        [server] = served
        assert isinstance(server, ssl.SSLSocket), server
        with client, server:
            assert protocol.certificate_matches(client, fingerprint)
            assert not protocol.certificate_matches(client, "ab" * 32)
            assert client.version() in ("TLSv1.2", "TLSv1.3")


def test_an_authenticated_frame_that_is_no_message_is_refused_naming_the_kind() -> None:
    master = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    slave = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    with pytest.raises(ProtocolError, match=r"^unknown message kind 99$"):
        slave.open(master.seal_body(b"\x63" + pickle.dumps(()))[4:])
    with pytest.raises(ProtocolError, match=r"^unknown message kind 4$"):
        slave.open(master.seal_body(bytes([protocol.Tasks.kind]) + pickle.dumps([[]]))[4:])  # fields not a tuple
    with pytest.raises(ProtocolError, match=r"^malformed Shutdown message: "):
        slave.open(master.seal_body(bytes([Shutdown.kind]) + pickle.dumps((0, 1, 2)))[4:])  # too many fields


def test_a_frame_with_a_wrong_tag_or_out_of_sequence_is_refused() -> None:
    master = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    slave = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    first, second = master.seal(Heartbeat())[4:], master.seal(Heartbeat())[4:]
    tampered = first[:-1] + bytes([first[-1] ^ 1])
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        slave.open(tampered)
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        slave.open(second)  # the first has not been read: a replay or a reordering
    assert slave.open(first) == Heartbeat()
    assert slave.open(second) == Heartbeat()


def test_verify_body_checks_tag_and_sequence_and_returns_the_data_unpickled() -> None:
    """mwpy/data/'s frames carry JSON and file bytes: checked exactly as messages are, never unpickled."""
    master = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=True)
    slave = protocol.derive_channel(SECRET, MASTER_NONCE, SLAVE_NONCE, is_master=False)
    first, second = master.seal_body(b"Gnot a pickle")[4:], master.seal_body(b"D")[4:]
    with pytest.raises(ProtocolError, match=r"^frame too short$"):
        slave.verify_body(b"\x05" * protocol.TAG_SIZE)
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        slave.verify_body(first[:-1] + bytes([first[-1] ^ 1]))
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        slave.verify_body(second)  # out of sequence
    assert slave.verify_body(first) == b"Gnot a pickle"
    assert slave.verify_body(second) == b"D"  # the shortest frame: a kind byte and its tag
    with pytest.raises(ProtocolError, match=r"^frame failed authentication$"):
        slave.verify_body(second)  # replayed

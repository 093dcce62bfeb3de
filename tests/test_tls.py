"""TLS (security.md): an encrypted, certificate-pinned link between master and slaves.

Masters are started with tests/data/tls-cert.pem and tls-key.pem; slaves learn
the certificate's fingerprint from the resource file. A recording TCP proxy
between a slave and its master shows what crosses the network.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import attrs
import pytest

from mwpy import ExitCode, resource_file
from mwpy.wire import protocol
from tests.programs import trust_net
from tests.programs.trust_net import Proxy, local_port
from tests.support import ROOT, TRUST_STREAM, Live, spawn_master, spawn_slave, start_live

CERT = ROOT / "tests" / "data" / "tls-cert.pem"
KEY = ROOT / "tests" / "data" / "tls-key.pem"
TLS = ("--mw-tls-cert", str(CERT), "--mw-tls-key", str(KEY))
MARKER = "MWPY-SECRET-PAYLOAD-7f3a9c"
CLIENT_TIMEOUT = 4
#: Long enough for results to arrive before stalled peers are dropped on a loaded machine.
STALL_TIMEOUT = 15
DEADLINE = 60.0


@pytest.fixture
def live(tmp_path: Path) -> Live:
    return start_live(tmp_path, *TLS, client_timeout=CLIENT_TIMEOUT)


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_tls_computation_completes_and_nothing_readable_crosses_the_network(tmp_path: Path, tls: bool) -> None:
    """Guards: with --mw-tls-cert, tasks and results travel encrypted (TLS 1.2+), pinned by fingerprint.

    The only slave talks to the master through a recording proxy. Its tasks'
    arguments and results carry a marker string: readable on the wire
    without TLS (so the sniffing works), nowhere to be seen with it.
    """
    master = spawn_master(
        TRUST_STREAM,
        tmp_path,
        *(TLS if tls else ()),
        "--mw-audit-file",
        str(tmp_path / "master.audit"),
        "echo",
        MARKER,
        "20",
    )
    record = resource_file.read(tmp_path / "resource.json")
    assert (record.tls_fingerprint is not None) == tls
    proxy = Proxy(record.master_port)
    try:
        slave = spawn_slave(TRUST_STREAM, tmp_path, "--mw-master-port", str(proxy.port))
        assert master.wait(DEADLINE) == 0, master.err()
        assert slave.wait(DEADLINE) == 0, slave.err()
    finally:
        proxy.close()
    summary = master.json_lines()[-1]["summary"]
    assert summary["received"] == summary["submitted"] == 20
    (wire,) = proxy.connections
    to_slave, to_master = bytes(wire.s2c), bytes(wire.c2s)
    if tls:
        assert to_slave[:1] == to_master[:1] == b"\x16"  # TLS handshake records
        assert MARKER.encode() not in to_slave + to_master
        assert b"MWPY" not in to_slave  # not even the challenge is in clear
    else:
        assert MARKER.encode() in to_slave  # task arguments
        assert f"{MARKER}-3:echoed".encode() in to_master  # results


def test_slave_pinning_another_fingerprint_is_refused(live: Live) -> None:
    """Guards: a slave accepts only the master certificate with the pinned SHA-256 fingerprint.

    Given another fingerprint (as from a rogue master's resource file), the
    slave exits 5 before proving membership to it.
    """
    wrong = spawn_slave(TRUST_STREAM, live.workdir, "--mw-tls-fingerprint", "ab" * 32)
    assert wrong.wait(DEADLINE) == ExitCode.REFUSED
    err = wrong.err().strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert "wrong fingerprint" in err
    sid_lines = [line for line in live.audit.lines() if f", pid {wrong.pid}, " in line]
    assert sid_lines == []  # it never joined
    live.progresses()
    live.finish()


def _client_hello() -> bytes:
    """The first bytes a TLS client sends (a real ClientHello)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = protocol.tls_client_context().wrap_bio(incoming, outgoing)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_plain_and_stalled_clients_are_dropped_while_the_tls_master_works_on(tmp_path: Path) -> None:
    """Guards: the master steps TLS handshakes without blocking and drops failed or stalled ones.

    A plain client speaking mwpy's handshake is cut off at once; a silent
    one and one stalled half-way through its ClientHello are dropped after
    the client timeout, and results keep coming meanwhile. A real slave
    without TLS gives up (status 5): it never gets a challenge.
    """
    live = start_live(tmp_path, *TLS, client_timeout=STALL_TIMEOUT)  # progress must come first, even on a busy host
    plain = trust_net.connect(live.port)
    plain.sendall(protocol.frame(protocol.new_nonce() + protocol.new_nonce()))
    silent = trust_net.connect(live.port)
    stalled = trust_net.connect(live.port)
    hello = _client_hello()
    stalled.sendall(hello[: len(hello) // 2])
    live.progresses(5)
    assert trust_net.connected(silent), "the master stalled on a handshake"
    assert trust_net.connected(stalled), "the master stalled on a handshake"

    record = resource_file.read(live.workdir / "resource.json")
    no_tls = live.workdir / "no-tls.json"
    resource_file.write(no_tls, attrs.evolve(record, tls_fingerprint=None))
    unaware = spawn_slave(TRUST_STREAM, live.workdir, resource=no_tls)

    assert trust_net.still_open([plain, silent, stalled], DEADLINE) == []
    assert live.audit.peer_dropped(local_port(plain)).startswith("TLS handshake failed")
    for sock in (silent, stalled):
        assert live.audit.peer_dropped(local_port(sock)) == f"silent for {STALL_TIMEOUT} s (client timeout)"
    for sock in (plain, silent, stalled):
        sock.close()
    assert unaware.wait(DEADLINE) == ExitCode.REFUSED
    assert "Traceback" not in unaware.err()
    live.progresses()
    live.finish()


#: The client timeout of the unproven-peer test: the peer finishes TLS half-way through it.
PROOF_TIMEOUT = 6


def test_a_peer_that_completes_tls_and_stays_silent_is_dropped_one_client_timeout_after_it_connected(
    tmp_path: Path,
) -> None:
    """Guards (issue 11 item 5): TLS and the proof share one client timeout, counted from accept.

    The peer takes half the client timeout to complete TLS, then says nothing. Were the timer
    restarted when TLS completes (the old defect), the master could drop it no sooner than one
    whole client timeout after that; it must drop it before, at one timeout after it connected.
    """
    live = start_live(tmp_path, *TLS, client_timeout=PROOF_TIMEOUT)
    raw = trust_net.connect(live.port)
    port = local_port(raw)
    time.sleep(PROOF_TIMEOUT / 2)  # the slow peer itself, not a wait for an outcome
    tls = protocol.tls_client_context().wrap_socket(raw)
    tls_done = time.monotonic()
    tls.settimeout(DEADLINE)
    try:
        while tls.recv(4096):  # the challenge, then nothing until the master hangs up
            pass
    except OSError:
        pass  # a reset or an unclean TLS close: hung up all the same
    hung_up = time.monotonic()
    tls.close()
    assert hung_up - tls_done < PROOF_TIMEOUT, "the unproven peer got a second client timeout after TLS"
    assert live.audit.peer_dropped(port) == f"silent for {PROOF_TIMEOUT} s (client timeout)"
    live.progresses()
    live.finish()

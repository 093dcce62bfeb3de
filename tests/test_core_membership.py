"""Who may join: member id, secret, and frame-size limits, with real masters, slaves and raw sockets.

A refused or misbehaving peer must be turned away without disturbing the
computation: every test ends with a good slave finishing the master's work.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import mwpy
from mwpy import ExitCode, resource_file
from mwpy.wire import protocol
from mwpy.wire.protocol import FrameReader
from tests.programs.workload import blob, size_of, square
from tests.support import PROGRAMS, Proc, audit_lines, local_master, spawn_master, spawn_slave

WORKLOAD = PROGRAMS / "workload.py"


def squares_printed(master: Proc, count: int) -> None:
    """The master ran ``run COUNT`` to the end: exit 0 and every square printed once."""
    assert master.wait() == 0, master.err()
    assert sorted(line["value"] for line in master.json_lines()) == [i * i for i in range(count)]


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_slave_with_the_wrong_member_id_is_refused_and_the_master_keeps_working(tmp_path: Path) -> None:
    audit = tmp_path / "master.audit"
    master = spawn_master(WORKLOAD, tmp_path, "--mw-member-id", "right", "--mw-audit-file", str(audit), "run", "20")
    wrong = spawn_slave(WORKLOAD, tmp_path, "--mw-member-id", "wrong")  # after the file: overrides its member id
    assert wrong.wait() == ExitCode.REFUSED
    assert "member id 'wrong' does not match" in one_line(wrong.err())

    good = spawn_slave(WORKLOAD, tmp_path)
    squares_printed(master, 20)
    assert good.wait() == 0
    refused = [line for line in audit_lines(audit.read_text()) if line.startswith("REFUSED")]
    assert len(refused) == 1
    assert "'wrong'" in refused[0]


def test_slave_with_the_wrong_secret_is_refused(tmp_path: Path) -> None:
    audit = tmp_path / "master.audit"
    master = spawn_master(WORKLOAD, tmp_path, "--mw-audit-file", str(audit), "run", "5")
    secret = tmp_path / "other.secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)  # a secret others can read is refused
    wrong = spawn_slave(WORKLOAD, tmp_path, "--mw-secret-file", str(secret))
    assert wrong.wait() == ExitCode.REFUSED
    assert "refused our proof of membership" in one_line(wrong.err())

    good = spawn_slave(WORKLOAD, tmp_path)
    squares_printed(master, 5)
    assert good.wait() == 0
    assert any("wrong proof of membership" in line for line in audit_lines(audit.read_text()))


def test_task_bigger_than_the_slave_s_read_buffer_fails_as_task_too_large(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path) as lm:
        slave = lm.start_slave("--mw-max-read-buffer-size", "4096")
        big = size_of.submit(b"x" * 100_000).task_id
        small = size_of.submit(b"x" * 100).task_id
        failed = lm.result_of(big)
        assert failed.error is not None
        assert failed.error.type == "TaskTooLarge"
        assert "4096" in failed.error.message
        assert lm.result_of(small).value == 100
        assert lm.result_of(square.submit(5).task_id).value == 25
        assert slave.alive()


def test_result_bigger_than_the_master_s_read_buffer_fails_as_result_too_large_without_retries(
    tmp_path: Path,
) -> None:
    # default attempts (3): a failure that would recur on any slave must still be handed over at once
    with local_master(WORKLOAD, tmp_path, "--mw-max-read-buffer-size", "4096") as lm:
        slave = lm.start_slave()
        failed = lm.result_of(blob.submit(100_000).task_id)
        assert failed.error is not None
        assert failed.error.type == "ResultTooLarge"
        assert "4096" in failed.error.message
        assert "queued to run again" not in lm.audit_text()
        assert lm.result_of(blob.submit(100).task_id).value == b"x" * 100
        assert slave.alive()
        assert set(lm.mw.connected_slaves().values()) == {mwpy.SlaveKind.UNORDERED}


# ---------------------------------------------------------------------- raw sockets


def read_frame(sock: socket.socket, reader: FrameReader) -> bytes:
    while (body := reader.next()) is None:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the master closed the connection")
        reader.feed(data)
    return body


def cut_off(sock: socket.socket) -> bool:
    """Read until the master hangs up (True) or 10 s pass (False)."""
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_unauthenticated_peer_announcing_a_huge_frame_is_cut_off(tmp_path: Path) -> None:
    audit = tmp_path / "master.audit"
    master = spawn_master(WORKLOAD, tmp_path, "--mw-audit-file", str(audit), "run", "5")
    port = resource_file.read(tmp_path / "resource.json").master_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        protocol.parse_challenge(read_frame(sock, FrameReader(protocol.MAX_HANDSHAKE_FRAME)))
        sock.sendall(protocol.HEADER.pack(2**31))
        assert cut_off(sock)
    good = spawn_slave(WORKLOAD, tmp_path)
    squares_printed(master, 5)
    assert good.wait() == 0
    assert any("exceeds the limit" in line for line in audit_lines(audit.read_text()))


def test_member_announcing_a_frame_over_max_read_buffer_size_is_cut_off(tmp_path: Path) -> None:
    """A peer that knows the secret (it reads the resource file) still may not send oversized frames."""
    audit = tmp_path / "master.audit"
    limit = 65536
    master = spawn_master(
        WORKLOAD, tmp_path, "--mw-max-read-buffer-size", str(limit), "--mw-audit-file", str(audit), "run", "10"
    )
    record = resource_file.read(tmp_path / "resource.json")
    assert record.secret is not None
    secret = bytes.fromhex(record.secret)
    with socket.create_connection(("127.0.0.1", record.master_port), timeout=10) as sock:
        reader = FrameReader(protocol.MAX_HANDSHAKE_FRAME)
        master_nonce = protocol.parse_challenge(read_frame(sock, reader))
        slave_nonce = protocol.new_nonce()
        sock.sendall(protocol.frame(slave_nonce + protocol.slave_proof(secret, master_nonce, slave_nonce)))
        proof = read_frame(sock, reader)
        assert protocol.proofs_match(protocol.master_proof(secret, master_nonce, slave_nonce), proof)
        channel = protocol.derive_channel(secret, master_nonce, slave_nonce, is_master=False)
        sock.sendall(channel.seal(protocol.Hello(record.member_id, "raw", os.getpid(), "0", 1 << 20)))
        reader.max_size = 1 << 20
        welcome = channel.open(read_frame(sock, reader))
        assert isinstance(welcome, protocol.Welcome)
        assert welcome.max_frame == limit  # the master tells members its limit...
        sock.sendall(protocol.HEADER.pack(limit + 1) + b"\0" * 1024)  # ...and cuts off one that ignores it
        assert cut_off(sock)

    good = spawn_slave(WORKLOAD, tmp_path)
    squares_printed(master, 10)  # a task the raw peer was sent is run again by the good slave
    assert good.wait() == 0
    lines = audit_lines(audit.read_text())
    assert any(f"frame of {limit + 1} bytes exceeds the limit of {limit}" in line for line in lines)

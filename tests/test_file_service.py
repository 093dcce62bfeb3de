"""The master's file service is as safe as the task channel (issue 22 item 5, docs/security.md).

Each test runs the real :class:`~mwpy.data.server.FileServer` (in its own
process, tests/programs/file_service.py, where a test limits its threads or
descriptors as an attacker would exhaust them) and talks to it over real
sockets: honest slaves (:class:`~mwpy.data.client.FileClient`) that must
keep fetching, and outsiders without the secret that must get nothing, hold
no thread, and be gone one client timeout after they connected.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import secrets
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import psutil
import pytest

from mwpy import resource_file
from mwpy.data import link as data_link
from mwpy.data import server as data_server
from mwpy.data.client import FileClient
from mwpy.data.landing import UPLOAD_PREFIX
from mwpy.data.server import FileServer
from mwpy.data.service import FileServiceError
from mwpy.jobs.command import PROGRAM as JOBS
from mwpy.jobs.outputs import Destination, JobOutputs
from mwpy.wire import protocol
from tests.programs.file_service import MEMBER, SECRET
from tests.programs.trust_net import Proxy
from tests.support import PROGRAMS, PYTHON, ROOT, spawn_master, spawn_slave, wait_until

SERVICE = PROGRAMS / "file_service.py"
PEERS = PROGRAMS / "peer_files.py"
CERT = ROOT / "tests" / "data" / "tls-cert.pem"
KEY = ROOT / "tests" / "data" / "tls-key.pem"
#: The content every test fetches: recognisable on the wire.
CONTENT = b"MWPY-FILE-SERVICE-PAYLOAD " * 4096
#: Deadline for anything to happen on a loaded machine.
DEADLINE = 60.0
#: The service's client timeout in these tests: short, so outsiders go quickly.
CLIENT_TIMEOUT = 3.0
#: Where cgroup v1 keeps its pids controller (the limit a container's or a user's thread cap is).
PIDS = Path("/sys/fs/cgroup/pids")


@attrs.define
class Service:
    process: subprocess.Popen[bytes]
    port: int
    digest: str
    err_path: Path

    def threads(self) -> int:
        return int(psutil.Process(self.process.pid).num_threads())

    def fetch(self, target: Path, fingerprint: str | None = None) -> bytes:
        """One honest slave's fetch, on a connection of its own (a full handshake every time)."""
        client = FileClient("127.0.0.1", self.port, SECRET, MEMBER, fingerprint)
        try:
            client.fetch(self.digest, target)
        finally:
            client.close()
        return target.read_bytes()

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")


@contextlib.contextmanager
def service(tmp_path: Path, *args: str, descriptors: int | None = None) -> Iterator[Service]:
    """The file service in its own process; ``descriptors`` caps its open files once it has started."""
    data = tmp_path / "data"
    data.write_bytes(CONTENT)
    err_path = tmp_path / f"service-{secrets.token_hex(3)}.err"
    with err_path.open("wb") as err:
        process = subprocess.Popen(
            [PYTHON, str(SERVICE), str(data), "--client-timeout", str(CLIENT_TIMEOUT), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], DEADLINE)
        assert ready, "the file service did not start"
        started = json.loads(process.stdout.readline())
        if descriptors is not None:
            resource.prlimit(process.pid, resource.RLIMIT_NOFILE, (descriptors, descriptors))
        yield Service(process, started["port"], started["digest"], err_path)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def outsiders(port: int, count: int) -> list[socket.socket]:
    """``count`` connections without the secret: half say nothing, half send half a proof and stall."""
    held = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        if number % 2:
            sock.sendall(protocol.HEADER.pack(protocol.RESPONSE_SIZE) + b"\0" * 10)
        held.append(sock)
    return held


def dropped(sock: socket.socket, within: float) -> bool:
    """Whether the service hangs up on ``sock`` within ``within`` seconds (whatever it sent first)."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:  # closed with bytes of ours unread: a hang-up all the same
        return True
    except TimeoutError:
        return False
    return False


@contextlib.contextmanager
def no_new_threads(pid: int) -> Iterator[Path]:
    """Put process ``pid`` into a pids cgroup that allows it no thread beyond those it has (the limit a
    container, a batch system's slot or ``ulimit -u`` sets); yield the group. Skips without cgroup v1 pids."""
    if not os.access(PIDS / "cgroup.procs", os.W_OK):
        pytest.skip(f"no writable cgroup pids controller at {PIDS}")
    group = PIDS / f"mwpy-test-{os.getpid()}-{secrets.token_hex(4)}"
    group.mkdir()
    try:
        (group / "pids.max").write_text(str(psutil.Process(pid).num_threads()))
        (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        with contextlib.suppress(OSError):  # back to the root group (the process may be gone)
            (PIDS / "cgroup.procs").write_text(str(pid))
        group.rmdir()


def test_an_outsider_under_a_thread_limit_neither_holds_a_thread_nor_stops_slaves_fetching(tmp_path: Path) -> None:
    """Guards: no unauthenticated peer holds a thread; nothing an outsider does makes the service start one, so
    a thread limit cannot kill its accept loop (before, one thread per connection: the accept thread died and
    slaves that connected later fetched nothing for the rest of the run); outsiders are dropped one client
    timeout after they connected."""
    with service(tmp_path) as svc:
        assert svc.fetch(tmp_path / "first") == CONTENT
        threads = svc.threads()
        with no_new_threads(svc.process.pid) as group:
            probe = subprocess.Popen(  # the limit bites: a process put in the group cannot start a thread
                [PYTHON, "-c", "import sys, threading; sys.stdin.read(); threading.Thread(target=print).start()"],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            (group / "cgroup.procs").write_text(str(probe.pid))
            _, complaint = probe.communicate("", timeout=DEADLINE)
            assert probe.returncode != 0
            assert "can't start new thread" in complaint
            held = outsiders(svc.port, 300)
            try:
                for round_ in range(20):  # honest slaves keep fetching while the outsiders sit there
                    assert svc.fetch(tmp_path / f"got-{round_}") == CONTENT
                assert svc.threads() == threads
                started = time.monotonic()
                assert all(dropped(sock, CLIENT_TIMEOUT + DEADLINE) for sock in held)
                assert time.monotonic() - started < CLIENT_TIMEOUT + DEADLINE
                assert svc.fetch(tmp_path / "last") == CONTENT
            finally:
                for sock in held:
                    sock.close()
    assert "Traceback" not in svc.stderr()


def test_out_of_descriptors_the_service_makes_room_and_slaves_keep_fetching(tmp_path: Path) -> None:
    """Guards: an accept loop that cannot be killed by EMFILE. With 48 descriptors and 120 outsiders holding
    connections, the oldest outsider that had its chance to prove itself is dropped to let the next caller in,
    so slaves waiting in the backlog are served."""

    with service(tmp_path, descriptors=48) as svc:
        held = outsiders(svc.port, 120)
        try:
            process = psutil.Process(svc.process.pid)
            wait_until(lambda: process.num_fds() == 48, DEADLINE, "the service to run out of descriptors")
            for round_ in range(10):
                assert svc.fetch(tmp_path / f"got-{round_}") == CONTENT
        finally:
            for sock in held:
                sock.close()
        assert svc.process.poll() is None
    assert "Traceback" not in svc.stderr()


def test_a_bounded_number_of_connections(tmp_path: Path) -> None:
    """Guards: at most --max-connections; a slave still gets in (the oldest outsider makes room)."""
    with service(tmp_path, "--max-connections", "10") as svc:
        held = outsiders(svc.port, 40)
        try:
            assert svc.fetch(tmp_path / "got") == CONTENT
            connections = [c for c in psutil.Process(svc.process.pid).net_connections() if c.status == "ESTABLISHED"]
            assert len(connections) <= 10
        finally:
            for sock in held:
                sock.close()


def test_garbage_and_oversized_frames_before_the_proof_are_dropped_at_once(tmp_path: Path) -> None:
    with service(tmp_path) as svc:
        for opening in (protocol.HEADER.pack(1 << 30), b"GET / HTTP/1.1\r\n\r\n" * 10, os.urandom(4096)):
            with socket.create_connection(("127.0.0.1", svc.port)) as sock:
                sock.sendall(opening)
                assert dropped(sock, CLIENT_TIMEOUT - 1)  # sooner than the client timeout
        assert svc.fetch(tmp_path / "got") == CONTENT


def test_a_deeply_nested_header_costs_its_connection_and_no_traceback(tmp_path: Path) -> None:
    """Guards: headers go through the strict JSON reader; ``[`` nested past the recursion limit was a
    RecursionError that killed a service thread with a traceback on the master's stderr."""
    with service(tmp_path) as svc:
        with socket.create_connection(("127.0.0.1", svc.port), timeout=DEADLINE) as sock:
            link = data_link.client_handshake(sock, SECRET, MEMBER)
            link.send(b"G", b"[" * 200_000)
            assert dropped(sock, DEADLINE)
        assert svc.fetch(tmp_path / "got") == CONTENT
    assert "Traceback" not in svc.stderr()
    assert "RecursionError" not in svc.stderr()


def test_with_tls_nothing_readable_crosses_the_network_and_the_certificate_is_pinned(tmp_path: Path) -> None:
    """Guards: TLS whenever the master uses TLS, with the master's certificate and the slaves' pinned fingerprint."""
    context, fingerprint = protocol.tls_server_context(str(CERT), str(KEY))
    server = FileServer(SECRET, MEMBER, tls=context, client_timeout=CLIENT_TIMEOUT)
    data = tmp_path / "data"
    data.write_bytes(CONTENT)
    digest, _ = server.publish(str(data))
    proxy = Proxy(server.port)
    try:
        client = FileClient("127.0.0.1", proxy.port, SECRET, MEMBER, fingerprint)
        client.fetch(digest, tmp_path / "got")
        client.close()
        assert (tmp_path / "got").read_bytes() == CONTENT
        wire = b"".join(bytes(c.s2c) + bytes(c.c2s) for c in proxy.connections)
        assert wire[:1] == b"\x16"  # a TLS record
        assert b"MWPY" not in wire
        assert b"FILE-SERVICE-PAYLOAD" not in wire
        wrong = FileClient("127.0.0.1", server.port, SECRET, MEMBER, "0" * 64)
        with pytest.raises(FileServiceError, match="wrong fingerprint"):
            wrong.fetch(digest, tmp_path / "wrong")
        plain = FileClient("127.0.0.1", server.port, SECRET, MEMBER)
        with pytest.raises(FileServiceError):
            plain.fetch(digest, tmp_path / "plain")
        assert not (tmp_path / "wrong").exists()
        assert not (tmp_path / "plain").exists()
    finally:
        proxy.close()
        server.close()


def test_without_tls_the_same_fetch_is_readable_on_the_wire(tmp_path: Path) -> None:
    """The sniffing above works: without TLS the content crosses in clear (and is still checked by hash)."""
    server = FileServer(SECRET, MEMBER)
    data = tmp_path / "data"
    data.write_bytes(CONTENT)
    digest, _ = server.publish(str(data))
    proxy = Proxy(server.port)
    try:
        client = FileClient("127.0.0.1", proxy.port, SECRET, MEMBER)
        client.fetch(digest, tmp_path / "got")
        client.close()
        wait_until(lambda: proxy.connections, DEADLINE, "the proxied connection")
        assert b"FILE-SERVICE-PAYLOAD" in b"".join(bytes(c.s2c) for c in proxy.connections)
    finally:
        proxy.close()
        server.close()


def test_mwpy_jobs_with_tls_serves_its_files_over_tls_with_the_master_s_certificate(tmp_path: Path) -> None:
    """End to end: a jobs master started with --mw-tls-cert; its file service (the master's second listening
    port) answers only TLS, with the master's certificate, and a real slave fetches inputs and sends outputs."""
    (tmp_path / "in.txt").write_text("input over TLS\n")
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'cat in.txt > out.txt'\"\ntransfer_input_files = in.txt\nqueue\n"
    )
    master = spawn_master(
        Path(JOBS), tmp_path, "--mw-tls-cert", str(CERT), "--mw-tls-key", str(KEY), "jobs.sub", "--summary", "s.jsonl"
    )
    record = resource_file.read(tmp_path / "resource.json")

    def service_port() -> int | None:
        ports = {c.laddr.port for c in psutil.Process(master.pid).net_connections() if c.status == "LISTEN"}
        others = ports - {record.master_port}
        return others.pop() if others else None

    port = wait_until(service_port, DEADLINE, "the file service to listen")
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            sock.recv(100)  # a plain service would have sent its challenge at once; this one waits for TLS
    context = protocol.tls_client_context()
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)) as tls:
        assert record.tls_fingerprint is not None
        assert protocol.certificate_matches(tls, record.tls_fingerprint)
    slave = spawn_slave(Path(JOBS), tmp_path)
    assert master.wait(DEADLINE) == 0, master.err()
    slave.wait(DEADLINE)
    assert (tmp_path / "out.txt").read_text() == "input over TLS\n"


def test_a_file_changed_after_it_was_offered_is_never_taken_for_its_hash(tmp_path: Path) -> None:
    """Guards: a fetched file's unframed content (protocol 8) is used only once the whole matches the hash the
    slave asked for; content that differs (same size, or cut short) fails that fetch with one line, leaves
    nothing at the target, and the service goes on serving."""
    server = FileServer(SECRET, MEMBER, client_timeout=CLIENT_TIMEOUT)
    data, kept = tmp_path / "data", tmp_path / "kept"
    data.write_bytes(CONTENT)
    kept.write_bytes(CONTENT + b"kept")
    digest, size = server.publish(str(data))
    kept_digest, _ = server.publish(str(kept))
    client = FileClient("127.0.0.1", server.port, SECRET, MEMBER)
    try:
        data.write_bytes(CONTENT[:-1] + b"!")  # same size, other bytes
        with pytest.raises(FileServiceError, match="does not match its hash"):
            client.fetch(digest, tmp_path / "changed")
        data.write_bytes(CONTENT[: size // 2])  # cut short: the service hangs up rather than leave the slave waiting
        with pytest.raises(FileServiceError, match=digest[:16]):
            client.fetch(digest, tmp_path / "short")
        assert not (tmp_path / "changed").exists()
        assert not (tmp_path / "short").exists()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(UPLOAD_PREFIX)] == []
        client.fetch(kept_digest, tmp_path / "got")
        assert (tmp_path / "got").read_bytes() == CONTENT + b"kept"
    finally:
        client.close()
        server.close()


def test_with_tls_a_file_of_many_reads_arrives_whole(tmp_path: Path) -> None:
    """Under TLS the content cannot be sendfile'd: it is sent in pieces, and a file longer than several
    of them arrives intact, twice on one connection (the conversation stays in step after the raw bytes)."""
    context, fingerprint = protocol.tls_server_context(str(CERT), str(KEY))
    server = FileServer(SECRET, MEMBER, tls=context, client_timeout=CLIENT_TIMEOUT)
    data = tmp_path / "data"
    content = os.urandom(2 * data_link.RAW_CHUNK + 12345)
    data.write_bytes(content)
    digest, _ = server.publish(str(data))
    client = FileClient("127.0.0.1", server.port, SECRET, MEMBER, fingerprint)
    try:
        for name in ("first", "second"):
            assert client.fetch(digest, tmp_path / name) == len(content)
            assert (tmp_path / name).read_bytes() == content
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_outputs_sent_back_to_back_all_land_and_the_connection_serves_on(tmp_path: Path, tls: bool) -> None:
    """A slave sends all of a job's outputs before it reads an answer; the service serves a peer's requests
    in a row while the next one is already there, a turn at a time (``REQUEST_BURST``). More outputs than
    three turns hold each land whole with one answer each, and the same connection then fetches an input."""
    context, fingerprint = protocol.tls_server_context(str(CERT), str(KEY)) if tls else (None, None)
    server = FileServer(SECRET, MEMBER, tls=context, client_timeout=CLIENT_TIMEOUT)
    data = tmp_path / "data"
    data.write_bytes(CONTENT)
    digest, _ = server.publish(str(data))
    landed = tmp_path / "landed"
    landed.mkdir()
    JobOutputs.of(server).expect("job-1", Destination(str(landed), frozenset()))
    sent = tmp_path / "sent"
    sent.mkdir()
    outputs = []
    for number in range(3 * data_server.REQUEST_BURST + 1):
        path = sent / f"out.{number}"
        path.write_bytes(os.urandom(number * 97))
        outputs.append((path.name, path))
    client = FileClient("127.0.0.1", server.port, SECRET, MEMBER, fingerprint)
    try:
        assert client.upload_all("job-1", outputs) == [None] * len(outputs)
        assert client.fetch(digest, tmp_path / "input") == len(CONTENT)
    finally:
        client.close()
        server.close()
    assert sorted(p.name for p in landed.iterdir()) == sorted(name for name, _ in outputs)
    assert all((landed / name).read_bytes() == path.read_bytes() for name, path in outputs)
    assert (tmp_path / "input").read_bytes() == CONTENT


# ---------------------------------------------------------------------- the data plane in any process


def test_a_slave_serves_what_it_holds_to_another_slave_by_content_hash(tmp_path: Path) -> None:
    """The file service is a component, not the master's: one slave-side process serves a file it holds and
    another fetches it by SHA-256 into its cache, both proving the computation's secret; a peer with another
    secret gets nothing."""
    held = tmp_path / "held.bin"
    held.write_bytes(os.urandom(3 << 20))
    digest = hashlib.sha256(held.read_bytes()).hexdigest()
    env = {**os.environ, "MWPY_TEST_PEER_SECRET": secrets.token_hex(32)}
    with subprocess.Popen(
        [PYTHON, str(PEERS), "serve", str(held)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    ) as serving:
        assert serving.stdout is not None
        assert serving.stdin is not None
        offered = json.loads(serving.stdout.readline())
        assert offered["digest"] == digest
        fetch = [PYTHON, str(PEERS), "fetch", str(offered["port"]), digest]
        fetched = subprocess.run(fetch, env=env, capture_output=True, text=True, timeout=120, check=True)
        assert json.loads(fetched.stdout) == {"sha256": digest, "size": 3 << 20}
        outsider = {**env, "MWPY_TEST_PEER_SECRET": secrets.token_hex(32)}
        refused = subprocess.run(fetch, check=False, env=outsider, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1
        assert "handshake failed" in refused.stderr
        serving.stdin.close()
        assert serving.wait(timeout=30) == 0

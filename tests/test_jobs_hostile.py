"""A hostile slave against the file service: outputs stay below initialdir, inputs are never overwritten.

The slave here is a real client on a real socket that knows the computation's
secret (a compromised execute node) and sends what an honest slave never
would: absolute names, ``..``, names through symbolic links, an input's name,
content that does not match its hash, more than its budget.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import safe_text
from mwpy.core.journal import Journal
from mwpy.data import link as data_link
from mwpy.data.client import FileClient
from mwpy.data.server import FileServer
from mwpy.data.service import FileServiceError
from mwpy.jobs.command import PROGRAM
from mwpy.jobs.outputs import Destination, JobOutputs
from mwpy.wire import protocol
from tests.support import PROGRAMS, spawn_master, spawn_slave
from tests.test_jobs_run import run_jobs

HOSTILE = PROGRAMS / "jobs" / "hostile_slave.py"
INSIDER = HOSTILE  # with MWPY_TEST_INSIDER_NAMES: the names it sends
JOBS_PROGRAM_PATH = Path(PROGRAM)

SECRET = b"s" * 32
MEMBER = "hostile-test"


@pytest.fixture
def server() -> Iterator[FileServer]:
    service = FileServer(SECRET, MEMBER)
    yield service
    service.close()


@pytest.fixture
def job(tmp_path: Path, server: FileServer) -> Path:
    """A job whose initialdir is ``tmp_path/iwd`` with one input file, expecting outputs as token ``t1``."""
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "input.dat").write_text("precious")
    (tmp_path / "outside").mkdir()
    JobOutputs.of(server).expect(
        "t1", Destination(str(iwd), frozenset({str(iwd / "input.dat")}), max_bytes=1000, max_files=20)
    )
    return iwd


def _upload(server: FileServer, tmp_path: Path, name: str, content: bytes = b"evil", token: str = "t1") -> str | None:
    """Upload ``content`` as ``name``; return the refusal, or None when accepted."""
    source = tmp_path / "payload"
    source.write_bytes(content)
    client = FileClient(server.host, server.port, SECRET, MEMBER)
    try:
        client.upload(token, name, source)
    except FileServiceError as exc:
        return str(exc)
    finally:
        client.close()
    return None


@pytest.mark.parametrize(
    "name", ["/etc/evil", "../evil", "sub/../../evil", "./evil", "a//b", "", ".mwpy-upload-x", "back\\slash"]
)
def test_names_that_leave_initialdir_are_refused(server: FileServer, job: Path, tmp_path: Path, name: str) -> None:
    refusal = _upload(server, tmp_path, name)
    assert refusal is not None
    assert "output name" in refusal
    assert not (tmp_path / "evil").exists()
    assert sorted(p.name for p in job.iterdir()) == ["input.dat"]


def test_a_folder_symlink_out_of_initialdir_is_not_followed(server: FileServer, job: Path, tmp_path: Path) -> None:
    (job / "link").symlink_to(tmp_path / "outside")
    JobOutputs.of(server).expect(
        "t2", Destination(str(job), frozenset(), outputs=("link",))
    )  # transfer_output_files = link
    refusal = _upload(server, tmp_path, "link/evil", token="t2")
    assert refusal is not None
    assert "symbolic link" in refusal
    assert list((tmp_path / "outside").iterdir()) == []


def test_a_file_symlink_is_replaced_never_written_through(server: FileServer, job: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside" / "target"
    target.write_text("untouched")
    (job / "result").symlink_to(target)
    assert _upload(server, tmp_path, "result", b"output") is None
    assert target.read_text() == "untouched"
    assert not (job / "result").is_symlink()
    assert (job / "result").read_bytes() == b"output"


def test_an_input_file_is_never_overwritten(server: FileServer, job: Path, tmp_path: Path) -> None:
    refusal = _upload(server, tmp_path, "input.dat")
    assert refusal is not None
    assert "input" in refusal
    (job / "alias").symlink_to(job / "input.dat")
    assert "input" in str(_upload(server, tmp_path, "alias"))  # nor through a link to it
    assert (job / "input.dat").read_text() == "precious"


def test_outputs_of_a_job_not_in_flight_and_over_budget_are_refused(
    server: FileServer, job: Path, tmp_path: Path
) -> None:
    assert "not expecting" in str(_upload(server, tmp_path, "x", token="t-unknown"))
    assert "more than 1000 bytes" in str(_upload(server, tmp_path, "big", b"x" * 2000))
    assert not (job / "big").exists()
    assert _upload(server, tmp_path, "small", b"fits") is None  # a refusal costs nothing else


def test_content_that_does_not_match_its_hash_is_not_kept(server: FileServer, job: Path) -> None:
    with socket.create_connection((server.host, server.port)) as sock:
        link = data_link.client_handshake(sock, SECRET, MEMBER)
        link.send_json(b"P", {"job": "t1", "name": "forged", "size": 4, "executable": False})
        link.send(b"D", b"real")
        link.send_json(b"E", {"sha256": hashlib.sha256(b"fake").hexdigest()})
        kind, payload = link.receive()
    assert kind == b"X"
    assert "hash" in json.loads(payload)["error"]
    assert sorted(p.name for p in job.iterdir()) == ["input.dat"]


def test_a_forged_or_replayed_frame_ends_the_conversation(server: FileServer, tmp_path: Path) -> None:
    """After the handshake every frame is checked: a wrong tag, or a genuine frame sent again, gets nothing."""
    data = tmp_path / "data"
    data.write_text("secret data")
    digest, _ = server.publish(str(data))
    fetch = b"G" + json.dumps({"sha256": digest}).encode()
    with socket.create_connection((server.host, server.port)) as sock:
        data_link.client_handshake(sock, SECRET, MEMBER)
        sock.sendall(protocol.HEADER.pack(len(fetch) + protocol.TAG_SIZE) + fetch + b"\0" * protocol.TAG_SIZE)
        assert _answer(sock) == b""
    with socket.create_connection((server.host, server.port)) as sock:
        link = data_link.client_handshake(sock, SECRET, MEMBER)
        sealed = link._channel.seal_body(fetch)
        sock.sendall(sealed)
        _, header = link.receive_json(b"S")  # the genuine frame is served (its content, then a sealed end) ...
        assert b"".join(bytes(piece) for piece in link.receive_raw(header["size"])) == b"secret data"
        assert link.receive()[0] == b"E"
        sock.sendall(sealed)  # ... and the same bytes again are not
        assert _answer(sock) == b""


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(30)
    received = b""
    while chunk := sock.recv(1 << 16):
        received += chunk
    return received


def test_a_peer_without_the_secret_or_of_another_computation_gets_nothing(server: FileServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("secret data")
    digest, _ = server.publish(str(data))
    wrong = FileClient(server.host, server.port, b"w" * 32, MEMBER)
    with pytest.raises(FileServiceError, match="handshake"):
        wrong.fetch(digest, tmp_path / "got")
    foreign = FileClient(server.host, server.port, SECRET, "another-computation")
    with pytest.raises(FileServiceError):
        foreign.fetch(digest, tmp_path / "got")
    assert not (tmp_path / "got").exists()
    honest = FileClient(server.host, server.port, SECRET, MEMBER)
    honest.fetch(digest, tmp_path / "got")
    honest.close()
    assert (tmp_path / "got").read_text() == "secret data"


def test_only_published_files_can_be_fetched(server: FileServer, tmp_path: Path) -> None:
    client = FileClient(server.host, server.port, SECRET, MEMBER)
    with pytest.raises(FileServiceError, match="no published file"):
        client.fetch(hashlib.sha256(b"/etc/passwd").hexdigest(), tmp_path / "got")
    client.close()


def test_a_hostile_slave_process_cannot_place_outputs_outside_initialdir(tmp_path: Path) -> None:
    """The real jobs master, and a real slave process whose outputs all try to escape."""
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "victim.txt").write_text("the user's input")
    (iwd / "link").symlink_to(tmp_path)
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/true\ninitialdir = iwd\ntransfer_input_files = victim.txt\n"
        "should_transfer_files = YES\nqueue\n"
    )
    master = spawn_master(JOBS_PROGRAM_PATH, tmp_path, "jobs.sub", "--summary", "summary.jsonl")
    slave = spawn_slave(HOSTILE, tmp_path)
    assert master.wait(timeout=60) == 1, master.err()  # the job failed: every output was refused
    slave.wait(timeout=30)
    (line, _) = [json.loads(text) for text in (tmp_path / "summary.jsonl").read_text().splitlines()]
    assert line["status"] == "failed"
    assert len(line["output_errors"]) == 5, line
    assert not (tmp_path / "escaped").exists()
    assert not Path("/tmp/mwpy-hostile-absolute").exists()
    assert (iwd / "victim.txt").read_text() == "the user's input"
    assert sorted(p.name for p in iwd.iterdir()) == ["link", "victim.txt"]


# ---------------------------------------------------------------------- an insider's names (issue 25 item 3)


@pytest.mark.parametrize(
    "name",
    ["evil\n2024-01-01 [A] forged line", "clip\x1b]52;c;cHduZWQ=\x07", "del\x7f", "csi\x9b2J", "exe\u202etxt.sh"],
    ids=["newline", "osc52", "del", "c1", "bidi"],
)
def test_names_with_control_characters_are_refused(server: FileServer, job: Path, tmp_path: Path, name: str) -> None:
    refusal = _upload(server, tmp_path, name)
    assert refusal is not None
    assert "control characters" in refusal
    assert safe_text.is_plain(refusal)  # the refusal quotes the name shown safe: the slave reports it, we print it
    assert sorted(p.name for p in job.iterdir()) == ["input.dat"]


def test_without_transfer_output_files_only_top_level_files_that_are_not_hidden(
    server: FileServer, job: Path, tmp_path: Path
) -> None:
    for name in (".ssh/authorized_keys", ".bashrc", "/".join(["deep"] * 40) + "/x", "sub/result"):
        assert _upload(server, tmp_path, name) is not None, name
    assert _upload(server, tmp_path, "result.txt") is None
    assert sorted(p.name for p in job.iterdir()) == ["input.dat", "result.txt"]


def test_with_transfer_output_files_only_the_named_entries_and_their_trees(server: FileServer, tmp_path: Path) -> None:
    iwd = tmp_path / "named"
    iwd.mkdir()
    JobOutputs.of(server).expect("t3", Destination(str(iwd), frozenset(), outputs=("out", "log.txt")))
    for accepted in ("log.txt", "out/a/b/c.dat", "out/.hidden-in-a-named-tree"):
        assert _upload(server, tmp_path, accepted, token="t3") is None, accepted
    for refused in ("other", "out2/x", ".ssh/authorized_keys", "outside.txt"):
        refusal = _upload(server, tmp_path, refused, token="t3")
        assert "transfer_output_files" in str(refusal), refused
    assert sorted(str(p.relative_to(iwd)) for p in iwd.rglob("*") if p.is_file()) == [
        "log.txt",
        "out/.hidden-in-a-named-tree",
        "out/a/b/c.dat",
    ]


def test_the_run_s_own_files_are_never_replaced(server: FileServer, job: Path, tmp_path: Path) -> None:
    own = {name: job / name for name in ("jobs.sub", "jobs.sub.summary.jsonl", "run.journal")}
    for path in own.values():
        path.write_text("the run's own\n")
    server.protect(*map(str, own.values()))
    for name in own:
        refusal = _upload(server, tmp_path, name)
        assert "the run's own files" in str(refusal)
    assert all(path.read_text() == "the run's own\n" for path in own.values())


def test_an_insider_slave_plants_nothing_and_the_summary_keeps_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real jobs master with a journal, and a real slave process holding the secret that sends back the
    submit file, the summary, the journal, the resource file, ssh keys, a 40-deep tree and names that would
    drive a terminal. Nothing lands, the summary (not an unlinked copy) has the job's line and the run's,
    and the failure line on the master's stderr quotes the names shown safe."""
    # YES: a slave off the submit side's file system sends its outputs (IF_NEEDED runs a local slave's in place)
    (tmp_path / "jobs.sub").write_text("executable = /bin/true\nshould_transfer_files = YES\nqueue\n")
    submit_text = (tmp_path / "jobs.sub").read_text()
    names = [
        "forged\x1b[1A\x1b[2Kall jobs ok",  # first: the stderr line shows a job's first 300 characters
        "jobs.sub",
        "summary.jsonl",
        "run.journal",
        "resource.json",
        ".ssh/authorized_keys",
        "/".join(["deep"] * 40) + "/x",
    ]
    monkeypatch.setenv("MWPY_TEST_INSIDER_NAMES", json.dumps(names))
    master = spawn_master(
        JOBS_PROGRAM_PATH, tmp_path, "--mw-journal", "run.journal", "jobs.sub", "--summary", "summary.jsonl"
    )
    slave = spawn_slave(INSIDER, tmp_path)
    assert master.wait(timeout=60) == 1, master.err()
    slave.wait(timeout=30)
    lines = [json.loads(text) for text in (tmp_path / "summary.jsonl").read_text().splitlines()]
    assert [sorted(line) for line in lines][-1] == ["run"]
    (job,) = lines[:-1]
    assert job["status"] == "failed"
    assert len(job["output_errors"]) == len(names), job
    assert (tmp_path / "jobs.sub").read_text() == submit_text
    assert not (tmp_path / ".ssh").exists()
    assert not (tmp_path / "deep").exists()
    assert "hostile slave" not in (tmp_path / "resource.json").read_text()
    Journal(tmp_path / "run.journal").close()  # still a journal this mwpy opens
    failed = [line for line in master.err().splitlines() if line.startswith("mwpy jobs: failed:")]
    assert "\x1b" not in master.err()
    assert "\\x1b[1A" in failed[0]


def test_a_summary_removed_during_the_run_is_written_again_in_full(tmp_path: Path) -> None:
    """A job that shares the folder (should_transfer_files = NO) removes the summary: the master does not go on
    writing into the unlinked file; the summary at its path ends with every job's line."""
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'rm -f jobs.sub.summary.jsonl'\"\nshould_transfer_files = NO\nqueue 4\n"
    )
    done = run_jobs(tmp_path, slaves=1)
    assert done.returncode == 0, done.stderr
    assert "was removed or replaced during the run; written again in full" in done.stderr
    lines = [json.loads(text) for text in (tmp_path / "jobs.sub.summary.jsonl").read_text().splitlines()]
    assert sorted(line["job"] for line in lines[:-1]) == ["1.0", "1.1", "1.2", "1.3"]
    assert lines[-1]["run"]["jobs"] == 4


# ---------------------------------------------------------------------- large results (issue 22 item 2)


def test_a_stored_result_is_kept_only_under_the_hash_of_its_content(server: FileServer, tmp_path: Path) -> None:
    """A slave's large result lands under the SHA-256 the service computed; a lying hash keeps nothing."""
    server.results = tmp_path / "received"
    server.results.mkdir()
    with socket.create_connection((server.host, server.port)) as sock:
        link = data_link.client_handshake(sock, SECRET, MEMBER)
        link.send_json(b"R", {"size": 4})
        link.send(b"D", b"real")
        link.send_json(b"E", {"sha256": hashlib.sha256(b"fake").hexdigest()})
        kind, payload = link.receive()
    assert kind == b"X"
    assert "hash" in json.loads(payload)["error"]
    assert list(server.results.iterdir()) == []
    client = FileClient(server.host, server.port, SECRET, MEMBER)
    try:
        digest = client.store(io.BytesIO(b"honest result"), 13)
    finally:
        client.close()
    assert [p.name for p in server.results.iterdir()] == [digest] == [hashlib.sha256(b"honest result").hexdigest()]


def test_a_service_that_takes_no_results_refuses_them(server: FileServer) -> None:
    """``mwpy jobs``' service (no results folder) takes no result, whatever a slave with the secret sends."""
    client = FileClient(server.host, server.port, SECRET, MEMBER)
    try:
        with pytest.raises(FileServiceError, match="no result of 5 bytes is taken here"):
            client.store(io.BytesIO(b"bytes"), 5)
    finally:
        client.close()
    assert server.counters.refused == 1

"""Hostile files at the paths mwpy reads (issue 11, items 4 and 5).

Each resource-file case is checked three ways, with real files and real
processes: ``resource_file.read`` raises one line naming the problem; a real
slave given the file exits 6 (``BAD_RESOURCE_FILE``) with one line on stderr;
``mwpy status`` exits 1 (docs/exit-codes.md) with one line. Nothing may hang
(a FIFO), eat memory (``/dev/zero``) or print a traceback (nesting, a symlink
loop). ``read`` itself runs in a child process with a deadline and an address
space limit, so that a regression fails the test instead of hanging or
swapping the test run.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mwpy import ExitCode, resource_file, safe_files
from mwpy.errors import InvalidResourceFileError, ResourceFileError, UnsafeFileError
from tests.support import PYTHON, TRUST_STREAM, free_port, mwpy_command, resource_record, spawn

#: Seconds any reader gets; each returns in well under one when it is right.
DEADLINE = 30.0
#: Address space for a child that reads a hostile file: enough for Python, far from a runaway read.
CHILD_MEMORY = 1 << 30


def resource_fields(**changes: Any) -> dict[str, Any]:
    """A valid, fresh resource file's keys (naming a closed port), with ``changes``."""
    fields: dict[str, Any] = json.loads(resource_file.dumps(resource_record()))
    return {**fields, **changes}


def json_file(**changes: Any) -> Callable[[Path], object]:
    """Writes a resource file with ``changes``; ``json.dumps`` writes NaN and Infinity as Python does."""
    return lambda path: path.write_text(json.dumps(resource_fields(**changes)))


def text_file(text: str) -> Callable[[Path], object]:
    return lambda path: path.write_text(text)


def symlink_loop(path: Path) -> None:
    other = path.with_name("other.json")
    path.symlink_to(other.name)
    other.symlink_to(path.name)


def huge_file(path: Path) -> None:
    """A regular file twice the cap (sparse: no disk is used)."""
    with path.open("wb") as out:
        out.truncate(2 * resource_file.MAX_SIZE)


#: name -> (how to make the file at a path, what the one-line message must say)
HOSTILE: dict[str, tuple[Callable[[Path], object], str]] = {
    "JSON nested 100,000 deep": (text_file("[" * 100_000 + "]" * 100_000), "nested deeper than"),
    "an object nested 100,000 deep": (text_file('{"a": ' * 100_000 + "1" + "}" * 100_000), "nested deeper than"),
    "a symlink to /dev/zero": (lambda path: path.symlink_to("/dev/zero"), "a character device, not a regular file"),
    "a FIFO": (os.mkfifo, "a FIFO, not a regular file"),
    "a symlink loop": (symlink_loop, "symlink loop"),
    "a NaN timestamp": (json_file(timestamp=float("nan")), "NaN is not a JSON number"),
    "an Infinity timestamp": (json_file(timestamp=float("inf")), "Infinity is not a JSON number"),
    "a -Infinity timestamp": (json_file(timestamp=float("-inf")), "-Infinity is not a JSON number"),
    "a NaN update_interval": (json_file(update_interval=float("nan")), "NaN is not a JSON number"),
    "an Infinity update_interval": (json_file(update_interval=float("inf")), "Infinity is not a JSON number"),
    "an update_interval of 1e999": (
        text_file(json.dumps(resource_fields(update_interval=12345.5)).replace("12345.5", "1e999")),
        "1e999 is out of range",
    ),
    "a string for slave_arguments": (json_file(slave_arguments="prog.py --mw-slave"), "slave_arguments"),
    "a string for slave_files": (json_file(slave_files="/etc/passwd"), "slave_files"),
    "a number in slave_files": (json_file(slave_files=["a", 1]), "slave_files"),
    "a bool in slaves_connected": (json_file(slaves_connected={"unordered": True}), "slaves_connected"),
    "a string for condor_jobs_connected": (json_file(condor_jobs_connected="41.3"), "condor_jobs_connected"),
    "a job id that is not CLUSTER.PROC": (
        json_file(condor_jobs_connected=["41.3", "41.3 || true"]),
        "condor_jobs_connected must hold Condor job ids (CLUSTER.PROC), not '41.3 || true'",
    ),
    "a job named twice": (json_file(condor_jobs_connected=["41.3", "41.3"]), "condor_jobs_connected names a job twice"),
    "a string for tasks_total": (json_file(tasks_total="300"), "tasks_total"),
    "a negative tasks_total": (json_file(tasks_total=-1), "'tasks_total' must be >= 0: -1"),
    "a bool for tasks_total": (json_file(tasks_total=True), "tasks_total"),
    "a peak memory no machine has": (  # the overseer would ask Condor for its memory cap for every new job
        json_file(slave_peak_memory=1 << 60),
        "'slave_peak_memory' must be <= 70368744177664",
    ),
    "a huge regular file": (huge_file, "too big"),
    "a directory": (Path.mkdir, "a directory, not a regular file"),
    "a wrong version": (json_file(version=2), "version 2"),
    "a duplicate key": (text_file('{"version": 1, "version": 1}'), "duplicate key 'version'"),
}

#: Reads the file named by argv[1] under a memory limit; prints what ``read`` raised, as JSON.
_READER = f"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEMORY}, {CHILD_MEMORY}))
from mwpy import resource_file
from mwpy.errors import InvalidResourceFileError, ResourceFileError
try:
    resource_file.read(sys.argv[1])
    print(json.dumps({{"raised": None}}))
except ResourceFileError as exc:
    print(json.dumps({{"raised": type(exc).__name__, "message": str(exc),
                       "permanent": isinstance(exc, InvalidResourceFileError)}}))
"""


def read_in_child(path: Path) -> dict[str, Any]:
    """What ``resource_file.read(path)`` raised, in a child that must finish within ``DEADLINE``."""
    done = subprocess.run(
        [PYTHON, "-c", _READER, str(path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.fixture(params=list(HOSTILE))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A hostile resource file (``tmp_path/resource.json``) and what its message must say."""
    make, problem = HOSTILE[request.param]
    path = tmp_path / "resource.json"
    make(path)
    return path, problem


def test_read_refuses_a_hostile_file_with_one_permanent_line(hostile: tuple[Path, str]) -> None:
    """Guards: ``resource_file.read`` returns at once with one line naming the problem, marked permanent.

    Before: RecursionError traceback, an endless read of /dev/zero, a FIFO
    blocking the open, NaN/Infinity accepted (a file that never goes stale), a
    string taken as a list of characters.
    """
    path, problem = hostile
    raised = read_in_child(path)
    assert raised["raised"] == "InvalidResourceFileError", raised
    assert raised["permanent"]
    assert problem in one_line(raised["message"])
    assert raised["message"].startswith(str(path))
    assert len(raised["message"]) < 600


def test_slave_given_a_hostile_file_exits_6_with_one_line(hostile: tuple[Path, str]) -> None:
    """Guards: a real slave exits 6 (BAD_RESOURCE_FILE) at once, one line on stderr, no traceback.

    The file names a closed port: a file that slipped through would end with
    status 3 after retrying for 10 s, or with a traceback.
    """
    path, problem = hostile
    slave = spawn([PYTHON, str(TRUST_STREAM), "--mw-slave", "--mw-resource-file", str(path)], path.parent, "slave")
    assert slave.wait(DEADLINE) == ExitCode.BAD_RESOURCE_FILE, slave.err()
    assert problem in one_line(slave.err())


def test_mwpy_status_on_a_hostile_file_exits_1_with_one_line(hostile: tuple[Path, str]) -> None:
    """Guards: ``mwpy status`` exits 1 (docs/exit-codes.md) with one line, no traceback, no hang."""
    path, problem = hostile
    done = subprocess.run(
        mwpy_command("status", str(path), "--no-condor"),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("mwpy status: error: ")
    assert problem in line
    assert done.stdout == ""


# ---------------------------------------------------------------------- what is not hostile


def test_missing_file_is_a_transient_error(tmp_path: Path) -> None:
    """Guards: a file not written yet (or a symlink to one) is not permanent, so an overseer keeps waiting."""
    dangling = tmp_path / "link.json"
    dangling.symlink_to("not-yet.json")
    for path in (tmp_path / "resource.json", dangling):
        with pytest.raises(ResourceFileError, match="no such resource file") as caught:
            resource_file.read(path)
        assert not isinstance(caught.value, InvalidResourceFileError)


def test_symlinked_file_and_brackets_inside_strings_are_read(tmp_path: Path) -> None:
    """Guards: the hardening refuses no legitimate file.

    Symlinks are followed (users link their files); brackets and escaped
    quotes inside strings do not count as nesting.
    """
    arguments = ["[" * 200, "{" * 200 + '\\"]"', '"', "\\"]
    target = tmp_path / "real.json"
    target.write_text(json.dumps(resource_fields(slave_arguments=arguments, update_interval=7)))
    link = tmp_path / "resource.json"
    link.symlink_to(target.name)
    record = resource_file.read(link)
    assert record.slave_arguments == arguments
    assert record.update_interval == 7.0
    assert isinstance(record.update_interval, float)


def test_file_at_the_size_cap_is_read(tmp_path: Path) -> None:
    """Guards: the cap is on size alone; a valid file padded with whitespace up to it is fine."""
    path = tmp_path / "resource.json"
    text = json.dumps(resource_fields())
    path.write_text(text + " " * (resource_file.MAX_SIZE - len(text)))
    assert path.stat().st_size == resource_file.MAX_SIZE
    assert resource_file.read(path).member_id == "m"


# ---------------------------------------------------------------------- safe_files


def test_read_bytes_stops_at_the_cap_when_the_size_lies(tmp_path: Path) -> None:
    """Guards: at most cap + 1 bytes are read even when fstat says 0 (procfs, a file still growing)."""
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    with pytest.raises(UnsafeFileError, match="too big: more than 16 bytes") as caught:
        safe_files.read_bytes(status, max_size=16)
    assert caught.value.permanent


@pytest.mark.parametrize(("mode", "who"), [(0o620, "its group"), (0o602, "others"), (0o666, "its group and others")])
def test_private_file_writable_by_others_is_refused(tmp_path: Path, mode: int, who: str) -> None:
    path = tmp_path / "secret"
    path.write_text("00" * 32)
    path.chmod(mode)
    with pytest.raises(UnsafeFileError, match=f"writable by {who} \\(mode 0{mode:o}\\)"):
        safe_files.read_bytes(path, max_size=100, private=True)
    assert safe_files.read_bytes(path, max_size=100) == b"00" * 32  # not private: only the kind and size count


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_private_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("00" * 32)
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(UnsafeFileError, match="owned by user id 65534, not by this user"):
        safe_files.read_bytes(path, max_size=100, private=True)


def test_open_checked_creates_missing_files_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "new"
    old = os.umask(0o022)
    try:
        os.close(safe_files.open_checked(path, private=True, flags=os.O_RDWR | os.O_CREAT))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_overseer_on_a_hostile_file_exits_1_with_one_line(hostile: tuple[Path, str], tmp_path: Path) -> None:
    """Guards: the overseer gives up on a file that can never be used (docs/exit-codes.md), one line, no hang."""
    path, problem = hostile
    done = subprocess.run(
        mwpy_command("overseer", str(path), "--backend", "local", "--workdir", str(tmp_path / "sandboxes")),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("mwpy overseer: error: ")
    assert problem in line


# ---------------------------------------------------------------------- the secret file


@pytest.fixture(
    params=["group-writable", "world-writable", "group-readable", "world-readable", "fifo", "dev-zero"],
)
def hostile_secret(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A secret file nobody may trust or read safely, and the words its refusal must contain."""
    path = tmp_path / "secret"
    kind: str = request.param
    if kind == "fifo":
        os.mkfifo(path)
        return path, "not a regular file"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return path, "not a regular file"
    path.write_text(os.urandom(32).hex())
    mode, problem = {
        "group-writable": (0o620, "writable by its group (mode 0620); chmod go-w it"),
        "world-writable": (0o602, "writable by others (mode 0602); chmod go-w it"),
        # Readable: whoever reads it is inside the computation (docs/security.md); refused as ssh refuses such a key.
        "group-readable": (0o640, "readable by its group (mode 0640); chmod go-rwx it"),
        "world-readable": (0o604, "readable by others (mode 0604); chmod go-rwx it"),
    }[kind]
    path.chmod(mode)
    return path, problem


def test_master_refuses_a_hostile_secret_file_with_exit_1(hostile_secret: tuple[Path, str], tmp_path: Path) -> None:
    """Guards: docs/security.md — whoever can write the secret file controls every slave, so the master refuses it."""
    path, problem = hostile_secret
    done = subprocess.run(
        [PYTHON, str(TRUST_STREAM), "--mw-master", "--mw-secret-file", str(path), "--mw-master-host", "127.0.0.1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert "--mw-secret-file" in line
    assert problem in line


def test_slave_refuses_a_hostile_secret_file_with_exit_2(hostile_secret: tuple[Path, str], tmp_path: Path) -> None:
    """Guards: docs/exit-codes.md — a slave whose secret cannot be used exits 2 with one line, never hangs."""
    path, problem = hostile_secret
    port = str(free_port())
    command = [PYTHON, str(TRUST_STREAM), "--mw-slave", "--mw-master-host", "127.0.0.1", "--mw-master-port", port]
    slave = spawn([*command, "--mw-secret-file", str(path)], tmp_path, "slave")
    assert slave.wait(DEADLINE) == ExitCode.USAGE, slave.err()
    assert problem in one_line(slave.err())

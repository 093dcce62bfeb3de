"""docs/security.md, docs/exit-codes.md and the staleness rules of docs/resource-file.md (issue 14).

Real master and slave processes of tests/programs/guarantees.py, real files
and sockets. Each docstring names the documented statement; docs/guarantees.md
maps them back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import threading
import time
from pathlib import Path

import attrs
import pytest

from mwpy import ExitCode, resource_file
from mwpy import options as mwpy_options
from mwpy.errors import ResourceFileError
from tests.programs.guarantees import attempts
from tests.support import (
    PROGRAMS,
    PYTHON,
    ROOT,
    Proc,
    free_port,
    mwpy_command,
    run_program,
    spawn,
    spawn_master,
    spawn_slave,
    wait_until,
    write_resource_file,
)

PROGRAM = PROGRAMS / "guarantees.py"
DEADLINE = 60.0


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def waiting_master(workdir: Path, *args: str) -> Proc:
    """A master process that serves until ``workdir/stop`` exists, with its audit in ``workdir/master.audit``."""
    return spawn_master(
        PROGRAM, workdir, "--mw-audit-file", str(workdir / "master.audit"), *args, "wait", str(workdir / "stop")
    )


def master_run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A master run to completion (one that cannot start)."""
    rf = str(workdir / "resource.json")
    command = ("--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", rf, *args, "run", "1")
    return run_program(PROGRAM, workdir, *command, timeout=DEADLINE)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# ---------------------------------------------------------------------- the secret


def test_resource_file_carries_the_secret_and_is_0600_in_every_write(tmp_path: Path) -> None:
    """security.md / resource-file.md: without a secret file the secret is in the resource file, mode 0600."""
    master = waiting_master(tmp_path)
    rf = tmp_path / "resource.json"
    record = resource_file.read(rf)
    assert record.secret is not None
    assert len(bytes.fromhex(record.secret)) == 32
    assert mode(rf) == 0o600
    (tmp_path / "stop").touch()
    assert master.wait(DEADLINE) == 0
    assert resource_file.read(rf).finished
    assert mode(rf) == 0o600  # the last write too


def test_secret_file_is_created_0600_kept_out_of_the_resource_file_and_shipped(tmp_path: Path) -> None:
    """security.md: --mw-secret-file FILE is created mode 0600; the resource file then has `secret: null`,
    lists FILE in slave_files and passes --mw-secret-file NAME to slaves; a slave with it joins."""
    secret = tmp_path / "secret"
    master = spawn_master(PROGRAM, tmp_path, "--mw-secret-file", str(secret), "run", "3")
    assert mode(secret) == 0o600
    assert len(bytes.fromhex(secret.read_text().strip())) == 32
    record = resource_file.read(tmp_path / "resource.json")
    assert record.secret is None
    assert str(secret) in record.slave_files
    assert record.slave_arguments[-2:] == ["--mw-secret-file", "secret"]
    without = spawn_slave(PROGRAM, tmp_path)  # the resource file alone proves nothing
    assert without.wait(DEADLINE) == ExitCode.USAGE
    assert "no secret" in one_line(without.err())
    slave = spawn_slave(PROGRAM, tmp_path, "--mw-secret-file", str(secret))
    assert master.wait(DEADLINE) == 0, master.err()
    assert slave.wait(DEADLINE) == 0
    assert sorted(line["value"] for line in master.json_lines()) == [0, 1, 2]


def test_slave_with_host_and_port_but_no_secret_exits_2(tmp_path: Path) -> None:
    """exit-codes.md: slave status 2 when it has no secret to prove membership with."""
    slave = spawn(
        [PYTHON, str(PROGRAM), "--mw-slave", "--mw-master-host", "127.0.0.1", "--mw-master-port", str(free_port())],
        tmp_path,
        "slave",
    )
    assert slave.wait(DEADLINE) == ExitCode.USAGE
    assert "no secret" in one_line(slave.err())


def test_master_raises_its_descriptor_limit_to_the_hard_limit(tmp_path: Path) -> None:
    """security.md: "The master raises its descriptor limit to the hard limit at start"."""
    import resource  # noqa: PLC0415 (Unix only)

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip(f"hard descriptor limit {hard}: nothing to raise")
    rf = tmp_path / "resource.json"
    lowered = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, (256, {hard})); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    args = ["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", str(rf)]
    master = spawn([PYTHON, "-c", lowered, str(PROGRAM), *args, "wait", str(tmp_path / "stop")], tmp_path, "master")
    wait_until(lambda: rf.exists() and resource_file.read(rf).master_pid == master.pid, DEADLINE, "the master")
    limits = Path(f"/proc/{master.pid}/limits").read_text().splitlines()
    [line] = [line for line in limits if line.startswith("Max open files")]
    soft_now, hard_now = line.split()[3:5]
    (tmp_path / "stop").touch()
    assert master.wait(DEADLINE) == 0
    assert (int(soft_now), int(hard_now)) == (hard, hard)


# ---------------------------------------------------------------------- master exit statuses


def test_master_exits_1_with_one_line_when_its_port_cannot_be_bound(tmp_path: Path) -> None:
    """exit-codes.md: master status 1 when the port cannot be bound."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = master_run(tmp_path, "--mw-master-port", str(port))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f":{port}" in one_line(done.stderr)


@pytest.mark.parametrize("kind", ["a folder", "an empty file"])
def test_master_exits_1_with_one_line_when_its_secret_file_cannot_be_read(tmp_path: Path, kind: str) -> None:
    """exit-codes.md: master status 1 when the secret file cannot be read."""
    secret = tmp_path / "secret"
    if kind == "a folder":
        secret.mkdir()
    else:
        secret.touch()
    done = master_run(tmp_path, "--mw-secret-file", str(secret))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "--mw-secret-file" in one_line(done.stderr)


def test_master_exits_1_with_one_line_when_its_tls_certificate_cannot_be_read(tmp_path: Path) -> None:
    """exit-codes.md: master status 1 when the TLS certificate cannot be read."""
    key = ROOT / "tests" / "data" / "tls-key.pem"
    done = master_run(tmp_path, "--mw-tls-cert", str(tmp_path / "missing.pem"), "--mw-tls-key", str(key))
    assert done.returncode == 1, (done.stdout, done.stderr)
    one_line(done.stderr)


def test_ctrl_c_makes_master_and_slave_exit_130(tmp_path: Path) -> None:
    """exit-codes.md: 130 when interrupted (Ctrl-C), for a slave and for the master; the master still
    writes its resource file as finished.

    The slave is interrupted once it has answered a task, so it is surely in
    its loop (see the next test for an interrupt while it connects).
    """
    stop = str(tmp_path / "stop")
    master = spawn_master(PROGRAM, tmp_path, "one-then-wait", stop)
    slave = spawn_slave(PROGRAM, tmp_path)
    wait_until(lambda: master.json_lines() == [{"answered": True}], DEADLINE, "the slave to answer a task")
    os.kill(slave.pid, signal.SIGINT)
    assert slave.wait(DEADLINE) == 130, slave.err()
    os.kill(master.pid, signal.SIGINT)
    assert master.wait(DEADLINE) == 130, master.err()
    assert resource_file.read(tmp_path / "resource.json").finished


def test_ctrl_c_while_the_slave_is_still_connecting_exits_130(tmp_path: Path) -> None:
    """exit-codes.md: slave 130 when interrupted — also while it is still trying to reach its master."""
    rf = tmp_path / "resource.json"
    write_resource_file(rf)  # fresh, nobody listening: the slave retries for 10 s
    slave = spawn_slave(PROGRAM, tmp_path)
    wait_until(lambda: "INIT SLAVE" in slave.out(), DEADLINE, "the slave to start connecting")
    os.kill(slave.pid, signal.SIGINT)
    assert slave.wait(DEADLINE) == 130, slave.err()
    assert "Traceback" not in slave.err()


def test_overseer_exits_1_when_no_schedd_answers(tmp_path: Path) -> None:
    """exit-codes.md: `mwpy overseer` exits 1 if it could not start (no schedd)."""
    rf = tmp_path / "resource.json"
    write_resource_file(rf)
    no_pool = {**os.environ, "CONDOR_CONFIG": "ONLY_ENV"}  # a configuration that names no schedd
    done = subprocess.run(
        mwpy_command("overseer", str(rf), "--backend", "condor"),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env=no_pool,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert one_line(done.stderr).startswith("mwpy overseer: error:")


# ---------------------------------------------------------------------- staleness


@pytest.mark.parametrize(("interval", "grace"), [(4.0, 10.0), (40.0, 20.0), (300.0, 150.0)])
def test_stale_exactly_after_interval_plus_grace(tmp_path: Path, interval: float, grace: float) -> None:
    """resource-file.md: stale when now > timestamp + update_interval + max(10 s, update_interval / 2);
    a finished file never. The reader's clock is passed in: no waiting."""
    rf = tmp_path / "resource.json"
    write_resource_file(rf, timestamp=1000.0, update_interval=interval)
    record = resource_file.read(rf)
    edge = 1000.0 + interval + grace
    assert not record.stale(now=edge - 0.01)
    assert not record.stale(now=edge)
    assert record.stale(now=edge + 0.01)
    assert not attrs.evolve(record, computation_status="finished").stale(now=edge + 1e6)


@pytest.mark.parametrize(("age", "stale"), [(4.0 + 10.0 - 4.0, False), (4.0 + 10.0 + 4.0, True)])
def test_slave_reads_staleness_with_the_grace(tmp_path: Path, age: float, stale: bool) -> None:
    """resource-file.md: a slave treats a file past its interval but within the grace as fresh (exit 3, it does
    not say "stale"), and one past the grace as stale: it waits for its master until --mw-abandon-after, then
    leaves the queue (exit 0). Interval 4 s, grace 10 s, ages 10 s and 18 s."""
    rf = tmp_path / "resource.json"
    write_resource_file(rf, timestamp=time.time() - age, update_interval=4.0)
    slave = spawn_slave(PROGRAM, tmp_path, "--mw-abandon-after", "1")
    assert slave.wait(DEADLINE) == (ExitCode.OK if stale else ExitCode.UNREACHABLE)
    err = one_line(slave.err())
    assert ("gone for good" if stale else "cannot reach the master") in err
    assert ("stale" in err) == stale, err


def test_a_slave_that_cannot_reach_its_master_names_the_member_id_of_its_resource_file(tmp_path: Path) -> None:
    """The audit's INIT and FINI lines carry the computation's member id, not the option's default."""
    rf = tmp_path / "resource.json"
    write_resource_file(rf, member_id="the-real-member")
    slave = spawn_slave(PROGRAM, tmp_path, "--mw-connect-timeout", "0.5")
    assert slave.wait(DEADLINE) == ExitCode.UNREACHABLE
    fini = [line for line in slave.out().splitlines() if "FINI" in line]
    assert len(fini) == 1
    assert fini[0].endswith('"the-real-member"'), fini
    assert "default-member-id" not in slave.out()


def test_slave_with_a_fresh_file_retries_for_10_s_and_one_with_a_long_stale_file_does_not(tmp_path: Path) -> None:
    """reliability.md / exit-codes.md: with no master, a slave given a fresh resource file retries for 10 s
    before exit 3; given one stale for longer than --mw-abandon-after (300 s by default), it leaves at once
    (exit 0: its master is gone for good, and Condor must not start it again).

    Both start together against the same dead port. Order, not speed, is
    asserted: the stale one must be gone while the fresh one still retries.
    The fresh one's retrying is then measured from the slave's side as a
    lower bound (load only lengthens it): at least 8 s, the 10 s less the
    last back-off step.
    """
    port = free_port()
    fresh_rf, stale_rf = tmp_path / "fresh.json", tmp_path / "stale.json"
    write_resource_file(fresh_rf, master_port=port)
    write_resource_file(stale_rf, master_port=port, timestamp=time.time() - 3600, update_interval=60.0)
    began = time.monotonic()
    fresh = spawn_slave(PROGRAM, tmp_path, resource=fresh_rf)
    stale = spawn_slave(PROGRAM, tmp_path, resource=stale_rf)
    assert stale.wait(DEADLINE) == ExitCode.OK
    assert fresh.alive(), "the fresh-file slave gave up no later than the stale-file one"
    assert "gone for good" in one_line(stale.err())
    assert fresh.wait(DEADLINE) == ExitCode.UNREACHABLE
    assert time.monotonic() - began >= 8.0
    err = one_line(fresh.err())
    assert "cannot reach the master" in err
    assert "stale" not in err


def test_a_slave_whose_master_finished_while_it_started_exits_0_not_3(tmp_path: Path) -> None:
    """exit-codes.md: 3 means no master *with a fresh resource file*. A slave that read the file while the
    computation ran, then found the port closed because the master had finished, looks at the file again: it
    says finished, so the slave exits 0 (Condor removes the job) instead of 3 (Condor starts it again for
    nothing). Seen in CI: a slave started just as a short computation ended."""
    rf = tmp_path / "resource.json"
    record = write_resource_file(rf, master_port=free_port(), member_id="ending-member")
    slave = spawn_slave(PROGRAM, tmp_path, "--mw-connect-timeout", "6")  # it looks again once it gives up
    wait_until(lambda: 'INIT SLAVE "ending-member"' in slave.out(), DEADLINE, "the slave to read the file")
    resource_file.write(rf, attrs.evolve(record, computation_status="finished"))
    assert slave.wait(DEADLINE) == ExitCode.OK, slave.err()
    assert slave.err() == ""
    assert "FINI the resource file says the computation is finished (exit 0)" in slave.out()


def test_documented_defaults() -> None:
    """reliability.md / security.md / resource-file.md: client timeout 60 s, task attempts 1 (issue 9), slave max
    failures 5, resource file update interval 300 s, when no option says otherwise."""
    defaults, rest = mwpy_options.parse(["--mw-master", "--mw-resource-file", "resource.json"])
    assert rest == []
    assert defaults.client_timeout == 60.0
    assert defaults.task_attempts == 1  # issue 9: a task that raises is a result, not retried, unless asked
    assert defaults.slave_max_failures == 5
    assert defaults.resource_file_update_interval == 300.0


def test_journal_is_sqlite_in_wal_mode(tmp_path: Path) -> None:
    """reliability.md: --mw-journal FILE is an SQLite database in WAL mode (a property kept in the file)."""
    journal = tmp_path / "journal.sqlite"
    runs = tmp_path / "runs"
    runs.mkdir()
    program = PROGRAMS / "trust_journal.py"
    master = spawn_master(program, tmp_path, "--mw-journal", str(journal), "squares", "2", str(runs))
    slave = spawn_slave(program, tmp_path)
    assert master.wait(DEADLINE) == 0, master.err()
    assert slave.wait(DEADLINE) == 0
    with contextlib.closing(sqlite3.connect(journal)) as db:
        assert db.execute("pragma journal_mode").fetchone() == ("wal",)
        assert db.execute("select count(*) from results").fetchone() == (2,)


def test_failed_results_are_not_journaled_and_run_again(tmp_path: Path) -> None:
    """reliability.md: "Failed results are not journaled, so they run again" after a restart."""
    journal = tmp_path / "journal.sqlite"
    for run in (1, 2):
        master = spawn_master(
            PROGRAM, tmp_path, "--mw-journal", str(journal), "--mw-task-attempts", "1", "keyed-failure", str(tmp_path)
        )
        slave = spawn_slave(PROGRAM, tmp_path)
        assert master.wait(DEADLINE) == 0, master.err()
        assert slave.wait(DEADLINE) == 0
        assert master.json_lines() == [{"ok": False, "journaled": False}]
        assert len(attempts(tmp_path, "keyed")) == run
    with contextlib.closing(sqlite3.connect(journal)) as db:
        assert db.execute("select count(*) from results").fetchone() == (0,)


def test_resource_file_readers_never_see_a_partial_write(tmp_path: Path) -> None:
    """resource-file.md: writes are atomic; a reader sees the old or the new file, never a mix.

    A reader polls while the file is rewritten 300 times with contents of
    alternating size; every read must parse. (A write in place would be
    caught half-way: a truncated file is not JSON.)
    """
    rf = tmp_path / "resource.json"
    write_resource_file(rf)
    big = [f"/a/long/path/{i:04d}" for i in range(400)]
    failures: list[str] = []
    done = threading.Event()
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not done.is_set():
            try:
                resource_file.read(rf)
            except ResourceFileError as exc:
                failures.append(str(exc))
            reads += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(300):
            write_resource_file(rf, slave_files=big if i % 2 else [], tasks_done=i)
    finally:
        done.set()
        thread.join()
    assert failures == []
    assert reads > 0
    assert resource_file.read(rf).tasks_done == 299

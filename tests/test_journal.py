"""The result journal (reliability.md): a master killed with SIGKILL resumes instead of starting over.

tests/programs/trust_journal.py runs ``journaled_square(i)`` with keys through
``mw.as_completed`` as a real master with real slaves and prints each result
as the master algorithm sees it. Every run of a task leaves a file, so the
tests count executions per key instead of trusting the master's word.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mwpy import ExitCode
from mwpy.core.journal import Journal
from mwpy.core.journal import digest as journal_digest
from tests.programs.trust_journal import executions
from tests.support import (
    PROGRAMS,
    Proc,
    mwpy_command,
    run_program,
    spawn_master,
    spawn_slave,
    wait_until,
)

JOURNALED = PROGRAMS / "trust_journal.py"
COUNT = 60
DEADLINE = 60.0


def printed(master: Proc) -> list[dict[str, Any]]:
    """The result lines the master algorithm printed (a line being written is left out)."""
    lines = []
    for line in master.out().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "i" in record:
            lines.append(record)
    return lines


def run_master(workdir: Path, journal: Path, runs: Path) -> Proc:
    return spawn_master(
        JOURNALED,
        workdir,
        "--mw-journal",
        str(journal),
        "--mw-audit-file",
        str(workdir / "master.audit"),
        "squares",
        str(COUNT),
        str(runs),
    )


def test_master_killed_half_way_resumes_from_its_journal(tmp_path: Path) -> None:
    """Guards: each keyed result is committed to the journal before the master algorithm sees it, and a
    restarted master answers journaled keys from the journal (Result.journaled) without running them.

    If the commit came later, results the first master printed would be
    missing from the journal; if replay did not work, they would run again.
    """
    journal = tmp_path / "journal.sqlite"
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "gate-from").write_text(str(COUNT // 3))  # the rest waits for runs/open: no race with the kill
    first = run_master(tmp_path, journal, runs)
    # No lease: these slaves leave with their master, as without a resource file (test_master_restart.py has
    # slaves that outlive it).
    slaves = [spawn_slave(JOURNALED, tmp_path, "--mw-master-lease", "0") for _ in range(2)]
    wait_until(lambda: len(printed(first)) >= COUNT // 3, DEADLINE, "a third of the results")
    first.kill()  # SIGKILL: no goodbye, no journal close
    (runs / "open").touch()  # the slaves finish the gated task they hold, then find the master gone
    for slave in slaves:
        assert slave.wait(DEADLINE) == ExitCode.MASTER_LOST
    seen_first = {line["i"] for line in printed(first)}
    assert seen_first == set(range(COUNT // 3)), "the first master got past the gate"
    assert not any(line["journaled"] for line in printed(first))
    before = executions(runs)

    second = run_master(tmp_path, journal, runs)
    slaves = [spawn_slave(JOURNALED, tmp_path) for _ in range(2)]
    assert second.wait(DEADLINE) == 0, second.err()
    for slave in slaves:
        assert slave.wait(DEADLINE) == 0
    lines = printed(second)
    after = executions(runs)
    assert sorted(line["i"] for line in lines) == list(range(COUNT))
    assert all(line["value"] == line["i"] ** 2 + 1 for line in lines)
    assert json.loads(second.out().splitlines()[-1]) == {"sum": sum(i * i + 1 for i in range(COUNT))}
    journaled = {line["i"] for line in lines if line["journaled"]}
    assert seen_first <= journaled, f"printed before the kill but not journaled: {seen_first - journaled}"
    for i in range(COUNT):
        if i in journaled:
            assert after.get(i, 0) == before.get(i, 0), f"journaled task {i} ran again"
        else:
            assert after.get(i, 0) > before.get(i, 0), f"task {i} was neither journaled nor run"

    third = run_master(tmp_path, journal, runs)  # everything is journaled now: no slave needed
    assert third.wait(DEADLINE) == 0, third.err()
    assert all(line["journaled"] for line in printed(third))
    assert len(printed(third)) == COUNT
    assert executions(runs) == after


def test_a_restarted_master_says_at_once_how_many_answers_it_takes_from_its_journal(tmp_path: Path) -> None:
    """Before the program's last line, and before any slave: the audit, the event log's ``master-start`` and
    ``mwpy status`` say how many answers the journal holds (``mwpy jobs`` says so in its own status)."""
    journal = Journal(tmp_path / "journal.sqlite")
    for i in range(846):
        journal.record(f"square-{i}", "journaled_square", b"\x80\x05K\x01.", "slave-0", 0.1)
    journal.close()
    events = tmp_path / "events.jsonl"
    master = spawn_master(JOURNALED, tmp_path, "--mw-journal", str(tmp_path / "journal.sqlite"), "--mw-events",
                          str(events), "--mw-audit-file", str(tmp_path / "master.audit"), "squares", "900",
                          str(tmp_path))  # fmt: skip
    audit = (tmp_path / "master.audit").read_text()
    assert "RESUMED 846 answers from the journal (their tasks are not run again)" in audit, audit
    status = subprocess.run(
        mwpy_command("status", str(tmp_path / "resource.json"), "--no-condor"), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    assert "resumed  846 answers from the journal" in status.stdout.splitlines(), status.stdout
    start = wait_until(lambda: [line for line in events.read_text().splitlines() if "master-start" in line], 30,
                       "the master-start event")  # fmt: skip
    assert json.loads(start[0])["journal_answers"] == 846
    master.kill()


def run_alone(program: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``program`` as a master on loopback with ``args``, no slave: for masters that must not get far."""
    master = ("--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", str(workdir / "resource.json"))
    return run_program(program, workdir, *master, *args, timeout=DEADLINE)


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table results (name text, score real)")
        db.execute("insert into results values ('x', 1.0)")
    db.close()


def _journal_with_results(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "create table results (key text primary key, algorithm text not null, value blob not null,"
            " slave_id text not null, compute_time real not null, recorded real not null)"
        )
        rows = [(f"square-{i}", "journaled_square", b"\x80\x05K\x01." * 20, "slave-0", 0.1, 0.0) for i in range(2000)]
        db.executemany("insert into results values (?, ?, ?, ?, ?, ?)", rows)
    db.close()


def _damaged_page(path: Path) -> None:
    _journal_with_results(path)
    with path.open("r+b") as data:
        data.seek(path.stat().st_size // 2)
        data.write(b"\xde\xad" * 2048)


def _truncated(path: Path) -> None:
    _journal_with_results(path)
    with path.open("r+b") as data:
        data.truncate(path.stat().st_size // 3)


DAMAGE: dict[str, Callable[[Path], object]] = {
    "garbage": lambda path: path.write_bytes(b"not a database at all\n" * 100),
    "another program's table": _foreign,
    "a damaged page": _damaged_page,
    "a truncated file": _truncated,
    "a folder": lambda path: path.mkdir(),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_journal_is_one_clear_line_and_status_1(tmp_path: Path, damage: str) -> None:
    """Guards: the journal is validated when the master starts (schema and pages), not mid-run.

    A journal that fails later makes the master algorithm die with a
    traceback at its first keyed submit, after slaves were already sought.
    """
    journal = tmp_path / "journal.sqlite"
    DAMAGE[damage](journal)
    done = run_alone(JOURNALED, tmp_path, "--mw-journal", str(journal), "squares", "3", str(tmp_path))
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{journal}: cannot use as a journal" in lines[0]


@pytest.mark.parametrize("linked", ["", "-wal"])
def test_a_journal_path_that_is_a_symlink_is_refused_and_what_it_names_left_alone(tmp_path: Path, linked: str) -> None:
    """A journal path linked to another program's SQLite database: mwpy wrote its table into it before."""
    other = tmp_path / "theirs.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("create table scores (name text, score real)")
    db.close()
    before = other.read_bytes()
    journal = tmp_path / "journal.sqlite"
    if linked:
        _journal_file(journal)
    Path(f"{journal}{linked}").symlink_to(other)
    done = run_alone(JOURNALED, tmp_path, "--mw-journal", str(journal), "squares", "3", str(tmp_path))
    assert done.returncode == 1, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert f"{journal}{linked}: cannot use as a journal: a symbolic link" in line
    assert other.read_bytes() == before


# ---------------------------------------------------------------------- file modes (issue 11, item 5)


def test_a_result_journaled_when_the_table_of_tasks_out_cannot_be_written_turns_the_journal_off_in_one_line(
    tmp_path: Path,
) -> None:
    """Guards docs/reliability.md's word that a journal failing mid-run costs no traceback: recording a result
    also forgets which slave its task was out on; when that write fails, the journal turns itself off with one
    line, as for the result's own row (the computation goes on).

    Before, that second statement was outside the guard and its sqlite3 error reached the master as a traceback.
    """
    path = tmp_path / "journal.sqlite"
    said: list[str] = []
    journal = Journal(path, on_failure=said.append)
    journal.record("k1", "f", b"v1", "s1", 0.1)
    journal.commit()
    with contextlib.closing(sqlite3.connect(path)) as other:  # the table goes (as a write that fails would)
        other.execute("drop table out_on_slaves")
        other.commit()
    journal.record("k2", "f", b"v2", "s1", 0.1)
    assert journal.failed is not None
    assert said == [journal.failed]
    assert "cannot write the journal (no such table: out_on_slaves)" in said[0]
    journal.close()


def test_journal_and_its_wal_and_shm_are_created_0600(tmp_path: Path) -> None:
    """Guards: the journal, -wal and -shm are private like the resource file, even under umask 022.

    SQLite creates files with the umask's mode (0644): results anyone could
    read, while the resource file next to them is 0600.
    """
    journal = tmp_path / "journal.sqlite"
    runs = tmp_path / "runs"
    runs.mkdir()
    old = os.umask(0o022)
    try:
        master = run_master(tmp_path, journal, runs)
    finally:
        os.umask(old)
    files = [journal, Path(f"{journal}-wal"), Path(f"{journal}-shm")]
    wait_until(lambda: all(f.exists() for f in files), DEADLINE, "the journal and its -wal and -shm files")
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
    slave = spawn_slave(JOURNALED, tmp_path)
    assert master.wait(DEADLINE) == 0, master.err()
    assert slave.wait(DEADLINE) == ExitCode.OK
    left = [f for f in files if f.exists()]  # SQLite removes -wal and -shm when the last connection closes
    assert journal in left
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in left} == {f.name: 0o600 for f in left}


def _journal_file(path: Path) -> None:
    Journal(path).close()


@pytest.mark.parametrize(
    ("writable", "mode", "who"),
    [("", 0o660, "its group"), ("", 0o606, "others"), ("-wal", 0o666, "its group and others")],
)
def test_journal_others_can_write_is_one_line_and_status_1(tmp_path: Path, writable: str, mode: int, who: str) -> None:
    """Guards: a journal (or its -wal) that others can write is refused before it is trusted.

    Its results are handed to the master algorithm without running the tasks
    again, so whoever can write it can choose them.
    """
    journal = tmp_path / "journal.sqlite"
    _journal_file(journal)
    target = Path(f"{journal}{writable}")
    target.touch()
    target.chmod(mode)
    done = run_alone(JOURNALED, tmp_path, "--mw-journal", str(journal), "squares", "3", str(tmp_path))
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{target}: cannot use as a journal: writable by {who} (mode 0{mode:o})" in lines[0]
    assert not (tmp_path / "resource.json").exists()  # refused before the master looked for slaves


# ---------------------------------------------------------------------- a full disk, a rotten entry (issue 25)

FILLER = PROGRAMS / "disk_filler.py"
#: Bytes of each result in the disk tests: a 1 MiB disk holds about fifteen.
BLOCK = 64 * 1024


def run_filler(workdir: Path, *options: str, count: int = 60) -> Proc:
    """disk_filler.py as master with ``options`` and two slaves; returns the master once it has exited."""
    master = spawn_master(FILLER, workdir, *options, "fill", str(count), str(BLOCK))
    slaves = [spawn_slave(FILLER, workdir) for _ in range(2)]
    master.wait(DEADLINE)
    for slave in slaves:
        slave.wait(DEADLINE)
    return master


def filled(master: Proc) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in master.out().splitlines() if line.startswith('{"i"')]
    assert sorted(line["i"] for line in lines) == list(range(len(lines)))
    assert all(line["ok"] for line in lines)
    return lines


def test_a_journal_on_a_disk_that_fills_says_so_once_and_the_computation_goes_on(
    tmp_path: Path, small_disk: Path
) -> None:
    """Guards: a write or commit that fails turns the journal off with one line naming the file and the problem;
    no traceback (before: two, and the master died); every result still reaches the algorithm once. What was
    journaled stays good: with room again, a restart answers it from the journal, and then everything is."""
    journal = small_disk / "journal.sqlite"
    first = run_filler(tmp_path, "--mw-journal", str(journal))
    assert first.returncode == 0, first.err()
    assert len(filled(first)) == 60
    assert "Traceback" not in first.err()
    complaints = [line for line in first.err().splitlines() if "journal" in line]
    assert complaints == [
        f"{journal}: cannot write the journal (database or disk is full); "
        "results from now on are not journaled (a restart runs them again)"
    ]
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True, timeout=DEADLINE)
    second = run_filler(tmp_path, "--mw-journal", str(journal))
    assert second.returncode == 0, second.err()
    assert len(filled(second)) == 60
    assert "journal" not in second.err()
    third = run_filler(tmp_path, "--mw-journal", str(journal))
    assert third.returncode == 0, third.err()
    assert all(line["journaled"] for line in filled(third))


def test_an_event_log_on_a_disk_that_fills_says_so_once_and_the_computation_goes_on(
    tmp_path: Path, small_disk: Path
) -> None:
    """Guards: the event log turns itself off with one line when its disk is full, and nothing else changes."""
    fill(small_disk)
    events = small_disk / "events.jsonl"
    master = run_filler(tmp_path, "--mw-events", str(events), count=20)
    assert master.returncode == 0, master.err()
    assert len(filled(master)) == 20
    assert "Traceback" not in master.err()
    assert [line for line in master.err().splitlines() if "event log" in line] == [
        f"mwpy: {events}: cannot write the event log (No space left on device); events are off"
    ]


def fill(disk: Path) -> None:
    """Write ballast until the disk is full (ENOSPC)."""
    ballast = os.open(disk / "ballast", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(ballast, b"\0" * 4096):
                pass
    finally:
        os.close(ballast)


def test_a_resource_file_and_audit_on_a_full_disk_is_one_line_and_status_1(small_disk: Path) -> None:
    """The master waited in silence for slaves that could never find it (its resource file never written)."""
    fill(small_disk)
    done = run_alone(FILLER, small_disk, "fill", "3", "10")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert f"{small_disk / 'resource.json'}: cannot write the resource file (No space left on device)" in line
    assert f"the folder mwpy writes it and its audit in, {small_disk}, needs room" in line


def test_a_full_temporary_folder_names_mwpy_s_folder(small_disk: Path) -> None:
    """share() of more than the temporary folder holds: "No space left on device" named no path before."""
    code = "import os, mwpy\nwith mwpy.Executor(max_workers=1) as ex:\n    ex.share(os.urandom(4 << 20))\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env={**os.environ, "TMPDIR": str(small_disk)},
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert f"No space left on device: mwpy's folder of shared objects, {small_disk}/mwpy-shared-" in last


@pytest.mark.parametrize("option", ["--mw-journal", "--mw-events"])
def test_a_journal_or_event_log_on_a_read_only_disk_is_one_line_and_status_1(
    tmp_path: Path, small_disk: Path, option: str
) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True, timeout=DEADLINE)
    done = run_alone(FILLER, tmp_path, option, str(small_disk / "file"), "fill", "3", "10")
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{small_disk / 'file'}: " in line
    assert "Read-only file system" in line


def test_a_damaged_journal_entry_is_treated_as_absent_and_the_audit_says_so(tmp_path: Path) -> None:
    """Guards: an entry whose bytes changed (its digest no longer matches), one written for another algorithm,
    and one whose value does not unpickle here (another mwpy's) each make their task run again, with an audit
    line; before, such an entry became a *failed* task that never ran again. An entry of an earlier mwpy (no
    digest) that unpickles still answers its task."""
    journal = tmp_path / "journal.sqlite"
    runs = tmp_path / "runs"
    runs.mkdir()
    first = run_master(tmp_path, journal, runs)
    slave = spawn_slave(JOURNALED, tmp_path)
    assert first.wait(DEADLINE) == 0, first.err()
    slave.wait(DEADLINE)
    elsewhere = b"cnowhere_module_of_this_mwpy\nThing\n."  # a pickle naming a class this mwpy does not have
    with sqlite3.connect(journal) as db:
        (value,) = db.execute("select value from results where key = 'square-3'").fetchone()
        flipped = value[:-2] + bytes([value[-2] ^ 0x01]) + value[-1:]
        db.execute("update results set value = ? where key = 'square-3'", (flipped,))
        db.execute("update results set algorithm = 'another_program.task' where key = 'square-5'")
        db.execute(
            "update results set value = ?, digest = ? where key = 'square-7'",
            (elsewhere, journal_digest("square-7", "journaled_square", elsewhere)),
        )
        db.execute("update results set digest = null where key = 'square-9'")
    db.close()
    before = executions(runs)
    second = run_master(tmp_path, journal, runs)
    slave = spawn_slave(JOURNALED, tmp_path)
    assert second.wait(DEADLINE) == 0, second.err()
    slave.wait(DEADLINE)
    lines = printed(second)
    assert sorted(line["i"] for line in lines) == list(range(COUNT))
    assert all(line["value"] == line["i"] ** 2 + 1 for line in lines)
    ran_again = {i for i, n in executions(runs).items() if n > before.get(i, 0)}
    assert ran_again == {3, 5, 7}
    assert {line["i"] for line in lines if not line["journaled"]} == {3, 5, 7}
    unusable = [line for line in (tmp_path / "master.audit").read_text().splitlines() if "UNUSABLE" in line]
    assert len(unusable) == 3
    assert "'square-3' UNUSABLE (damaged: its digest does not match)" in unusable[0] + unusable[1] + unusable[2]

"""The result journal (reliability.md): a master killed with SIGKILL resumes instead of starting over.

tests/programs/trust_journal.py runs ``journaled_square(i)`` with keys through
``mw.as_completed`` as a real master with real slaves and prints each result
as the master algorithm sees it. Every run of a task leaves a file, so the
tests count executions per key instead of trusting the master's word.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mwpy import ExitCode
from mwpy.core.journal import Journal
from tests.programs.trust_journal import executions
from tests.support import PROGRAMS, Proc, run_program, spawn_master, spawn_slave, wait_until

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
    slaves = [spawn_slave(JOURNALED, tmp_path) for _ in range(2)]
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
    done = run_program(
        JOURNALED,
        tmp_path,
        "--mw-master",
        "--mw-master-host",
        "127.0.0.1",
        "--mw-resource-file",
        str(tmp_path / "resource.json"),
        "--mw-journal",
        str(journal),
        "squares",
        "3",
        str(tmp_path),
        timeout=DEADLINE,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{journal}: cannot use as a journal" in lines[0]


# ---------------------------------------------------------------------- file modes (issue 11, item 5)


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
    done = run_program(
        JOURNALED,
        tmp_path,
        "--mw-master",
        "--mw-master-host",
        "127.0.0.1",
        "--mw-resource-file",
        str(tmp_path / "resource.json"),
        "--mw-journal",
        str(journal),
        "squares",
        "3",
        str(tmp_path),
        timeout=DEADLINE,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{target}: cannot use as a journal: writable by {who} (mode 0{mode:o})" in lines[0]
    assert not (tmp_path / "resource.json").exists()  # refused before the master looked for slaves

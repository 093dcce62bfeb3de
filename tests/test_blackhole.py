"""Black holes (reliability.md): a slave whose every task fails for an environmental reason is sent away.

The master runs in the test process (``LocalMaster``); the slaves are real
processes of tests/programs/trust_blackhole.py. A slave started with
``TRUST_BLACK_HOLE=1`` in its environment fails every ``careful`` task with an
OSError, like a machine with a full disk; ``doomed`` tasks fail everywhere.
Every run of a task leaves a file, so attempts are counted, not guessed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwpy import ExitCode
from tests.programs.trust_blackhole import BROKEN, attempts, careful, doomed
from tests.support import PROGRAMS, LocalMaster, Proc, local_master

BLACK_HOLE = PROGRAMS / "trust_blackhole.py"
DEADLINE = 60.0


def connected(lm: LocalMaster, slave: Proc) -> str:
    """Drive the master until ``slave`` has connected; its slave id."""

    def sid() -> str:
        marker = f", pid {slave.pid}, "
        lines = [line for line in lm.audit_text().splitlines() if " connecting [" in line and marker in line]
        return lines[0].split(" [A] ", 1)[1].split(" ", 1)[0] if lines else ""

    return lm.drive_until(sid, f"slave {slave.pid} to connect", DEADLINE)


def start(lm: LocalMaster, monkeypatch: pytest.MonkeyPatch, *, broken: bool = False) -> tuple[Proc, str]:
    with monkeypatch.context() as patch:
        if broken:
            patch.setenv(BROKEN, "1")
        slave = lm.start_slave()
    return slave, connected(lm, slave)


def test_black_hole_is_told_to_leave_and_its_tasks_complete_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: black-hole detection (--mw-slave-max-failures failed tasks that then succeeded elsewhere).

    Without it the broken slave would stay until the end and exit 0, and
    tasks would fail on it again after the retry delay.
    """
    folder = tmp_path / "runs"
    folder.mkdir()
    with local_master(BLACK_HOLE, tmp_path, "--mw-slave-max-failures", "3", "--mw-task-attempts", "3") as lm:
        good, _ = start(lm, monkeypatch)
        hole, hole_sid = start(lm, monkeypatch, broken=True)
        keys = {careful.submit(f"k{i}", str(folder)).task_id: f"k{i}" for i in range(30)}
        lm.drive_until(lambda: not hole.alive(), "the black hole to leave", DEADLINE)
        assert hole.returncode == ExitCode.TOLD_TO_LEAVE
        lm.drive_until(lambda: len(lm.results) >= len(keys), "every result", DEADLINE)
        assert sorted(r.task_id for r in lm.results) == sorted(keys)
        for result in lm.results:
            assert result.ok, result.error
            assert result.value == keys[result.task_id].upper()
            assert result.slave_id != hole_sid
        assert not lm.unrunnable
        hole_runs = [pid for key in keys.values() for pid in attempts(folder, key) if pid == hole.pid]
        assert len(hole_runs) >= 3  # it did fail (at least) the 3 tasks that proved it a black hole
        for key in keys.values():
            assert good.pid in attempts(folder, key)  # every task succeeded on the good slave
        audit = lm.audit_text()
        assert f"{hole_sid} -> told to leave" in audit
        assert "MASTER -> LEAVE (exit 7)" in hole.out()
        assert good.alive()
    assert good.wait(DEADLINE) == 0


def test_task_failing_everywhere_comes_back_failed_after_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: a task that raised runs again, on another slave where possible, --mw-task-attempts times in all.

    Exactly two runs (one per slave) with --mw-task-attempts 2, then one
    failed Result; a retry-less master would give up after one run, an
    unbounded one never.
    """
    folder = tmp_path / "runs"
    folder.mkdir()
    with local_master(BLACK_HOLE, tmp_path, "--mw-task-attempts", "2") as lm:
        first, _ = start(lm, monkeypatch)
        second, _ = start(lm, monkeypatch)
        task_id = doomed.submit("d", str(folder)).task_id
        result = lm.result_of(task_id, DEADLINE)
        assert result.error is not None
        assert result.error.type == "ValueError"
        assert "d cannot be done anywhere" in result.error.message
        assert sorted(attempts(folder, "d")) == sorted([first.pid, second.pid])  # once on each
        assert lm.result_of(careful.submit("after", str(folder)).task_id).value == "AFTER"
        assert len(lm.results_of(task_id)) == 1
    assert first.wait(DEADLINE) == 0
    assert second.wait(DEADLINE) == 0


def test_tasks_failing_everywhere_expel_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards: only failures that later succeed elsewhere count against a slave (not plain failures).

    Ten tasks fail on every slave, far more failures per slave than
    --mw-slave-max-failures 2; nobody is told to leave, and each task comes
    back failed exactly once after exactly --mw-task-attempts 3 runs.
    """
    folder = tmp_path / "runs"
    folder.mkdir()
    with local_master(BLACK_HOLE, tmp_path, "--mw-slave-max-failures", "2", "--mw-task-attempts", "3") as lm:
        slaves = [start(lm, monkeypatch)[0] for _ in range(2)]
        keys = {doomed.submit(f"d{i}", str(folder)).task_id: f"d{i}" for i in range(10)}
        lm.drive_until(
            lambda: len(lm.results) >= len(keys) or not all(slave.alive() for slave in slaves),
            "every failed result",
            DEADLINE,
        )
        assert all(slave.alive() for slave in slaves), "a slave was sent away though every task fails everywhere"
        assert sorted(r.task_id for r in lm.results) == sorted(keys)
        for result in lm.results:
            assert result.error is not None
            assert result.error.type == "ValueError"
            assert len(attempts(folder, keys[result.task_id])) == 3
        assert "told to leave" not in lm.audit_text()
    for slave in slaves:
        assert slave.wait(DEADLINE) == 0

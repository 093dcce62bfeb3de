"""The total of a computation, for progress bars and ETAs: declared by the algorithm or known from a sized map.

docs/resource-file.md (``tasks_total``), docs/observability.md (the status view's bar).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import mwpy
from mwpy import resource_file
from mwpy.observe import statusview
from mwpy.resource_file import ResourceFile
from tests.programs import executor_work as work
from tests.support import PROGRAMS, mwpy_command, spawn_master, spawn_slave, wait_until, write_resource_file

TOTALS = PROGRAMS / "totals.py"


def _record(path: Path) -> ResourceFile:
    return resource_file.read(path)


def test_a_sized_map_announces_its_whole_total_before_its_tasks_exist(tmp_path: Path) -> None:
    """40 inputs through a window of 5: at most 5 tasks exist, yet the file says 40 while none is done."""
    release, rf = tmp_path / "release", tmp_path / "resource.json"
    master = spawn_master(TOTALS, tmp_path, "map", str(release), "40")
    spawn_slave(TOTALS, tmp_path)
    wait_until(lambda: _record(rf).tasks_total is not None, 30, "a total in the resource file")
    running = _record(rf)  # no task can finish before the release
    assert (running.tasks_total, running.tasks_done) == (40, 0), running
    assert running.tasks_pending + running.tasks_running <= 5, "the window holds the rest back"
    release.touch()
    assert master.wait(60) == 0, master.err()
    assert f"sum {sum(v * v for v in range(40))}" in master.out()
    final = _record(rf)
    assert (final.tasks_total, final.tasks_done, final.finished) == (40, 40, True)


def test_an_unsized_input_announces_nothing(tmp_path: Path) -> None:
    master = spawn_master(TOTALS, tmp_path, "generator", "20")
    spawn_slave(TOTALS, tmp_path)
    assert master.wait(60) == 0, master.err()
    final = _record(tmp_path / "resource.json")
    assert final.tasks_done == 20
    assert final.tasks_total is None


def test_a_declared_total_wins_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    master = spawn_master(TOTALS, tmp_path, "declare", "123", "4")
    spawn_slave(TOTALS, tmp_path)
    assert master.wait(60) == 0, master.err()
    assert "refused: tasks_total must be a whole number >= 0 or None, not -1" in master.out()
    final = _record(tmp_path / "resource.json")
    assert (final.tasks_total, final.tasks_done) == (123, 4)


def test_leaving_a_map_early_drops_what_it_never_submitted_from_the_total(tmp_path: Path) -> None:
    master = spawn_master(TOTALS, tmp_path, "break", "1000")
    spawn_slave(TOTALS, tmp_path)
    assert master.wait(60) == 0, master.err()
    final = _record(tmp_path / "resource.json")
    assert final.tasks_total is not None
    assert 3 <= final.tasks_total <= 3 + 5, final  # done, plus at most the window that was out


def test_mwpy_local_shows_the_total_of_a_sized_map_without_being_told() -> None:
    command = mwpy_command("local", str(TOTALS), "--slaves", "2", "--progress", "--", "map", "", "300")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    views = [line for line in done.stderr.splitlines() if line.startswith("[mwpy] ")]
    assert views[-1].startswith("[mwpy] finished · 300/300 tasks done (100 %"), views


def test_the_status_view_takes_the_total_from_the_resource_file_and_total_overrides_it(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    write_resource_file(rf, tasks_done=25, tasks_total=100)
    follower = statusview.Follower(rf, condor=False)
    told = statusview.Follower(rf, total=50, condor=False)
    for view in (follower, told):
        assert view.sample() is None
    assert follower.line().startswith("[mwpy] in progress · 25/100 tasks done (25 %)"), follower.line()
    assert told.line().startswith("[mwpy] in progress · 25/50 tasks done (50 %)"), told.line()


def test_an_event_log_that_is_a_fifo_is_a_problem_line_not_a_hang(tmp_path: Path) -> None:
    """Opening a FIFO blocks until a writer comes: the view must refuse it, not wait for ever (pytest-timeout)."""
    rf, fifo = tmp_path / "resource.json", tmp_path / "events.jsonl"
    write_resource_file(rf)
    os.mkfifo(fifo)
    follower = statusview.Follower(rf, events=fifo, condor=False)
    assert follower.sample() is None
    assert follower.extra.failures == [f"event log: {fifo}: a FIFO, not a regular file"], follower.extra.failures


def test_an_executor_s_total_is_every_future_it_made(tmp_path: Path) -> None:
    """``Executor.map`` makes its futures at once (as concurrent.futures does): the total is all of them."""
    release = tmp_path / "release"
    with mwpy.Executor(max_workers=1, workdir=tmp_path / "work") as ex:
        results = ex.map(work.wait_for, [str(release)] * 12, range(12))
        rf = tmp_path / "work" / "resource.json"
        wait_until(lambda: _record(rf).tasks_total == 12, 30, "the total of the map in the resource file")
        assert _record(rf).tasks_done == 0  # none can finish before the release
        release.touch()
        assert list(results) == list(range(12))

"""Goodput accounting (docs/observability.md) against synthetic runs whose busy and idle times are known."""

from __future__ import annotations

import subprocess
from pathlib import Path

import attrs
import pytest

from mwpy.observe import events as ev
from mwpy.observe import goodput
from tests.obs_support import finished, known_run, write_log
from tests.support import mwpy_command


def test_known_busy_idle_and_lost_times(tmp_path: Path) -> None:
    # slave-1: 0..30 s, ran 4+4+5 s ok and 1 s retried          -> slot 30, idle 16
    # slave-2: 0..15 s, ran 2 s ok, timed out with a task since 5 -> slot 15, timed out 10, idle 3
    # slave-3: 10..20 s, ran 3 s that failed, evicted holding tasks since 14 -> slot 10, evicted 6, idle 1
    g = goodput.account_file(write_log(tmp_path / "events.jsonl", known_run()))
    assert g.slaves == 3
    assert g.slot == pytest.approx(55.0)
    assert g.good == pytest.approx(15.0)
    assert g.retried == pytest.approx(1.0)
    assert g.failed == pytest.approx(3.0)
    assert g.timed_out == pytest.approx(10.0)
    assert g.evicted == pytest.approx(6.0)
    assert g.idle == pytest.approx(20.0)
    assert g.lost == pytest.approx(20.0)
    assert g.efficiency == pytest.approx(15.0 / 55.0)
    assert (g.tasks_ok, g.tasks_failed, g.tasks_retried) == (4, 1, 1)
    assert g.wall == pytest.approx(30.0)


def test_a_master_that_died_ends_its_slaves_at_its_last_event() -> None:
    history = [
        ev.MasterStart(t=0.0, run=1, pid=1, host="h", version="0", member_id="m"),
        ev.SlaveConnected(t=10.0, slave="slave-1", host="a", address="a:1", group="unordered"),
        finished(50.0, "slave-1", "ok", 30.0),
        # killed here; Condor restarts the master, whose slave ids start again at slave-1
        ev.MasterStart(t=500.0, run=2, pid=2, host="h", version="0", member_id="m"),
        ev.SlaveConnected(t=510.0, slave="slave-1", host="a", address="a:1", group="unordered"),
        finished(520.0, "slave-1", "ok", 10.0),
    ]
    g = goodput.account(history)
    assert g.slot == pytest.approx(40.0 + 10.0), "run 1: 10..50 s; run 2: 510..520 s (still connected at the end)"
    assert g.good == pytest.approx(40.0)
    assert g.idle == pytest.approx(10.0)


def test_no_slaves_no_division_by_zero() -> None:
    g = goodput.account([])
    assert g.efficiency == 0.0
    assert "efficiency 0.0 %" in goodput.summary(g)


def test_the_summary_is_short_and_states_every_share(tmp_path: Path) -> None:
    text = goodput.summary(goodput.account(known_run()))
    lines = text.splitlines()
    assert len(lines) == 9
    assert lines[0] == "goodput: 4 tasks ok, 1 failed, 1 retried; 3 slave connections, efficiency 27.3 %"
    assert lines[1].split() == ["slot", "time", "granted", "55.0", "s", "100.0", "%"]
    assert "idle" in lines[3]
    assert lines[3].split()[-2:] == ["36.4", "%"]
    assert [line.split()[1] for line in lines[4:]] == ["tasks", "tasks", "slaves", "slaves", "master"]


@pytest.mark.parametrize(("seconds", "text"), [(4.25, "4.2 s"), (65, "1 min 05 s"), (3725, "1 h 02 min"), (0, "0.0 s")])
def test_durations_read_well(seconds: float, text: str) -> None:
    assert goodput.duration(seconds) == text


@attrs.frozen(kw_only=True)
class _Refined(ev.TasksFinished):
    """A subclass of a kind (a refinement, a test double): still that kind."""


def test_a_subclass_of_a_kind_counts_as_that_kind() -> None:
    """The accountant looks events up by kind, not by exact type, so a subclass is never skipped silently."""
    start = ev.SlaveConnected(t=0.0, slave="slave-1", host="a", address="a:1", group="unordered")
    plain = finished(10.0, "slave-1", "ok", 4.0)
    refined = _Refined(**attrs.asdict(plain))
    assert goodput.account([start, refined]) == goodput.account([start, plain])
    assert goodput.account([start, refined]).good == pytest.approx(4.0)


CRASHING_MASTER = """\
import time
from pathlib import Path

import mwpy


@mwpy.task
def slow(folder: str, x: int) -> int:
    Path(folder, str(x)).touch()
    time.sleep(60)
    return x


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    for x in range(2):
        slow.submit(argv[0], x)
    while len(list(Path(argv[0]).iterdir())) < 2:  # both running
        mw.loop(timeout=0.1)
    raise RuntimeError("the master algorithm crashed")


if __name__ == "__main__":
    mwpy.run()
"""


def test_a_crashed_master_s_running_tasks_are_not_blamed_on_evicted_slaves(tmp_path: Path) -> None:
    """A master-API program that crashes under ``mwpy local`` with tasks running: nothing was evicted (93 %
    of the slot time was "lost: slaves evicted" before)."""
    program = tmp_path / "crash.py"
    program.write_text(CRASHING_MASTER)
    work, running = tmp_path / "work", tmp_path / "running"
    running.mkdir()
    done = subprocess.run(
        [
            *mwpy_command("local", str(program), "--slaves", "2", "--no-progress", "--workdir", str(work)),
            "--",
            str(running),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "the master algorithm crashed" in done.stderr
    g = goodput.account_file(work / "events.jsonl")
    assert g.evicted == 0
    assert g.stopped > 0
    assert "lost: master stopped" in done.stderr

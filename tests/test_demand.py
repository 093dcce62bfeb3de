"""The master asks for slaves that would shorten the run (dask's adaptive target-duration model), not one per task.

2,000 tasks of 20 ms made the master ask for 1,999 slaves for work 8 slots finish in seconds. dask's
``distributed.deploy.Adaptive`` asks for ``ceil(expected work / target duration)`` workers (its
``target-duration`` default is 5 s); so does mwpy once it has measured its tasks, bounded by one slave per
task, and the resource file, ``mwpy status`` and the overseer say why.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import resource_file
from mwpy.core.demand import TARGET_SECONDS, Demand, adaptive
from tests.support import PROGRAMS, mwpy_command, reap_spawned, spawn_master, spawn_slave, wait_until

SHORT = PROGRAMS / "short_tasks.py"


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    yield
    reap_spawned()


def test_short_tasks_on_8_slots_ask_for_no_more_slaves_and_long_ones_for_one_per_task() -> None:
    """The issue's two workloads on 8 connected slaves, with measured task times and start-up."""
    assert TARGET_SECONDS == 5.0
    short = adaptive(per_task=1992, tasks=2000, connected=8, task_seconds=0.02, startup_seconds=3.0)
    assert short == Demand(0, "2,000 tasks x 20 ms = 40.0 s of work: 8 slaves finish it in 5.0 s "
                              "(target 5.0 s; slave start-up 3.0 s)")  # fmt: skip
    slow_start = adaptive(per_task=1992, tasks=2000, connected=1, task_seconds=0.02, startup_seconds=30.0)
    assert slow_start.needed == 1  # 40 s of work: a slave that takes 30 s to come is worth one more, not 7
    long = adaptive(per_task=192, tasks=200, connected=8, task_seconds=60.0, startup_seconds=3.0)
    assert long.needed == 192  # 12,000 s of work: one slave per task, as before
    assert adaptive(per_task=192, tasks=200, connected=8, task_seconds=None, startup_seconds=None) == Demand(192)


def test_a_master_with_short_tasks_asks_for_what_would_shorten_the_run_and_says_why(tmp_path: Path) -> None:
    """300 tasks of 20 ms on one slave: 6 s of work, 2 slaves do it in the target's 5 s: 1 more, not 299."""
    master = spawn_master(SHORT, tmp_path, "--mw-resource-file-update-interval", "1", "300", "0.02")
    spawn_slave(SHORT, tmp_path)

    def measured() -> resource_file.ResourceFile | None:
        record = resource_file.read(tmp_path / "resource.json")
        return record if record.demand_reason and record.tasks_pending > 100 else None

    record = wait_until(measured, 60, "a resource file with the demand's reason while tasks remain")
    assert record is not None
    assert record.slaves_needed <= 1, record
    assert "tasks x 2" in record.demand_reason, record.demand_reason  # 20 ms and a little more, as measured
    assert "of work" in record.demand_reason, record.demand_reason
    status = subprocess.run(
        mwpy_command("status", str(tmp_path / "resource.json"), "--no-condor"), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    assert any(line.startswith("demand   ") and "of work" in line for line in status.stdout.splitlines()), status
    assert master.wait(60) == 0, master.err()


def test_an_absurd_compute_time_falls_back_to_one_slave_per_task_instead_of_crashing_the_master() -> None:
    """A hostile insider's compute time of 1e308 s made the work infinite and math.ceil raised OverflowError in
    the master's tick (tests/test_hostile.py's fuzz found it): CL-MW's count is asked for instead."""
    assert adaptive(per_task=3, tasks=10, connected=1, task_seconds=1e308, startup_seconds=None) == Demand(3)

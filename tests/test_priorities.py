"""Priorities: ``@mwpy.task(priority=N)``, ``with_policy(priority=N)``, ``ex.with_priority(N)`` — higher first,
first in first out within one priority, and a high one queued behind 10^5 others leaves at the next dispatch."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

import mwpy
from mwpy.core.scheduler import Scheduler
from mwpy.task_records import DEFAULT_POLICY
from tests.programs import dataflow_work as work
from tests.test_core_scheduler import NOW, run_all, submit


@pytest.fixture
def sched() -> Scheduler:
    sched = Scheduler(fixed_window=1)
    sched.join("s1")
    return sched


def test_higher_priorities_run_first_and_first_in_first_out_within_one(sched: Scheduler) -> None:
    order = [0, 5, 0, -1, 5, 10, 0, -1]
    tasks = [submit(sched, attrs.evolve(DEFAULT_POLICY, priority=p)) for p in order]
    ran = run_all(sched, "s1")
    by_priority = sorted(tasks, key=lambda task: (-task.policy.priority, task.task_id))
    assert [task.task_id for task in ran] == [task.task_id for task in by_priority]


def test_a_high_priority_task_behind_100000_queued_ones_is_the_next_sent(sched: Scheduler) -> None:
    for _ in range(100_000):
        submit(sched)
    urgent = submit(sched, attrs.evolve(DEFAULT_POLICY, priority=10))
    assert sched.take("s1", NOW) == [urgent]
    assert sched.queued_total == 100_000


def test_a_task_handed_back_goes_first_within_its_own_priority(sched: Scheduler) -> None:
    low = submit(sched)
    high = submit(sched, attrs.evolve(DEFAULT_POLICY, priority=1))
    assert sched.take("s1", NOW) == [high]
    lost = sched.leave("s1")  # its slave vanished: the task is queued again, at the front of priority 1
    assert lost in ([], [high])
    sched.join("s2")
    assert run_all(sched, "s2") == [high, low]


@mwpy.task(priority=3)
def urgent_square(x: int) -> int:
    return x * x


def test_the_decorator_and_with_policy_set_the_priority() -> None:
    assert urgent_square.policy.priority == 3
    assert urgent_square.with_policy(tag="t").policy.priority == 3  # kept when left out
    assert urgent_square.with_policy(priority=-2).policy.priority == -2
    with pytest.raises(mwpy.ConfigurationError, match="priority must be an int"):
        urgent_square.with_policy(priority=0.5)  # type: ignore[arg-type]


def test_on_a_real_executor_a_priority_call_is_the_next_the_slave_starts(tmp_path: Path) -> None:
    log, go = tmp_path / "order", tmp_path / "go"
    with mwpy.Executor(max_workers=1, options=["--mw-slave-window", "1"]) as ex:
        blocker = ex.submit(work.wait_for, str(go))
        queued = [ex.submit(work.record, str(log), f"plain {n}") for n in range(10_000)]
        first = ex.with_priority(10).submit(work.record, str(log), "urgent")
        go.touch()
        assert blocker.result(timeout=60) == 0
        assert first.result(timeout=60) == "urgent"
        # The first ten plain calls ran before the shutdown's cancelling begins: it cancels in submission order
        # while the slave goes on, so which calls run after that is a race (numbers[:10] below is not).
        assert queued[9].result(timeout=60) == "plain 9"
        ex.shutdown(wait=True, cancel_futures=True)
    ran = log.read_text(encoding="utf-8").splitlines()
    assert ran[0] == "urgent"
    numbers = [int(line.split()[1]) for line in ran[1:]]
    assert numbers == sorted(numbers)  # the rest in the order submitted (until shutdown cancelled them)
    assert numbers[:10] == list(range(10))
    assert sum(future.cancelled() for future in queued) > 0


def test_the_executor_s_priority_view_maps_too() -> None:
    with mwpy.Executor(max_workers=1) as ex:
        view = ex.with_priority(2)
        assert view.priority == 2
        assert list(view.map(work.combine, [1, 2], [3, 4], c=10, timeout=60)) == [14, 16]
        with pytest.raises(mwpy.ConfigurationError, match="priority must be an int"):
            ex.with_priority("high")  # type: ignore[arg-type]

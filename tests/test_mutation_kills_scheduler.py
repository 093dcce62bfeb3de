"""Retries and black-hole detection in the scheduler, in this process (docs/mutation.md).

tests/test_blackhole.py proves the rule with real slaves; mutation testing
cannot see into those processes, and found ``Scheduler.failed`` and
``Scheduler.succeeded`` untested in-process.
"""

from __future__ import annotations

import time

import pytest

from mwpy.scheduler import RETRY_DELAY, Scheduler, SlaveKind
from mwpy.task import DEFAULT_POLICY, Policy, Task


def new_task(sched: Scheduler, policy: Policy = DEFAULT_POLICY) -> Task:
    task = Task(sched.new_id(), "f", b"", policy)
    sched.add(task)
    return task


def with_slaves(*sids: str, attempts: int = 10, black_hole_failures: int = 2) -> Scheduler:
    sched = Scheduler(task_attempts=attempts, black_hole_failures=black_hole_failures)
    for sid in sids:
        sched.join(sid)
    return sched


def test_a_slave_whose_failures_succeed_elsewhere_is_a_black_hole() -> None:
    sched = with_slaves("bad", "good", "other")
    first, second = new_task(sched), new_task(sched)
    assert sched.failed("bad", first)
    assert sched.succeeded("good", first) == []  # one proven failure: not yet
    assert sched.failed("bad", second)
    assert sched.succeeded("other", second) == ["bad"]  # two, on any other slaves
    third = new_task(sched)
    assert sched.failed("bad", third)
    assert sched.succeeded("good", third) == ["bad"]  # still one, and reported again


def test_a_success_of_its_own_clears_a_slave() -> None:
    sched = with_slaves("flaky", "good")
    first, mine, second = new_task(sched), new_task(sched), new_task(sched)
    assert sched.failed("flaky", first)
    assert sched.succeeded("good", first) == []
    assert sched.succeeded("flaky", mine) == []  # it can run tasks after all: a new streak
    assert sched.failed("flaky", second)
    assert sched.succeeded("good", second) == []  # one failure of the new streak only
    late = new_task(sched)
    assert sched.failed("flaky", late)
    assert sched.succeeded("good", late) == ["flaky"]


def test_failures_of_an_old_streak_do_not_count_when_they_succeed_later() -> None:
    sched = with_slaves("flaky", "good")
    old, mine, new = new_task(sched), new_task(sched), new_task(sched)
    assert sched.failed("flaky", old)
    assert sched.succeeded("flaky", mine) == []  # new streak
    assert sched.failed("flaky", new)
    assert sched.succeeded("good", old) == []  # from the earlier streak: not evidence
    assert sched.succeeded("good", new) == []  # the one failure of this streak


def test_a_task_that_succeeds_where_it_failed_proves_nothing_and_gone_slaves_are_skipped() -> None:
    sched = with_slaves("a", "b", "gone", black_hole_failures=1)
    task = new_task(sched)
    assert sched.failed("a", task)
    assert sched.succeeded("a", task) == []
    other = new_task(sched)
    assert sched.failed("gone", other)
    sched.leave("gone")
    assert sched.failed("b", other)
    assert sched.succeeded("a", other) == ["b"]


def test_no_black_holes_when_the_rule_is_off() -> None:
    sched = with_slaves("bad", "good", black_hole_failures=0)
    for _ in range(5):
        task = new_task(sched)
        assert sched.failed("bad", task)
        assert sched.succeeded("good", task) == []


def test_a_failed_task_runs_again_later_until_its_attempts_are_spent() -> None:
    sched = with_slaves("a", "b", "c", attempts=3)
    task = new_task(sched)
    before = time.monotonic()
    assert sched.failed("a", task)
    assert before + RETRY_DELAY <= task.retry_after <= time.monotonic() + RETRY_DELAY
    assert sched.failed("b", task)
    assert task.retry_after >= before + 2 * RETRY_DELAY  # backs off
    assert not sched.failed("c", task)  # third failure of 3 attempts: handed over
    assert task.failed_on == [("a", 0), ("b", 0), ("c", 0)]
    once = Scheduler(task_attempts=1)
    once.join("a")
    assert not once.failed("a", new_task(once))  # 1 attempt: the first failure is handed over


def test_a_task_bound_to_its_slave_is_not_retried_elsewhere() -> None:
    sched = with_slaves("a", "b")
    bound = new_task(sched, Policy(sid="a"))
    assert not sched.failed("a", bound)


def test_allocating_adds_up_and_moves_just_enough_unordered_slaves_over() -> None:
    sched = with_slaves("u1", "u2", "u3")
    sched.allocate(1, SlaveKind.ORDERED)
    sched.allocate(1, SlaveKind.ORDERED)  # two wanted now, not one
    kinds = [sched.kind_of(sid) for sid in ("u1", "u2", "u3")]
    assert kinds.count(SlaveKind.ORDERED) == 2
    assert kinds.count(SlaveKind.UNORDERED) == 1
    sched.allocate(2, SlaveKind.INTERMINGLE)  # one unordered slave left to move; one more must connect
    assert [sched.kind_of(sid) for sid in ("u1", "u2", "u3")].count(SlaveKind.INTERMINGLE) == 1
    assert sched.slaves_needed == 1


def test_amounts_must_not_be_negative_and_zero_changes_nothing() -> None:
    sched = with_slaves()
    for change in (sched.allocate, sched.deallocate):
        with pytest.raises(ValueError, match=r"^(de)?allocate_slaves: amount must not be negative$"):
            change(-1, SlaveKind.ORDERED)
        change(0, SlaveKind.ORDERED)
    assert sched.slaves_needed == 0
    sched.allocate(3, SlaveKind.ORDERED)
    sched.deallocate(5, SlaveKind.ORDERED)  # never below zero
    sched.allocate(1, SlaveKind.ORDERED)
    assert sched.slaves_needed == 1


def test_asking_for_unordered_slaves_by_number_replaces_one_per_queued_task() -> None:
    sched = with_slaves()
    for _ in range(4):
        new_task(sched)
    assert sched.slaves_needed == 4  # by default: one unordered slave per queued task
    sched.deallocate(0, SlaveKind.ORDERED)  # about ordered slaves: the default stays
    assert sched.slaves_needed == 4
    sched.deallocate(0, SlaveKind.UNORDERED)  # the master manages unordered slaves itself from now on
    assert sched.slaves_needed == 0


def test_each_success_starts_a_new_streak() -> None:
    sched = with_slaves("flaky", "good", black_hole_failures=1)
    assert sched.succeeded("flaky", new_task(sched)) == []
    task = new_task(sched)
    assert sched.failed("flaky", task)
    assert sched.succeeded("flaky", new_task(sched)) == []  # a second success: that failure is history
    assert sched.succeeded("good", task) == []


def test_a_failed_task_goes_to_another_slave_first() -> None:
    sched = with_slaves("a", "b")
    task = new_task(sched)
    assert sched.take("a") == [task]
    assert sched.failed("a", task)
    assert sched.take("a") == []  # not back to the slave it just failed on
    assert sched.take("b") == [task]


def test_unordered_slaves_moved_to_a_group_no_longer_count_as_unordered() -> None:
    sched = with_slaves("u1", "u2", "u3", "u4")
    sched.allocate(2, SlaveKind.ORDERED)
    sched.allocate(4, SlaveKind.UNORDERED)  # four wanted, two still unordered
    assert sched.slaves_needed == 2

"""Retries and black-hole detection in the scheduler, in this process (docs/mutation.md).

tests/test_blackhole.py proves the rule with real slaves; mutation testing
cannot see into those processes, and found ``Scheduler.failed`` and
``Scheduler.succeeded`` untested in-process.
"""

from __future__ import annotations

import math

import attrs
import pytest

from mwpy.core.entry import Entry
from mwpy.core.scheduler import RETRY_DELAY, Scheduler, SlaveKind
from mwpy.task_records import DEFAULT_POLICY, Policy, Result
from tests.support import QUIET

#: The time every call of these tests happens at, unless a test says otherwise: the scheduler has no clock.
NOW = 1000.0


def new_task(sched: Scheduler, policy: Policy = DEFAULT_POLICY) -> Entry:
    task = Entry(sched.new_id(), "f", b"", policy, QUIET)
    sched.add(task)
    return task


def hold_back(task: Entry) -> None:
    """Keep a task that just failed from its slave for an hour, not RETRY_DELAY (a retry delay's length is
    tested on its own)."""
    task.retry_after = NOW + 3600.0


def with_slaves(*sids: str, attempts: int = 10, black_hole_failures: int = 2) -> Scheduler:
    sched = Scheduler(task_attempts=attempts, black_hole_failures=black_hole_failures)
    for sid in sids:
        sched.join(sid)
    return sched


def test_a_slave_whose_failures_succeed_elsewhere_is_a_black_hole() -> None:
    sched = with_slaves("bad", "good", "other")
    first, second = new_task(sched), new_task(sched)
    assert sched.failed("bad", first, NOW)
    assert sched.succeeded("good", first) == []  # one proven failure: not yet
    assert sched.failed("bad", second, NOW)
    assert sched.succeeded("other", second) == ["bad"]  # two, on any other slaves
    third = new_task(sched)
    assert sched.failed("bad", third, NOW)
    assert sched.succeeded("good", third) == ["bad"]  # still one, and reported again


def test_a_success_of_its_own_clears_a_slave() -> None:
    sched = with_slaves("flaky", "good")
    first, mine, second = new_task(sched), new_task(sched), new_task(sched)
    assert sched.failed("flaky", first, NOW)
    assert sched.succeeded("good", first) == []
    assert sched.succeeded("flaky", mine) == []  # it can run tasks after all: a new streak
    assert sched.failed("flaky", second, NOW)
    assert sched.succeeded("good", second) == []  # one failure of the new streak only
    late = new_task(sched)
    assert sched.failed("flaky", late, NOW)
    assert sched.succeeded("good", late) == ["flaky"]


def test_failures_of_an_old_streak_do_not_count_when_they_succeed_later() -> None:
    sched = with_slaves("flaky", "good")
    old, mine, new = new_task(sched), new_task(sched), new_task(sched)
    assert sched.failed("flaky", old, NOW)
    assert sched.succeeded("flaky", mine) == []  # new streak
    assert sched.failed("flaky", new, NOW)
    assert sched.succeeded("good", old) == []  # from the earlier streak: not evidence
    assert sched.succeeded("good", new) == []  # the one failure of this streak


def test_a_task_that_succeeds_where_it_failed_proves_nothing_and_gone_slaves_are_skipped() -> None:
    sched = with_slaves("a", "b", "gone", black_hole_failures=1)
    task = new_task(sched)
    assert sched.failed("a", task, NOW)
    assert sched.succeeded("a", task) == []
    other = new_task(sched)
    assert sched.failed("gone", other, NOW)
    sched.leave("gone")
    assert sched.failed("b", other, NOW)
    assert sched.succeeded("a", other) == ["b"]


def test_no_black_holes_when_the_rule_is_off() -> None:
    sched = with_slaves("bad", "good", black_hole_failures=0)
    for _ in range(5):
        task = new_task(sched)
        assert sched.failed("bad", task, NOW)
        assert sched.succeeded("good", task) == []


def test_a_failed_task_runs_again_later_until_its_attempts_are_spent() -> None:
    sched = with_slaves("a", "b", "c", attempts=3)
    task = new_task(sched)
    assert sched.failed("a", task, NOW)
    assert task.retry_after == NOW + RETRY_DELAY
    assert sched.failed("b", task, NOW + 5.0)
    assert task.retry_after == NOW + 5.0 + 2 * RETRY_DELAY  # backs off
    assert not sched.failed("c", task, NOW)  # third failure of 3 attempts: handed over
    assert task.failed_on == (("a", 0), ("b", 0), ("c", 0))
    once = Scheduler(task_attempts=1)
    once.join("a")
    assert not once.failed("a", new_task(once), NOW)  # 1 attempt: the first failure is handed over


def test_a_slave_passes_over_a_task_that_just_failed_on_it_until_its_retry_delay_ends() -> None:
    sched = with_slaves("a", attempts=3)
    task = new_task(sched)
    assert sched.take("a", NOW) == [task]
    sched.finish("a", task.task_id, 0.1, NOW)
    assert sched.failed("a", task, NOW)
    assert sched.take("a", math.nextafter(NOW + RETRY_DELAY, -math.inf)) == []  # another slave may take it now
    assert sched.take("a", NOW + RETRY_DELAY) == [task]


def test_a_task_bound_to_its_slave_is_not_retried_elsewhere() -> None:
    sched = with_slaves("a", "b")
    bound = new_task(sched, Policy(sid="a"))
    assert not sched.failed("a", bound, NOW)


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
    assert sched.failed("flaky", task, NOW)
    assert sched.succeeded("flaky", new_task(sched)) == []  # a second success: that failure is history
    assert sched.succeeded("good", task) == []


def test_a_failed_task_goes_to_another_slave_first() -> None:
    sched = with_slaves("a", "b")
    task = new_task(sched)
    assert sched.take("a", NOW) == [task]
    assert sched.finish("a", task.task_id, 0.1, NOW) is task  # what the master does with a failure: result first
    assert sched.failed("a", task, NOW)
    hold_back(task)
    assert sched.take("a", NOW) == []  # not back to the slave it just failed on
    assert sched.take("b", NOW) == [task]


def test_unordered_slaves_moved_to_a_group_no_longer_count_as_unordered() -> None:
    sched = with_slaves("u1", "u2", "u3", "u4")
    sched.allocate(2, SlaveKind.ORDERED)
    sched.allocate(4, SlaveKind.UNORDERED)  # four wanted, two still unordered
    assert sched.slaves_needed == 2


# ---------------------------------------------------------------------- dispatch as the engine drives it


def dispatch(sched: Scheduler) -> dict[str, list[Entry]]:
    """One dispatch round as the engine runs it: ``take`` for every slave ``ready`` names."""
    return {sid: batch for sid in sched.ready() if (batch := sched.take(sid, NOW))}


def test_ready_names_exactly_the_slaves_with_room_and_work() -> None:
    sched = Scheduler(fixed_window=2)
    sched.join("a")
    sched.join("b")
    assert sched.ready() == []  # no work: nobody
    tasks = [new_task(sched) for _ in range(5)]
    assert sorted(sched.ready()) == ["a", "b"]
    sent = dispatch(sched)
    assert sorted(len(batch) for batch in sent.values()) == [2, 2]  # each up to its window, never more
    assert sched.ready() == []  # both full
    assert sched.take("a", NOW) == []  # asked anyway: a full slave gets nothing
    first = sent["a"][0]
    assert sched.finish("a", first.task_id, 0.1, NOW) is first
    assert sched.ready() == ["a"]  # a result makes room
    assert dispatch(sched) == {"a": [tasks[4]]}
    sched.finish("b", sent["b"][0].task_id, 0.1, NOW)  # room on b, and then b goes
    sched.leave("b")
    new_task(sched)
    assert sched.ready() == []  # a is full, and gone slaves are never named (the engine would look them up)


def test_a_slave_with_room_short_of_a_group_waits_for_a_whole_group() -> None:
    sched = Scheduler(task_group=2, fixed_window=3)
    sched.join("a")
    tasks = [new_task(sched) for _ in range(6)]
    assert sched.take("a", NOW) == tasks[:3]
    sched.finish("a", tasks[0].task_id, 0.1, NOW)
    assert sched.take("a", NOW) == []  # room for one: less than a group, and it still has work
    assert sched.ready() == []  # and it is not named again until it has room for a group
    sched.finish("a", tasks[1].task_id, 0.1, NOW)
    assert sched.take("a", NOW) == tasks[3:5]


def test_a_slave_with_work_in_flight_takes_more_up_to_its_window() -> None:
    sched = Scheduler(fixed_window=3)
    sched.join("a")
    first = new_task(sched)
    assert sched.take("a", NOW) == [first]
    more = [new_task(sched) for _ in range(3)]
    assert sched.take("a", NOW) == more[:2]  # two more fit beside the one it runs
    sched = Scheduler(fixed_window=2)
    sched.join("a")
    first = new_task(sched)
    assert sched.take("a", NOW) == [first]
    second = new_task(sched)
    assert sched.take("a", NOW) == [second]  # room for exactly one group of one


def test_an_ordered_slave_is_named_while_its_own_queue_has_work_and_not_after() -> None:
    sched = Scheduler(fixed_window=2)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("o")
    mine = [new_task(sched, Policy(sid="o")) for _ in range(3)]
    assert dispatch(sched) == {"o": mine[:2]}
    for task in mine[:2]:
        sched.finish("o", task.task_id, 0.1, NOW)
    assert sched.ready() == ["o"]  # one of its own still queued
    assert dispatch(sched) == {"o": mine[2:]}
    sched.finish("o", mine[2].task_id, 0.1, NOW)
    assert sched.ready() == []  # its queue is empty: nothing to offer it
    sched.leave("o")
    sched.deallocate(1, SlaveKind.ORDERED)
    sched.allocate(1, SlaveKind.ORDERED)
    assert sched.join("o") is SlaveKind.ORDERED  # the same name again, with an empty queue
    assert sched.ready() == []


def test_a_slave_that_left_with_ordered_work_queued_is_not_offered_it_when_it_comes_back() -> None:
    sched = Scheduler(fixed_window=1)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("o")
    mine = [new_task(sched, Policy(sid="o")) for _ in range(2)]
    assert sched.take("o", NOW) == mine[:1]
    sched.leave("o")  # one in flight, one still queued for it: both unrunnable now
    assert sched.news.drain_unrunnable() == mine
    assert sched.join("o") is SlaveKind.ORDERED
    assert sched.ready() == []


def test_the_window_follows_a_moving_average_of_compute_times() -> None:
    sched = Scheduler()
    sched.join("a")
    for _ in range(3):
        new_task(sched)
    [first] = sched.take("a", NOW)
    sched.finish("a", first.task_id, 0.001, NOW)
    assert sched.window("a") == 5  # 5 ms of work at 1 ms a task
    batch = sched.take("a", NOW)
    sched.finish("a", batch[0].task_id, 0.0001, NOW)
    # 0.8 * 1 ms + 0.2 * 0.1 ms = 0.82 ms a task: ceil(5 / 0.82) = 7, not the last sample's 50.
    assert sched.window("a") == 7


def test_a_result_the_slave_does_not_hold_is_ignored() -> None:
    sched = with_slaves("a", "b")
    task = new_task(sched)
    assert sched.take("a", NOW) == [task]
    assert sched.finish("b", task.task_id, 0.1, NOW) is None  # not this slave's
    assert sched.finish("a", task.task_id + 99, 0.1, NOW) is None  # no such task
    assert sched.finish("ghost", task.task_id, 0.1, NOW) is None  # no such slave
    assert sched.running_total == 1
    assert sched.finish("a", task.task_id, 0.1, NOW) is task
    assert sched.finish("a", task.task_id, 0.1, NOW) is None  # a duplicate
    assert sched.running_total == 0


def test_pending_counts_per_algorithm_stay_right_while_tasks_complete() -> None:
    sched = with_slaves("a")
    tasks = [new_task(sched), new_task(sched)]
    for task in sched.take("a", NOW) + sched.take("a", NOW):
        sched.finish("a", task.task_id, 0.1, NOW)
    sched.complete(tasks[0])
    assert sched.pending_for("f") == 1
    sched.complete(tasks[1])
    assert sched.pending_for("f") == 0


def test_target_numbers_per_algorithm_default_to_zero_and_are_never_negative() -> None:
    sched = Scheduler()
    assert sched.target_for("f") == 0
    sched.set_target_for("f", 5)
    sched.set_target_for("g", 2)
    assert (sched.target_for("f"), sched.target_for("g"), sched.target_for("h")) == (5, 2, 0)
    sched.set_target_for("f", -3)
    assert sched.target_for("f") == 0


def test_news_is_any_one_of_unrunnable_tasks_arrivals_and_departures() -> None:
    sched = Scheduler()
    assert not sched.news.pending()
    new_task(sched, Policy(sid="ghost"))  # unrunnable at once
    assert sched.news.pending()
    sched.news.drain_unrunnable()
    assert not sched.news.pending()
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("o")
    assert sched.news.pending()
    sched.news.drain_connected_ordered()
    assert not sched.news.pending()
    sched.leave("o")
    assert sched.news.pending()
    assert sched.news.drain_disconnected_ordered() == ["o"]
    assert not sched.news.pending()


def test_leaving_twice_or_unknown_slaves_change_nothing() -> None:
    sched = with_slaves("a", "b", "c")
    assert sched.leave("ghost") == []
    assert sched.kind_of("ghost") is None
    sched.free("ghost")  # freeing a slave that is not there: nothing to do
    sched.leave("a")
    assert sched.leave("a") == []
    assert sched.connected() == {"ordered": 0, "intermingle": 0, "unordered": 2}


# ---------------------------------------------------------------------- freeing ordered slaves


def test_a_freed_slave_counts_as_unordered_and_may_be_allocated_again() -> None:
    sched = Scheduler()
    sched.allocate(2, SlaveKind.ORDERED)
    sched.join("o1")
    sched.join("o2")
    sched.join("u")
    sched.free("o1")
    assert sched.connected() == {"ordered": 1, "intermingle": 0, "unordered": 2}
    assert sched.slaves_needed == 0  # one ordered slave wanted now, and it is there
    sched.allocate(1, SlaveKind.ORDERED)  # the freed slave moves back
    assert sched.kind_of("o1") is SlaveKind.ORDERED
    assert sched.connected() == {"ordered": 2, "intermingle": 0, "unordered": 1}


def test_freeing_waits_for_every_ordered_task_in_flight() -> None:
    sched = Scheduler(fixed_window=3)
    sched.allocate(1, SlaveKind.INTERMINGLE)
    sched.join("i")
    mine = [new_task(sched, Policy(sid="i")) for _ in range(2)]
    loose = new_task(sched)
    assert sched.take("i", NOW) == [*mine, loose]
    sched.free("i")
    sched.finish("i", mine[0].task_id, 0.1, NOW)
    assert sched.kind_of("i") is SlaveKind.INTERMINGLE  # one of its own still runs
    sched.finish("i", loose.task_id, 0.1, NOW)
    assert sched.kind_of("i") is SlaveKind.INTERMINGLE
    sched.finish("i", mine[1].task_id, 0.1, NOW)
    assert sched.kind_of("i") is SlaveKind.UNORDERED
    assert sched.slaves_needed == 0  # not replaced: the group was given up


def test_freeing_gives_up_one_wanted_slave_of_the_group() -> None:
    sched = Scheduler()
    sched.allocate(2, SlaveKind.ORDERED)
    sched.join("o1")
    sched.free("o1")
    assert sched.slaves_needed == 1  # two wanted, one freed: one more ordered slave to come
    sched.free("o1")  # already unordered: nothing more is given up
    assert sched.slaves_needed == 1
    sched = Scheduler()
    sched.allocate(1, SlaveKind.UNORDERED)
    sched.join("u")
    sched.free("u")  # an unordered slave: freeing it means nothing
    sched.allocate(1, SlaveKind.UNORDERED)
    assert sched.slaves_needed == 1


def test_a_freed_slave_s_queued_ordered_tasks_follow_their_policy_as_never_run() -> None:
    sched = Scheduler(fixed_window=1)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("o")
    sched.join("u")
    running = new_task(sched, Policy(sid="o"))
    assert sched.take("o", NOW) == [running]
    lost = new_task(sched, Policy(sid="o"))
    moved = new_task(sched, Policy(sid="o", do_it_anyway=True, retry=False))  # never ran: it may move
    sched.free("o")
    sched.finish("o", running.task_id, 0.1, NOW)
    assert sched.news.drain_unrunnable() == [lost]
    assert sorted(sched.ready()) == ["o", "u"]
    assert dispatch(sched) in ({"o": [moved]}, {"u": [moved]})
    assert sched.ready() == []  # nothing left for anyone, the freed slave included


def test_a_freed_slave_with_no_work_left_is_not_offered_ordered_work() -> None:
    sched = Scheduler(fixed_window=1)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("o")
    queued = new_task(sched, Policy(sid="o", do_it_anyway=True))
    sched.free("o")
    assert dispatch(sched) == {"o": [queued]}  # moved to the pool, and the slave takes pool work now
    sched.finish("o", queued.task_id, 0.1, NOW)
    assert sched.ready() == []


# ---------------------------------------------------------------------- listeners, cancelling


@attrs.define
class Told:
    """A listener that says whether its task may start and writes down what it is told."""

    task_id: int
    go: bool = True
    heard: list[tuple[str, int]] = attrs.field(factory=list)

    def may_start(self) -> bool:
        self.heard.append(("asked", self.task_id))
        return self.go

    def began(self) -> None:
        self.heard.append(("began", self.task_id))

    def unrunnable(self, reason: str | None = None) -> bool:
        self.heard.append(("unrunnable", self.task_id))
        return False

    def settle(self, result: Result) -> bool:
        return True


def test_a_task_whose_listener_says_no_is_dropped_unsent_from_either_queue() -> None:
    sched = Scheduler(fixed_window=4)
    sched.allocate(1, SlaveKind.INTERMINGLE)
    sched.join("i")
    asked: list[tuple[str, int]] = []
    tasks = []
    for sid, go in ((None, True), (None, False), ("i", False), ("i", True)):
        task_id = sched.new_id()
        task = Entry(task_id, "f", b"", Policy(sid=sid), Told(task_id, go, asked))
        sched.add(task)
        tasks.append(task)
    assert sched.take("i", NOW) == [tasks[3], tasks[0]]  # its own first, then the pool; the cancelled ones skipped
    assert sorted(task_id for what, task_id in asked if what == "asked") == [1, 2, 3, 4]
    assert (sched.cancelled_total, sched.pending_total, sched.running_total) == (2, 2, 2)
    assert sched.pending_for("f") == 2


def test_the_listener_hears_when_its_task_becomes_the_one_its_slave_runs() -> None:
    sched = Scheduler(fixed_window=3)
    sched.join("a")
    heard: list[tuple[str, int]] = []
    tasks = []
    for _ in range(4):
        task_id = sched.new_id()
        task = Entry(task_id, "f", b"", DEFAULT_POLICY, Told(task_id, heard=heard))
        sched.add(task)
        tasks.append(task)

    def begun() -> list[int]:
        return [task_id for what, task_id in heard if what == "began"]

    assert sched.take("a", NOW) == tasks[:3]
    assert begun() == [1]  # only the first runs; the others wait behind it
    sched.finish("a", 1, 0.1, NOW)
    assert begun() == [1, 2]
    assert sched.take("a", NOW) == tasks[3:]
    assert begun() == [1, 2]  # taking more while it runs begins nothing
    assert sched.withdraw("a", 2) is tasks[1]  # the running one given back: the next in line runs
    assert begun() == [1, 2, 3]


def test_holders_names_the_slaves_holding_the_given_tasks() -> None:
    sched = Scheduler(fixed_window=2)
    sched.join("a")
    sched.join("b")
    sched.join("idle")
    tasks = [new_task(sched) for _ in range(5)]
    assert sched.take("a", NOW) == tasks[:2]
    assert sched.take("b", NOW) == tasks[2:4]
    assert sched.holders([1, 3, 4, 5, 99]) == {"a": [1], "b": [3, 4]}  # task 5 is still queued here
    assert sched.holders([]) == {}


def test_a_task_given_back_unstarted_leaves_the_books_and_makes_room() -> None:
    sched = Scheduler(fixed_window=1)
    for sid in ("a", "b", "c"):
        sched.join(sid)
    first, second, third = new_task(sched), new_task(sched), new_task(sched)
    assert sched.take("a", NOW) == [first]
    assert sched.take("b", NOW) == [second]
    assert sched.take("c", NOW) == [third]
    assert sched.withdraw("a", second.task_id) is None  # not a's
    assert sched.withdraw("ghost", first.task_id) is None
    assert (sched.pending_total, sched.running_total, sched.cancelled_total) == (3, 3, 0)
    assert sched.withdraw("a", first.task_id) is first
    assert (sched.pending_total, sched.running_total, sched.cancelled_total) == (2, 2, 1)
    assert sched.withdraw("a", first.task_id) is None  # only once
    assert (sched.pending_total, sched.running_total, sched.cancelled_total) == (2, 2, 1)
    assert sched.withdraw("b", second.task_id) is second
    assert (sched.pending_total, sched.running_total, sched.cancelled_total) == (1, 1, 2)
    fourth = new_task(sched)
    assert dispatch(sched) in ({"a": [fourth]}, {"b": [fourth]})  # a and b have room again


def test_an_abandoned_task_leaves_its_slave_and_is_not_queued_again() -> None:
    sched = Scheduler(fixed_window=3)
    sched.join("a")
    stuck, behind, last = new_task(sched), new_task(sched), new_task(sched)
    assert sched.take("a", NOW) == [stuck, behind, last]
    sched.abandon("ghost", stuck)
    sched.abandon("a", new_task(sched))  # not in flight on a: nothing happens
    assert sched.running_total == 3
    sched.abandon("a", stuck)
    assert sched.running_total == 2
    sched.abandon("a", stuck)  # twice: counted once
    assert sched.running_total == 2
    sched.abandon("a", last)
    assert sched.running_total == 1
    assert sched.holders([stuck.task_id, behind.task_id]) == {"a": [behind.task_id]}
    assert sched.leave("a") == [behind]  # the abandoned task is not among what the slave held


# ---------------------------------------------------------------------- timeouts


def edge_after(start: float, limit: float) -> float:
    """The latest time at which ``limit`` seconds have not yet passed since ``start`` (float-exact)."""
    edge = start + limit
    while edge - start > limit:
        edge = math.nextafter(edge, -math.inf)
    return edge


def test_no_task_is_overdue_when_no_task_has_a_timeout() -> None:
    sched = with_slaves("a")
    new_task(sched)
    sched.take("a", NOW)
    assert sched.overdue(math.inf, 0.0) == []


def test_the_running_task_is_overdue_just_past_its_timeout_and_grace() -> None:
    sched = Scheduler(task_timeout=2.0, fixed_window=2)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("idle")  # listed first, holds nothing (an ordered slave: no share of a's work): others are looked at
    sched.join("a")
    running, behind = new_task(sched), new_task(sched)
    assert sched.take("a", NOW) == [running, behind]
    edge = edge_after(running.sent_at, 2.0 + 3.0)
    assert sched.overdue(edge, 3.0) == []
    assert sched.overdue(math.nextafter(edge, math.inf), 3.0) == [("a", running)]  # only the one it runs
    assert sched.overdue(edge_after(running.sent_at, 2.0) + 1.0, 0.0) == [("a", running)]  # grace 0: 1 s late


def test_a_task_s_own_timeout_beats_the_master_s() -> None:
    sched = Scheduler(task_timeout=100.0)
    sched.join("a")
    short = new_task(sched, Policy(timeout=1.0))
    assert sched.timeout_of(short) == 1.0
    assert sched.timeout_of(Entry(0, "f", b"", DEFAULT_POLICY, QUIET)) == 100.0
    assert sched.take("a", NOW) == [short]
    assert sched.overdue(short.sent_at + 2.0, 0.0) == [("a", short)]
    plain = Scheduler()
    plain.join("a")
    alone = new_task(plain, Policy(timeout=1.0))  # a task with a timeout, on a master without one
    assert plain.timeout_of(alone) == 1.0
    assert plain.timeout_of(Entry(0, "f", b"", DEFAULT_POLICY, QUIET)) is None
    assert plain.take("a", NOW) == [alone]
    assert plain.overdue(alone.sent_at + 2.0, 0.0) == [("a", alone)]


def test_a_task_without_a_timeout_is_never_overdue_even_beside_one_with() -> None:
    sched = Scheduler(fixed_window=2)
    sched.allocate(1, SlaveKind.ORDERED)
    sched.join("b")  # an ordered slave: no share of a's work
    sched.join("a")
    free_running = new_task(sched)
    timed = new_task(sched, Policy(timeout=1.0))
    assert sched.take("a", NOW) == [free_running, timed]
    assert sched.overdue(math.inf, 0.0) == []  # a runs the task without a timeout; the other waits


def test_the_next_task_s_clock_starts_at_the_previous_result() -> None:
    sched = Scheduler(task_timeout=5.0, fixed_window=2)
    sched.join("a")
    first, second = new_task(sched), new_task(sched)
    assert sched.take("a", NOW) == [first, second]
    sched.finish("a", first.task_id, 0.1, NOW + 3.0)
    # Sent with the first, but it started only when the first ended: not overdue 5 s after it was sent.
    assert sched.overdue(edge_after(NOW + 3.0, 5.0), 0.0) == []
    assert sched.overdue(math.nextafter(edge_after(NOW + 3.0, 5.0), math.inf), 0.0) == [("a", second)]


def test_a_slave_with_room_for_one_more_group_stays_ready() -> None:
    sched = Scheduler(fixed_window=2)
    sched.join("a")
    first = new_task(sched)
    assert sched.take("a", NOW) == [first]
    second = new_task(sched)
    assert sched.ready() == ["a"]  # one running, room for one more
    assert sched.take("a", NOW) == [second]
    new_task(sched)
    assert sched.ready() == []  # now full


def test_a_slave_looks_64_tasks_past_those_that_just_failed_on_it() -> None:
    for failed_ahead, expected in ((63, 1), (64, 0)):
        sched = Scheduler(fixed_window=100, task_attempts=2)
        sched.join("a")
        ahead = [new_task(sched) for _ in range(failed_ahead)]
        assert sched.take("a", NOW) == ahead
        for task in ahead:
            sched.finish("a", task.task_id, 0.1, NOW)
            assert sched.failed("a", task, NOW)
            hold_back(task)
        fresh = new_task(sched)
        assert sched.take("a", NOW) == [fresh] * expected, failed_ahead


def test_a_task_counts_the_times_it_was_sent() -> None:
    sched = Scheduler(task_attempts=3)
    sched.join("a")
    sched.join("b")
    task = new_task(sched, Policy(retry=False, retries=2))
    assert sched.take("a", NOW) == [task]
    assert task.attempts == 1
    sched.finish("a", task.task_id, 0.1, NOW)
    assert sched.failed("a", task, NOW)
    assert sched.take("b", NOW) == [task]
    assert task.attempts == 2
    sched.leave("b")  # it vanished with the task, which may not be retried: handed back, sent twice
    assert sched.news.drain_unrunnable() == [task]
    assert task.attempts == 2


def test_an_ordered_task_whose_slave_is_not_there_yet_never_ran_and_may_move() -> None:
    sched = Scheduler()
    moved = new_task(sched, Policy(sid="ghost", do_it_anyway=True, retry=False))
    assert sched.news.drain_unrunnable() == []
    sched.join("u")
    assert sched.take("u", NOW) == [moved]


def test_the_general_target_number_is_zero_until_the_algorithm_sets_one() -> None:
    assert Scheduler().general_target == 0  # what Master.target_number reports at first

"""The scheduler on its own (no I/O): slave groups, task policies, windows, and no task lost or doubled.

These are fast unit tests of mwpy/core/scheduler.py; the same rules are exercised
with real processes in test_core_policies.py.
"""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mwpy.core.entry import Entry
from mwpy.core.news import LoopEvents
from mwpy.core.scheduler import MAX_WINDOW, PREFER_SECONDS, Scheduler, SlaveKind
from mwpy.task_records import DEFAULT_POLICY, Policy
from tests.support import QUIET

#: The time every call of these tests happens at, unless a test says otherwise: the scheduler has no clock.
NOW = 1000.0

ORDERED, INTERMINGLE, UNORDERED = SlaveKind.ORDERED, SlaveKind.INTERMINGLE, SlaveKind.UNORDERED


def submit(sched: Scheduler, policy: Policy = DEFAULT_POLICY, algorithm: str = "f") -> Entry:
    task = Entry(sched.new_id(), algorithm, b"", policy, QUIET)
    sched.add(task)
    return task


def run_all(sched: Scheduler, sid: str, compute_time: float = 0.001) -> list[Entry]:
    """Let ``sid`` take and finish work until it gets none; the tasks it ran, in order."""
    ran: list[Entry] = []
    while batch := sched.take(sid, NOW):
        for task in batch:
            assert sched.finish(sid, task.task_id, compute_time, NOW) is task
            sched.complete(task)
            ran.append(task)
    return ran


def test_connecting_slaves_fill_ordered_then_intermingle_then_unordered() -> None:
    sched = Scheduler()
    sched.allocate(2, ORDERED)
    sched.allocate(1, INTERMINGLE)
    kinds = [sched.join(sid) for sid in ("a", "b", "c", "d")]
    assert kinds == [ORDERED, ORDERED, INTERMINGLE, UNORDERED]
    assert sched.news.drain_connected_ordered() == ["a", "b", "c"]
    assert sched.news.drain_connected_ordered() == []  # drained: reported once
    assert sched.connected() == {"ordered": 2, "intermingle": 1, "unordered": 1}
    sched.leave("b")
    assert sched.news.events(0) == LoopEvents(disconnected_ordered=1)
    assert sched.news.drain_disconnected_ordered() == ["b"]
    assert not sched.news.pending()
    assert sched.join("e") is ORDERED  # the group has room again


def test_allocate_moves_connected_unordered_slaves_over() -> None:
    sched = Scheduler()
    assert sched.join("a") is UNORDERED
    sched.allocate(1, INTERMINGLE)
    assert sched.kind_of("a") is INTERMINGLE
    assert sched.news.drain_connected_ordered() == ["a"]
    assert sched.slaves_needed == 0


def test_slaves_needed_is_the_sum_over_groups_of_what_is_missing() -> None:
    sched = Scheduler()
    for _ in range(3):
        submit(sched)
    assert sched.slaves_needed == 3  # by default: one per queued or running unordered task
    sched.allocate(2, ORDERED)
    assert sched.slaves_needed == 5
    sched.join("a")
    assert sched.slaves_needed == 4
    sched.allocate(1, UNORDERED)  # explicit unordered wish replaces the automatic one
    assert sched.slaves_needed == 2
    sched.deallocate(9, ORDERED)
    sched.deallocate(9, UNORDERED)
    assert sched.slaves_needed == 0  # never negative


def test_ordered_slave_takes_only_its_tasks_in_order_and_intermingle_prefers_its_own() -> None:
    sched = Scheduler()
    sched.allocate(1, ORDERED)
    sched.allocate(1, INTERMINGLE)
    sched.join("o")
    sched.join("i")
    loose = [submit(sched) for _ in range(3)]
    mine = [submit(sched, Policy(sid="o")) for _ in range(5)]
    its = [submit(sched, Policy(sid="i")) for _ in range(2)]
    assert run_all(sched, "o") == mine
    assert run_all(sched, "i") == its + loose
    assert sched.pending_total == 0


def test_tasks_of_a_vanished_slave_follow_their_policy() -> None:
    sched = Scheduler(fixed_window=10)
    sched.allocate(1, ORDERED)
    sched.join("o")
    sched.join("u")
    again = submit(sched)
    dropped = submit(sched, Policy(retry=False))
    assert sched.take("u", NOW) == [again, dropped]
    ordered = submit(sched, Policy(sid="o"))
    anyway = submit(sched, Policy(sid="o", do_it_anyway=True))
    anyway_no_retry = submit(sched, Policy(sid="o", do_it_anyway=True, retry=False))
    assert sched.take("o", NOW) == [ordered, anyway, anyway_no_retry]
    queued_anyway = submit(sched, Policy(sid="o", do_it_anyway=True, retry=False))  # never sent

    assert sched.leave("u") == [again, dropped]
    assert sched.unrunnable_total == 1
    assert sched.leave("o") == [ordered, anyway, anyway_no_retry]
    assert sched.unrunnable_total == 3  # counted whether or not a listener lists them for the algorithm
    assert sorted(t.task_id for t in sched.news.drain_unrunnable()) == sorted(
        t.task_id for t in (dropped, ordered, anyway_no_retry)
    )
    sched.deallocate(1, ORDERED)
    assert sched.join("v") is UNORDERED
    assert sorted(t.task_id for t in run_all(sched, "v")) == sorted(t.task_id for t in (again, anyway, queued_anyway))
    assert sched.pending_total == 0


def test_tasks_of_a_vanished_slave_keep_their_submission_order() -> None:
    sched = Scheduler(fixed_window=2)
    sched.allocate(1, ORDERED)
    sched.join("o")
    sched.join("u")
    moved = [submit(sched, Policy(sid="o", do_it_anyway=True)) for _ in range(5)]
    dropped = [submit(sched, Policy(retry=False)) for _ in range(2)]
    retried = [submit(sched) for _ in range(2)]
    assert sched.take("o", NOW) == moved[:2]  # two in flight, three still queued on the slave
    assert sched.take("u", NOW) == dropped
    sched.leave("o")
    sched.leave("u")
    assert sched.news.drain_unrunnable() == dropped
    sched.deallocate(1, ORDERED)
    sched.join("v")
    assert run_all(sched, "v") == moved + retried


def test_ordered_task_for_a_slave_that_is_not_there_is_unrunnable_unless_do_it_anyway() -> None:
    sched = Scheduler()
    lost = submit(sched, Policy(sid="ghost"))
    moved = submit(sched, Policy(sid="ghost", do_it_anyway=True))
    assert len(sched.news.unrunnable) == 1
    assert sched.news.drain_unrunnable() == [lost]
    assert len(sched.news.unrunnable) == 0
    sched.join("u")
    assert run_all(sched, "u") == [moved]


def test_free_waits_for_ordered_work_in_flight_then_the_slave_takes_unordered_work() -> None:
    sched = Scheduler()
    sched.allocate(1, ORDERED)
    sched.join("o")
    running = submit(sched, Policy(sid="o"))
    assert sched.take("o", NOW) == [running]
    loose = submit(sched)
    sched.free("o")
    assert sched.kind_of("o") is ORDERED
    assert sched.slaves_needed == 1  # only the loose task wants a slave; no replacement for "o"
    sched.finish("o", running.task_id, 0.001, NOW)
    sched.complete(running)
    assert sched.kind_of("o") is UNORDERED
    assert run_all(sched, "o") == [loose]


def test_window_grows_for_short_tasks_and_stays_at_one_for_long_ones() -> None:
    sched = Scheduler()
    sched.join("fast")
    sched.join("slow")
    assert sched.window("fast") == 1  # nothing known yet
    for _ in range(300):
        submit(sched)
    run_all(sched, "fast", compute_time=1e-6)
    assert sched.window("fast") == MAX_WINDOW
    for _ in range(5):
        submit(sched)
    run_all(sched, "slow", compute_time=10.0)
    assert sched.window("slow") == 1


def test_task_group_sets_the_smallest_batch() -> None:
    sched = Scheduler(task_group=10)
    assert sched.task_group == 10  # the engine packs frames of this many
    sched.join("a")
    for _ in range(25):
        submit(sched)
    assert len(sched.take("a", NOW)) == 10


def test_pending_counts_follow_tasks_per_algorithm() -> None:
    sched = Scheduler()
    sched.join("a")
    submit(sched, algorithm="f")
    submit(sched, algorithm="f")
    submit(sched, algorithm="g")
    assert (sched.pending_for("f"), sched.pending_for("g"), sched.pending_total) == (2, 1, 3)
    run_all(sched, "a")
    assert (sched.pending_for("f"), sched.pending_for("g"), sched.pending_total, sched.done_total) == (0, 0, 0, 3)


# ---------------------------------------------------------------------- property: every task answered once

SLAVES = ("s0", "s1", "s2")
policies = st.builds(
    Policy,
    sid=st.sampled_from([None, None, *SLAVES]),
    retry=st.booleans(),
    do_it_anyway=st.booleans(),
)


class SchedulerMachine(RuleBasedStateMachine):
    """Random interleavings of submissions, slaves coming and going, dispatch and results.

    Whatever happens, once the survivors have worked off their queues and a
    fresh unordered slave has emptied the pool, every task has ended exactly
    once: as a result or as an unrunnable task, never both, never twice.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler()
        self.submitted: list[Entry] = []
        self.completed: Counter[int] = Counter()
        self.held: dict[str, list[Entry]] = {}
        self.unrunnable: list[Entry] = []

    @rule(policy=policies)
    def submit(self, policy: Policy) -> None:
        self.submitted.append(submit(self.sched, policy))

    @rule(sid=st.sampled_from(SLAVES))
    def join(self, sid: str) -> None:
        if sid not in self.held:
            self.sched.join(sid)
            self.held[sid] = []

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.held)))
        lost = self.sched.leave(sid)
        assert sorted(t.task_id for t in lost) == sorted(t.task_id for t in self.held.pop(sid))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def take(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.held)))
        self.held[sid] += self.sched.take(sid, NOW)

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(s for s, tasks in self.held.items() if tasks)))
        task = self.held[sid].pop(0)
        assert self.sched.finish(sid, task.task_id, 0.001, NOW) is task
        self.sched.complete(task)
        self.completed[task.task_id] += 1

    @rule(kind=st.sampled_from([ORDERED, INTERMINGLE]))
    def allocate(self, kind: SlaveKind) -> None:
        self.sched.allocate(1, kind)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        self.sched.free(data.draw(st.sampled_from(sorted(self.held))))

    @invariant()
    def counts_add_up(self) -> None:
        sched = self.sched
        assert sched.running_total == sum(len(tasks) for tasks in self.held.values())
        self.unrunnable += sched.news.drain_unrunnable()
        ended = sum(self.completed.values()) + len(self.unrunnable)
        assert sched.pending_total == len(self.submitted) - ended

    @invariant()
    def slaves_needed_counts_what_unordered_slaves_hold(self) -> None:
        """The demand kept as running counts equals a walk of every slave (what it replaced)."""
        sched = self.sched
        held = sum(len(tasks) for sid, tasks in self.held.items() if sched.kind_of(sid) is UNORDERED)
        acquired = sched.connected()
        needed = sum(max(0, sched._groups._desired[kind] - acquired[kind.value]) for kind in (ORDERED, INTERMINGLE))
        wanted = len(sched._unordered) + held
        assert sched.slaves_needed == needed + max(0, wanted - acquired[UNORDERED.value])

    def teardown(self) -> None:
        sched = self.sched
        for sid, tasks in self.held.items():
            for task in tasks:
                assert sched.finish(sid, task.task_id, 0.001, NOW) is task
                sched.complete(task)
                self.completed[task.task_id] += 1
        sched.deallocate(99, ORDERED)
        sched.deallocate(99, INTERMINGLE)
        sched.join("drain")
        for sid in [*self.held, "drain"]:
            for task in run_all(sched, sid):
                self.completed[task.task_id] += 1
        self.unrunnable += sched.news.drain_unrunnable()
        unrunnable = Counter(t.task_id for t in self.unrunnable)
        for task in self.submitted:
            assert self.completed[task.task_id] + unrunnable[task.task_id] == 1, task
        assert (sched.pending_total, sched.running_total) == (0, 0)


SchedulerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None, database=None)
test_every_task_ends_exactly_once_as_a_result_or_unrunnable = SchedulerMachine.TestCase


def test_a_deep_window_leaves_the_other_slaves_their_share_of_a_short_queue() -> None:
    """Issue 21: after quick tasks a slave's window holds up to MAX_WINDOW tasks; taking a short queue whole
    would leave another slave idle while its tasks wait behind one another."""
    sched = Scheduler()
    sched.join("a")
    sched.join("b")
    for sid in ("a", "b"):
        submit(sched)
        run_all(sched, sid, compute_time=1e-5)
    assert sched.window("a") == sched.window("b") == MAX_WINDOW
    tasks = [submit(sched) for _ in range(20)]
    first = sched.take("a", NOW)
    assert len(first) == 10
    assert sched.ready() == ["b"]  # a has its share: the rest waits for b
    second = sched.take("b", NOW)
    assert first + second == tasks
    more = [submit(sched) for _ in range(4)]
    assert sched.take("b", NOW) == more[:2]  # b is still hungry; a gets the rest at its next result
    finished = first[0]
    assert sched.finish("a", finished.task_id, 1e-5, NOW) is finished
    assert sched.take("a", NOW) == more[2:]


def test_a_task_is_left_to_the_slave_that_holds_its_input_for_a_while_and_a_pinned_one_while_it_is_there() -> None:
    """Delay scheduling (Spark's locality wait): the holder takes it at once when free; another slave takes it
    only after PREFER_SECONDS; a pinned task (mwpy's relay of what that slave holds) waits for that slave alone,
    until it leaves."""
    sched = Scheduler()
    for sid in ("holder", "other"):
        sched.join(sid)
    task = Entry(sched.new_id(), "f", b"", DEFAULT_POLICY, QUIET)
    task.prefer = "holder"
    sched.add(task)
    assert sched.take("other", 10.0) == []
    assert sched.take("other", 10.0 + PREFER_SECONDS / 2) == []
    assert sched.take("other", 10.0 + PREFER_SECONDS) == [task]  # the holder stayed busy: taken elsewhere
    assert sched.finish("other", task.task_id, 0.001, 11.0) is task
    sched.complete(task)
    again = Entry(sched.new_id(), "f", b"", DEFAULT_POLICY, QUIET)
    again.prefer = "holder"
    sched.add(again)
    assert sched.take("holder", 20.0) == [again]  # the holder is free: nothing moves
    pinned = Entry(sched.new_id(), "f", b"", DEFAULT_POLICY, QUIET)
    pinned.prefer, pinned.prefer_until = "holder", math.inf
    sched.add(pinned)
    assert sched.take("other", 1e9) == []
    sched.leave("holder")
    assert pinned in sched.take("other", 1e9)  # its slave is gone: another runs it (and says it holds nothing)

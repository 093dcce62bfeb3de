"""Which task goes to which slave, and what happens to tasks when a slave vanishes.

Pure bookkeeping with no I/O, so that every rule of CL-MW's task policies and
slave groups lives in one place and can be read (and tested) on its own:

* a connecting slave fills the ordered group first, then intermingle, then
  unordered; ordered slaves run only tasks addressed to them, intermingle
  slaves prefer those and also take unordered ones;
* when a slave vanishes, its unordered tasks are queued again (``retry``) or
  become unrunnable; its ordered tasks become unrunnable unless
  ``do_it_anyway`` moves them to the unordered pool;
* each slave gets a window of tasks queued ahead of the one it runs, sized so
  that it holds a few milliseconds of work: deep for tiny tasks (no idle round
  trips), one task for long ones (no task stuck behind another while a
  different slave idles).

The scheduler reads no clock: whoever calls it says what time it is (``now``,
monotonic seconds), so a test can play any timing. It holds tasks as
:class:`Entry` records (the task and its bookkeeping), never the user's
:class:`~mwpy.task_records.Task`; and it tells each task's :class:`Listener` (a
future, a ``map`` stream) what becomes of it, without knowing what it is.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import ClassVar

from mwpy.core.entry import Entry
from mwpy.core.groups import Groups, SlaveKind
from mwpy.core.news import News
from mwpy.core.queues import Queue, TaskQueue
from mwpy.core.shapes import Shapes, fits
from mwpy.lifetime import RunTimes
from mwpy.matching import Offer
from mwpy.resources import Resources

#: SlaveKind is the groups' (mwpy/core/groups.py); a slave's group is what join() answers, so it is named here too.
__all__ = ["Scheduler", "SlaveKind"]

#: Work a slave should hold beyond its current task, in seconds of compute.
PIPELINE_SECONDS = 0.005
#: Upper bound of the adaptive window, in tasks.
MAX_WINDOW = 128
#: How far down the queue a slave looks past tasks that already failed on it (or that need more than it has).
_MAX_SKIP = 64
#: ... once tasks ask for resources: a slave may have many tasks for bigger slaves ahead of its own.
_MAX_SHAPE_SKIP = 4096
#: Seconds other slaves leave a task to the slave that holds its input (a value that stayed where it was made),
#: then one of them fetches it from there: no transfer if that slave is free soon, no long wait if it is not.
PREFER_SECONDS = 1.0
#: Seconds (times the failures so far) before a failed task may run again on a slave it failed on;
#: other slaves may take it at once.
RETRY_DELAY = 1.0


class _Slot:
    """The scheduler's view of one connected slave."""

    __slots__ = (
        "sid", "kind", "shape", "ordered", "in_flight", "freeing", "compute_time", "run_times", "last_result_at",
        "streak", "proven",
    )  # fmt: skip

    def __init__(self, sid: str, kind: SlaveKind, shape: Offer | None) -> None:
        self.sid = sid
        self.kind = kind
        self.shape = shape  # what it offers, as its Hello said (mwpy/core/shapes.py)
        self.ordered: deque[Entry] = deque()
        self.in_flight: dict[int, Entry] = {}
        self.freeing = False
        self.compute_time: float | None = None  # moving average, seconds per task
        self.run_times = RunTimes()  # the longest run per algorithm, as the slave judges its lifetime by
        self.last_result_at = 0.0  # the next task in flight started no earlier
        self.streak = 0  # numbers this slave's runs of failures; a success starts a new one
        self.proven = 0  # failures of the current streak that later succeeded elsewhere

    def running(self) -> Entry | None:
        """The task it runs now: the first in flight (a slave runs its tasks in the order sent), or None."""
        return next(iter(self.in_flight.values()), None)

    def runs_alone(self) -> bool:
        """Whether it runs a task that may kill its slave: it holds nothing more (Scheduler._take_unordered)."""
        running = self.running()
        return running is not None and bool(running.deaths)

    def begin(self) -> None:
        """Tell the task it runs now that it began (its future becomes running)."""
        running = self.running()
        if running is not None:
            running.listener.began()


def _fair_share(shared: int, takers: int, holding: int, least: int) -> int:
    """How many more of ``shared`` tasks (queued and in flight) a slave holding ``holding`` may take: an equal
    part for each of ``takers``, at least ``least``; a deep window must not take a short queue whole while
    others idle (design.md)."""
    part = -(-shared // max(1, takers)) - holding
    return max(least, part) if part > 0 else 0


def _failed_here(task: Entry, sid: str) -> bool:
    return any(failed_sid == sid for failed_sid, _ in task.failed_on)


def _left_to_holder(task: Entry, sid: str, slots: Mapping[str, _Slot], now: float) -> bool:
    """Whether ``sid`` leaves ``task`` to the slave that holds its input: while that one is connected, for
    :data:`PREFER_SECONDS` from the first time a slave passed it over."""
    if task.prefer == sid or task.prefer not in slots:
        return False
    if not task.prefer_until:
        task.prefer_until = now + PREFER_SECONDS
    return now < task.prefer_until


def timeouts_in(sched: Scheduler, batch: list[Entry]) -> dict[int, float]:
    """The timeouts of the tasks of ``batch`` that have one, by id (what their Tasks frame carries)."""
    return {t.task_id: timeout for t in batch if (timeout := sched.timeout_of(t)) is not None}


class Scheduler:
    """Entry queues, slaves in their groups (counted in mwpy/core/groups.py) and target numbers of one master (the
    task board reads them in place)."""

    _SHARED_WITH: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "_slots": ("mwpy.core.board",),
        "_unordered": ("mwpy.core.board",),
        "_next_id": ("mwpy.core.board",),
    }

    def __init__(
        self,
        *,
        task_group: int = 0,
        fixed_window: int = 0,
        task_attempts: int = 1,
        black_hole_failures: int = 0,
        task_timeout: float | None = None,
    ) -> None:
        self.task_timeout = task_timeout
        #: The slave shapes on offer (:meth:`Shapes.offer`), and whether tasks ask for resources.
        self.shapes = Shapes()
        #: Whether any task may have a timeout (else timeouts cost nothing: not on the wire, not in overdue()).
        self.may_time_out = task_timeout is not None
        #: Tasks per frame (``--mw-slave-task-group``); 0: whatever is due at once shares a frame.
        self.task_group = task_group
        #: The fewest tasks worth sending a slave (its window has room for a group).
        self._least = max(1, task_group)
        self.fixed_window = fixed_window
        #: Slaves expected to take shared work (an Executor's ``max_workers``): before they connect, the first
        #: ones leave them their share of a short queue.
        self.expected_slaves = 0
        self.task_attempts = task_attempts
        self.black_hole_failures = black_hole_failures
        self._next_id = 0
        self._unordered: Queue = deque()  # a TaskQueue once a task of a priority other than 0 comes
        self._slots: dict[str, _Slot] = {}
        self._hungry: set[str] = set()
        self._with_ordered_work: set[str] = set()
        self._groups = Groups()
        self.general_target = 0
        self._targets: dict[str, int] = {}
        self._pending: dict[str, int] = {}  # not a Counter: its missing keys and deletions are Python calls
        self.pending_total = 0
        self.running_total = 0
        #: Tasks in flight on unordered slaves: slaves_needed reads it every tick, and a walk of every
        #: slave costs milliseconds at 10,000 of them (docs/scaling.md).
        self._unordered_running = 0
        self.done_total = 0
        self.cancelled_total = 0
        #: Tasks that became unrunnable so far (whether or not their listener lists them for the algorithm).
        self.unrunnable_total = 0
        #: What the master algorithm has yet to be told; the master drains it.
        self.news: News[Entry] = News()
        #: Told the payload of each task that leaves the books (done, dropped, cancelled): the master's file
        #: service frees the arguments it stored for it (set once it stored some: until then no call per task).
        self.on_leave: Callable[[bytes], None] | None = None

    # ------------------------------------------------------------------ tasks

    def add(self, task: Entry) -> None:
        """Take in a new task (its id already assigned by :meth:`new_id`)."""
        if task.policy.timeout is not None:
            self.may_time_out = True
        self._pending[task.algorithm] = self._pending.get(task.algorithm, 0) + 1
        self.pending_total += 1
        need = self.shapes.need_of(task) if self.shapes.learned else task.policy.resources
        if need is not None and (reason := self.shapes.take(need)) is not None:
            self._drop(task, f"task {task.task_id} {task.label}: {reason}")
            return
        if task.policy.priority and type(self._unordered) is deque:  # an ordered task too: it may come there
            self._unordered = TaskQueue(self._unordered)  # served highest priority first from now on
        sid = task.policy.sid
        if sid is None:
            self._unordered.append(task)
        else:
            self._place(task, sid)

    def learned(self, algorithm: str, memory: int) -> int:
        """``algorithm``'s tasks need ``memory`` MB from now on (mwpy/core/memory.py): new ones are born with it,
        and each not answered yet is re-filed under it (:meth:`Shapes.refile`) -- those queued, and those in
        flight, which a lost slave, a hand-back or a retry would queue again. Returns how many moved."""
        self.shapes.learned[algorithm] = memory
        held = (itertools.chain(slot.ordered, slot.in_flight.values()) for slot in self._slots.values())
        tasks = itertools.chain(self._unordered, *held)
        return sum(self.shapes.refile(task) for task in tasks if task.algorithm == algorithm)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _place(self, task: Entry, sid: str) -> None:
        """An ordered task goes to its slave's queue, or follows its policy when that slave is not there."""
        slot = self._slots.get(sid)
        if slot is None or slot.kind is SlaveKind.UNORDERED:
            self._orphan(task, ran=False)
            return
        slot.ordered.append(task)
        self._with_ordered_work.add(sid)

    def _orphan(self, task: Entry, *, ran: bool) -> None:
        """Apply the task policy to a task whose slave is gone."""
        policy = task.policy
        if policy.sid is None:
            if policy.retry:
                self._unordered.appendleft(task)
            else:
                self._drop(task)
        elif policy.do_it_anyway and (policy.retry or not ran):
            self._unordered.appendleft(task)
        else:
            self._drop(task)

    def _orphan_all(self, tasks: list[tuple[Entry, bool]]) -> None:
        """``_orphan`` each (task, ran) keeping their order: at the front of the pool, and among the unrunnable."""
        pool, self._unordered = self._unordered, TaskQueue()
        for task, ran in tasks:
            self._orphan(task, ran=ran)
        requeued, self._unordered = self._unordered, pool
        pool.extendleft(requeued)  # requeued was built by appendleft: reversed, and extendleft reverses back

    def _drop(self, task: Entry, reason: str | None = None) -> None:
        self.complete(task, done=False)
        self.unrunnable_total += 1
        if task.listener.unrunnable(reason):
            self.news.unrunnable.append(task)

    def finish(self, sid: str, task_id: int, compute_time: float, now: float) -> Entry | None:
        """Record a result that came at ``now``; returns its task, or ``None`` if this slave does not hold it."""
        slot = self._slots.get(sid)
        if slot is None:
            return None
        task = slot.in_flight.pop(task_id, None)
        if task is None:
            return None
        self.running_total -= 1  # _landed(slot, 1), inline: this is every result's way
        if slot.kind is SlaveKind.UNORDERED:
            self._unordered_running -= 1
        if self.may_time_out:  # true since before any task with a timeout was sent: its start is known
            slot.last_result_at = now
        if slot.in_flight:
            next(iter(slot.in_flight.values())).listener.began()  # the next task in flight is the one it runs now
        previous = slot.compute_time
        slot.compute_time = compute_time if previous is None else 0.8 * previous + 0.2 * compute_time
        slot.run_times.ran(task.algorithm, compute_time)
        if slot.freeing and not any(t.policy.sid is not None for t in slot.in_flight.values()):
            self._become_unordered(slot)
        self._hungry.add(sid)
        return task

    def failed(self, sid: str, task: Entry, now: float) -> bool:
        """A run of ``task`` on ``sid`` raised (known at ``now``). True: queued to run again; False: hand it over."""
        slot = self._slots.get(sid)
        if slot is not None:
            task.failed_on += ((sid, slot.streak),)
        if len(task.failed_on) >= task.policy.attempts(self.task_attempts) or task.policy.sid is not None:
            return False
        task.retry_after = now + RETRY_DELAY * len(task.failed_on)
        self._unordered.append(task)  # at the back: most likely another slave takes it
        return True

    def succeeded(self, sid: str, task: Entry) -> list[str]:
        """A run of ``task`` on ``sid`` gave a value. Returns slaves now proven to be black holes.

        A slave is a black hole when ``black_hole_failures`` tasks that failed on
        it, with no success of its own in between, have since succeeded on other
        slaves: its failures come from its machine, not from the tasks.
        """
        slot = self._slots.get(sid)
        if slot is not None:
            slot.streak += 1
            slot.proven = 0
        holes: list[str] = []
        if not task.failed_on:
            return holes  # the common case
        for failed_sid, streak in task.failed_on:
            other = self._slots.get(failed_sid)
            if other is None or failed_sid == sid or other.streak != streak:
                continue
            other.proven += 1
            if self.black_hole_failures and other.proven >= self.black_hole_failures:
                holes.append(failed_sid)
        return holes

    def complete(self, task: Entry, *, done: bool = True) -> None:
        """The task leaves the master's memory: its result handed over (``done``), or dropped, or cancelled."""
        if self.on_leave is not None:  # set once some task's arguments went to the file service
            self.on_leave(task.payload)
        pending = self._pending
        algorithm = task.algorithm
        if left := pending.pop(algorithm, 0) - 1:
            pending[algorithm] = left
        self.pending_total -= 1
        self.done_total += done
        if self.shapes.active:
            self.shapes.settled(task.policy.resources)

    # ------------------------------------------------------------------ dispatch

    def window(self, sid: str) -> int:
        slot = self._slots[sid]
        if slot.in_flight and slot.runs_alone():  # an idle slave (one task in flight at a time) asks nothing more
            return 1
        if self.fixed_window:
            return max(self.fixed_window, self._least)
        if slot.compute_time is None:
            adaptive = 1
        else:
            adaptive = min(MAX_WINDOW, max(1, math.ceil(PIPELINE_SECONDS / max(slot.compute_time, 1e-6))))
        return max(adaptive, self._least)

    def ready(self) -> list[str]:
        """Slaves with room in their window for which work is waiting (a snapshot: take() changes it)."""
        if self._unordered:
            return list(self._hungry)
        if self._with_ordered_work:
            return [sid for sid in self._with_ordered_work if sid in self._hungry]
        return []

    def take(self, sid: str, now: float) -> list[Entry]:
        """Tasks to send to ``sid`` at ``now`` (possibly none); they count as running."""
        slot = self._slots[sid]
        if not self._unordered and not slot.ordered:
            return []  # nothing for it (ready() is a snapshot: another slave may have taken the last task)
        window = self.window(sid)
        room = window - len(slot.in_flight)
        if room < self._least and slot.in_flight:
            self._hungry.discard(sid)
            return []
        batch: list[Entry] = []
        if slot.kind is not SlaveKind.UNORDERED:
            self._take_ordered(sid, slot, room, batch)
        if slot.kind is not SlaveKind.ORDERED:
            share = self._share(slot)
            self._take_unordered(slot, min(room, len(batch) + share), batch, now)
            if share <= len(batch) and self._unordered:
                room = len(batch)  # its share taken, the rest left to others: hungry again at its next result
        idle = not slot.in_flight
        for task in batch:
            task.sent_at = now
            slot.in_flight[task.task_id] = task
            task.attempts += 1
        self.running_total += len(batch)
        if slot.kind is SlaveKind.UNORDERED:
            self._unordered_running += len(batch)
        if idle and batch:
            batch[0].listener.began()  # the first of an idle slave's batch runs now (slot.begin's, without its calls)
        if len(slot.in_flight) + self._least > window or len(batch) >= room:
            self._hungry.discard(sid)
        return batch

    def _share(self, slot: _Slot) -> int:
        """How many more shared tasks ``slot`` may hold (:func:`_fair_share`)."""
        takers = max(self.expected_slaves, self._groups.takers)
        shared = len(self._unordered) + self._unordered_running
        return _fair_share(shared, takers, len(slot.in_flight), self._least)

    def _take_ordered(self, sid: str, slot: _Slot, room: int, batch: list[Entry]) -> None:
        """Fill ``batch`` up to ``room`` from the slave's own ordered queue, in order."""
        queue = slot.ordered
        while queue and len(batch) < room:
            task = queue.popleft()
            if task.listener.may_start():
                batch.append(task)
            else:
                self._cancelled(task)
        if not queue:
            self._with_ordered_work.discard(sid)

    def _take_unordered(self, slot: _Slot, room: int, batch: list[Entry], now: float) -> None:
        """Fill ``batch`` up to ``room`` from the shared queue, passing over tasks that just failed on the slave
        and, once tasks ask for resources, those its shape cannot run. A task that was in flight on a slave that
        died goes alone to an idle slave (:meth:`window`): a death there is surely its own (Outcomes.slave_died).
        """
        queue, sid, shaped = self._unordered, slot.sid, self.shapes.active
        skipped: list[Entry] = []
        limit = _MAX_SHAPE_SKIP if shaped else _MAX_SKIP
        while queue and len(batch) < room and len(skipped) < limit:
            task = queue.popleft()
            if task.deaths and (batch or slot.in_flight):
                queue.appendleft(task)  # it waits at the head for an idle slave, the tasks behind it with it
                break
            if task.failed_on and now < task.retry_after and _failed_here(task, sid):
                skipped.append(task)  # leave it to a slave it has not failed on, for a while
            elif shaped and not fits(slot.shape, task.policy.resources):
                skipped.append(task)  # left for a slave of its shape
            elif task.prefer is not None and _left_to_holder(task, sid, self._slots, now):
                skipped.append(task)  # left for the slave that holds its input, for a while
            elif task.listener.may_start():
                batch.append(task)
                if task.deaths:
                    break
            else:
                self._cancelled(task)
        queue.extendleft(reversed(skipped))

    def _cancelled(self, task: Entry) -> None:
        """The task's listener said no (it was cancelled): it leaves without a result."""
        self.complete(task, done=False)
        self.cancelled_total += 1

    def timeout_of(self, task: Entry) -> float | None:
        """The task's timeout: its policy's, else the master's ``--mw-task-timeout``."""
        timeout = task.policy.timeout
        return self.task_timeout if timeout is None else timeout

    def overdue(self, now: float, grace: float) -> list[tuple[str, Entry]]:
        """(slave, task) for each slave whose running task is past its timeout by more than ``grace``.

        A slave runs its tasks in the order they were sent, so the first in
        flight is the running one, and it started when it was sent or when the
        slave's previous result came back, whichever is later. Heartbeats do
        not enter into it: a slave that is stopped (SIGSTOP) or stuck in a task
        that ignores its interruption is overdue all the same.
        """
        if not self.may_time_out:
            return []
        found = []
        for sid, slot in self._slots.items():
            if not slot.in_flight:
                continue
            head = next(iter(slot.in_flight.values()))
            timeout = self.timeout_of(head)
            if timeout is not None and now - max(head.sent_at, slot.last_result_at) > timeout + grace:
                found.append((sid, head))
        return found

    def held_by(self, sid: str) -> list[Entry]:
        """The tasks ``sid`` holds in flight, in the order sent."""
        slot = self._slots.get(sid)
        return [] if slot is None else list(slot.in_flight.values())

    def offer_of(self, sid: str) -> Offer | None:
        """What ``sid`` offers (its Hello's shape), or None: not connected, or no shape said."""
        slot = self._slots.get(sid)
        return None if slot is None else slot.shape

    def holders(self, task_ids: list[int]) -> dict[str, list[int]]:
        """Which slave holds which of ``task_ids`` in flight (one scan of the slaves: cancelling is rare)."""
        wanted = set(task_ids)
        found: dict[str, list[int]] = {}
        for sid, slot in self._slots.items():
            held = [task_id for task_id in slot.in_flight if task_id in wanted]
            if held:
                found[sid] = held
        return found

    def withdraw(self, sid: str, task_id: int) -> Entry | None:
        """``sid`` gave back ``task_id`` unstarted (it was cancelled): it leaves the master's books."""
        slot = self._slots.get(sid)
        task = None if slot is None else slot.in_flight.pop(task_id, None)
        if slot is None or task is None:
            return None
        self._landed(slot, 1)
        self.complete(task, done=False)
        self.cancelled_total += 1
        self._hungry.add(sid)
        if slot.in_flight:
            slot.begin()
        return task

    def hand_back(self, sid: str, task_ids: list[int]) -> int:
        """``sid`` is leaving and gave back these tasks unstarted: queued again first, as never sent.

        Unlike a vanished slave's tasks they never ran, so ``retry=False`` does
        not make them unrunnable; an ordered task follows its policy, as for any
        ordered slave that leaves. Returns how many were given back.
        """
        slot = self._slots.get(sid)
        if slot is None:
            return 0
        back = [task for task_id in task_ids if (task := slot.in_flight.pop(task_id, None)) is not None]
        self._landed(slot, len(back))
        self._unordered.extendleft(reversed([task for task in back if task.policy.sid is None]))
        self._orphan_all([(task, False) for task in back if task.policy.sid is not None])
        return len(back)

    def abandon(self, sid: str, task: Entry) -> None:
        """Take ``task`` off ``sid`` without a result (it timed out there): it will not be re-queued."""
        slot = self._slots.get(sid)
        if slot is not None and slot.in_flight.pop(task.task_id, None) is not None:
            self._landed(slot, 1)

    def _landed(self, slot: _Slot, count: int) -> None:
        """``count`` tasks left ``slot``'s flight (a result, a hand-back, a timeout, the slave gone)."""
        self.running_total -= count
        if slot.kind is SlaveKind.UNORDERED:
            self._unordered_running -= count

    # ------------------------------------------------------------------ slaves

    def join(self, sid: str, shape: Offer | None = None) -> SlaveKind:
        """A slave connected (offering ``shape``, with its slot's ad if it has one): put it in the first group that
        still needs slaves."""
        kind = self._groups.first_short()
        self._slots[sid] = _Slot(sid, kind, shape)
        self._groups.joined(kind)
        self._hungry.add(sid)
        if kind is not SlaveKind.UNORDERED:
            self.news.connected_ordered.append(sid)
        return kind

    def leave(self, sid: str) -> list[Entry]:
        """A slave is gone: apply task policies to everything it held. Returns what it ran."""
        slot = self._slots.pop(sid, None)
        if slot is None:
            return []
        self._groups.left(slot.kind)
        self._hungry.discard(sid)
        self._with_ordered_work.discard(sid)
        lost = list(slot.in_flight.values())
        self._landed(slot, len(lost))
        self._orphan_all([(task, True) for task in lost] + [(task, False) for task in slot.ordered])
        if slot.kind is not SlaveKind.UNORDERED:
            self.news.disconnected_ordered.append(sid)
        return lost

    def shape_demand(self) -> list[tuple[Resources, int, int]]:
        """Per need: tasks not answered, and connected slaves that satisfy it (none while no task asked)."""
        return self.shapes.report(slot.shape for slot in self._slots.values()) if self.shapes.active else []

    def slaves(self) -> dict[str, SlaveKind]:
        return {sid: slot.kind for sid, slot in self._slots.items()}

    def kind_of(self, sid: str) -> SlaveKind | None:
        slot = self._slots.get(sid)
        return None if slot is None else slot.kind

    def allocate(self, amount: int, kind: SlaveKind) -> None:
        """Want ``amount`` more slaves of ``kind``; connected unordered slaves may move over."""
        self._groups.want(amount, kind)
        if kind is SlaveKind.UNORDERED:
            return
        for slot in list(self._slots.values()):
            if not self._groups.short(kind):
                break
            if slot.kind is SlaveKind.UNORDERED and not slot.freeing:
                self._groups.moved(SlaveKind.UNORDERED, kind)
                self._unordered_running -= len(slot.in_flight)
                slot.kind = kind
                self.news.connected_ordered.append(slot.sid)

    def deallocate(self, amount: int, kind: SlaveKind) -> None:
        """Want ``amount`` fewer slaves of ``kind`` (never below zero); nobody is disconnected."""
        self._groups.unwant(amount, kind)

    def free(self, sid: str) -> None:
        """Move an ordered slave to the unordered group once its ordered work in flight is done."""
        slot = self._slots.get(sid)
        if slot is None or slot.kind is SlaveKind.UNORDERED:
            return
        self._groups.unwant(1, slot.kind)
        if any(t.policy.sid is not None for t in slot.in_flight.values()):
            slot.freeing = True
        else:
            self._become_unordered(slot)

    def _become_unordered(self, slot: _Slot) -> None:
        self._groups.moved(slot.kind, SlaveKind.UNORDERED)
        self._unordered_running += len(slot.in_flight)
        slot.kind = SlaveKind.UNORDERED
        slot.freeing = False
        self._with_ordered_work.discard(slot.sid)
        leftover, slot.ordered = slot.ordered, deque()
        self._orphan_all([(task, False) for task in leftover])
        self._hungry.add(slot.sid)

    # ------------------------------------------------------------------ numbers

    @property
    def slaves_needed(self) -> int:
        """Slaves wanted beyond those connected: what the resource file advertises."""
        return self._groups.needed(len(self._unordered) + self._unordered_running)

    @property
    def demand_follows_tasks(self) -> bool:
        """Whether ``slaves_needed`` is one slave per task: no group allocation was set (the demand model's case)."""
        return self._groups.follows_tasks and not self._groups.reserved

    @property
    def reserved(self) -> int:
        """Ordered and intermingle slaves wanted (what ``allocate_slaves`` asked for them, less what was given back)."""
        return self._groups.reserved

    def connected(self) -> dict[str, int]:
        """Connected slaves per group."""
        return self._groups.connected()

    @property
    def queued_total(self) -> int:
        return self.pending_total - self.running_total

    def pending_for(self, algorithm: str) -> int:
        return self._pending.get(algorithm, 0)

    def target_for(self, algorithm: str) -> int:
        return self._targets.get(algorithm, 0)

    def set_target_for(self, algorithm: str, value: int) -> None:
        self._targets[algorithm] = max(0, value)


def hold(sched: Scheduler, task: Entry, *, answered: bool | None = None) -> None:
    """Count a task held back outside ``sched``'s queues as pending (one a restarted master keeps for a slave of
    its predecessor: mwpy/core/adoption.py), as ``mw.pending_tasks()`` must for the program to wait for it; with
    ``answered``, stop counting it: queued now (False; :meth:`Scheduler.add` counts it again), or answered
    without a run (True: it leaves the master's memory). Beside the class, which is at its length bound."""
    pending, algorithm = sched._pending, task.algorithm
    step = 1 if answered is None else -1
    count = pending[algorithm] = pending.get(algorithm, 0) + step  # a plain dict (the hot path's), not a Counter
    if not count:
        del pending[algorithm]
    sched.pending_total += step
    if answered:
        sched.done_total += 1
        if sched.on_leave is not None:  # arguments the file service took for it go
            sched.on_leave(task.payload)

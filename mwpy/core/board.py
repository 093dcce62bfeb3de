"""The task board: where each task stands, in a few bounded lines of the resource file.

``mwpy status --explain TASK`` answers "why is my task not running?" from the
resource file, the one source every master always writes (the event log and
the journal are optional). The board says which ids were issued, which tasks
each slave holds (the first runs now) and which wait in each queue, in the
order they will be sent, as runs of consecutive ids, which keeps it small for
the usual queue (tasks submitted in order).

Built when the resource file is written (a change, debounced, or its update
interval), never per task. Each part is bounded so that a queue of millions
costs the master a fixed walk and the file a few KiB: past the bounds the
board says how much it left out, and the reader says "at least".

It reads the scheduler's queues in place and changes nothing: a view for the resource file's readers, apart
from the rules that change the queues (:class:`~mwpy.core.scheduler.Scheduler`).
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Iterable, Mapping

from mwpy.core.entry import Entry
from mwpy.core.scheduler import Scheduler
from mwpy.resource_file import Flight, Need, TaskBoard, TooLong, Waiting

#: Queued tasks walked at most, all queues together.
MAX_WALK = 10_000
#: Runs of consecutive ids written at most, all queues together.
MAX_RUNS = 1_000
#: Tasks in flight listed at most, all slaves together. The resource file travels with every slave job
#: (Condor ships it at each start): the whole board stays within a few tens of KiB.
MAX_IN_FLIGHT = 256


def _runs(tasks: Iterable[Entry], budget: int, most: int) -> tuple[list[int], int]:
    """``[first, last, ...]``: at most ``most`` runs of consecutive ids among the first ``budget`` tasks, and how
    many tasks they cover."""
    runs: list[int] = []
    covered = 0
    for entry in itertools.islice(tasks, budget):
        task_id = entry.task_id
        if runs and task_id == runs[-1] + 1:
            runs[-1] = task_id
        elif len(runs) < 2 * most:
            runs += [task_id, task_id]
        else:
            break
        covered += 1
    return runs, covered


def _flights(sched: Scheduler, now: float) -> tuple[list[Flight], bool]:
    """What each slave holds, the running task first, with its start as a Unix time; and whether all were listed."""
    wall = time.time() - now  # monotonic seconds + this = Unix time
    flights: list[Flight] = []
    listed = 0
    for sid, slot in sched._slots.items():
        if not slot.in_flight:
            continue
        if listed + len(slot.in_flight) > MAX_IN_FLIGHT:
            return flights, False
        head = next(iter(slot.in_flight.values()))
        started = max(head.sent_at, slot.last_result_at)
        flights.append(Flight(slave=sid, since=round(wall + started, 3), tasks=list(slot.in_flight)))
        listed += len(slot.in_flight)
    return flights, True


def _needs(listed: Iterable[Entry]) -> list[Need]:
    """What the listed queued tasks ask of a slave, per need (tasks that ask nothing are left out)."""
    by_need = _runs_by(listed, lambda entry: None if entry.policy.resources is None else str(entry.policy.resources))
    return [Need(need, runs) for need, runs in by_need.items()]


def _too_long(sched: Scheduler, leave_at: Mapping[str, float], listed: Iterable[Entry]) -> list[TooLong]:
    """The listed tasks, per algorithm, that no connected slave would start now: each leaves by plan (``leave_at``,
    Unix time, from its Hello) before a task of that algorithm would end, by the rule the slave itself applies
    to the run times it measured (:class:`mwpy.lifetime.RunTimes`, which the scheduler keeps per slave from the
    same measurements). A slave without a lifetime takes any task: then none is too long."""
    slots = sched._slots
    if not slots or any(sid not in leave_at for sid in slots):
        return []
    now = time.time()
    found = []
    for algorithm, runs in sorted(_runs_by(listed, lambda entry: entry.algorithm).items()):
        if any(slot.run_times.starts_in_time(algorithm, leave_at[sid] - now) for sid, slot in slots.items()):
            continue
        seconds = max(slot.run_times.longest(algorithm) for slot in slots.values())
        found.append(TooLong(algorithm, round(seconds, 3), runs))
    return found


def _runs_by(listed: Iterable[Entry], key: Callable[[Entry], str | None]) -> dict[str, list[int]]:
    """The listed tasks grouped by ``key`` (None: left out), each group as its runs of task ids (see _runs)."""
    groups: dict[str, list[Entry]] = collections.defaultdict(list)
    for entry in listed:
        name = key(entry)
        if name is not None:
            groups[name].append(entry)
    return {
        name: _runs(sorted(entries, key=lambda entry: entry.task_id), len(entries), MAX_RUNS)[0]
        for name, entries in groups.items()
    }


def snapshot(sched: Scheduler, now: float, leave_at: Mapping[str, float] | None = None) -> TaskBoard:
    """The board as of ``now`` (the master's monotonic clock).

    ``leave_at``: when (Unix time) each connected slave that has a lifetime leaves by plan.
    """
    budget, most = MAX_WALK, MAX_RUNS
    queues: list[Waiting] = []
    listed: list[tuple[Iterable[Entry], int]] = []
    beyond = 0
    shared = sched._unordered
    lines = [("", shared)] + [(sid, slot.ordered) for sid, slot in sched._slots.items() if slot.ordered]
    for sid, queue in lines:
        runs, covered = _runs(queue, budget, most)
        budget, most = budget - covered, most - len(runs) // 2
        beyond += len(queue) - covered
        listed.append((queue, covered))
        if runs:
            queues.append(Waiting(slave=sid, runs=runs))
    flights, complete = _flights(sched, now)

    def walked() -> Iterable[Entry]:
        return itertools.chain.from_iterable(itertools.islice(queue, covered) for queue, covered in listed)

    return TaskBoard(
        issued=sched._next_id,
        flights=flights,
        flights_complete=complete,
        queued=queues,
        queued_beyond=beyond,
        needs=_needs(walked()) if sched.shapes.active else [],
        too_long=_too_long(sched, leave_at, walked()) if leave_at else [],
    )

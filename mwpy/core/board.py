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

It reads the scheduler's queues in place and changes nothing; it lives here,
not in :class:`~mwpy.core.scheduler.Scheduler`, whose class is at its size limit.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Iterable

from mwpy.core.scheduler import Entry, Scheduler
from mwpy.lifetime import SAFETY
from mwpy.resource_file import Flight, Need, TaskBoard, Waiting

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
    by_need: dict[str, list[Entry]] = collections.defaultdict(list)
    for entry in listed:
        if entry.policy.resources is not None:
            by_need[str(entry.policy.resources)].append(entry)
    needs = []
    for need, entries in by_need.items():
        entries.sort(key=lambda entry: entry.task_id)
        needs.append(Need(need, _runs(entries, len(entries), MAX_RUNS)[0]))
    return needs


def _lifetimes(sched: Scheduler, leaving: Callable[[float], int] | None) -> tuple[float, int]:
    """How long the connected slaves' tasks take (the longest mean), and how many slaves leave by plan before
    a task that long (times the lifetime's ``SAFETY``) would end, if started now."""
    seconds = max((slot.compute_time or 0.0 for slot in sched._slots.values()), default=0.0)
    if not seconds or leaving is None:
        return seconds, 0
    return seconds, leaving(time.time() + seconds * SAFETY)


def snapshot(sched: Scheduler, now: float, leaving: Callable[[float], int] | None = None) -> TaskBoard:
    """The board as of ``now`` (the master's monotonic clock).

    ``leaving(when)``: how many connected slaves leave by plan before ``when`` (Unix time), when known.
    """
    budget, most = MAX_WALK, MAX_RUNS
    queues: list[Waiting] = []
    listed: list[Iterable[Entry]] = []
    beyond = 0
    shared = sched._unordered
    lines = [("", shared)] + [(sid, slot.ordered) for sid, slot in sched._slots.items() if slot.ordered]
    for sid, queue in lines:
        runs, covered = _runs(queue, budget, most)
        budget, most = budget - covered, most - len(runs) // 2
        beyond += len(queue) - covered
        listed.append(itertools.islice(queue, covered))
        if runs:
            queues.append(Waiting(slave=sid, runs=runs))
    flights, complete = _flights(sched, now)
    seconds, leaving_soon = _lifetimes(sched, leaving)
    return TaskBoard(
        issued=sched._next_id,
        flights=flights,
        flights_complete=complete,
        queued=queues,
        queued_beyond=beyond,
        needs=_needs(itertools.chain.from_iterable(listed)) if sched.shapes.active else [],
        task_seconds=round(seconds, 3),
        slaves_leaving=leaving_soon,
    )

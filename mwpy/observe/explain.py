"""``mwpy status --explain TASK``: why a task is not running, in plain lines.

Read from the resource file's task board (mwpy/core/board.py), the one
source every master always writes, and, when a schedd answers, from the
computation's slave jobs (their hold reasons and why idle ones do not match).
The lines say what the file said when it was written, and how long ago.

With the master's event log (``--events``, written with ``--mw-events``) it
also says how a task ended (a value, or the error that went to the program)
and how often it failed before: the log names each failed task.

:func:`explain` is pure; :func:`failures_of` reads the event log; the command
gathers the facts and prints the lines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from mwpy.backends import Job, JobState
from mwpy.errors import EventLogError, MwpyError
from mwpy.observe import events as ev
from mwpy.observe.goodput import duration
from mwpy.resource_file import ResourceFile, TaskBoard, Waiting
from mwpy.resources import Resources

#: Slave jobs quoted at most, per state, in the lines about them.
MAX_JOBS_QUOTED = 3


class UnknownTaskError(MwpyError):
    """The task id names no task the master has issued (``mwpy status --explain`` exits 3)."""


def failures_of(path: str | os.PathLike[str], task: int) -> tuple[list[ev.TaskFailed], str | None]:
    """The ``task-failed`` events of ``task`` in the event log, oldest first, and the log's problem if it has one
    (the failures read before it are kept: a live log's last line may be cut)."""
    found: list[ev.TaskFailed] = []
    try:
        for event in ev.iter_events(path):
            if isinstance(event, ev.TaskFailed) and event.task == task:
                found.append(event)
    except EventLogError as exc:
        return found, str(exc)
    return found, None


def _failure(event: ev.TaskFailed) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(event.t))
    return f"{event.error}: {' '.join(event.message.split())[:200]} (on {event.slave} at {when})"


def _history(failures: Sequence[ev.TaskFailed]) -> list[str]:
    """``it failed 2 times before; the last: ...`` for a task still to run, from the event log."""
    if not failures:
        return []
    return [f"it failed {_count(len(failures), 'time')} before; the last: {_failure(failures[-1])}"]


def _ended(failures: Sequence[ev.TaskFailed] | None) -> str:
    """How a done task ended: from the event log when there is one."""
    if failures is None:
        return "done: its result (a value or its error) went to the program"
    if failures and not failures[-1].retried:
        return f"done: it failed and its error went to the program: {_failure(failures[-1])}"
    after = f", after {_count(len(failures), 'failed run')}" if failures else ""
    return f"done: its value went to the program (the event log records no failure that ended it{after})"


def _position(waiting: Waiting, task: int) -> int | None:
    """How many tasks of this queue come before ``task``, or None when it is not listed there."""
    ahead = 0
    runs = waiting.runs
    for first, last in zip(runs[::2], runs[1::2], strict=True):
        if first <= task <= last:
            return ahead + task - first
        ahead += last - first + 1
    return None


def _clock(when: float, now: float) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(when))} ({duration(max(0.0, now - when))} ago)"


def _where(board: TaskBoard, task: int, now: float) -> tuple[str, bool] | None:
    """Where the board places ``task`` and whether that is a queue (not yet on a slave); None: listed nowhere."""
    for flight in board.flights:
        if task in flight.tasks:
            ahead = flight.tasks.index(task)
            if ahead == 0:
                return f"running on {flight.slave} since {_clock(flight.since, now)}", False
            return (
                f"sent to {flight.slave}, which runs {_count(ahead, 'task')} before it "
                f"(task {flight.tasks[0]} since {_clock(flight.since, now)})",
                False,
            )
    for waiting in board.queued:
        before = _position(waiting, task)
        if before is None:
            continue
        if waiting.slave:
            return f"waiting for its ordered slave {waiting.slave}, behind {before} of that slave's tasks", True
        if before == 0:
            return "waiting in the queue: it is next", True
        return f"waiting in the queue behind {_count(before, 'task')}", True
    return None


def _job_lines(jobs: Sequence[Job], state: JobState) -> list[str]:
    """``3 slave jobs idle``, then the first few with how long and why (one line per distinct reason)."""
    chosen = [job for job in jobs if job.state is state]
    if not chosen:
        return []
    lines = [f"{len(chosen)} slave job{'s' if len(chosen) > 1 else ''} {state.value}"]
    told: set[str | None] = set()
    for job in chosen:
        if job.reason in told or len(told) >= MAX_JOBS_QUOTED:
            continue
        told.add(job.reason)
        how_long = job.in_state_for()
        since = "" if how_long is None else f" for {duration(how_long)}"
        lines.append(f"  {job.job_id} {state.value}{since}: {job.reason or 'no reason given'}")
    return lines


def _need_of(board: TaskBoard, task: int) -> str | None:
    """What ``task`` asks of a slave (``--mw-slave-resources``' form), when the board lists it with a need."""
    return next((need.resources for need in board.needs if _position(Waiting("", need.runs), task) is not None), None)


def _shape_lines(record: ResourceFile, need: str) -> list[str]:
    """``no slave of its shape is connected (...)``, or how many connected slaves have its shape."""
    described = Resources.parse(need).describe()
    shape = next((shape for shape in record.shapes if shape.resources == need), None)
    if shape is None:
        return [f"it needs: {described}"]
    if not shape.slaves:
        return [f"no slave of its shape is connected: it needs {described} ({_count(shape.tasks, 'task')} need it)"]
    return [f"it needs: {described}; {_count(shape.slaves, 'connected slave')} of that shape"]


def _lifetime_lines(record: ResourceFile, board: TaskBoard, task: int) -> list[str]:
    """``slave lifetime too short``: when every connected slave leaves by plan before a task of ``task``'s
    algorithm would end, by the rule each slave applies before it starts one (the board's ``too_long``)."""
    found = next((kind for kind in board.too_long if _position(Waiting("", kind.runs), task) is not None), None)
    if found is None:
        return []
    connected = sum(record.slaves_connected.values())
    return [
        f"slave lifetime too short: {found.algorithm} tasks have taken up to {duration(found.seconds)} on the "
        f"connected slaves, and all {connected} leave by plan before one that long would end; it waits for a "
        "fresh slave"
    ]


def _why_waiting(record: ResourceFile, jobs: Sequence[Job] | None, condor_problem: str | None) -> list[str]:
    """Why queued tasks do not move: no slave, busy slaves, and what the slave jobs are doing."""
    connected = sum(record.slaves_connected.values())
    lines = [
        f"{_count(connected, 'slave')} connected ({_count(record.tasks_running, 'task')} running); "
        f"the master wants {record.slaves_needed} more"
        if connected
        else f"no slave is connected; the master wants {record.slaves_needed}"
    ]
    if record.demand_reason:  # why that many: the master's demand model (mwpy/core/demand.py)
        lines.append(f"the master asks for what would shorten the run: {record.demand_reason}")
    if jobs is None:
        if condor_problem:
            lines.append(f"slave jobs unknown: {condor_problem}")
        return lines
    if not jobs and record.slaves_needed:
        lines.append("no slave job is queued in Condor: is an overseer running (mwpy overseer RESOURCE_FILE)?")
    for state in (JobState.HELD, JobState.IDLE):
        lines += _job_lines(jobs, state)
    return lines


def explain(
    record: ResourceFile,
    task: int,
    *,
    jobs: Sequence[Job] | None = None,
    condor_problem: str | None = None,
    need: str | None = None,
    master_gone: str | None = None,
    failures: Sequence[ev.TaskFailed] | None = None,
    now: float | None = None,
) -> list[str]:
    """Why ``task`` is not running, one fact a line; :class:`UnknownTaskError` when no such task was issued.

    ``need``: what the task asks of a slave (its resources, in words), when tasks carry one; it is said
    with the reasons a queued task waits. Without it, the board's need of the task (if any) is said, with
    whether a connected slave has that shape; and a task that no connected slave would live to finish
    (mwpy/lifetime.py) says "slave lifetime too short". ``master_gone``: how the master's Condor job left the queue.
    ``failures``: the task's ``task-failed`` events (:func:`failures_of`), None without an event log.
    """
    now = time.time() if now is None else now
    board = record.task_board
    if board is None:
        raise MwpyError("the resource file has no task board: its master is an mwpy from before --explain")
    if not 1 <= task <= board.issued:
        issued = f"tasks 1 to {board.issued}" if board.issued else "no task yet"
        raise UnknownTaskError(f"task {task} is unknown: the master has issued {issued}")
    lines = [f"task {task}, as of the resource file written {duration(record.age(now))} ago:"]
    if master_gone:
        lines.append(master_left(master_gone, finished=record.finished))
    elif record.stale(now):
        lines.append("the resource file is stale: the master has not rewritten it in time and may be gone")
    where = _where(board, task, now)
    if where is not None:
        line, queued = where
        lines += [line, *_history(failures or ())]
        if queued:
            shaped = _need_of(board, task)
            lines += [f"it needs: {need}"] if need else _shape_lines(record, shaped) if shaped else []
            lines += _lifetime_lines(record, board, task) + _why_waiting(record, jobs, condor_problem)
        return lines
    if record.finished and failures is None:
        return [*lines, "done: the computation has finished"]
    if record.finished or (board.flights_complete and not board.queued_beyond):
        return [*lines, _ended(failures)]
    listed = sum(len(f.tasks) for f in board.flights) + sum(_size(w) for w in board.queued)
    return [
        *lines,
        f"not among the {listed} tasks the resource file lists as sent or queued: done, or queued behind "
        f"them (the file leaves out {board.queued_beyond} queued tasks"
        + ("" if board.flights_complete else " and some slaves' tasks")
        + ")",
    ]


def master_left(master_gone: str, *, finished: bool) -> str:
    """How the master's job left the queue, and what it means: a master that finished ended the computation;
    one that left before (``condor_rm``, a crash) leaves it without a master."""
    if finished:
        return f"{master_gone}: the computation finished"
    return f"{master_gone}: the computation has no master, and nothing runs any more"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _size(waiting: Waiting) -> int:
    runs = waiting.runs
    return sum(last - first + 1 for first, last in zip(runs[::2], runs[1::2], strict=True))

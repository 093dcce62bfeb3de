"""A soak computation for the churn test: slaves come and go while it runs.

Master usage (after the ``--mw-*`` options)::

    soak STOPFILE FOLDER

Until STOPFILE exists it keeps pending: ``SHORT`` short tasks, ``LONG`` longer
ones, ``FRAGILE`` tasks submitted with ``retry=False`` and, once, ``MARATHON``
tasks that run longer than the client timeout (only heartbeats keep their
slaves connected). It wants one ordered slave; every ordered slave that
connects gets ``STEPS`` ordered tasks, every other one with ``do_it_anyway``.
Then it drains everything. It prints one JSON line per task submitted, per
result and per unrunnable task, and {"end": ...} last.

Fragile tasks write ``FOLDER/fragile-running-I-PID`` while they run, so the
test can kill a slave that is certainly inside one.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mwpy

SHORT = 60
LONG = 3
FRAGILE = 2
MARATHON = 2
MARATHON_SECONDS = 4.0
STEPS = 8
#: The longest a fragile task waits for the test to release it (a test gone wrong).
FRAGILE_LIMIT = 120.0

_steps_run = itertools.count()


@mwpy.task
def churn_short(i: int) -> int:
    return 3 * i + 1


@mwpy.task
def churn_long(i: int) -> int:
    time.sleep(0.3)
    return -i


@mwpy.task
def churn_marathon(i: int) -> int:
    time.sleep(MARATHON_SECONDS)
    return 1000 + i


@mwpy.task
def churn_fragile(i: int, folder: str) -> int:
    """Announce itself with a marker file and run until the test removes it (or kills this slave)."""
    running = Path(folder) / f"fragile-running-{i}-{os.getpid()}"
    running.touch()
    deadline = time.monotonic() + FRAGILE_LIMIT
    while running.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    running.unlink(missing_ok=True)
    return 7 * i


@mwpy.task
def churn_step(k: int) -> list[int]:
    """Ordered work: (this process, how many steps it ran before this one)."""
    time.sleep(0.03)
    return [os.getpid(), next(_steps_run), k]


def expected(algorithm: str, args: tuple[Any, ...]) -> Any:
    """The right value of a task (``step`` values depend on where they ran: ``None`` here)."""
    if algorithm == "churn_short":
        return 3 * args[0] + 1
    if algorithm == "churn_long":
        return -args[0]
    if algorithm == "churn_marathon":
        return 1000 + args[0]
    if algorithm == "churn_fragile":
        return 7 * args[0]
    return None


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def submit(algorithm: mwpy.TaskAlgorithm[..., Any], *args: Any, **policy: Any) -> None:
    task_id = algorithm.with_policy(**policy).submit(*args).task_id
    emit({"submitted": task_id, "algorithm": algorithm.name, "args": list(args), "tag": policy.get("tag")})


def _top_up(mw: mwpy.Master, counter: Iterator[int], folder: str) -> None:
    """Submit short, long and fragile tasks until each has its number pending."""
    for algorithm, wanted, policy in (
        (churn_short, SHORT, {}),
        (churn_long, LONG, {}),
        (churn_fragile, FRAGILE, {"retry": False}),
    ):
        for _ in range(wanted - mw.pending_tasks_for(algorithm.name)):
            args = (next(counter), folder) if algorithm is churn_fragile else (next(counter),)
            submit(algorithm, *args, **policy)


def _give_steps(mw: mwpy.Master, stopping: bool) -> int:
    """``STEPS`` ordered tasks for each ordered slave that connected (none once stopping); how many slaves got them."""
    rounds = 0
    for sid in mw.connected_ordered_slaves():
        if stopping:
            continue
        rounds += 1
        for k in range(STEPS):
            submit(churn_step, k, sid=sid, do_it_anyway=k % 2 == 1, tag=[sid, k, k % 2 == 1])
    return rounds


def _emit_outcomes(mw: mwpy.Master) -> None:
    """One line per result and per unrunnable task of this loop pass."""
    for result in mw.results():
        emit(
            {
                "result": result.task_id,
                "algorithm": result.algorithm,
                "slave_id": result.slave_id,
                "value": result.value,
                "error": None if result.error is None else result.error.type,
            }
        )
    for task in mw.unrunnable_tasks():
        emit({"unrunnable": task.task_id, "algorithm": task.algorithm})


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    _, stop, folder = argv
    stop_file = Path(stop)
    mw.allocate_slaves(1, "ordered")
    counter = itertools.count()
    for _ in range(MARATHON):
        submit(churn_marathon, next(counter))
    stopping = False
    ordered_rounds = 0
    while True:
        stopping = stopping or stop_file.exists()
        if not stopping:
            _top_up(mw, counter, folder)
        elif not mw.pending_tasks():
            break
        mw.loop(timeout=0.1)
        ordered_rounds += _give_steps(mw, stopping)
        mw.disconnected_ordered_slaves()
        _emit_outcomes(mw)
    emit({"end": True, "ordered_rounds": ordered_rounds})
    return 0


if __name__ == "__main__":
    mwpy.run()

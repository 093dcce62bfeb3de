"""Scenario 5's work, as an mwpy program and as a plain Condor job (``benchmarks/condor.py`` runs both).

As an mwpy program (``master.sub`` + ``slaves.sub``, ``program = condor_program.py``)
the master submits ``--tasks`` tasks of ``--seconds`` of work each at once, as any
mwpy program would, lets its slaves take them as they connect, checks every
answer, and writes its timestamps (``time.time()``, the host's clock: the pool
runs on the same kernel) to ``--report`` as JSON: when it started, when the first
and when all ``--slaves`` slaves were connected (and how many tasks were answered
by then), when the last answer came::

    condor_submit submit/master.sub -a program=condor_program.py \
        -a 'program_args=--kind spin --tasks 1000 --seconds 0.05 --slaves 8 --report /abs/report.json'

As a plain job (``python3 condor_program.py --plain spin 0.05``) it does the same
work once and exits, without importing mwpy: a bare Python is enough.

The work is either ``spin`` -- a busy loop until the process has used ``seconds``
of CPU (``time.process_time()``), so it costs the same CPU however busy the
machine is -- or ``sleep`` -- ``time.sleep(seconds)``, which needs no CPU and
therefore overlaps on however many slots there are.
"""

from __future__ import annotations

import sys
import time

KINDS = ("spin", "sleep")


def do_work(kind: str, seconds: float) -> None:
    """``seconds`` of CPU in a busy loop (``spin``), or ``seconds`` of ``time.sleep`` (``sleep``)."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    if kind != "spin":
        raise ValueError(f"unknown kind of work {kind!r} (one of {', '.join(KINDS)})")
    clock = time.process_time
    end = clock() + seconds
    while clock() < end:
        pass


def plain_job(argv: list[str]) -> int:
    """``--plain KIND SECONDS``: the work of one task, as a whole Condor job."""
    kind, seconds = argv
    do_work(kind, float(seconds))
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--plain"]:
    sys.exit(plain_job(sys.argv[2:]))

# Below: the mwpy program. A plain job never gets here, so its Python needs no mwpy.
import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from typing import Any  # noqa: E402

import mwpy  # noqa: E402


@mwpy.task(name="bench.condor.work")
def work(kind: str, seconds: float, index: int) -> int:
    """One task: the work, then its index back (the master checks every one)."""
    do_work(kind, seconds)
    return index


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Scenario 5: tasks of fixed work on Condor slaves.")
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--slaves", type=int, required=True, help="slaves expected (their connection is timed)")
    parser.add_argument("--report", required=True, help="where to write the timestamps (JSON)")
    return parser.parse_args(argv)


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    started = time.time()
    options = parse_arguments(argv)
    report: dict[str, Any] = {"master_started": started, "master_pid": os.getpid(), **vars(options)}
    # Every task at once, as an ordinary mwpy program does: each slave gets work the moment it connects.
    for index in range(options.tasks):
        work.submit(options.kind, options.seconds, index)
    first_connected: float | None = None
    all_connected: float | None = None
    answered_before_all_connected = 0
    answers: set[int] = set()
    per_slave: collections.Counter[str] = collections.Counter()
    while len(answers) < options.tasks:
        mw.loop(timeout=0.01)
        if all_connected is None:
            connected = len(mw.connected_slaves())
            if connected and first_connected is None:
                first_connected = time.time()
            if connected >= options.slaves:
                all_connected = time.time()
                answered_before_all_connected = len(answers)
        for task in mw.unrunnable_tasks():
            print(f"task {task.args[2]} unrunnable", file=sys.stderr)
            return 1
        for result in mw.results():
            if result.error is not None:
                print(f"task failed: {result.error.type}: {result.error.message}", file=sys.stderr)
                return 1
            answers.add(result.value)
            per_slave[result.slave_id] += 1
    done = time.time()
    if answers != set(range(options.tasks)):
        print(f"wrong answers: {sorted(answers - set(range(options.tasks)))[:10]}", file=sys.stderr)
        return 1
    report.update(
        first_slave_connected=first_connected,
        all_slaves_connected=all_connected,
        answered_before_all_connected=answered_before_all_connected,
        slaves_seen=len(per_slave),
        tasks_done=done,
        answered=len(answers),
        tasks_per_slave=dict(per_slave),
    )
    with open(options.report, "w", encoding="utf-8") as out:
        json.dump(report, out)
    took = done - started
    print(f"{len(answers)} {options.kind} tasks of {options.seconds:g} s in {took:.2f} s on {len(per_slave)} slaves")
    return 0


if __name__ == "__main__":
    mwpy.run()

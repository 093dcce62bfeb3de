"""Where one task's round trip goes: the latency scenario's master and slave with a clock read between stages.

``python -m benchmarks.stages [--round-trips N]`` runs scenario 2's program
(benchmarks/mwpy_program.py, one task in flight, one slave) with the methods
that bound each stage wrapped to note ``time.perf_counter_ns()`` as they
enter or return, in the master and in the slave (both clocks are the one
``CLOCK_MONOTONIC``). It prints each stage's median and 90th percentile over
the round trips after the first tenth.

The wrappers add a call each (well under a microsecond), so the total is a
little above the latency scenario's figure: the table says where the time
goes, scenario 2 says how much there is. ``--hot`` adds what the wire layer's
share costs when it is run in a tight loop instead (the same code, warm in
the caches): the gap between the two is the cost of the round trip's working
set, not of any one call.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import pickle
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import stop, wait_for

PROGRAM = Path(__file__).with_name("mwpy_program.py")
#: Each side's stages: (class path, method, mark on entry or None, mark on return), in round-trip order.
MASTER_MARKS = (
    ("mwpy.task:TaskAlgorithm", "submit", "submit", "submitted"),
    ("mwpy.core.scheduler:Scheduler", "take", "dispatch", "taken"),
    ("mwpy.net.engine:Engine", "_send_batch", None, "framed"),
    ("mwpy.net.connections:Connections", "send", None, "sent"),
    ("mwpy.net.spin:Spinner", "wait", None, "readable"),
    ("mwpy.net.connections:Connections", "receive", None, "received"),
    ("mwpy.wire.session:MasterSession", "next_event", None, "opened"),
    ("mwpy.net.engine:Engine", "_handle_events", None, "settled"),
    ("mwpy.master:Master", "loop", None, "loop returned"),
    ("mwpy.master:Master", "results", None, "results drained"),
)
SLAVE_MARKS = (
    ("mwpy.slaveside.connection:Link", "wait", None, "readable"),
    ("mwpy.slaveside.connection:Link", "receive", None, "received"),
    ("mwpy.slaveside.running:Runner", "run", "queued", "ran"),
    ("mwpy.slaveside.connection:Link", "send_results", "ready to send", "sent"),
)
#: What each stage (from the previous mark to this one) is made of, for the table.
MEANING = {
    "submitted": "submit(): pickle the arguments, queue the task",
    "dispatch": "loop() to the scheduler",
    "taken": "scheduler.take(): the task leaves the queue",
    "framed": "Tasks frame built and sealed (MAC)",
    "sent": "send() system call",
    "readable": "waiting (the other side's work and the wire)",
    "received": "recv() into the frame reader",
    "opened": "frame verified, unpickled, made a message",
    "settled": "result decoded, task finished, future settled",
    "loop returned": "rest of the loop pass",
    "results drained": "results() hands it over",
    "queued": "frame verified, unpickled, task queued",
    "ran": "the task run (arguments unpickled, result pickled)",
    "ready to send": "result held, flushed",
}


def _install(marks: Sequence[tuple[str, str, str | None, str]], notes: list[tuple[str, int]]) -> None:
    """Wrap each method to append (mark, ns) to ``notes``."""
    import importlib  # noqa: PLC0415 - the wrapped modules load only in the measured processes

    clock = time.perf_counter_ns
    for where, name, enter, leave in marks:
        module, cls_name = where.split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        inner = getattr(cls, name)

        def wrapper(
            *args: Any, _inner: Callable[..., Any] = inner, _enter: str | None = enter, _leave: str = leave, **kw: Any
        ) -> Any:
            if _enter is not None:
                notes.append((_enter, clock()))
            value = _inner(*args, **kw)
            notes.append((_leave, clock()))
            return value

        setattr(cls, name, functools.wraps(inner)(wrapper))


def _role(argv: list[str]) -> int:
    """Run mwpy_program.py as ``__main__`` with the marks of its role installed; they are written at exit."""
    out = Path(os.environ["MWPY_STAGES_OUT"]) / f"{'master' if '--mw-master' in argv else 'slave'}.pickle"
    notes: list[tuple[str, int]] = []
    _install(MASTER_MARKS if "--mw-master" in argv else SLAVE_MARKS, notes)
    atexit.register(lambda: out.write_bytes(pickle.dumps(notes)))
    sys.argv = [str(PROGRAM), *argv]
    runpy.run_path(str(PROGRAM), run_name="__main__")
    return 0


def _trips(notes: list[tuple[str, int]], order: Sequence[str]) -> list[list[int]]:
    """Each round trip's time at every mark of ``order``: the first of each after the previous, from ``order[0]``."""
    trips: list[list[int]] = []
    current: list[int] = []
    for mark, ns in notes:
        if mark == order[0]:
            current = [ns]
        elif current and mark == order[len(current)]:
            current.append(ns)
            if len(current) == len(order):
                trips.append(current)
                current = []
    return trips[len(trips) // 10 :]


def _table(side: str, trips: list[list[int]], order: Sequence[str]) -> list[str]:
    rows = [f"{side} ({len(trips):,} round trips)", f"  {'stage':<17} {'p50 µs':>7} {'p90 µs':>7}  what"]
    for i in range(1, len(order)):
        spans = sorted((trip[i] - trip[i - 1]) / 1000 for trip in trips)
        rows.append(
            f"  {order[i]:<17} {statistics.median(spans):7.1f} {spans[len(spans) * 9 // 10]:7.1f}  {MEANING[order[i]]}"
        )
    totals = sorted((trip[-1] - trip[0]) / 1000 for trip in trips)
    rows.append(f"  {'all':<17} {statistics.median(totals):7.1f} {totals[len(totals) * 9 // 10]:7.1f}")
    return rows


def _order(marks: Sequence[tuple[str, str, str | None, str]]) -> list[str]:
    return [mark for _, _, enter, leave in marks for mark in (enter, leave) if mark is not None]


def _hot() -> list[str]:
    """The wire layer's share of the master's receiving side, run hot: seal a Results frame, open and check it."""
    from mwpy.wire import protocol  # noqa: PLC0415 - only this measurement needs it

    sender, receiver = protocol.Channel(b"k" * 32, b"j" * 32), protocol.Channel(b"j" * 32, b"k" * 32)
    items = [(1, True, pickle.dumps(1, 5), 1e-4)]

    def frame() -> None:
        data = sender.seal_body(protocol.results_body(items))
        protocol.check_results(receiver.open(data[protocol.HEADER.size :]))  # type: ignore[arg-type]

    number = 100_000
    best = min(timeit.repeat(frame, number=number, repeat=5)) / number * 1e6
    return [f"hot: a Results frame sealed, then verified, unpickled and checked, in a tight loop: {best:.2f} µs"]


def measure(round_trips: int) -> list[str]:
    """Run the master and one slave with their marks; the two tables."""
    with tempfile.TemporaryDirectory(prefix="mwpy-stages-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "MWPY_STAGES_OUT": str(tmp)}
        me = [sys.executable, "-m", "benchmarks.stages", "--role"]
        params = {"mode": "latency", "round_trips": round_trips, "warmup": 100, "slaves": 1}
        files = ["--mw-resource-file", str(tmp / "rf.json"), "--mw-audit-file", "/dev/null"]
        master = subprocess.Popen(
            [*me, "--mw-master", "--mw-master-host", "127.0.0.1", *files, json.dumps(params), str(tmp / "out.json")],
            env=env,
            cwd=tmp,
        )
        slave: subprocess.Popen[bytes] | None = None
        try:
            wait_for(lambda: (tmp / "rf.json").exists() or master.poll() is not None, time.monotonic() + 60, "rf")
            slave = subprocess.Popen([*me, "--mw-slave", *files], env=env, cwd=tmp)
            if master.wait(600) != 0:
                raise SystemExit("the master failed")
            slave.wait(30)
        finally:
            for child in (master, slave):
                if child is not None:
                    stop(child)
        rows: list[str] = []
        for side, marks in (("master", MASTER_MARKS), ("slave", SLAVE_MARKS)):
            notes = pickle.loads((tmp / f"{side}.pickle").read_bytes())
            order = _order(marks)
            trips = _trips(notes, order)
            if not trips:  # a stage's method no longer on the path: its mark never comes
                raise SystemExit(f"{side}: no round trip passed every stage of {order}")
            rows += _table(side, trips, order)
        return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--role"]:
        return _role(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages", description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20_000, help="round trips measured (default 20,000)")
    parser.add_argument("--hot", action="store_true", help="also time the wire layer's share run hot")
    args = parser.parse_args(argv)
    rows = measure(args.round_trips)
    if args.hot:
        rows += _hot()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m benchmarks.restart_loss``: the work a master restart loses, before and after slaves outlive it.

A master with ``--mw-journal`` runs TASKS keyed tasks of SECONDS each on SLAVES local slaves started by
hand (benchmarks/restart_program.py). Once half the tasks have ended it is killed with SIGKILL, its slaves
busy, and the same command is run again. ``before``: the slaves have ``--mw-master-lease 0``, so they exit
4 with their master as every slave did before the lease, and as many fresh slaves are started for the new
master (Condor would run their jobs again). ``after``: the slaves outlive the master and hand their work over.

Per mode: ``rerun`` (tasks started more than once), ``lost_slot_s`` (the work a restart loses: slot-seconds
of every run begun, to its end or, for one that never ended, to the kill, less TASKS x SECONDS) and
``wall_s`` (first start to the restarted master's exit). A scaled-down
stand-in for 1,000 tasks of 30 s on 20 slots on a pool: the loss per restart is at most one task per slot.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).with_name("restart_program.py")
#: Seconds any one wait may take, beyond the run's own length, before the benchmark gives up (a run gone wrong).
PATIENCE = 600.0


def _wait(predicate: Callable[[], bool], what: str, patience: float) -> None:
    deadline = time.monotonic() + patience
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_loss: gave up waiting for {what}")
        time.sleep(0.25)  # not faster: a long run's marks folder holds thousands of files


def _runs(folder: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Start and end times of every run, by its mark (``I-PID-RANDOM``)."""
    found: dict[str, dict[str, float]] = {"start": {}, "end": {}}
    for path in folder.iterdir():
        kind, _, mark = path.name.partition("-")
        text = path.read_text()
        if kind in found and text:
            found[kind][mark] = float(text)
    return found["start"], found["end"]


def run_mode(mode: str, tasks: int, seconds: float, slaves: int, work: Path) -> dict[str, Any]:
    """One master killed and restarted; the figures of the module's docstring."""
    marks = work / "marks"
    marks.mkdir(parents=True)
    patience = PATIENCE + 2 * tasks * seconds / slaves  # 1,000 tasks of 30 s on 20 slots run 25 minutes
    rf = work / "resource.json"
    master = [sys.executable, str(PROGRAM), "--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file",
              str(rf), "--mw-journal", str(work / "journal.sqlite"), str(tasks), str(seconds), str(marks)]  # fmt: skip
    slave = [sys.executable, str(PROGRAM), "--mw-slave", "--mw-resource-file", str(rf)]
    if mode == "before":
        slave += ["--mw-master-lease", "0"]
    quiet: dict[str, Any] = {"cwd": work, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    first = subprocess.Popen(master, **quiet)
    _wait(rf.exists, "the resource file", patience)
    workers = [subprocess.Popen(slave, **quiet) for _ in range(slaves)]
    _wait(lambda: len(_runs(marks)[1]) >= tasks // 2, "half the tasks", patience)
    _wait(lambda: len(_runs(marks)[0]) - len(_runs(marks)[1]) >= slaves, "every slave busy", patience)
    first.send_signal(signal.SIGKILL)
    killed = time.time()
    first.wait()
    second = subprocess.Popen(master, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=work, text=True)
    if mode == "before":  # the slaves exit 4 with their master: fresh ones for the new one, as Condor would
        for worker in workers:
            worker.wait(patience)
        workers = [subprocess.Popen(slave, **quiet) for _ in range(slaves)]
    out, _ = second.communicate(timeout=patience)
    ended = time.time()
    for worker in workers:
        worker.wait(patience)
    if json.dumps({"sum": tasks * (tasks - 1) // 2}) not in out.splitlines():
        raise SystemExit(f"restart_loss: wrong result in {mode}: {out!r}")
    starts, ends = _runs(marks)
    per_task: dict[str, int] = {}
    for mark in starts:
        per_task[mark.split("-")[0]] = per_task.get(mark.split("-")[0], 0) + 1
    begun = sum(ends.get(mark, killed) - start for mark, start in starts.items())
    return {
        "mode": mode,
        "rerun": sum(1 for n in per_task.values() if n > 1),
        "lost_slot_s": round(begun - tasks * seconds, 1),
        "wall_s": round(ended - min(starts.values()), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.restart_loss", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--slaves", type=int, default=4)
    args = parser.parse_args(argv)
    for mode in ("before", "after"):
        with tempfile.TemporaryDirectory(prefix="mwpy-restart-loss-") as work:
            figures = run_mode(mode, args.tasks, args.seconds, args.slaves, Path(work))
        print(json.dumps({**figures, "tasks": args.tasks, "seconds": args.seconds, "slaves": args.slaves}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

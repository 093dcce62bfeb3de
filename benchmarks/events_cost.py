"""``python -m benchmarks.events_cost``: what the event log costs the master per task (docs/observability.md).

Times, with ``timeit``, 10^6 ``EventWriter.task_finished`` calls with a
``flush()`` every ``per_pass`` tasks (what one loop pass of the master hands
over), into a real file, and reports microseconds per task together with the
file's size. The writer's clock is simulated: each pass advances it by the
master's own CPU time for its tasks (``MASTER_US`` per task), so the writer
writes as often as it would in a master running flat out (every
``FLUSH_INTERVAL`` s), not once for the whole benchmark.
Compare with the master's own CPU per task in docs/performance.md (13.2 µs at
default settings): 5 % of it is about 0.66 µs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import timeit
from collections.abc import Sequence
from pathlib import Path

from mwpy.observe.events import EventWriter

TASKS = 1_000_000
SLAVES = 8
#: The master's CPU per task at default settings (docs/performance.md).
MASTER_US = 13.2


def cost(per_pass: int, tasks: int = TASKS) -> tuple[float, int]:
    """(µs per task, bytes written) for ``tasks`` finished tasks flushed every ``per_pass``."""
    slaves = [f"slave-{i}" for i in range(SLAVES)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "events.jsonl"
        clock = [0.0]
        writer = EventWriter(path, clock=lambda: clock[0])
        step = per_pass * MASTER_US / 1e6

        def run() -> None:
            finished = writer.task_finished
            for start in range(0, tasks, per_pass):
                for i in range(start, min(tasks, start + per_pass)):
                    finished(slaves[i % SLAVES], "work", "ok", 0.001234, 0.000567)
                clock[0] += step
                writer.flush()

        seconds = timeit.timeit(run, number=1)
        writer.close()
        return seconds / tasks * 1e6, os.path.getsize(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.events_cost", description=__doc__)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--per-pass", type=int, nargs="+", default=[1, 10, 100, 1000])
    options = parser.parse_args(argv)
    print(f"{'tasks per pass':>15} {'µs per task':>12} {'MB written':>11}")
    for per_pass in options.per_pass:
        micros, size = cost(per_pass, options.tasks)
        print(f"{per_pass:>15} {micros:>12.3f} {size / 1e6:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

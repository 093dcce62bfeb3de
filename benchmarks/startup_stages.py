"""Where a short script's start-up goes: ``mwpy.Executor(max_workers=2)``'s steps, timed in fresh processes.

``python -m benchmarks.startup_stages [--runs N]`` starts N fresh interpreters
that each do what scenario 7's script does up to its first result and leave
the ``with`` block, with a clock read after each step of the constructor: the
steps are the executor's own functions, wrapped in the child (``EarlySlaves``
starts the slaves' fork server, ``_engine`` imports the engine, the class it
returns builds the master). It prints each step's median and min-max in ms.
The slaves' side runs meanwhile in the fork server, a process of its own:
the first result waits for whichever of the two paths ends last. So the
child also notes when the first slave's connection reaches the listener's
backlog (a thread polls the listener, accepting nothing), and the table
ends with both paths timed from the fork server's start.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

#: The child: the steps, in order, each timed from the end of the one before.
STEPS = (
    ("import mwpy", "the package (lazy: names only)"),
    ("mwpy.Executor", "the executor's light module"),
    ("slaves started", "the fork server started (EarlySlaves)"),
    ("engine imported", "mwpy.executor_core and what it imports"),
    ("master built", "the master, its listener, its resource file, its thread"),
    ("first result", "submit() to the first result (the slaves connect, are greeted, run it)"),
    ("with block left", "shutdown: slaves told to leave and gone, folder removed"),
)
#: The two paths from the fork server's start, run at once: (name, what), after the steps.
PATHS = (
    ("slaves' path", "to the first slave's connection: the fork server's Python, the slave's code, a fork"),
    ("caller's path", "to the master listening: engine imported, master built"),
)
CHILD = textwrap.dedent(
    """
    import json, select, sys, threading, time
    clock = time.perf_counter
    marks = [clock()]
    import mwpy
    marks.append(clock())
    Executor = mwpy.Executor
    marks.append(clock())
    import mwpy.executor as light

    def timed(inner):
        def wrapper(*args, **kwargs):
            value = inner(*args, **kwargs)
            marks.append(clock())
            return value
        return wrapper

    connected = []

    def watch(listener):
        poll = select.poll()
        poll.register(listener, select.POLLIN)
        if poll.poll(60_000):
            connected.append(clock())

    start_slaves = light.EarlySlaves

    def early(*args, **kwargs):
        slaves = timed(start_slaves)(*args, **kwargs)
        threading.Thread(target=watch, args=(slaves.listener,), daemon=True).start()
        return slaves

    light.EarlySlaves = early
    engine = light._engine
    light._engine = lambda: timed(timed(engine)())

    def echo(x):
        return x

    if __name__ == "__main__":
        with Executor(max_workers=2) as ex:
            ex.submit(echo, 1).result()
            marks.append(clock())
        marks.append(clock())
        paths = [(connected[0] - marks[3]) * 1e3, (marks[5] - marks[3]) * 1e3]
        print(json.dumps([(b - a) * 1e3 for a, b in zip(marks, marks[1:])] + paths))
    """
)


def run(runs: int) -> list[list[float]]:
    """Each run's step durations (ms), from fresh interpreters."""
    samples: list[list[float]] = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise SystemExit(f"a run failed:\n{done.stderr}")
        steps = json.loads(done.stdout.splitlines()[-1])
        if len(steps) != len(STEPS) + len(PATHS):  # a wrapped step no longer called: the table would shift
            raise SystemExit(f"expected {len(STEPS)} steps, measured {len(steps) - len(PATHS)}")
        samples.append(steps)
    return samples


def table(samples: list[list[float]]) -> list[str]:
    def row(name: str, values: list[float], what: str = "") -> str:
        spread = f"{min(values):.1f}-{max(values):.1f}"
        return f"{name:<16} {statistics.median(values):9.1f}  {spread:>13}  {what}".rstrip()

    rows = [f"{'step':<16} {'median ms':>9}  {'min-max':>13}  what"]
    rows += [row(name, [run[i] for run in samples], what) for i, (name, what) in enumerate(STEPS)]
    rows.append(row("to first result", [sum(run[: len(STEPS) - 1]) for run in samples]))
    rows.append("from the fork server's start (both at once; the first result waits for the later):")
    rows += [row(name, [run[len(STEPS) + i] for run in samples], what) for i, (name, what) in enumerate(PATHS)]
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup_stages", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes measured (default 15)")
    args = parser.parse_args(argv)
    print("\n".join(table(run(args.runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

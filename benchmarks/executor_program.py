"""The ``mwpy.Executor`` side of scenario 6: ``Executor.map`` over no-op tasks, written as a user would.

A plain script (no ``@mwpy.master``, no ``mwpy.run()``) run by path; its
slaves load it as ``__mp_main__``, so it imports nothing from ``benchmarks``.
Arguments: a JSON object (``tasks``, ``warmup``, ``workers``) and the path of
the JSON report. Timing starts after a warm-up map, once the slaves are
connected (start-up is not counted, as for the master algorithm API run). The
process's CPU per task over the timed map is reported too: on a loaded machine
it is steadier than the rate.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import mwpy


def echo(x: int) -> int:
    """The no-op task: return the argument."""
    return x


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(params: dict[str, int], out: Path) -> None:
    tasks, warmup, workers = params["tasks"], params["warmup"], params["workers"]
    started = time.monotonic()
    with mwpy.Executor(max_workers=workers) as ex:
        assert list(ex.map(echo, range(warmup))) == list(range(warmup))
        startup = time.monotonic() - started
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        began = time.perf_counter()
        total = sum(ex.map(echo, range(tasks)))
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_SELF)
    assert total == tasks * (tasks - 1) // 2
    report = {
        "tasks": tasks,
        "seconds": seconds,
        "tasks_per_s": tasks / seconds,
        # The whole process (the caller's thread and the engine's), as the master API's run counts its master.
        "master_cpu_us_per_task": (after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime) / tasks * 1e6,
        "peak_rss_mb": _peak_rss_mb(),
        "startup_seconds": startup,
    }
    out.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), Path(sys.argv[2]))

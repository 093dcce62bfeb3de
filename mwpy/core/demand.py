"""How many slaves would shorten the run: dask's adaptive target-duration model, on measured task times.

One slave per queued task (CL-MW's count) asks a pool for 1,999 slaves for
2,000 tasks of 20 ms that 8 slots finish in seconds. dask's ``Adaptive`` asks
for ``ceil(expected work / target duration)`` workers instead; so does the
master once it has measured its tasks: the work is the tasks not yet answered
times their mean run time, and the target is :data:`TARGET_SECONDS` or a slave's
measured start-up, whichever is longer (a slave that arrives after the work is
done shortens nothing). It never asks for more than one slave per task (nor
more than CL-MW's count), and before any task was measured it asks as before.
No clock, no I/O: the publisher gives the measurements.
"""

from __future__ import annotations

import math

import attrs

#: dask's ``distributed.adaptive.target-duration`` default: the work should take about this long.
TARGET_SECONDS = 5.0


@attrs.frozen
class Demand:
    """Slaves wanted beyond those connected, and why, in one line for ``mwpy status`` and the overseer."""

    needed: int
    why: str = ""


def _span(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def adaptive(
    *, per_task: int, tasks: int, connected: int, task_seconds: float | None, startup_seconds: float | None
) -> Demand:
    """What to ask for, given CL-MW's count ``per_task`` (one slave per task beyond ``connected``), the ``tasks``
    not yet answered, their mean run time and a slave's start-up (None: not measured yet)."""
    if task_seconds is None or not tasks:
        return Demand(per_task)
    target = max(TARGET_SECONDS, startup_seconds or 0.0)
    work = tasks * task_seconds
    if not math.isfinite(work):  # an absurd compute time a slave reported (a hostile insider's): CL-MW's count
        return Demand(per_task)
    slaves = min(tasks, max(1, math.ceil(work / target)))
    needed = min(per_task, max(0, slaves - connected))
    startup = f"; slave start-up {_span(startup_seconds)}" if startup_seconds is not None else ""
    why = (
        f"{tasks:,} tasks x {_span(task_seconds)} = {_span(work)} of work: {slaves:,} slaves finish it in "
        f"{_span(work / slaves)} (target {_span(target)}{startup})"
    )
    return Demand(needed, why)

"""Scenario 5: a real HTCondor pool, 1,000 tasks of 50 ms as mwpy tasks vs. 1,000 plain Condor jobs.

This needs the pool that ``tools/condor_pool.py up`` builds (8 slots) and
mwpy's Condor back end (master.sub + slaves.sub, or the overseer). Until both
exist the scenario reports "skipped: <reason>" so the rest of the harness runs
everywhere; :func:`measure_on_pool` is the hook to fill in.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.common import Check, Row, Settings

#: Where ``tools/condor_pool.py`` keeps its state (overridable like the tool itself).
POOL_BASE = Path(os.environ.get("MWPY_CONDOR_BASE", "/var/cache/mwpy-condor"))
#: The Condor back end the scenario drives; any of these modules will do once written.
BACKEND_MODULES = ("mwpy.condor", "mwpy.overseer")

TASKS = 1_000
TASK_SECONDS = 0.05
SLOTS = 8

NAME = "5 condor"


def pool_description() -> tuple[dict[str, Any] | None, str]:
    """The running pool's description (``pool.json``), or ``None`` and why there is none."""
    path = POOL_BASE / "pool.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no HTCondor pool ({path} missing; start one with `tools/condor_pool.py up`)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable {path}: {exc}"
    return data, ""


def backend_missing() -> str | None:
    """Why the Condor back end cannot be used, or ``None`` if one is importable."""
    for module in BACKEND_MODULES:
        if importlib.util.find_spec(module) is not None:
            return None
    return f"no mwpy Condor back end yet (none of {', '.join(BACKEND_MODULES)})"


def run(settings: Settings) -> tuple[list[Row], list[Check]]:
    """The scenario's rows and checks; skipped rows when the pool or the back end is missing."""
    pool, why = pool_description()
    if pool is None:
        return _skipped(why)
    missing = backend_missing()
    if missing is not None:
        return _skipped(missing)
    settings.log(f"{NAME}: pool {pool}")
    return measure_on_pool(settings, pool)


def measure_on_pool(settings: Settings, pool: dict[str, Any]) -> tuple[list[Row], list[Check]]:
    """TODO(issue 5, scenario 5): measure on the real pool once the Condor back end exists.

    The plan, so the numbers line up with the rest of the harness:

    1. mwpy: submit master.sub + slaves.sub (or start the overseer) for a
       program whose master submits ``TASKS`` tasks of ``TASK_SECONDS`` busy
       work (``time.sleep`` would let slots overlap unfairly; spin the CPU)
       with ``SLOTS`` slaves; wall time from ``condor_submit`` to the master
       job leaving the queue.
    2. Plain Condor: one cluster of ``TASKS`` jobs, each ``python -c`` the
       same 50 ms of work; wall time from ``condor_submit`` until the
       cluster has left the queue (``htcondor2.Schedd.query`` with a deadline).
    3. Rows: both wall times and tasks/s; checks: plain ÷ mwpy ≥ 10 and
       mwpy ÷ ideal ≤ 2, where ideal = ``TASKS * TASK_SECONDS / SLOTS``.
    """
    del settings
    return _skipped(f"scenario 5 is not implemented yet (pool found: {pool.get('cpus', '?')} slots)")


def _skipped(reason: str) -> tuple[list[Row], list[Check]]:
    rows = [
        Row(NAME, f"mwpy on Condor, {TASKS} x {TASK_SECONDS * 1000:g} ms", skipped=reason),
        Row(NAME, f"{TASKS} plain Condor jobs", skipped=reason),
    ]
    checks = [
        Check("5. Condor: plain jobs ÷ mwpy wall time", None, "≥ 10", None, reason),
        Check("5. Condor: mwpy ÷ ideal wall time (work ÷ slots)", None, "≤ 2", None, reason),
    ]
    return rows, checks

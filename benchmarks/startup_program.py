"""Scenario 7: a short script as a user writes it, with ``ProcessPoolExecutor`` or ported to ``mwpy.Executor``.

Issue 21 item 4: on a short script, start-up and shut-down are most of what
an executor costs. The script makes an executor in a ``with`` block, submits
``tasks`` calls that each sleep ``task_seconds`` (sleeping, not computing, so
the figures show what the executor adds and not how two systems share a busy
CPU), takes the results as they complete and leaves the block. It is a plain
script run by path (mwpy's slaves load it as ``__mp_main__``), so it imports
nothing from ``benchmarks``.

Arguments: a JSON object (``system``: ``"mwpy"``, ``"processpool"`` (the
platform's default start method) or ``"processpool-spawn"``,
``workers``, ``tasks``, ``task_seconds``) and the path of the JSON report.
Times are counted from just before the executor's package is imported, as
a script pays it: ``first_result_s`` (the first result back, less that
call's own sleep: the start-up the script waited through), ``results_s``
(every result back) and ``shutdown_s`` (leaving the ``with`` block, counted
from its end). The harness adds ``total_s``, the whole process from start to
exit.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent import futures
from pathlib import Path
from typing import Any


def nap(x: int, seconds: float) -> int:
    """The task: sleep, then return the argument."""
    time.sleep(seconds)
    return x


def _executor(system: str, workers: int) -> futures.Executor:
    """The executor the script would make; its package imported now, so its import is timed too."""
    if system == "mwpy":
        import mwpy  # noqa: PLC0415 - timed: part of what the ported script pays

        return mwpy.Executor(max_workers=workers)
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415 - timed, as mwpy's import is

    if system == "processpool-spawn":  # mwpy's slaves start as spawn's children do: a fresh Python each
        import multiprocessing  # noqa: PLC0415 - timed, as mwpy's import is

        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    return ProcessPoolExecutor(max_workers=workers)


def main(params: dict[str, Any], out: Path) -> None:
    system, workers, tasks, task_seconds = params["system"], params["workers"], params["tasks"], params["task_seconds"]
    began = time.perf_counter()
    with _executor(system, workers) as ex:
        calls = [ex.submit(nap, x, task_seconds) for x in range(tasks)]
        done = futures.as_completed(calls)
        values = [next(done).result()]
        first_result = time.perf_counter() - began - task_seconds  # less the call's own sleep: the start-up
        values += [call.result() for call in done]
        assert sorted(values) == list(range(tasks))
        results = time.perf_counter() - began
    shutdown = time.perf_counter() - began - results
    report = {"tasks": tasks, "first_result_s": first_result, "results_s": results, "shutdown_s": shutdown}
    out.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), Path(sys.argv[2]))

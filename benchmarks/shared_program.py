"""Scenario 8 (issue 22): tasks that all need one large numpy array, written as a user would.

A plain script run by path (its slaves load it as ``__mp_main__``, so it
imports nothing from ``benchmarks``). Arguments: a JSON object (``system``,
``mode``, ``megabytes``, ``tasks``, ``workers``) and the path of the JSON
report. ``system`` is ``mwpy`` (``mwpy.Executor``) or ``dask``
(``dask.distributed`` with a ``LocalCluster`` of processes); ``mode`` is
``tiny`` (a small int in place of the array: the cost of the task itself),
``share`` (``ex.share(arr)`` / ``client.scatter(arr, broadcast=True)``, the
handle passed to every call) or ``kwargs`` (``ex.map(f, xs, big=arr)``).

Two times, after a warm-up map once the workers are connected: ``share_seconds``,
the one-time cost of getting the array onto every worker (mwpy: ``ex.share``
and short tasks over the handle until the file service has sent it to each
slave; dask: ``scatter(broadcast=True)``, which returns once every worker
holds it), and ``seconds``, the map of ``tasks`` calls once it is there (the
steady per-task cost). ``kwargs`` cannot be split (the map shares its keyword
argument itself): its ``seconds`` is the whole map, and ``total_seconds`` is
what compares with the ``share`` form's share plus map.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def probe(arr: Any, i: int) -> int:
    """A short task: one element of the array (or of the tiny stand-in)."""
    return int(arr[i % len(arr)]) if hasattr(arr, "__len__") else arr + i


def probe_big(i: int, big: Any) -> int:
    return int(big[i % len(big)])


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


#: Seconds the share may take to reach every slave before the run is called failed.
SHARE_DEADLINE = 600.0


def _on_every_slave(ex: Any, handle: Any, workers: int) -> None:
    """Short tasks over ``handle`` until the file service has sent it to each of the ``workers`` slaves."""
    deadline = time.monotonic() + SHARE_DEADLINE
    while sum(ex.file_counters()["fetches"].values()) < workers:
        if time.monotonic() > deadline:
            raise SystemExit(f"the shared array did not reach {workers} slaves in {SHARE_DEADLINE:.0f} s")
        list(ex.map(probe, [handle] * 4 * workers, range(4 * workers)))


def _mwpy(params: dict[str, Any], arr: Any) -> dict[str, Any]:
    import mwpy  # noqa: PLC0415 (the dask side need not load it)

    tasks, mode, workers = params["tasks"], params["mode"], params["workers"]
    share_seconds, file_bytes = 0.0, None
    with mwpy.Executor(max_workers=workers) as ex:
        list(ex.map(probe, [7] * 50, range(50)))  # warm-up: both slaves connected
        if mode == "tiny":
            began = time.perf_counter()
            values = list(ex.map(probe, [7] * tasks, range(tasks)))
        elif mode == "share":
            began = time.perf_counter()
            handle = ex.share(arr)
            _on_every_slave(ex, handle, workers)
            share_seconds, file_bytes = time.perf_counter() - began, handle.size
            began = time.perf_counter()
            values = list(ex.map(probe, [handle] * tasks, range(tasks)))
        else:
            began = time.perf_counter()
            values = list(ex.map(probe_big, range(tasks), big=arr))
        seconds = time.perf_counter() - began
        counters = ex.file_counters()
    return {
        "seconds": seconds,
        "share_seconds": share_seconds,
        "values": len(values),
        "bytes_sent": counters["bytes_sent"],
        "copies_per_slave": None if file_bytes is None else counters["bytes_sent"] / (workers * file_bytes),
    }


def _dask(params: dict[str, Any], arr: Any) -> dict[str, Any]:
    distributed = importlib.import_module("distributed")  # untyped, and optional (the bench extra): as peers.py

    tasks, mode = params["tasks"], params["mode"]
    workers = params["workers"]
    with (
        distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c,
        distributed.Client(c) as client,
    ):
        client.gather(client.map(probe, [7] * 50, range(50), pure=False))
        share_seconds, argument = 0.0, 7
        if mode != "tiny":
            began = time.perf_counter()
            [argument] = client.scatter([arr], broadcast=True)  # returns once every worker holds it
            share_seconds = time.perf_counter() - began
        began = time.perf_counter()
        values = client.gather(client.map(probe, [argument] * tasks, range(tasks), pure=False))
        seconds = time.perf_counter() - began
    return {"seconds": seconds, "share_seconds": share_seconds, "values": len(values), "bytes_sent": None}


def main(params: dict[str, Any], out: Path) -> None:
    arr = np.arange(params["megabytes"] * (1 << 20) // 8, dtype=np.int64)
    report = (_dask if params["system"] == "dask" else _mwpy)(params, arr)
    report.update(
        tasks=params["tasks"],
        total_seconds=report["share_seconds"] + report["seconds"],
        per_task_ms=1000 * report["seconds"] / params["tasks"],
        tasks_per_s=params["tasks"] / report["seconds"],
        peak_rss_mb=_peak_rss_mb(),
        array_mb=arr.nbytes / (1 << 20),
        bytes_sent_mib=None if report["bytes_sent"] is None else report["bytes_sent"] / (1 << 20),
    )
    out.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), Path(sys.argv[2]))

"""Scenario 10: task graphs (futures as arguments), ``mwpy.Executor`` and ``dask.distributed``, as a user writes them.

A plain script run by path (its slaves load it as ``__mp_main__``, so it
imports nothing from ``benchmarks``). Arguments: a JSON object (``system``:
``mwpy`` or ``dask``; ``part``; ``n``; ``workers``; ``megabytes`` and
``cpu_tasks`` for ``intermediate``) and the path of the JSON report. The parts:

* ``chain``: ``n`` dependent tiny tasks, ``f = submit(inc, f)``: hops per second;
* ``fanin``: ``n`` futures into one task, ``submit(total, futs)``;
* ``tree``: ``n`` leaf values summed by a tree of width 100 (3 levels at 10,000 and more);
* ``intermediate`` (mwpy only): a large value made by one task and used by another, on the slaves: the bytes
  that went through the master (file service counters, value-moved events) and the master's RSS growth; then the
  master's CPU per independent task, per dependency on a done input and per chain hop.

Timing starts after a warm-up once the workers are connected. The peak RSS is
the caller's (``VmHWM``, reset after the warm-up where the kernel allows it), so
the growth over the RSS before the timed part is reported too.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The tree's width: each inner task sums this many values of the level below.
WIDTH = 100


def inc(x: Any) -> int:  # Any: a future stands for its value
    return int(x) + 1


def total(values: Any) -> int:
    """The sum of a list of numbers (a level of the tree, or the fan-in's inputs)."""
    return sum(int(v) for v in values)


def large(n: int) -> tuple[int, bytes]:
    """``n`` random bytes and the pid of the slave that made them."""
    return os.getpid(), os.urandom(n)


def where(value: Any) -> tuple[int, int, int]:
    """(this slave's pid, the producer's pid, the size of its bytes): where the large input was used."""
    pid, data = value
    return os.getpid(), pid, len(data)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> float:
    """Reset ``VmHWM`` to the current RSS (``clear_refs`` 5, Linux 4.0+) and return the RSS in MB."""
    # Where the kernel refuses, the peak counts the warm-up too; the growth still says what the part added.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5", encoding="ascii")
    return _status_mb("VmRSS")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Submit = Callable[..., Any]


def _timed(part: str, n: int, submit: Submit, result: Callable[[Any], Any]) -> dict[str, Any]:
    """Run one part (not ``intermediate``) after a warm-up; its figures."""
    assert [result(submit(inc, i)) for i in range(20)] == list(range(1, 21))  # warm-up: the workers are connected
    before = _reset_peak()
    began, cpu = time.perf_counter(), _cpu()
    if part == "chain":
        f = submit(inc, 0)
        for _ in range(n - 1):
            f = submit(inc, f)
        out, expected, tasks = result(f), n, n
    elif part == "fanin":
        out, expected, tasks = result(submit(total, [submit(inc, i) for i in range(n)])), n * (n + 1) // 2, n + 1
    else:
        level = [submit(inc, i) for i in range(n)]
        tasks = n
        while len(level) > 1:
            level = [submit(total, level[i : i + WIDTH]) for i in range(0, len(level), WIDTH)]
            tasks += len(level)
        out, expected = result(level[0]), n * (n + 1) // 2
    seconds, used = time.perf_counter() - began, _cpu() - cpu
    if out != expected:
        raise SystemExit(f"{part}: got {out}, expected {expected}")
    peak = _status_mb("VmHWM")
    return {
        "tasks": tasks,
        "seconds": seconds,
        "tasks_per_s": tasks / seconds,
        "hops_per_s": n / seconds if part == "chain" else None,
        "peak_rss_mb": peak,
        "rss_growth_mb": peak - before,
        "caller_cpu_seconds": used,
    }


def _dask(params: dict[str, Any]) -> dict[str, Any]:
    distributed = importlib.import_module("distributed")  # untyped, and optional (the bench extra): as peers.py

    workers = params["workers"]
    with (
        distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c,
        distributed.Client(c) as client,
    ):
        report: dict[str, Any] = _timed(
            params["part"],
            params["n"],
            lambda fn, *args: client.submit(fn, *args, pure=False),
            lambda future: future.result(),
        )
    return report


def _mwpy(params: dict[str, Any]) -> dict[str, Any]:
    import mwpy  # noqa: PLC0415 (the dask side need not load it)

    with mwpy.Executor(max_workers=params["workers"]) as ex:
        report = _timed(params["part"], params["n"], ex.submit, lambda future: future.result())
    return report


def _intermediate(params: dict[str, Any]) -> dict[str, Any]:
    """A ``megabytes`` MB value between two tasks, then the master's CPU per task, per dependency, per hop."""
    import mwpy  # noqa: PLC0415
    from mwpy.observe import events  # noqa: PLC0415

    size, n = params["megabytes"] * 1_000_000, params["cpu_tasks"]
    with tempfile.TemporaryDirectory(prefix="mwpy-bench-dataflow-") as tmp:
        log = Path(tmp) / "events.jsonl"
        with mwpy.Executor(max_workers=params["workers"], options=["--mw-events", str(log)]) as ex:
            assert list(ex.map(inc, range(50))) == list(range(1, 51))  # warm-up: both slaves connected
            sent_before = ex.file_counters()["bytes_sent"]
            before = _reset_peak()
            began = time.perf_counter()
            used_on, made_on, length = ex.submit(where, ex.submit(large, size)).result()
            seconds = time.perf_counter() - began
            growth = _status_mb("VmHWM") - before
            sent = ex.file_counters()["bytes_sent"] - sent_before
            if length != size:
                raise SystemExit(f"intermediate: the dependent saw {length} bytes, not {size}")
            cpu = _cpu()
            futures = [ex.submit(inc, i) for i in range(n)]
            assert [f.result() for f in futures] == list(range(1, n + 1))
            independent = _cpu() - cpu
            cpu = _cpu()
            dependents = [ex.submit(inc, f) for f in futures]  # inputs done: the dependency's own bookkeeping
            assert [f.result() for f in dependents] == list(range(2, n + 2))
            dependency = _cpu() - cpu
            cpu = _cpu()
            f = ex.submit(inc, 0)
            for _ in range(n - 1):
                f = ex.submit(inc, f)
            assert f.result() == n
            hop = _cpu() - cpu
        moved = [e for e in events.read_events(log) if isinstance(e, events.ValueMoved)]
    relayed = sum(e.bytes for e in moved if e.way == "relayed")  # into the master; what it serves is in ``sent``
    return {
        "tasks": 2,
        "seconds": seconds,
        "tasks_per_s": 2 / seconds,
        "peak_rss_mb": _status_mb("VmHWM"),
        "rss_growth_mb": growth,
        "same_slave": used_on == made_on,
        "file_bytes_sent": sent,
        "moved": {way: sum(e.bytes for e in moved if e.way == way) for way in {e.way for e in moved}},
        "master_mb": (sent + relayed) / 1e6,
        "cpu_us_per_task": independent / n * 1e6,
        "cpu_us_per_dependency": dependency / n * 1e6,
        "cpu_us_per_hop": hop / n * 1e6,
    }


def main(params: dict[str, Any], out: Path) -> None:
    if params["part"] == "intermediate":
        report = _intermediate(params)
    else:
        report = (_dask if params["system"] == "dask" else _mwpy)(params)
    out.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), Path(sys.argv[2]))

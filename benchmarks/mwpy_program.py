"""The mwpy program the harness runs: one no-op task algorithm and a master that measures itself.

It is an ordinary mwpy program (``@mwpy.task``, ``@mwpy.master``, ``mwpy.run()``)
started with ``--mw-master`` / ``--mw-slave`` exactly as a user would, so what is
measured is the real master and slave. The master's own arguments are a JSON
object of parameters and the path where it writes its measurements as JSON.

Timing starts only once the expected slaves are connected and a warm-up batch
has run, which is also how the peers are measured (start-up is not counted).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import mwpy
from benchmarks.common import peak_rss_mb

#: How long the master waits for its slaves to connect.
CONNECT_DEADLINE = 120.0


@mwpy.task(name="bench.echo")
def echo(x: int) -> int:
    """The no-op task: return the argument."""
    return x


def connected_slaves(mw: mwpy.Master) -> int:
    """Slaves connected now, of any group."""
    return len(mw.connected_slaves())


def wait_for_slaves(mw: mwpy.Master, count: int) -> float:
    """Run the event loop until ``count`` slaves are connected; the seconds it took."""
    started = time.monotonic()
    deadline = started + CONNECT_DEADLINE
    while connected_slaves(mw) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {connected_slaves(mw)} of {count} slaves connected")
        mw.loop(timeout=0.05)
    return time.monotonic() - started


def run_tasks(mw: mwpy.Master, first: int, count: int, target: int) -> None:
    """Stream ``count`` echo tasks through the target number, checking every value."""
    mw.target_number = target
    submitted = received = 0
    total = 0
    while received < count:
        room = min(mw.upto_target_number(), count - submitted)
        for i in range(first + submitted, first + submitted + room):
            echo.submit(i)
        submitted += room
        mw.loop()
        for result in mw.results():
            if result.error is not None:
                raise RuntimeError(f"task failed: {result.error.type}: {result.error.message}")
            total += result.value
            received += 1
    check_sum(total, first, count)


def map_chunks(mw: mwpy.Master, first: int, count: int, chunksize: int) -> None:
    """``mw.map(echo, ..., chunksize=n)`` over ``count`` calls, as ``ProcessPoolExecutor.map`` is measured."""
    check_sum(sum(mw.map(echo, range(first, first + count), chunksize=chunksize)), first, count)


@mwpy.task(name="bench.size")
def size(data: bytes) -> int:
    """Scenario 9's task: the length of its (large) argument."""
    return len(data)


def large_arguments(mw: mwpy.Master, params: dict[str, Any]) -> dict[str, Any]:
    """``mw.map`` over ``tasks`` distinct arguments of ``argument_bytes`` each (issue 22: the master's memory)."""
    count, each = int(params["tasks"]), int(params["argument_bytes"])
    started = time.perf_counter()
    inputs = (i.to_bytes(8, "big") * (each // 8) for i in range(count))
    if sum(mw.map(size, inputs)) != count * (each // 8) * 8:
        raise RuntimeError("wrong results")
    elapsed = time.perf_counter() - started
    return {"tasks": count, "seconds": elapsed, "tasks_per_s": count / elapsed}


def check_sum(total: int, first: int, count: int) -> None:
    """Every echo of ``first .. first + count - 1`` came back: their sum is right."""
    expected = count * first + count * (count - 1) // 2
    if total != expected:
        raise RuntimeError(f"wrong results: sum {total}, expected {expected}")


def throughput(mw: mwpy.Master, params: dict[str, Any]) -> dict[str, Any]:
    """Calls per second over ``tasks`` no-op calls, after a warm-up batch.

    A task per call (``submit``), or ``chunksize`` calls per task through ``mw.map`` when given.
    """
    chunksize = int(params.get("chunksize", 0))
    target = int(params.get("target", 20_000))

    def run(first: int, count: int) -> None:
        if chunksize:
            map_chunks(mw, first, count, chunksize)
        else:
            run_tasks(mw, first, count, target)

    run(0, int(params["warmup"]))
    count = int(params["tasks"])
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    run(1_000_000_000, count)
    elapsed = time.perf_counter() - started
    return {"tasks": count, "seconds": elapsed, "tasks_per_s": count / elapsed, **_cpu_per(cpu, count)}


def _cpu_per(before: resource.struct_rusage, count: int) -> dict[str, float]:
    """The master process's own CPU per task since ``before``: steadier than wall time on a busy machine.

    ``getrusage``, not ``os.times()``: the latter counts in clock ticks (10 ms),
    which at 2,000 round trips would be a tenth of the figure.
    """
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "master_user_us_per_task": (after.ru_utime - before.ru_utime) / count * 1e6,
        "master_system_us_per_task": (after.ru_stime - before.ru_stime) / count * 1e6,
    }


def latency(mw: mwpy.Master, params: dict[str, Any]) -> dict[str, Any]:
    """Round-trip times with exactly one task in flight."""
    samples: list[float] = []
    warmup = int(params["warmup"])
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(warmup + int(params["round_trips"])):
        if i == warmup:
            cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        echo.submit(i)
        results: list[mwpy.Result] = []
        while not results:
            mw.loop()
            results = mw.results()
        elapsed = time.perf_counter() - started
        if results[0].value != i:
            raise RuntimeError(f"wrong result {results[0].value!r} for {i}")
        if i >= warmup:
            samples.append(elapsed)
    return {"round_trips_s": samples, **_cpu_per(cpu, len(samples))}


def idle_cpu(mw: mwpy.Master, seconds: float) -> dict[str, Any]:
    """The master's CPU use (psutil ``cpu_times``) while it waits with its slaves connected and no task."""
    import psutil  # noqa: PLC0415 - only this measurement needs it

    me = psutil.Process()
    before = me.cpu_times()
    started = time.monotonic()
    end = started + seconds
    while (now := time.monotonic()) < end:
        mw.loop(timeout=end - now)
    wall = time.monotonic() - started
    after = me.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"idle_seconds": wall, "idle_cpu_seconds": cpu, "idle_cpu_percent": 100 * cpu / wall}


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    params: dict[str, Any] = json.loads(argv[0])
    report: dict[str, Any] = {"connect_seconds": wait_for_slaves(mw, int(params["slaves"]))}
    if params.get("idle_seconds"):
        report.update(idle_cpu(mw, float(params["idle_seconds"])))
    mode = params["mode"]
    if mode == "throughput":
        report.update(throughput(mw, params))
    elif mode == "latency":
        report.update(latency(mw, params))
    elif mode == "large":
        report.update(large_arguments(mw, params))
    elif mode != "idle":
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    report["peak_rss_mb"] = peak_rss_mb()
    with open(argv[1], "w", encoding="utf-8") as out:
        json.dump(report, out)
    return 0


if __name__ == "__main__":
    mwpy.run()

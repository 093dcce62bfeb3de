"""A two-level tree of masters built from mwpy's public API: the prototype measured in docs/scaling.md.

One program, three roles:

* the **top master** (``--mw-master``) sends *batches* of no-op tasks, one
  ``relay`` task per batch, to its slaves, which are foremen;
* a **foreman** is an ordinary mwpy slave of the top master (``--mw-slave``)
  whose slave algorithm first opens a master of its own (a *sub-master*, its
  resource file named by ``MWPY_TREE_RESOURCE_FILE``) and waits for
  ``MWPY_TREE_LEAVES`` leaf slaves; each ``relay`` task then fans its batch
  out to the leaves as ``bench.echo`` tasks and returns their values;
* the **leaves** are load-generator connections to a foreman's sub-master.

The top master therefore holds a handful of connections and sees one task
per batch, whatever the number of leaves: its CPU per leaf task is the
figure that says how far a tree goes. Nothing in mwpy changes for this.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import secrets
import time
from typing import Any

import mwpy
from benchmarks.common import peak_rss_mb
from mwpy import options as mwpy_options
from mwpy.master import Master
from mwpy.observe.audit import Audit

#: How long a foreman waits for its leaves, and the top master for its foremen.
CONNECT_DEADLINE = 120.0
_SUB: list[Master] = []  # the foreman's sub-master, once its slave algorithm has opened it


@mwpy.task(name="bench.echo")
def echo(x: int) -> int:
    """The no-op leaf task (the load generator answers it without running this)."""
    return x


@mwpy.task(name="tree.relay")
def relay(batch: list[int]) -> list[int]:
    """On a foreman: run every item of the batch on the leaves, return their values in order."""
    futures = [echo.submit(x) for x in batch]
    return [future.result() for future in futures]


@mwpy.slave
def foreman(slave: mwpy.Slave, argv: list[str]) -> int:
    """Open the sub-master, wait for its leaves, then serve the top master until it says stop."""
    path = os.environ["MWPY_TREE_RESOURCE_FILE"]
    options, _ = mwpy_options.parse(
        ["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", path, "--mw-audit-file", "/dev/null"]
    )
    sub = Master(options, audit=Audit("/dev/null"), secret=secrets.token_bytes(32), program=__file__)
    sub.__enter__()  # the current master: relay()'s submissions go to it
    atexit.register(sub.__exit__, None, None, None)  # tell the leaves to stop once the top master has
    _SUB.append(sub)
    _wait_for(sub, int(os.environ["MWPY_TREE_LEAVES"]))
    slave.loop_until_shutdown()
    return 0


def _wait_for(mw: Master, count: int) -> float:
    started = time.monotonic()
    while len(mw.connected_slaves()) < count:
        if time.monotonic() - started > CONNECT_DEADLINE:
            raise TimeoutError(f"only {len(mw.connected_slaves())} of {count} slaves connected")
        mw.loop(timeout=0.05)
    return time.monotonic() - started


def _run(mw: mwpy.Master, first: int, batches: int, size: int) -> None:
    """``batches`` relay tasks of ``size`` items each, two in flight per foreman; every value checked."""
    mw.target_number = 2 * len(mw.connected_slaves())
    submitted = received = 0
    while received < batches:
        room = min(mw.upto_target_number(), batches - submitted)
        for b in range(submitted, submitted + room):
            start = first + b * size
            relay.submit(list(range(start, start + size)))
        submitted += room
        mw.loop()
        for result in mw.results():
            if result.error is not None:
                raise RuntimeError(f"relay failed: {result.error.type}: {result.error.message}")
            values = result.value
            if values != list(range(values[0], values[0] + size)):
                raise RuntimeError("a relay returned wrong values")
            received += 1


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    params: dict[str, Any] = json.loads(argv[0])
    size = int(params["batch"])
    report: dict[str, Any] = {"connect_seconds": _wait_for(mw, int(params["foremen"]))}
    foremen = int(params["foremen"])
    _run(mw, 0, max(foremen, int(params["warmup"]) // size), size)  # also waits for every foreman's leaves
    batches = max(1, int(params["tasks"]) // size)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    _run(mw, 1_000_000_000, batches, size)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    tasks = batches * size
    used = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    report.update(
        tasks=tasks,
        seconds=elapsed,
        tasks_per_s=tasks / elapsed,
        master_cpu_us_per_task=used / tasks * 1e6,
        peak_rss_mb=peak_rss_mb(),
    )
    with open(argv[1], "w", encoding="utf-8") as out:
        json.dump(report, out)
    return 0


if __name__ == "__main__":
    mwpy.run()

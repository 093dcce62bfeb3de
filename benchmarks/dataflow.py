"""Scenario 10, dataflow: task graphs built by passing futures as arguments, mwpy.Executor against dask.distributed.

Each part runs as its own child process (:mod:`benchmarks.dataflow_program`,
a plain script), mwpy and dask back to back in the same round, so every ratio
is taken within a round and each caller's peak RSS is its own:

1. a chain of dependent tiny tasks (hops per second);
2. a fan-in of many futures into one task (seconds, the caller's peak RSS);
3. a tree reduction of width 100 (seconds, peak RSS; the number of leaves is
   ``--tree-leaves``: dask takes minutes at 100,000, so the rounds use fewer);
4. mwpy alone: a large intermediate value between two tasks on the slaves
   (the bytes that went through the master, the master's RSS growth), and the
   master's CPU per independent task, per dependency and per chain hop.

It runs only when named (``--scenario dataflow``): dask takes a minute a round.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from benchmarks.common import Row, Settings
from benchmarks.scenarios import Outcome, System, Target, _script_row, note_spread, ratio, run_rounds, single

PROGRAM = Path(__file__).with_name("dataflow_program.py")
NAME = "10 dataflow"


def _run(settings: Settings, label: str, params: dict[str, Any]) -> Row:
    """One part on one system in a child process, or a row saying it failed or dask is not installed."""
    if params["system"] == "dask" and importlib.util.find_spec("distributed") is None:
        return Row(NAME, label, skipped="dask.distributed is not installed (the bench extra)")
    return _script_row(settings, NAME, label, PROGRAM, params)


def dataflow(settings: Settings) -> Outcome:
    """The four parts, each system once per round; the chain's targets, the rest for information."""
    sizes = settings.sizes
    chain, fanin, leaves = sizes.dataflow_chain, sizes.dataflow_fanin, sizes.dataflow_tree_leaves
    parts = (
        ("chain", chain, f"chain of {chain:,} dependent tasks"),
        ("fanin", fanin, f"fan-in of {fanin:,} futures into one task"),
        ("tree", leaves, f"tree reduction of {leaves:,} leaves, width 100"),
    )
    systems = [
        System(
            f"{part}-{system}",
            f"{who}, {what}",
            functools.partial(_run, settings, f"{who}, {what}", {"system": system, "part": part, "n": n}),
        )
        for part, n, what in parts
        for system, who in (("mwpy", "mwpy.Executor"), ("dask", "dask LocalCluster"))
    ]
    megabytes = sizes.dataflow_megabytes
    label = f"mwpy.Executor, {megabytes} MB intermediate between two tasks"
    params = {"system": "mwpy", "part": "intermediate", "n": 2, "megabytes": megabytes}
    systems.append(
        System(
            "intermediate",
            label,
            functools.partial(_run, settings, label, {**params, "cpu_tasks": sizes.dataflow_cpu_tasks}),
        )
    )
    targets: list[Target] = [
        single(f"10. chain of {chain:,}: hops/s, mwpy", "chain-mwpy", "hops_per_s", 1000, op="≥"),
        ratio("10. chain: hops/s, mwpy / dask", "chain-mwpy", "chain-dask", "hops_per_s", 3),
    ]
    for part, what in (("fanin", f"fan-in of {fanin:,}"), ("tree", f"tree of {leaves:,}")):
        targets += [
            single(f"10. {what}: seconds, mwpy", f"{part}-mwpy", "seconds", None),
            single(f"10. {what}: seconds, dask", f"{part}-dask", "seconds", None),
            ratio(f"10. {what}: seconds, dask / mwpy", f"{part}-dask", f"{part}-mwpy", "seconds", None),
            single(f"10. {what}: caller's peak RSS (MB), mwpy", f"{part}-mwpy", "peak_rss_mb", None),
            single(f"10. {what}: caller's peak RSS (MB), dask", f"{part}-dask", "peak_rss_mb", None),
        ]
    targets += [
        single(f"10. {megabytes} MB intermediate: MB through the master", "intermediate", "master_mb", None),
        single(f"10. {megabytes} MB intermediate: master peak RSS growth (MB)", "intermediate", "rss_growth_mb", None),
        single("10. master CPU per independent task (µs)", "intermediate", "cpu_us_per_task", None),
        single("10. master CPU per dependency on a done input (µs)", "intermediate", "cpu_us_per_dependency", None),
        single("10. master CPU per chain hop (µs)", "intermediate", "cpu_us_per_hop", None),
    ]
    series, checks = run_rounds(settings, NAME, systems, targets)
    note_spread(series, "rss_growth_mb", lambda growth: f"peak RSS growth over the part {growth.format('.0f')} MB")
    return series, checks

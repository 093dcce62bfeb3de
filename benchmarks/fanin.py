"""Scenario 4, fan-in: one master and up to 10,000 simulated slaves (issue 13, items 4 and 5).

The slaves are :mod:`benchmarks.loadgen` connections (real TCP, the real
handshake with its HMAC proofs, real task and result frames) held by
``--workers`` load-generator processes, so the CPU given to "slaves" is the
same at 2 and at 10,000 connections and the ratio measures the master alone.
One run of the master does everything in order:

1. **storm**: the load generators open their connections evenly over
   ``connections / STORM_RATE`` seconds (10,000 in 10 s) and time each one
   from ``connect()`` to the master's Welcome; a connection refused, reset or
   not admitted within ``HANDSHAKE_DEADLINE`` is counted, never retried;
2. **idle**: the master waits ``IDLE_SECONDS`` (longer than one heartbeat
   interval, so every slave's heartbeats are in it) with every slave
   connected and no task, and measures its own CPU;
3. **throughput**: no-op tasks, as in scenario 1;
4. **memory**: the master's peak RSS (``VmHWM``) over all of it.

``fanin`` runs 2 and 10,000 connections in rounds and checks issue 13's four
targets; ``fanin-curve`` (only when named) runs more sizes for the curve in
docs/scaling.md, and ``fanin-tree`` (only when named) the same 10,000 slaves
under one master and under a two-level tree of masters
(:mod:`benchmarks.tree_program`, the prototype of docs/scaling.md).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import BenchError, Checkout, Row, Series, Settings, add_master_cpu, stop, tail, wait_for
from benchmarks.scenarios import Outcome, System, Target, ratio, run_rounds, single

#: Slaves arriving per second in the storm: issue 13's 10,000 within 10 s.
STORM_RATE = 1_000.0
#: A connection not admitted within this many seconds counts as a timed-out handshake (a real slave waits
#: for ``--mw-client-timeout``, 60 s by default: this is stricter).
HANDSHAKE_DEADLINE = 10.0
#: The idle measurement: longer than the heartbeat interval (a quarter of the 60 s client timeout).
IDLE_SECONDS = 20.0
#: The connection counts of ``fanin-curve``.
CURVE = (2, 1_000, 3_000, 10_000, 15_000)
#: ``fanin-tree``: foremen under the top master, and leaf tasks per relay task.
FOREMEN = 2
TREE_BATCH = 2_000
TREE_PROGRAM = Path(__file__).with_name("tree_program.py")


@dataclasses.dataclass(frozen=True)
class FaninRun:
    """One master with ``connections`` load-generator slaves."""

    connections: int
    tasks: int
    warmup: int
    idle_seconds: float
    processes: int
    timeout: float = 900.0

    @property
    def arrival(self) -> float:
        return self.connections / STORM_RATE


def run_fanin(settings: Settings, run: FaninRun) -> dict[str, Any]:
    """Run the master and the load generators; the master's report plus the load generators' totals."""
    checkout = Checkout(Checkout.this().root, settings.python)
    params = {
        "mode": "throughput",
        "tasks": run.tasks,
        "warmup": run.warmup,
        "idle_seconds": run.idle_seconds,
        "slaves": run.connections,
    }
    with tempfile.TemporaryDirectory(prefix="mwpy-bench-fanin-") as tmp_name:
        tmp = Path(tmp_name)
        rf, out = tmp / "rf.json", tmp / "out.json"
        children: list[tuple[subprocess.Popen[bytes], Path]] = []

        def spawn(cmd: list[str], name: str) -> subprocess.Popen[bytes]:
            log = tmp / f"{name}.log"
            with log.open("wb") as sink:
                child = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=checkout.env(), cwd=tmp)
            children.append((child, log))
            return child

        try:
            master = spawn(
                [
                    checkout.python, str(checkout.program), "--mw-master",
                    "--mw-master-host", "127.0.0.1",
                    "--mw-resource-file", str(rf),
                    "--mw-audit-file", "/dev/null",
                    json.dumps(params), str(out),
                ],
                "master",
            )  # fmt: skip
            wait_for(lambda: rf.exists() or master.poll() is not None, time.monotonic() + 60, "the resource file")
            if master.poll() is not None:
                raise BenchError(f"the master exited with status {master.returncode}\n{tail(children[0][1])}")
            reports = [tmp / f"loadgen-{i}.json" for i in range(run.processes)]
            share, extra = divmod(run.connections, run.processes)
            loadgens = []
            for i, report in enumerate(reports):
                count = share + (1 if i < extra else 0)
                command = [
                    checkout.python, "-m", "benchmarks.loadgen", str(rf), str(count),
                    "--arrival", str(run.arrival),
                    "--handshake-deadline", str(HANDSHAKE_DEADLINE),
                    "--report", str(report),
                ]  # fmt: skip
                loadgens.append(spawn(command, f"loadgen-{i}"))
            return _outcome(
                (master, "the master", children[0][1]), loadgens,
                others_name="a load generator", out=out, reports=reports, timeout=run.timeout,
            )  # fmt: skip
        finally:
            for child, _log in children:
                stop(child)


def run_tree(settings: Settings, run: FaninRun, foremen: int = FOREMEN) -> dict[str, Any]:
    """A top master, ``foremen`` foremen (its slaves, each a master of its own) and the leaves split between them."""
    checkout = Checkout(Checkout.this().root, settings.python)
    leaves = run.connections // foremen
    params = {"foremen": foremen, "batch": TREE_BATCH, "tasks": run.tasks, "warmup": max(run.warmup, TREE_BATCH)}
    with tempfile.TemporaryDirectory(prefix="mwpy-bench-tree-") as tmp_name:
        tmp = Path(tmp_name)
        top, out = tmp / "top.json", tmp / "out.json"
        children: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []

        def spawn(cmd: list[str], name: str, **env: str) -> subprocess.Popen[bytes]:
            logs.append(tmp / f"{name}.log")
            with logs[-1].open("wb") as sink:
                child = subprocess.Popen(
                    cmd, stdout=sink, stderr=subprocess.STDOUT, env={**checkout.env(), **env}, cwd=tmp
                )
            children.append(child)
            return child

        audit = ["--mw-audit-file", "/dev/null"]
        try:
            master = spawn(
                [
                    checkout.python, str(TREE_PROGRAM), "--mw-master", "--mw-master-host", "127.0.0.1",
                    "--mw-resource-file", str(top), *audit, json.dumps(params), str(out),
                ],
                "top",
            )  # fmt: skip
            wait_for(lambda: top.exists() or master.poll() is not None, time.monotonic() + 60, "the resource file")
            reports = []
            for i in range(foremen):
                sub = tmp / f"foreman-{i}.json"
                spawn(
                    [checkout.python, str(TREE_PROGRAM), "--mw-slave", "--mw-resource-file", str(top), *audit],
                    f"foreman-{i}",
                    MWPY_TREE_RESOURCE_FILE=str(sub),
                    MWPY_TREE_LEAVES=str(leaves),
                )
                wait_for(sub.exists, time.monotonic() + 60, f"foreman {i}'s resource file")
                reports.append(tmp / f"loadgen-{i}.json")
                command = [
                    checkout.python, "-m", "benchmarks.loadgen", str(sub), str(leaves),
                    "--arrival", str(leaves / STORM_RATE), "--handshake-deadline", str(HANDSHAKE_DEADLINE),
                    "--report", str(reports[-1]),
                ]  # fmt: skip
                spawn(command, f"loadgen-{i}")
            return _outcome(
                (master, "the top master", logs[0]), children[1:],
                others_name="a foreman or load generator", out=out, reports=reports, timeout=run.timeout,
            )  # fmt: skip
        finally:
            for child in children:
                stop(child)


def _outcome(
    master: tuple[subprocess.Popen[bytes], str, Path],
    others: Sequence[subprocess.Popen[bytes]],
    *,
    others_name: str,
    out: Path,
    reports: Sequence[Path],
    timeout: float,
) -> dict[str, Any]:
    """Wait for the master (process, name, log) to finish and the others to leave; its report plus their totals."""
    process, name, log = master
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{name} did not finish within {timeout:g} s") from None
    if code != 0 or not out.exists():
        raise BenchError(f"{name} exited with status {code}\n{tail(log)}")
    for child in others:
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{others_name} did not exit after the shutdown") from None
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return {**report, **_totals([json.loads(r.read_text(encoding="utf-8")) for r in reports])}


def _totals(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The load generators' reports as one: counts added up, times the worst of them."""
    totals: dict[str, Any] = {
        key: sum(int(r[key]) for r in reports) for key in ("admitted", "refused", "timed_out", "failed", "lost")
    }
    totals["handshakes_failed"] = totals["refused"] + totals["timed_out"] + totals["failed"]
    for key in ("admission_p50_s", "admission_p99_s", "admission_max_s", "storm_seconds"):
        values = [float(r[key]) for r in reports if key in r]
        if values:
            totals[key] = max(values)
    errors: dict[str, int] = {}
    for report in reports:
        for name, count in report["errors"].items():
            errors[name] = errors.get(name, 0) + int(count)
    totals["errors"] = errors
    return totals


def _measure(settings: Settings, scenario: str, label: str, run: FaninRun, *, tree: bool = False) -> Row:
    settings.log(f"{scenario}: {label}")
    try:
        report = run_tree(settings, run) if tree else run_fanin(settings, run)
    except BenchError as exc:
        return Row(scenario, label, skipped=f"failed: {exc}")
    add_master_cpu(report)
    return Row(
        scenario,
        label,
        tasks=report.get("tasks"),
        seconds=report.get("seconds"),
        tasks_per_s=report.get("tasks_per_s"),
        peak_rss_mb=report.get("peak_rss_mb"),
        cpu_percent=report.get("idle_cpu_percent"),
        extra=report,
    )


def _systems(settings: Settings, scenario: str, counts: Sequence[int]) -> list[System]:
    sizes = settings.sizes
    idle = IDLE_SECONDS if sizes.idle_seconds >= IDLE_SECONDS / 2 else sizes.idle_seconds  # --quick: short
    systems = []
    for n in counts:
        run = FaninRun(n, sizes.fanin_tasks, sizes.warmup_tasks, idle, settings.workers)
        label = f"mwpy default, {n:,} slaves arriving in {run.arrival:.3g} s ({settings.workers} load generators)"
        systems.append(System(str(n), label, functools.partial(_measure, settings, scenario, label, run)))
    return systems


def _notes(series: list[Series]) -> None:
    for one in series:
        parts = [one.note] if one.note else []
        p99, worst = one.spread("admission_p99_s"), one.spread("admission_max_s")
        if p99 is not None and worst is not None:
            parts.append(f"admission p99 {p99.format('.3f')} s, max {worst.format('.3f')} s")
        storm = one.spread("storm_seconds")
        if storm is not None:
            parts.append(f"all admitted in {storm.format('.1f')} s")
        failed = sum(one.values("handshakes_failed")) + sum(one.values("lost"))
        if failed:
            parts.append(f"{failed:g} handshakes failed or connections lost")
        one.note = "; ".join(parts)


def fanin(settings: Settings) -> Outcome:
    """2 and ``fanin_connections`` (10,000) slaves: throughput ratio, idle CPU, RSS, and the storm's admission."""
    name = "4 fan-in"
    many = settings.sizes.fanin_connections
    few = settings.workers
    systems = _systems(settings, name, (few, many))
    k = str(many)
    targets = [
        ratio(f"4. throughput {many:,} vs {few} slaves", k, str(few), "tasks_per_s", 0.5),
        single(f"4. idle master CPU with {many:,} slaves (% of a core)", k, "cpu_percent", 2, "<"),
        single(f"4. master peak RSS with {many:,} slaves (MB)", k, "peak_rss_mb", 300),
        single(
            f"4. storm: {many:,} slaves in {many / STORM_RATE:g} s, handshakes refused or timed out",
            k,
            "handshakes_failed",
            0,
        ),
        single(f"4. storm: admission p99, connect() to Welcome (s), {many:,} slaves", k, "admission_p99_s", None),
        Target(
            f"4. master RSS per slave (KB), {many:,} vs {few} slaves", functools.partial(_per_slave, k, str(few)), None
        ),
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    _notes(series)
    return series, checks


def _per_slave(many: str, few: str, runs: Mapping[str, Row]) -> float | None:
    a, b = runs.get(many), runs.get(few)
    if a is None or b is None or a.peak_rss_mb is None or b.peak_rss_mb is None:
        return None
    return (a.peak_rss_mb - b.peak_rss_mb) * 1024 / (int(many) - int(few))


def fanin_curve(settings: Settings) -> Outcome:
    """Throughput, idle CPU and memory against the number of slaves, for docs/scaling.md (information only)."""
    name = "4c fan-in curve"
    quick = settings.sizes.fanin_connections < CURVE[-1] // 10
    counts = sorted({settings.workers, *((10, 20) if quick else CURVE[1:])})
    systems = _systems(settings, name, counts)
    base = str(counts[0])
    targets = [
        ratio(f"4c. throughput {n:,} vs {counts[0]} slaves", str(n), base, "tasks_per_s", None) for n in counts[1:]
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    _notes(series)
    return series, checks


def fanin_tree(settings: Settings) -> Outcome:
    """The same slaves under one master and under a two-level tree: throughput and the top master's CPU per task."""
    name = "4t fan-in tree"
    sizes = settings.sizes
    run = FaninRun(sizes.fanin_connections, sizes.fanin_tasks, sizes.warmup_tasks, 0.0, FOREMEN)
    n = f"{run.connections:,}"
    flat_label = f"one master, {n} slaves ({FOREMEN} load generators)"
    tree_label = f"top master, {FOREMEN} foremen, {n} slaves under them, {TREE_BATCH:,} tasks per relay"
    systems = [
        System("flat", flat_label, functools.partial(_measure, settings, name, flat_label, run)),
        System("tree", tree_label, functools.partial(_measure, settings, name, tree_label, run, tree=True)),
    ]
    targets = [
        ratio(f"4t. throughput, tree vs one master ({n} slaves)", "tree", "flat", "tasks_per_s", None),
        single("4t. top master CPU per leaf task, one master (µs)", "flat", "master_cpu_us_per_task", None),
        single("4t. top master CPU per leaf task, tree (µs)", "tree", "master_cpu_us_per_task", None),
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    _notes(series)
    return series, checks

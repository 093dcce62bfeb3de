"""The scenarios: each measures mwpy and its peers in rounds and checks the targets (issues 5 and 13).

**Rounds** (issue 13). A scenario is a list of :class:`System` and a list of
:class:`Target`. :func:`run_rounds` runs ``--rounds`` rounds; a round runs every
system once, back to back, in the scenario's order in even rounds and in the
reverse order in odd ones (so a system that gains from going first or last,
or from a drift in the machine's load, gains in half the rounds only). Each
target is evaluated *within* each round, from that round's runs alone, and
judged by the median of its per-round values, reported with their min and max.
No figure is a best-of-N, and no ratio divides figures from different rounds.

**Adding a scenario.** Write a function ``(settings) -> Outcome`` that builds
its systems (``System(key, label, measure)``, where ``measure`` returns one
:class:`~benchmarks.common.Row`, usually through :func:`_mwpy` or
:func:`_peer`) and targets (:func:`ratio` between two systems' figures,
:func:`single` for one system's figure, or a :class:`Target` with any function
of one round's runs), returns ``run_rounds(settings, name, systems, targets)``,
and add it to :data:`SCENARIOS`. ``python -m benchmarks`` then prints it, puts
every round's raw runs in ``--json`` and runs it with ``all``.

A peer that is not installed or fails becomes a row that says so (and its
checks read "not measured") rather than stopping the run: the other figures
are still worth having.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import condor, overseer_queries, peers
from benchmarks.common import (
    BenchError,
    Check,
    Checkout,
    Row,
    Series,
    Settings,
    Spread,
    add_master_cpu,
    figure,
    latency_summary,
    run_child_json,
)
from benchmarks.mwpy_runner import MwpyRun, run_mwpy

Outcome = tuple[list[Series], list[Check]]

PEER_LABELS = {
    "processpool-submit": "ProcessPoolExecutor submit() per task",
    "processpool-1": "ProcessPoolExecutor chunksize=1",
    "processpool-100": "ProcessPoolExecutor chunksize=100",
    "dask": "dask.distributed LocalCluster",
    "parsl": "Parsl HighThroughputExecutor",
    "floor": "bare pickle echo, loopback TCP (floor)",
    "floor-event-loop": "same echo waiting in epoll/poll (event-loop floor)",
    "floor-spin": "same echo, both sides busy-polling (spinning floor)",
    "floor-frames": "spinning echo over mwpy's sealed frames (frames floor)",
}

#: Figures of a series the JSON summarises (median, min, max, values); the runs carry everything else.
SUMMARY_FIELDS = (
    "tasks_per_s",
    "seconds",
    "p50_us",
    "p99_us",
    "peak_rss_mb",
    "cpu_percent",
    "master_cpu_us_per_task",
    "startup_seconds",
    "sampled_peak_rss_mb",
    "events_bytes",
    "first_result_s",
    "shutdown_s",
    "total_s",
    "hops_per_s",
    "rss_growth_mb",
    "master_mb",
)


def _peer(settings: Settings, scenario: str, peer: str, params: dict[str, Any], label: str | None = None) -> Row:
    """Measure one peer in a child process, or a row saying why it was not measured."""
    label = label or PEER_LABELS[peer]
    if peer not in settings.peers:
        return Row(scenario, label, skipped="not selected (--peers)")
    why = peers.available(peer)
    if why is not None:
        return Row(scenario, label, skipped=why)
    settings.log(f"{scenario}: {label}")
    argv = [
        settings.python,
        "-m",
        "benchmarks.peers",
        json.dumps({**params, "peer": peer, "workers": settings.workers}),
    ]
    try:
        report = run_child_json(argv, timeout=900, name=peer)
    except BenchError as exc:
        return Row(scenario, label, skipped=f"failed: {exc}")
    return Row(
        scenario,
        label,
        tasks=report.get("tasks", report.get("round_trips")),
        seconds=report.get("seconds"),
        tasks_per_s=report.get("tasks_per_s"),
        p50_us=report.get("p50_us"),
        p99_us=report.get("p99_us"),
        peak_rss_mb=report.get("peak_rss_mb"),
        extra=report,
    )


def _mwpy(settings: Settings, scenario: str, label: str, run: MwpyRun) -> Row:
    """Measure one mwpy configuration, or a row saying it failed."""
    settings.log(f"{scenario}: {label}")
    try:
        report = run_mwpy(settings, run)
    except BenchError as exc:
        print(f"[bench] {scenario} {label} failed: {exc}", file=sys.stderr)
        return Row(scenario, label, skipped=f"failed: {exc}")
    round_trips = report.pop("round_trips_s", None)
    if round_trips:
        report.update(round_trips=len(round_trips), **latency_summary(round_trips))
    add_master_cpu(report)
    return Row(
        scenario,
        label,
        tasks=report.get("tasks", report.get("round_trips")),
        seconds=report.get("seconds"),
        tasks_per_s=report.get("tasks_per_s"),
        p50_us=report.get("p50_us"),
        p99_us=report.get("p99_us"),
        peak_rss_mb=report.get("peak_rss_mb"),
        cpu_percent=report.get("idle_cpu_percent"),
        extra=report,
    )


Measurement = Callable[[], Row]


@dataclasses.dataclass(frozen=True)
class System:
    """One thing a scenario measures once per round: ``key`` names it to the targets, ``label`` in the table."""

    key: str
    label: str
    measure: Measurement


#: A target's value in one round, from that round's runs by system key; ``None`` when a side is missing.
RoundValue = Callable[[Mapping[str, Row]], "float | None"]


@dataclasses.dataclass(frozen=True)
class Target:
    """A figure computed within each round and judged by its median over rounds.

    ``op`` is how the median must compare with ``bound`` (``None``: reported for information).
    """

    name: str
    value: RoundValue
    bound: float | None
    op: str = "≥"

    def bound_text(self) -> str:
        return "info" if self.bound is None else f"{self.op} {self.bound:g}"

    def judge(self, median: float) -> bool | None:
        if self.bound is None:
            return None
        bound = self.bound
        return {"≥": median >= bound, "≤": median <= bound, "<": median < bound, "=": median == bound}[self.op]


def _figure_of(runs: Mapping[str, Row], key: str, field: str) -> float | None:
    row = runs.get(key)
    if row is None or row.skipped:
        return None
    return figure(row, field)


def ratio(name: str, top: str, bottom: str, field: str, bound: float | None, *, op: str = "≥") -> Target:
    """``top``'s ``field`` over ``bottom``'s, both from the same round."""

    def value(runs: Mapping[str, Row]) -> float | None:
        a, b = _figure_of(runs, top, field), _figure_of(runs, bottom, field)
        return None if a is None or b is None or b == 0 else a / b

    return Target(name, value, bound, op)


def single(name: str, key: str, field: str, bound: float | None, op: str = "≤") -> Target:
    """One system's ``field`` in each round (a figure with a bound of its own, such as µs of CPU per task)."""
    return Target(name, lambda runs: _figure_of(runs, key, field), bound, op)


def evaluate(target: Target, rounds: Sequence[Mapping[str, Row]]) -> Check:
    """The target's value in every round where it could be computed, judged by their median."""
    values: list[float] = []
    used: list[int] = []
    for number, runs in enumerate(rounds):
        value = target.value(runs)
        if value is not None:
            values.append(value)
            used.append(number)
    if not values:
        return Check(target.name, None, target.bound_text(), None, "not measured")
    median = statistics.median(values)
    detail = "per round: " + ", ".join(format(v, ".3g") for v in values) if len(values) > 1 else ""
    if len(values) < len(rounds):
        missing = f"{len(rounds) - len(values)} of {len(rounds)} rounds lack a side"
        detail = f"{detail}; {missing}" if detail else missing
    return Check(target.name, median, target.bound_text(), target.judge(median), detail, values, used)


def _not_again(earlier: list[Row]) -> bool:
    """A system skipped because not selected or not installed: asking again in the next round is pointless."""
    return bool(earlier) and all(row.skipped and not row.skipped.startswith("failed") for row in earlier)


def run_rounds(settings: Settings, scenario: str, systems: Sequence[System], targets: Sequence[Target]) -> Outcome:
    """Run ``settings.rounds`` rounds of ``systems`` (order reversed every other round) and evaluate ``targets``."""
    keys = [system.key for system in systems]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{scenario}: duplicate system keys {keys}")
    runs: dict[str, list[Row]] = {key: [] for key in keys}
    rounds: list[dict[str, Row]] = []
    for number in range(settings.rounds):
        order = list(systems) if number % 2 == 0 else list(reversed(systems))
        if settings.rounds > 1:
            settings.log(f"{scenario}: round {number + 1} of {settings.rounds}")
        this_round: dict[str, Row] = {}
        for system in order:
            if _not_again(runs[system.key]):
                continue
            row = system.measure()
            row.system = system.label
            row.round, row.position = number, len(this_round)
            runs[system.key].append(row)
            this_round[system.key] = row
        rounds.append(this_round)
    series = [Series(scenario, system.label, system.key, runs[system.key]) for system in systems]
    for one in series:
        one.note = _note(one, settings.rounds)
    return series, [evaluate(target, rounds) for target in targets]


def _note(series: Series, rounds: int) -> str:
    """What the table says beside a series' figures: peers' start-up, and rounds that failed."""
    parts = []
    startup = series.spread("startup_seconds")
    if startup is not None:
        parts.append(f"start-up {startup.format('.1f')} s, not counted")
    failed = [row for row in series.runs if row.skipped and row.skipped.startswith("failed")]
    if failed and series.valid:
        parts.append(f"failed in {len(failed)} of {rounds} rounds")
    return "; ".join(parts)


def _once(run: Callable[[Settings], tuple[list[Row], list[Check]]]) -> Callable[[Settings], Outcome]:
    """A scenario that measures each system once (scenario 5: plain Condor jobs take minutes) as one round."""

    @functools.wraps(run)
    def scenario(settings: Settings) -> Outcome:
        rows, checks = run(settings)
        series: list[Series] = []
        for row in rows:
            row.round, row.position = 0, len(series)
            series.append(Series(row.scenario, row.system, row.system, [row], row.note))
        return series, checks

    return scenario


# ---------------------------------------------------------------------- 1. throughput


def throughput(settings: Settings) -> Outcome:
    """No-op throughput: mwpy (default, chunks of 100, frames of 100) against ProcessPoolExecutor, dask, Parsl.

    ``ProcessPoolExecutor.map(chunksize=100)`` makes one task of 100 calls; its
    like is ``mw.map(..., chunksize=100)``, which the target compares. A task per
    call with task/result frames of 100 (``--mw-slave-task-group 100``) is shown too.
    """
    sizes = settings.sizes
    name = "1 throughput"
    n = sizes.throughput_tasks
    params = {"mode": "throughput", "tasks": n, "warmup": sizes.warmup_tasks}
    default_run = MwpyRun(params, slaves=settings.workers)
    grouped_run = MwpyRun(params, slaves=settings.workers, task_group=100, result_group=100)
    chunked_run = MwpyRun({**params, "chunksize": 100}, slaves=settings.workers)
    slow = {**params, "tasks": sizes.slow_peer_tasks, "warmup": min(sizes.warmup_tasks, 500)}

    def peer(key: str, peer_name: str, peer_params: dict[str, Any]) -> System:
        label = PEER_LABELS[peer_name]
        return System(key, label, functools.partial(_peer, settings, name, peer_name, peer_params))

    def mwpy(key: str, label: str, run: MwpyRun) -> System:
        return System(key, label, functools.partial(_mwpy, settings, name, label, run))

    systems = [
        mwpy("default", "mwpy default settings", default_run),
        mwpy("chunk100", "mwpy map(chunksize=100)", chunked_run),
        mwpy("group100", "mwpy task/result group 100", grouped_run),
        peer("submit", "processpool-submit", params),
        peer("pool100", "processpool-100", params),
        peer("dask", "dask", slow),
        peer("parsl", "parsl", slow),
    ]  # fmt: skip
    targets = [
        ratio("1. no-op, mwpy default vs ProcessPool submit() per task", "default", "submit", "tasks_per_s", 5),
        ratio("1. no-op, mwpy chunksize=100 vs ProcessPool chunksize=100", "chunk100", "pool100", "tasks_per_s", 0.4),
        ratio("1. no-op, mwpy frames of 100 vs ProcessPool chunksize=100", "group100", "pool100", "tasks_per_s", None),
        ratio("1. no-op, mwpy default vs dask", "default", "dask", "tasks_per_s", 80),
        ratio("1. no-op, mwpy default vs Parsl HTEX", "default", "parsl", "tasks_per_s", 40),
        single("1. master CPU per task, mwpy default (µs)", "default", "master_cpu_us_per_task", 15),
        single("1. master CPU per task, mwpy group 100 (µs)", "group100", "master_cpu_us_per_task", None),
        single("1. master CPU per call, mwpy chunksize=100 (µs)", "chunk100", "master_cpu_us_per_task", None),
    ]
    outcome = run_rounds(settings, name, systems, targets)
    if settings.profile_dir is not None:
        settings.log(f"{name}: mwpy under cProfile (not in the table)")
        run_mwpy(settings, dataclasses.replace(default_run, profile_name="throughput-default"))
        run_mwpy(settings, dataclasses.replace(grouped_run, profile_name="throughput-group100"))
    return outcome


# ---------------------------------------------------------------------- 2. latency


def latency(settings: Settings) -> Outcome:
    """One task in flight: round-trip p50/p99 of mwpy and the peers beside a bare pickle echo."""
    sizes = settings.sizes
    name = "2 latency"
    warmup = max(10, sizes.latency_round_trips // 20)
    params = {"mode": "latency", "round_trips": sizes.latency_round_trips, "warmup": warmup}
    slow = {**params, "round_trips": sizes.slow_peer_round_trips, "warmup": max(5, sizes.slow_peer_round_trips // 10)}
    run = MwpyRun(params, slaves=settings.workers)

    def peer(key: str, peer_name: str, peer_params: dict[str, Any], label: str | None = None) -> System:
        label = label or PEER_LABELS[peer_name]
        return System(key, label, functools.partial(_peer, settings, name, peer_name, peer_params, label))

    systems = [
        peer("floor", "floor", params),
        peer("event-floor", "floor-event-loop", params),
        peer("spin-floor", "floor-spin", params),
        peer("frames-floor", "floor-frames", params),
        System("mwpy", "mwpy default", functools.partial(_mwpy, settings, name, "mwpy default", run)),
        peer("pool", "processpool-1", params, "ProcessPoolExecutor submit().result()"),
        peer("dask", "dask", slow),
        peer("parsl", "parsl", slow),
    ]
    targets = [
        ratio("2. latency p50, mwpy vs bare pickle echo", "mwpy", "floor", "p50_us", 2.5, op="≤"),
        ratio("2. latency p99, mwpy vs bare pickle echo's p99", "mwpy", "floor", "p99_us", 4, op="≤"),
        ratio("2. latency p50, mwpy vs spinning echo", "mwpy", "spin-floor", "p50_us", 3, op="≤"),
        ratio("2. latency p99, mwpy vs spinning echo's p99", "mwpy", "spin-floor", "p99_us", 5, op="≤"),
        ratio("2. latency p50, event-loop floor vs bare pickle echo", "event-floor", "floor", "p50_us", None),
        ratio("2. latency p50, mwpy vs event-loop floor", "mwpy", "event-floor", "p50_us", None),
        ratio("2. latency p50, frames floor vs spinning echo", "frames-floor", "spin-floor", "p50_us", None),
        ratio("2. latency p50, mwpy vs frames floor", "mwpy", "frames-floor", "p50_us", None),
        single("2. master CPU per round trip, mwpy (µs)", "mwpy", "master_cpu_us_per_task", None),
    ]
    outcome = run_rounds(settings, name, systems, targets)
    if settings.profile_dir is not None:
        settings.log(f"{name}: mwpy under cProfile (not in the table)")
        run_mwpy(settings, dataclasses.replace(run, profile_name="latency"))
    return outcome


# ---------------------------------------------------------------------- 3. streaming memory


def streaming(settings: Settings) -> Outcome:
    """Master peak RSS with tasks fed through target numbers, at two sizes: it must stay flat."""
    sizes = settings.sizes
    name = "3 streaming"
    systems = []
    for key, n in (("small", sizes.streaming_small), ("large", sizes.streaming_large)):
        run = MwpyRun(
            {"mode": "throughput", "tasks": n, "warmup": sizes.warmup_tasks, "target": 10_000},
            slaves=settings.workers,
            sample_rss=True,
        )
        label = f"mwpy default, {n:,} tasks, target number 10,000"
        systems.append(System(key, label, functools.partial(_mwpy, settings, name, label, run)))
    targets = [
        single(f"3. master peak RSS at {sizes.streaming_large:,} tasks (MB)", "large", "peak_rss_mb", 100),
        ratio(
            f"3. peak RSS {sizes.streaming_large:,} vs {sizes.streaming_small:,} tasks",
            "large",
            "small",
            "peak_rss_mb",
            1.10,
            op="≤",
        ),
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    note_spread(series, "sampled_peak_rss_mb", lambda sampled: f"psutil-sampled peak {sampled.format('.1f')} MB")
    return series, checks


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def note_spread(series: Sequence[Series], field: str, say: Callable[[Spread], str]) -> None:
    """Add to each series' note what ``say`` makes of its ``field`` over the rounds, where it has one."""
    for one in series:
        spread = one.spread(field)
        if spread is not None:
            one.note = _join(one.note, say(spread))


# ---------------------------------------------------------------------- 4. fan-in


def fanin(settings: Settings) -> Outcome:
    """Scenario 4 lives in benchmarks/fanin.py, which builds on this module: imported when it runs."""
    from benchmarks import fanin as scenario  # noqa: PLC0415 - a cycle at import time otherwise

    return scenario.fanin(settings)


def fanin_curve(settings: Settings) -> Outcome:
    """The fan-in curve for docs/scaling.md (benchmarks/fanin.py)."""
    from benchmarks import fanin as scenario  # noqa: PLC0415 - a cycle at import time otherwise

    return scenario.fanin_curve(settings)


def fanin_tree(settings: Settings) -> Outcome:
    """One master against a two-level tree of masters (benchmarks/fanin.py, benchmarks/tree_program.py)."""
    from benchmarks import fanin as scenario  # noqa: PLC0415 - a cycle at import time otherwise

    return scenario.fanin_tree(settings)


# ---------------------------------------------------------------------- E. event log


def event_log(settings: Settings) -> Outcome:
    """What the event log (``--mw-events FILE``) costs: default throughput with and without it, same round."""
    sizes = settings.sizes
    name = "E event log"
    params = {"mode": "throughput", "tasks": sizes.throughput_tasks, "warmup": sizes.warmup_tasks}
    without = MwpyRun(params, slaves=settings.workers)
    with_log = MwpyRun(params, slaves=settings.workers, events=True)
    systems = [
        System(key, label, functools.partial(_mwpy, settings, name, label, run))
        for key, label, run in (
            ("without", "mwpy default, no event log", without),
            ("with", "mwpy default, --mw-events FILE", with_log),
        )
    ]

    def cpu_added(runs: Mapping[str, Row]) -> float | None:
        a, b = _figure_of(runs, "with", "master_cpu_us_per_task"), _figure_of(runs, "without", "master_cpu_us_per_task")
        return None if a is None or b is None else a - b

    targets = [
        ratio("E. event log: throughput with / without --mw-events", "with", "without", "tasks_per_s", 0.95),
        ratio("E. event log: master CPU per task with / without", "with", "without", "master_cpu_us_per_task", None),
        Target("E. event log: master CPU added per task (µs)", cpu_added, None),
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    for one in series:
        size = one.spread("events_bytes")
        if size is not None and one.valid and one.valid[0].tasks:
            # Warm-up tasks are logged too: bytes per task over all the tasks the master ran.
            per_task = [v / (sizes.throughput_tasks + sizes.warmup_tasks) for v in one.values("events_bytes")]
            one.note = _join(one.note, f"log {size.median / 1e6:.1f} MB, {statistics.median(per_task):.0f} B per task")
    return series, checks


# ---------------------------------------------------------------------- B. baseline


def baseline(settings: Settings) -> Outcome:
    """This checkout against ``--baseline PATH``: throughput (default, group 100) and latency, new / baseline.

    Each measurement runs with the baseline's interpreter and program and then
    with this checkout's (the other way round in odd rounds), so a ratio never
    spans two rounds: it shows whether a restructuring regressed, on a busy
    machine too. The bounds (5 %) are the harness's noise allowance, not an
    issue's target.
    """
    sizes = settings.sizes
    name = "B baseline"
    base = settings.baseline
    if base is None:
        reason = "no --baseline PATH given"
        return [Series(name, "baseline", "baseline", [Row(name, "baseline", skipped=reason, round=0)])], []
    throughput_params = {"mode": "throughput", "tasks": sizes.throughput_tasks, "warmup": sizes.warmup_tasks}
    warmup = max(10, sizes.latency_round_trips // 20)
    latency_params = {"mode": "latency", "round_trips": sizes.latency_round_trips, "warmup": warmup}
    grouped = MwpyRun(throughput_params, slaves=settings.workers, task_group=100, result_group=100)
    measurements = [
        ("default", "throughput, default", MwpyRun(throughput_params, slaves=settings.workers)),
        ("group100", "throughput, group 100", grouped),
        ("latency", "latency", MwpyRun(latency_params, slaves=settings.workers)),
    ]
    script = {"tasks": sizes.script_tasks, "task_seconds": sizes.script_task_seconds, "system": "mwpy"}
    systems = []
    for side, checkout in (("new", None), ("base", base)):
        where = "this checkout" if checkout is None else f"baseline {checkout.root}"
        for key, what, run in measurements:
            label = f"mwpy {what}, {where}"
            side_run = dataclasses.replace(run, checkout=checkout)
            systems.append(System(f"{key}-{side}", label, functools.partial(_mwpy, settings, name, label, side_run)))
        label = f"mwpy.Executor start-up (scenario 7's script), {where}"
        start = functools.partial(_short_script, settings, name, label, script, checkout)
        systems.append(System(f"startup-{side}", label, start))
    targets = [
        ratio("B. new / baseline throughput, default", "default-new", "default-base", "tasks_per_s", 0.95),
        ratio("B. new / baseline throughput, group 100", "group100-new", "group100-base", "tasks_per_s", 0.95),
        ratio("B. new / baseline latency p50", "latency-new", "latency-base", "p50_us", 1.05, op="≤"),
        ratio("B. new / baseline latency p99", "latency-new", "latency-base", "p99_us", None),
        ratio(
            "B. new / baseline master CPU per task, default",
            "default-new",
            "default-base",
            "master_cpu_us_per_task",
            1.05,
            op="≤",
        ),
        ratio(
            "B. new / baseline master CPU per task, group 100",
            "group100-new",
            "group100-base",
            "master_cpu_us_per_task",
            None,
        ),
        ratio(
            "B. new / baseline master CPU per round trip", "latency-new", "latency-base", "master_cpu_us_per_task", None
        ),
        ratio(
            "B. new / baseline start-up, first result", "startup-new", "startup-base", "first_result_s", 1.05, op="≤"
        ),
        ratio("B. new / baseline start-up, whole script", "startup-new", "startup-base", "total_s", None),
    ]
    return run_rounds(settings, name, systems, targets)


# ---------------------------------------------------------------------- 6. mwpy.Executor


EXECUTOR_PROGRAM = Path(__file__).with_name("executor_program.py")
STARTUP_PROGRAM = Path(__file__).with_name("startup_program.py")


def _script(
    settings: Settings,
    scenario: str,
    label: str,
    program: Path,
    params: dict[str, Any],
    *,
    checkout: Checkout | None = None,
) -> dict[str, Any]:
    """Run a benchmark script by path in a child process, as a user runs one; its JSON report.

    ``checkout``: another tree's interpreter and environment run it (``--baseline``); default this one.
    """
    settings.log(f"{scenario}: {label}")
    python, env = (settings.python, None) if checkout is None else (checkout.python, checkout.env())
    argv = [python, str(program), json.dumps({**params, "workers": settings.workers})]
    return run_child_json(argv, timeout=900, name=program.stem, env=env)


def _script_row(settings: Settings, scenario: str, label: str, program: Path, params: dict[str, Any]) -> Row:
    """A plain script's run as a row (its tasks, time, rate, peak RSS; all it reported in ``extra``), or a row
    saying it failed."""
    try:
        report = _script(settings, scenario, label, program, params)
    except BenchError as exc:
        return Row(scenario, label, skipped=f"failed: {exc}")
    return Row(
        scenario,
        label,
        tasks=report["tasks"],
        seconds=report["seconds"],
        tasks_per_s=report["tasks_per_s"],
        peak_rss_mb=report["peak_rss_mb"],
        extra=report,
    )


def _executor(settings: Settings, scenario: str, label: str, params: dict[str, Any]) -> Row:
    """Measure ``mwpy.Executor.map`` in a child process (a plain script), or a row saying it failed."""
    row = _script_row(settings, scenario, label, EXECUTOR_PROGRAM, params)
    if row.skipped is None:
        row.note = f"start-up {row.extra['startup_seconds']:.1f} s, not counted"
    return row


def executor(settings: Settings) -> Outcome:
    """``mwpy.Executor.map`` over no-op tasks against the master algorithm API, same slaves, same round.

    The Executor pays for a thread hand-over per batch of inputs and a second
    thread owning the engine, which shares the GIL with the caller's; these
    ratios say what that costs (CPU per task: the whole process, both threads).
    """
    name = "6 executor"
    n = settings.sizes.throughput_tasks
    params = {"mode": "throughput", "tasks": n, "warmup": settings.sizes.warmup_tasks}
    executor_label = f"mwpy.Executor.map, {settings.workers} local slaves"
    master_label = "mwpy master algorithm API (default)"
    systems = [
        System("executor", executor_label, functools.partial(_executor, settings, name, executor_label, params)),
        System(
            "master",
            master_label,
            functools.partial(_mwpy, settings, name, master_label, MwpyRun(params, slaves=settings.workers)),
        ),
    ]
    targets = [
        ratio("6. no-op, mwpy.Executor.map vs master algorithm API", "executor", "master", "tasks_per_s", 0.8),
        ratio("6. master CPU per task, Executor / master API", "executor", "master", "master_cpu_us_per_task", None),
    ]
    return run_rounds(settings, name, systems, targets)


# ---------------------------------------------------------------------- 7. a short script's start-up


def _short_script(
    settings: Settings, scenario: str, label: str, params: dict[str, Any], checkout: Checkout | None = None
) -> Row:
    """Run ``startup_program.py`` (``checkout``'s own, default this one's) and time the whole process, start to
    exit, or a row saying it failed."""
    program = STARTUP_PROGRAM if checkout is None else checkout.startup_program
    _compile_once(checkout or Checkout.this())
    began = time.perf_counter()
    try:
        report = _script(settings, scenario, label, program, params, checkout=checkout)
    except BenchError as exc:
        return Row(scenario, label, skipped=f"failed: {exc}")
    report["total_s"] = time.perf_counter() - began
    return Row(scenario, label, tasks=report["tasks"], seconds=report["total_s"], extra=report)


@functools.cache
def _compile_once(checkout: Checkout) -> None:
    """Compile the checkout's mwpy to bytecode once, as ``pip install`` does: a start-up measured with
    ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` (an editable install) compiles every module again in
    the caller and in each slave, which no installed mwpy does (and the standard library never does)."""
    argv = [checkout.python, "-m", "compileall", "-q", str(checkout.root / "mwpy")]
    if subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode != 0:
        raise BenchError(f"{checkout.root}: python -m compileall mwpy failed")


#: What scenario 7's table notes say of each run (the table's columns are for task streams).
SCRIPT_FIGURES = (("whole script", "total_s"), ("first result", "first_result_s"), ("shutdown", "shutdown_s"))


def startup(settings: Settings) -> Outcome:
    """Issue 21 item 4: a short script with ``mwpy.Executor`` and with ``ProcessPoolExecutor``, same round.

    The same script (``startup_program.py``: a ``with`` block, ``script_tasks``
    calls that sleep, every result) runs once with each executor per round.
    The targets are the issues': the first result within 0.3 s and within 1.5
    times that of a ProcessPoolExecutor with the spawn start method (whose
    workers start as mwpy's slaves do, a fresh Python each), the whole script
    within 1.1 times the default ProcessPoolExecutor's, the ``with`` block left
    within 0.1 s; the other ratios are given for information. Both sides run
    compiled bytecode, as installed packages do (:func:`_compile_once`).
    """
    name = "7 start-up"
    sizes = settings.sizes
    params = {"tasks": sizes.script_tasks, "task_seconds": sizes.script_task_seconds}
    work = sizes.script_tasks * sizes.script_task_seconds / settings.workers
    systems = [
        System(key, label, functools.partial(_short_script, settings, name, label, {**params, "system": system}))
        for key, system, label in (
            ("pool", "processpool", f"ProcessPoolExecutor({settings.workers}), {work:.1f} s script"),
            ("spawn", "processpool-spawn", f"ProcessPoolExecutor({settings.workers}, spawn), {work:.1f} s script"),
            ("mwpy", "mwpy", f"mwpy.Executor({settings.workers}), {work:.1f} s script"),
        )
    ]
    targets = [
        single("7. short script: first result, mwpy.Executor (s)", "mwpy", "first_result_s", 0.3),
        ratio("7. short script: first result, mwpy.Executor / ProcessPool", "mwpy", "pool", "first_result_s", None),
        ratio("7. short script: whole script, mwpy.Executor / ProcessPool", "mwpy", "pool", "total_s", 1.1, op="≤"),
        ratio(
            "7. short script: first result, mwpy.Executor / ProcessPool(spawn)",
            "mwpy",
            "spawn",
            "first_result_s",
            1.5,
            op="≤",
        ),
        ratio("7. short script: whole script, mwpy.Executor / ProcessPool(spawn)", "mwpy", "spawn", "total_s", None),
        single("7. short script: leaving the with block, mwpy.Executor (s)", "mwpy", "shutdown_s", 0.1),
        ratio(
            "7. short script: leaving the with block, mwpy.Executor / ProcessPool", "mwpy", "pool", "shutdown_s", None
        ),
    ]
    series, checks = run_rounds(settings, name, systems, targets)
    for one in series:
        figures = [(what, one.spread(field)) for what, field in SCRIPT_FIGURES]
        one.note = _join(one.note, ", ".join(f"{what} {spread.format('.2f')} s" for what, spread in figures if spread))
    return series, checks


# ---------------------------------------------------------------------- 8. one large array, shared (issue 22)

SHARED_PROGRAM = Path(__file__).with_name("shared_program.py")


def _shared_run(settings: Settings, scenario: str, label: str, params: dict[str, Any]) -> Row:
    """Run ``shared_program.py`` once (mwpy or dask, one mode), or a row saying it failed or is not installed."""
    if params["system"] == "dask" and importlib.util.find_spec("distributed") is None:
        return Row(scenario, label, skipped="dask.distributed is not installed (the bench extra)")
    row = _script_row(settings, scenario, label, SHARED_PROGRAM, params)
    if row.skipped is None:
        row.extra["rss_over_array_mb"] = row.extra["peak_rss_mb"] - row.extra["array_mb"]
    return row


def shared(settings: Settings) -> Outcome:
    """Issue 22: short tasks that all need one large numpy array, same round.

    Per task, once the array is on the slaves: ``ex.share(arr)`` against the
    same run with a tiny argument and against dask's ``scatter(broadcast=True)``.
    The one-time cost of getting it onto every slave is a row of its own (mwpy
    against dask). The keyword form ``ex.map(f, xs, big=arr)``, which shares
    inside the map, against ``share`` plus its map, at the keyword target's
    size. Bytes sent are the file service's counters, over slaves times
    the object's file.
    """
    name = "8 shared"
    sizes = settings.sizes
    big = {"megabytes": sizes.shared_megabytes, "tasks": sizes.shared_tasks}
    small = {"megabytes": sizes.kwargs_megabytes, "tasks": sizes.kwargs_tasks}
    runs = (
        ("tiny", "mwpy", "tiny", big, f"mwpy.Executor, tiny argument, {sizes.shared_tasks} tasks"),
        ("share", "mwpy", "share", big, f"mwpy ex.share({sizes.shared_megabytes} MiB), {sizes.shared_tasks} tasks"),
        ("dask", "dask", "share", big, f"dask scatter(broadcast) {sizes.shared_megabytes} MiB"),
        ("share-kw", "mwpy", "share", small, f"mwpy ex.share({sizes.kwargs_megabytes} MiB), {sizes.kwargs_tasks}"),
        ("kwargs", "mwpy", "kwargs", small, f"mwpy ex.map(f, xs, big={sizes.kwargs_megabytes} MiB)"),
    )
    systems = [
        System(key, label, functools.partial(_shared_run, settings, name, label, {**p, "system": s, "mode": m}))
        for key, s, m, p, label in runs
    ]
    targets = [
        ratio("8. shared array: per task, share / tiny argument", "share", "tiny", "seconds", 1.2, op="≤"),
        ratio("8. shared array: per task, mwpy share / dask scatter", "share", "dask", "seconds", 0.5, op="≤"),
        single("8. shared array: one-time share to every slave (s), mwpy", "share", "share_seconds", None),
        single("8. shared array: one-time share to every worker (s), dask", "dask", "share_seconds", None),
        ratio("8. shared array: one-time share, mwpy / dask", "share", "dask", "share_seconds", None),
        ratio("8. shared array: map(big=arr) / share and map", "kwargs", "share-kw", "total_seconds", 1.1, op="≤"),
        single("8. shared array: bytes sent / (slaves * object), mwpy", "share", "copies_per_slave", 1.0, op="="),
        single("8. shared array: master peak RSS above the array (MiB)", "share", "rss_over_array_mb", 100.0, op="≤"),
    ]
    return run_rounds(settings, name, systems, targets)


# ---------------------------------------------------------------------- 9. large distinct arguments (issue 22)


def large_arguments(settings: Settings) -> Outcome:
    """Issue 22: ``mw.map`` over distinct 1 MB arguments; the master's peak RSS must stay under 1 GiB.

    Before issue 22 ``mw.map`` kept 10,000 tasks ahead whatever their size
    (a master grew to 6.2 GB); it now also stops at ``streams.WINDOW_BYTES``.
    """
    name = "9 large arguments"
    n = settings.sizes.large_argument_tasks
    label = f"mw.map, {n:,} distinct 1 MB arguments"
    params = {"mode": "large", "tasks": n, "argument_bytes": 1_000_000}
    run = MwpyRun(params, slaves=settings.workers, timeout=3600.0)
    systems = [System("mwpy", label, functools.partial(_mwpy, settings, name, label, run))]
    targets = [single("9. large arguments: master peak RSS (MiB)", "mwpy", "peak_rss_mb", 1024.0)]
    return run_rounds(settings, name, systems, targets)


# ---------------------------------------------------------------------- 10. dataflow


def dataflow(settings: Settings) -> Outcome:
    """Task graphs through futures as arguments, mwpy against dask (benchmarks/dataflow.py)."""
    from benchmarks import dataflow as scenario  # noqa: PLC0415 - a cycle at import time otherwise

    return scenario.dataflow(settings)


SCENARIOS: dict[str, Callable[[Settings], Outcome]] = {
    "throughput": throughput,
    "latency": latency,
    "streaming": streaming,
    "fanin": fanin,
    "fanin-curve": fanin_curve,
    "fanin-tree": fanin_tree,
    "condor": _once(condor.run),
    "overseer-queries": _once(overseer_queries.run),
    "events": event_log,
    "baseline": baseline,
    "executor": executor,
    "startup": startup,
    "shared": shared,
    "large-arguments": large_arguments,
    "dataflow": dataflow,
}

#: Scenarios that ``all`` leaves out unless their option is given (``baseline`` needs ``--baseline``).
NEEDS_OPTION = {"baseline": "--baseline"}
#: Scenarios that ``all`` leaves out: they run only when named (the fan-in curve takes minutes a round;
#: scenarios 8 and 9 move hundreds of MiB, even 100 GB; dask takes a minute a round of scenario 10).
ONLY_BY_NAME = frozenset({"fanin-curve", "fanin-tree", "shared", "large-arguments", "overseer-queries", "dataflow"})

"""``python -m benchmarks``: run the scenarios in rounds, print the table and the target checks.

Every figure is the median over ``--rounds`` rounds with its min-max, and
every ratio the median of ratios taken within one round (issue 13; see
:mod:`benchmarks.scenarios`). Exit status 0 when the harness ran (whatever
the figures), 2 on a usage error: the benchmark reports, it does not gate.
``--json`` keeps everything (machine, checkouts, settings, every round's raw
runs, every check's per-round values) so each figure can be re-derived.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import peers
from benchmarks.common import BenchError, Check, Checkout, Series, Settings, Sizes, Spread
from benchmarks.scenarios import NEEDS_OPTION, ONLY_BY_NAME, SCENARIOS, SUMMARY_FIELDS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="mwpy against ProcessPoolExecutor, dask.distributed and Parsl, side by side, in rounds.",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, "all"],
        help="scenario to run (repeatable; default: all, which includes baseline only with --baseline; "
        "--baseline alone runs baseline only)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes for every system (default 2)")
    parser.add_argument("--tasks", type=float, default=1.0, help="scale every task count by this factor")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument(
        "--rounds",
        "--repeat",
        dest="rounds",
        type=int,
        default=3,
        metavar="N",
        help="rounds: each runs every system of a scenario once, back to back, the order reversed every other "
        "round; figures are medians over rounds with min-max, ratios are taken within a round "
        "(default 3; --repeat is an alias)",
    )
    parser.add_argument(
        "--baseline",
        metavar="COMMIT|PATH",
        help="a commit of this repository (checked out once, with its own .venv, under "
        "~/.cache/mwpy-bench-baselines) or another mwpy checkout with its own .venv: the baseline scenario runs "
        "its mwpy and this one's in the same rounds and reports new / baseline (throughput, latency, master CPU "
        "per task, start-up)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(peers.REQUIRES),
        help=f"comma-separated peers to run (default: all of {','.join(peers.REQUIRES)})",
    )
    parser.add_argument(
        "--tree-leaves",
        type=int,
        metavar="N",
        help="leaf values of the dataflow scenario's tree reduction (default 10,000; dask takes minutes at 100,000)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write everything as JSON here")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="also run mwpy under cProfile in scenarios 1 and 2")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    unknown = set(args.peers.split(",")) - set(peers.REQUIRES) - {""}
    if unknown:
        parser.error(f"--peers: unknown {', '.join(sorted(unknown))}")
    if (
        args.workers < 1
        or args.tasks <= 0
        or args.rounds < 1
        or (args.tree_leaves is not None and args.tree_leaves < 1)
    ):
        parser.error("--workers, --tasks, --rounds and --tree-leaves must be positive")
    for name, option in NEEDS_OPTION.items():
        if name in (args.scenario or []) and getattr(args, option.removeprefix("--")) is None:
            parser.error(f"--scenario {name} needs {option} PATH")
    if args.baseline is not None:
        try:
            args.baseline = Checkout.baseline(args.baseline)
            # Before any measurement: a baseline that imports another tree's mwpy would make every ratio a lie.
            args.baseline_info = args.baseline.describe()
        except BenchError as exc:
            parser.error(f"--baseline: {exc}")
    return args


def scenario_names(args: argparse.Namespace) -> list[str]:
    """The scenarios to run: as chosen; ``all`` leaves out those whose option is missing; ``--baseline`` alone."""
    if args.scenario is None and args.baseline is not None:
        return ["baseline"]
    chosen = args.scenario or ["all"]
    if "all" not in chosen:
        return list(dict.fromkeys(chosen))
    return [
        name
        for name in SCENARIOS
        if name not in ONLY_BY_NAME
        if name not in NEEDS_OPTION or getattr(args, NEEDS_OPTION[name].removeprefix("--")) is not None
    ]


def machine() -> dict[str, Any]:
    """What the figures were measured on: they mean little without it."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for package in ("mwpy", "dask", "distributed", "parsl", "psutil"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    info["versions"] = versions
    return info


def _fmt(spread: Spread | None, spec: str) -> str:
    return "-" if spread is None else spread.format(spec)


def table(series: list[Series]) -> str:
    """The figures, one line per system and scenario: median [min-max] over the rounds that measured it."""
    header = ("scenario", "system", "rounds", "tasks", "tasks/s", "p50 µs", "p99 µs", "peak RSS MB", "CPU %", "note")
    lines = [header]
    for one in series:
        if one.skipped:
            skipped = f"skipped: {one.skipped.splitlines()[0]}"
            lines.append((one.scenario, one.system, "", "", "", "", "", "", "", skipped))
            continue
        tasks = one.valid[0].tasks
        lines.append(
            (
                one.scenario,
                one.system,
                str(len(one.valid)),
                "-" if tasks is None else format(tasks, ","),
                _fmt(one.spread("tasks_per_s"), ",.0f"),
                _fmt(one.spread("p50_us"), ",.1f"),
                _fmt(one.spread("p99_us"), ",.1f"),
                _fmt(one.spread("peak_rss_mb"), ".1f"),
                _fmt(one.spread("cpu_percent"), ".2f"),
                one.note,
            )
        )
    return _grid(lines, right={2, 3, 4, 5, 6, 7, 8})


def targets(checks: list[Check]) -> str:
    """Each target: median of its per-round values [min-max], the rounds it rests on, PASS / FAIL of the median."""
    lines = [("target", "median", "[min-max]", "rounds", "bound", "result", "detail")]
    for check in checks:
        verdict = {True: "PASS", False: "FAIL", None: "-"}[check.ok]
        if check.bound == "info" and check.measured is not None:
            verdict = "info"
        spread = check.spread
        median = "-" if check.measured is None else format(check.measured, ",.3g")
        span = "" if spread is None or spread.count < 2 else f"[{spread.low:,.3g}\N{EN DASH}{spread.high:,.3g}]"
        rounds = str(len(check.values)) if check.values else "0"
        lines.append((check.target, median, span, rounds, check.bound, verdict, check.detail))
    return _grid(lines, right={1, 3})


def _grid(lines: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    names = scenario_names(args)
    sizes = (Sizes.quick() if args.quick else Sizes()).scaled(args.tasks)
    if args.tree_leaves is not None:
        sizes = dataclasses.replace(sizes, dataflow_tree_leaves=args.tree_leaves)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        workers=args.workers,
        sizes=sizes,
        peers=frozenset(p for p in args.peers.split(",") if p),
        rounds=args.rounds,
        profile_dir=args.profile.resolve() if args.profile else None,
        verbose=not args.quiet,
        baseline=args.baseline,
    )
    this = Checkout.this()
    try:
        checkouts: dict[str, dict[str, Any]] = {"new": this.describe()}
    except BenchError as exc:  # the runs will say what fails; the report still says which tree it was
        checkouts = {"new": {"root": str(this.root), "python": this.python, "mwpy": None, "error": str(exc)}}
    if settings.baseline is not None:
        checkouts["baseline"] = args.baseline_info
        print(_describe_baseline(checkouts), file=sys.stderr)
    started = time.monotonic()
    series: list[Series] = []
    checks: list[Check] = []
    for name in names:
        new_series, new_checks = SCENARIOS[name](settings)
        series += new_series
        checks += new_checks
    elapsed = time.monotonic() - started
    print(table(series))
    print()
    print(targets(checks))
    print(
        f"\n{args.workers} workers for every system; {args.rounds} round{'s' if args.rounds > 1 else ''} "
        "(order reversed every other round); "
        "figures: median [min\N{EN DASH}max] over rounds; ratios: median of per-round ratios; "
        f"{elapsed:.0f} s in all."
    )
    if "baseline" in checkouts:
        print(_describe_baseline(checkouts))
    if args.profile is not None:
        _summarise_profiles(args.profile)
    if args.json is not None:
        report = {
            "command": shlex.join([sys.executable, "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]),
            "method": "rounds: every system of a scenario once per round, back to back, order reversed in odd "
            "rounds; each check's values are per round, judged by their median",
            "machine": machine(),
            "checkouts": checkouts,
            "sizes": dataclasses.asdict(sizes),
            "workers": args.workers,
            "rounds": args.rounds,
            "seconds": elapsed,
            "rows": [one.as_json(SUMMARY_FIELDS) for one in series],
            "checks": [{**dataclasses.asdict(c), "spread": c.spread and dataclasses.asdict(c.spread)} for c in checks],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def _describe_baseline(checkouts: dict[str, dict[str, Any]]) -> str:
    """Which two trees a baseline comparison ran: commits, local changes, where each interpreter found mwpy."""
    lines = []
    for side, info in checkouts.items():
        commit = (info.get("commit") or "unknown commit")[:12]
        changes = " with local changes" if info.get("changes") else ""
        lines.append(f"{side}: {info['root']} at {commit}{changes}; {info['python']} imports {info['mwpy']}")
    return "\n".join(lines)


def _summarise_profiles(directory: Path, top: int = 25) -> None:
    """Write the top functions (by own time) of each cProfile dump next to it, as text."""
    import io  # noqa: PLC0415 - only with --profile
    import pstats  # noqa: PLC0415

    for dump in sorted(directory.glob("*.prof")):
        text = io.StringIO()
        pstats.Stats(str(dump), stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
        dump.with_suffix(".txt").write_text(text.getvalue(), encoding="utf-8")
    print(f"cProfile dumps and their top {top} functions (*.txt) are in {directory}")


if __name__ == "__main__":
    sys.exit(main())

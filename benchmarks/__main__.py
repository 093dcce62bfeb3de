"""``python -m benchmarks``: run the scenarios of issue 5, print the table and the target checks.

Exit status 0 when the harness ran (whatever the figures), 2 on a usage
error: the benchmark reports, it does not gate. ``--json`` keeps everything
(machine, settings, rows, checks) for docs/performance.md or later comparison.
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
from benchmarks.common import Check, Row, Settings, Sizes
from benchmarks.scenarios import SCENARIOS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="mwpy against ProcessPoolExecutor, dask.distributed and Parsl, side by side.",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, "all"],
        help="scenario to run (repeatable; default: all)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes for every system (default 2)")
    parser.add_argument("--tasks", type=float, default=1.0, help="scale every task count by this factor")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run each speed measurement N times, interleaved, keep the best"
    )
    parser.add_argument(
        "--peers",
        default=",".join(peers.REQUIRES),
        help=f"comma-separated peers to run (default: all of {','.join(peers.REQUIRES)})",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write everything as JSON here")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="also run mwpy under cProfile in scenarios 1 and 2")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    unknown = set(args.peers.split(",")) - set(peers.REQUIRES) - {""}
    if unknown:
        parser.error(f"--peers: unknown {', '.join(sorted(unknown))}")
    if args.workers < 1 or args.tasks <= 0 or args.repeat < 1:
        parser.error("--workers, --tasks and --repeat must be positive")
    return args


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


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    """The figures, one line per system and scenario."""
    header = ("scenario", "system", "tasks", "tasks/s", "p50 µs", "p99 µs", "peak RSS MB", "CPU %", "note")
    lines = [header]
    for row in rows:
        if row.skipped:
            lines.append((row.scenario, row.system, "", "", "", "", "", "", f"skipped: {row.skipped.splitlines()[0]}"))
            continue
        lines.append(
            (
                row.scenario,
                row.system,
                _fmt(row.tasks, ","),
                _fmt(row.tasks_per_s, ",.0f"),
                _fmt(row.p50_us, ",.1f"),
                _fmt(row.p99_us, ",.1f"),
                _fmt(row.peak_rss_mb, ".1f"),
                _fmt(row.cpu_percent, ".2f"),
                row.note,
            )
        )
    return _grid(lines, right={2, 3, 4, 5, 6, 7})


def targets(checks: list[Check]) -> str:
    """Each target of issue 5 with the measured ratio and PASS / FAIL."""
    lines = [("target", "measured", "bound", "result", "detail")]
    for check in checks:
        verdict = {True: "PASS", False: "FAIL", None: "-"}[check.ok]
        if check.bound == "info" and check.measured is not None:
            verdict = "info"
        lines.append((check.target, _fmt(check.measured, ",.3g"), check.bound, verdict, check.detail))
    return _grid(lines, right={1})


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
    chosen = args.scenario or ["all"]
    names = list(SCENARIOS) if "all" in chosen else list(dict.fromkeys(chosen))
    sizes = (Sizes.quick() if args.quick else Sizes()).scaled(args.tasks)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        workers=args.workers,
        sizes=sizes,
        peers=frozenset(p for p in args.peers.split(",") if p),
        repeat=args.repeat,
        profile_dir=args.profile.resolve() if args.profile else None,
        verbose=not args.quiet,
    )
    started = time.monotonic()
    rows: list[Row] = []
    checks: list[Check] = []
    for name in names:
        new_rows, new_checks = SCENARIOS[name](settings)
        rows += new_rows
        checks += new_checks
    elapsed = time.monotonic() - started
    print(table(rows))
    print()
    print(targets(checks))
    print(f"\n{args.workers} workers for every system; best of {args.repeat} interleaved runs; {elapsed:.0f} s in all.")
    if args.profile is not None:
        _summarise_profiles(args.profile)
    if args.json is not None:
        report = {
            "command": shlex.join([sys.executable, "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]),
            "machine": machine(),
            "sizes": dataclasses.asdict(sizes),
            "workers": args.workers,
            "repeat": args.repeat,
            "seconds": elapsed,
            "rows": [dataclasses.asdict(r) for r in rows],
            "checks": [dataclasses.asdict(c) for c in checks],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


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

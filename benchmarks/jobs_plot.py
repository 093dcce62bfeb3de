"""The plot of docs/performance.md's "Short Condor jobs" section, from ``benchmarks.jobs_condor --json`` files.

``python -m benchmarks.jobs_plot RESULTS.json... --out docs/jobs-condor.svg``

Files of the same pool and N are merged (rounds run in separate sittings).
Left: for the first of them, each case's wall time by ``condor_submit`` and by
``mwpy jobs`` beside the ideal N·d/slots. Right: the speed-up for 0.2 s jobs
against the pool's slot count, one point per pool and size (median, bars from the
lowest to the highest round). matplotlib writes the SVG itself, with no
browser: it is the long-kept static plotting library, where plotly's static
export needs kaleido and a Chrome. Text stays text in the SVG
(``svg.fonttype = none``) and the file carries no date, so the same figures
give the same file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.jobs_condor import cases, load

#: The target of issue 10 for 0.2 s jobs.
SPEEDUP_TARGET = 10.0
TIMES = "\N{MULTIPLICATION SIGN}"
PLAIN_COLOUR = "#9e9e9e"
MWPY_COLOUR = "#1f77b4"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs_plot", description=__doc__)
    parser.add_argument("results", nargs="+", type=Path, help="files written by benchmarks.jobs_condor --json")
    parser.add_argument("--out", type=Path, required=True, help="the SVG to write")
    parser.add_argument("--duration", type=float, default=0.2, help="job duration of the speed-up panel (0.2)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    results = load(args.results)
    import matplotlib  # noqa: PLC0415 - only this command needs it (the `plot` extra)

    matplotlib.use("svg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["svg.hashsalt"] = "mwpy"
    figure, (walls, speedups) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(1.6, 1))
    _walls(walls, results[0])
    _speedups(speedups, results, args.duration)
    figure.tight_layout()
    figure.savefig(args.out, format="svg", metadata={"Date": None})
    print(f"jobs_plot: wrote {args.out}")
    return 0


def _walls(axes: Any, result: dict[str, Any]) -> None:
    """Grouped bars: plain and mwpy wall time per case (median over rounds), the ideal as a black tick."""
    found = cases(result["runs"])
    labels, plain, mwpy, ideal, speedups = [], [], [], [], []
    for case in found:
        labels.append(f"{case['seconds']:g} s\n{case['size_mb']:g} MB")
        plain.append(statistics.median(p["wall_seconds"] for p, _ in case["pairs"]))
        mwpy.append(statistics.median(m["wall_seconds"] for _, m in case["pairs"]))
        ideal.append(result["jobs"] * case["seconds"] / result["slots"])
        speedups.append(statistics.median(p["wall_seconds"] / m["wall_seconds"] for p, m in case["pairs"]))
    positions = range(len(found))
    axes.bar([x - 0.2 for x in positions], plain, 0.4, color=PLAIN_COLOUR, label="condor_submit jobs.sub")
    axes.bar([x + 0.2 for x in positions], mwpy, 0.4, color=MWPY_COLOUR, label="mwpy jobs (jobs-master.sub)")
    axes.scatter(list(positions), ideal, marker="_", s=900, color="black", zorder=3, label="ideal N·d / slots")
    for x, top, speedup in zip(positions, plain, speedups, strict=True):
        axes.annotate(f"{speedup:.1f}{TIMES}", (x, top), textcoords="offset points", xytext=(0, 3), ha="center")
    axes.set_xticks(list(positions), labels)
    axes.set_xlabel("job duration d, shared input S (above: the speed-up)")
    axes.set_ylabel("wall time from the first condor_submit (s)")
    pool = f"{result['nodes']} node {TIMES} {result['cpus_per_node']} CPUs"
    rounds = f"median of {result['rounds']} rounds" if result["rounds"] > 1 else "one round"
    axes.set_title(f"{result['jobs']} jobs on {result['slots']} slots ({pool}), {rounds}", fontsize=10)
    axes.set_ylim(top=max(plain) * 1.12)
    axes.legend(fontsize=8, frameon=False, loc="upper left")


def _speedups(axes: Any, results: list[dict[str, Any]], duration: float) -> None:
    """Speed-up of mwpy over plain Condor against slots, a line per (S, jobs per slot): median and range."""
    series: dict[tuple[float, int, str], list[tuple[int, float, float, float]]] = {}
    for result in results:
        for case in cases(result["runs"]):
            if case["seconds"] == duration:
                ratios = [p["wall_seconds"] / m["wall_seconds"] for p, m in case["pairs"]]
                key = (case["size_mb"], result["jobs"] // result["slots"], result.get("cycles", "fast"))
                series.setdefault(key, []).append(
                    (result["slots"], statistics.median(ratios), min(ratios), max(ratios))
                )
    for (size, per_slot, cycles), points in sorted(series.items()):
        points.sort()
        axes.errorbar(
            [p[0] for p in points],
            [p[1] for p in points],
            yerr=[[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]],
            fmt=("o-" if size < 10 else "s--") if cycles == "fast" else "v:",
            capsize=4,
            label=f"S = {size:g} MB, {per_slot} jobs per slot" + ("" if cycles == "fast" else f", {cycles} cycles"),
        )
    axes.axhline(SPEEDUP_TARGET, color="black", linestyle=":", linewidth=1, label=f"target {SPEEDUP_TARGET:g}{TIMES}")
    axes.set_xlabel("slots (= mwpy slaves), all on one 2-core machine")
    axes.set_ylabel("speed-up: plain wall ÷ mwpy wall")
    axes.set_title(f"{duration:g} s jobs: speed-up over condor_submit", fontsize=10)
    axes.set_xticks(sorted({slots for points in series.values() for slots, *_ in points}))
    axes.set_ylim(0, SPEEDUP_TARGET * 1.2)
    axes.legend(fontsize=8, frameon=False, loc="center right")


if __name__ == "__main__":
    sys.exit(main())

"""Seed 000's experiment on the real pool: one submit file, run by ``condor_submit`` and by ``mwpy jobs``.

``python -m benchmarks.jobs_condor`` (root, with the pool of ``tools/condor_pool.py up`` running):
for each shared-input size S and job duration d, the same ``jobs.sub`` (N jobs
that each read an S MB input and sleep d seconds; N = ``--jobs-per-slot`` x
the pool's slots, so that whole jobs can fill every slot to the end) is submitted

* **plain**: ``condor_submit jobs.sub`` (one cluster of N jobs; Condor moves
  the input with every job);
* **common** (``--arms plain,common,mwpy``): ``condor_submit`` of the same file with the input in
  ``transfer_common_input`` (HTCondor stages it once per execute node). The command is HTCondor 24's:
  on an older pool (tools/condor_pool.py's default trixie root has 23.9) the arm is skipped with that
  reason; ``tools/condor_pool.py up --suite sid --base /var/cache/mwpy-condor-25`` builds a pool with 25;
* **mwpy**: ``condor_submit submit/jobs-master.sub -a jobs=jobs.sub``, then,
  once the master has written its resource file and ``mwpy.pyz``,
  ``condor_submit submit/slaves.sub -a program=submit/mwpy_jobs.py -a
  slaves=SLOTS``, as docs/jobs.md tells a user (plus ``--mw-events``, whose
  timestamps say where the start-up time goes).

Wall time runs from just before the first ``condor_submit`` until no job of
the arm is left in the queue. With ``--rounds R`` every case runs R times,
the two arms in turn first (plain then mwpy, then mwpy then plain), and each
ratio is taken within a round: the table gives median [min-max] over rounds.
* **floor** (``--arms floor,mwpy``): no framework at all, what the machine itself costs. One Condor job
  per slot (``queue SLOTS``, the shared input transferred once with it) runs the same ``job.sh`` back to
  back N/slots times in its sandbox from a bash loop, each run's start and end stamped just before the
  job is started and just after it ended (bash's ``$EPOCHREALTIME``: no process for the stamps), as the
  slave stamps mwpy's jobs.

It prints a Markdown table and ``--json FILE`` keeps every figure, for
``python -m benchmarks.jobs_plot``. A second table gives the jobs' span, two ways:

* **after start-up** (issue 23's "s per 0.2 s job"): per slot, from its own first job's start to its own
  last job's end, over the jobs it ran; the sum of those spans over the sum of the jobs is the seconds per
  job, and d over it the span %. The slots' start-up (Condor starting the slave jobs, the first fetch of
  the shared input) and their end spread are left out: it is what one slot pays per job once running;
* **first job to last**: from the first job's start on any slot to the last job's end on any slot, over
  the ideal N·d/slots; it includes the slots' start-up and end spread.

Both for mwpy and for the floor, in the same round, and mwpy's seconds per job over the floor's (what
mwpy costs beyond the machine's own process start and reading of the input). Beside them, from the
per-job times (mwpy's from the run summary), where the span goes beyond d: the job's own run past d
(process start, reading the shared input; median), the gap between two jobs on one slot (for mwpy:
sending outputs back, the result, the next task, the scratch folder; median), and, per slot, how long
after the first job its own first job started (the slaves' start-up spread) and how long before the last
job's end its last one ended (means over the slots).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import REPO, BenchError, Spread
from benchmarks.condor import PoolQueue, pool_description, pool_down
from mwpy.data.service import sha256_of

SUBMIT = REPO / "submit"
JOB = """#!/bin/sh
# Reads the shared input (as a BLAST search reads its database), then works for $1 seconds.
cat shared.bin > /dev/null
sleep "$1"
echo "job $2 done" > "done.$2"
"""
#: The floor arm's Condor job: $3 runs of job.sh from run $1 x $3 on, back to back, each stamped around it.
FLOOR = """#!/bin/bash
# No framework: this slot's share of the jobs, one after another, as the slave would run them.
chmod +x job.sh
stamps=""
for ((job = $1 * $3; job < ($1 + 1) * $3; job++)); do
    start=$EPOCHREALTIME
    ./job.sh "$2" "$job" > "out.$job"
    end=$EPOCHREALTIME
    stamps+="$job $start $end"$'\\n'
done
printf "%s" "$stamps" > "stamps.$1"
"""
#: The longest one arm may take before it is removed and reported as failed.
DEADLINE = 3600.0
T = TypeVar("T")
#: The first HTCondor major version that knows ``transfer_common_input``.
COMMON_INPUT_SINCE = 24


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs_condor", description=__doc__)
    parser.add_argument("--jobs-per-slot", type=int, default=25, help="N = this x the pool's slots (default 25)")
    parser.add_argument("--durations", default="0.2,1,5", help="job durations in seconds (default 0.2,1,5)")
    parser.add_argument("--sizes", default="1,50", help="shared input sizes in MB (default 1,50)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every case, arms in turn first (default 1)")
    parser.add_argument(
        "--first-round", type=int, default=0, help="number of the first round (0: plain first; 1: mwpy first)"
    )
    parser.add_argument(
        "--arms", default="plain,mwpy", help="arms to run: plain, common, floor, mwpy (default plain,mwpy)"
    )
    parser.add_argument(
        "--master-options", default="", help="more --mw-* options for the jobs master, e.g. '--mw-slave-window 2'"
    )
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--table", type=Path, nargs="+", metavar="JSON", help="only print the table of these --json files (merged)"
    )
    return parser.parse_args(argv)


def _write_jobs(workdir: Path, jobs: int, seconds: float, size_mb: float, *, common: bool = False) -> None:
    """``jobs.sub``: the shared input in ``transfer_input_files``, or in ``transfer_common_input`` (``common``)."""
    with open(workdir / "shared.bin", "wb") as out:
        for _ in range(int(size_mb)):
            out.write(os.urandom(1 << 20))
    (workdir / "job.sh").write_text(JOB)
    (workdir / "job.sh").chmod(0o755)
    command = "transfer_common_input" if common else "transfer_input_files"
    (workdir / "jobs.sub").write_text(
        f'executable = job.sh\narguments = "{seconds:g} $(Process)"\n{command} = shared.bin\n'
        f"should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\nrequest_memory = 128\n"
        f"output = out.$(Process)\nlog = jobs.log\nqueue {jobs}\n"
    )


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat: how busy both arms keep its cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_since(start: tuple[int, int]) -> float:
    busy, total = _cpu_ticks()
    return (busy - start[0]) / max(1, total - start[1])


def common_input_skipped(condor_version: str | None) -> str | None:
    """Why the common-input arm cannot run on a pool of ``condor_version`` (its ``pool.json``), or None."""
    major = (condor_version or "").split(".", 1)[0]
    if major.isdigit() and int(major) >= COMMON_INPUT_SINCE:
        return None
    return (
        f"transfer_common_input needs HTCondor {COMMON_INPUT_SINCE} or later; this pool runs "
        f"{condor_version or 'an unknown version'} (tools/condor_pool.py up --suite sid builds one with 25)"
    )


def _plain(queue: PoolQueue, jobs: int, seconds: float, size_mb: float, *, common: bool = False) -> dict[str, Any]:
    workdir = queue.new_workdir(f"{'common' if common else 'plain'}-{seconds:g}s-{size_mb:g}MB")
    _write_jobs(workdir, jobs, seconds, size_mb, common=common)

    def outputs(folder: Path) -> None:
        if (done := len(list(folder.glob("done.*")))) != jobs:
            raise BenchError(f"plain: {done} of {jobs} jobs left their output")

    wall, busy, _ = _cluster(queue, workdir, "jobs.sub", outputs)
    moved = None if common else jobs * int(size_mb) * (1 << 20)  # common: once per node, Condor does not say
    return {"wall_seconds": wall, "cpu_busy": busy, "shared_bytes_moved": moved}


def _floor(queue: PoolQueue, jobs: int, seconds: float, size_mb: float, slots: int) -> dict[str, Any]:
    """The floor: one Condor job per slot runs its N/slots jobs back to back with no framework (FLOOR)."""
    workdir = queue.new_workdir(f"floor-{seconds:g}s-{size_mb:g}MB")
    _write_jobs(workdir, jobs, seconds, size_mb)
    (workdir / "floor.sh").write_text(FLOOR)
    (workdir / "floor.sh").chmod(0o755)
    (workdir / "floor.sub").write_text(
        f'executable = floor.sh\narguments = "$(Process) {seconds:g} {jobs // slots}"\n'
        f"transfer_input_files = shared.bin, job.sh\nshould_transfer_files = YES\n"
        f"when_to_transfer_output = ON_EXIT\nrequest_memory = 128\nlog = floor.log\nqueue {slots}\n"
    )

    def stamps(folder: Path) -> list[dict[str, Any]]:
        records = [
            {"slave": slot.name, "started": float(start), "ended": float(end), "seconds": float(end) - float(start)}
            for slot in sorted(folder.glob("stamps.*"))
            for _, start, end in (line.split() for line in slot.read_text().splitlines())
        ]
        done = len(list(folder.glob("done.*")))
        if done != jobs or len(records) != jobs:
            raise BenchError(f"floor: {done} of {jobs} jobs left their output, {len(records)} were stamped")
        return records

    wall, busy, records = _cluster(queue, workdir, "floor.sub", stamps)
    return {"wall_seconds": wall, "cpu_busy": busy, **_spans(records), **per_job_time(records, seconds)}


def _cluster(queue: PoolQueue, workdir: Path, submit_file: str, outcome: Callable[[Path], T]) -> tuple[float, float, T]:
    """``condor_submit submit_file`` in ``workdir`` and wait until its cluster has left the queue: the wall time
    from just before the submit, how busy the machine's cores were, and ``outcome(workdir)`` (which checks it)."""
    queue.give(workdir)
    cluster = None
    ok = False
    try:
        cpu = _cpu_ticks()
        started = time.time()
        cluster = queue.submit(workdir, submit_file)
        queue.wait_empty(f"ClusterId == {cluster}", DEADLINE)
        wall = time.time() - started
        busy = _busy_since(cpu)
        found = outcome(workdir)
        ok = True
    finally:
        queue.finish(workdir, None if cluster is None else f"ClusterId == {cluster}", keep=not ok)
    return wall, busy, found


def _spans(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The jobs' span from the first job's start to the last job's end, the slots used, the jobs' seconds."""
    return {
        "jobs_span_seconds": max(line["ended"] for line in records) - min(line["started"] for line in records),
        "job_seconds": sum(line["seconds"] for line in records),
        "slaves_used": len({line["slave"] for line in records}),
    }


def _mwpy(queue: PoolQueue, jobs: int, seconds: float, size_mb: float, *, slots: int, options: str) -> dict[str, Any]:
    workdir = queue.new_workdir(f"mwpy-{seconds:g}s-{size_mb:g}MB")
    _write_jobs(workdir, jobs, seconds, size_mb)
    shutil.copytree(SUBMIT, workdir / "submit")
    queue.give(workdir)
    constraint = f'MwpyMemberId == "mwpy:{workdir / "resource.json"}"'
    ok = False
    try:
        cpu = _cpu_ticks()
        started = time.time()
        queue.submit(
            workdir,
            "submit/jobs-master.sub",
            f"python={queue.pool['job_python']}",
            "jobs=jobs.sub",
            f"master_options=--mw-events events.jsonl {options}".strip(),
        )
        stamps = {"master_submitted": time.time()}
        deadline = time.monotonic() + 120
        while not ((workdir / "resource.json").exists() and (workdir / "mwpy.pyz").exists()):
            if time.monotonic() > deadline:
                raise BenchError(f"no resource file from the jobs master in {workdir}")
            time.sleep(0.02)
        stamps["resource_file_seen"] = time.time()
        queue.submit(workdir, "submit/slaves.sub", "program=submit/mwpy_jobs.py", f"slaves={slots}")
        stamps["slaves_submitted"] = time.time()
        gone = queue.wait_empty(constraint, DEADLINE, roles=("master", "slave"), fine=4 * (slots + 1))
        wall = time.time() - started
        busy = _busy_since(cpu)
        lines = [json.loads(line) for line in (workdir / "jobs.sub.summary.jsonl").read_text().splitlines()]
        events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
        run = lines[-1]["run"]
        records = [line for line in lines if "job" in line]
        if run["failed"] or len(records) != jobs:
            raise BenchError(f"mwpy: {run['failed']} failed, {len(records)} of {jobs} jobs in the summary")
        shared_fetches = run["fetches"].get(sha256_of(workdir / "shared.bin"), 0)
        ok = True
    finally:
        queue.finish(workdir, constraint, keep=not ok)
    connected = [event["t"] for event in events if event["kind"] == "slave-connected"]
    stamps |= {
        "master_started": min(event["t"] for event in events if event["kind"] == "master-start"),
        "first_slave_connected": min(connected),
        "last_slave_connected": max(connected),
        "first_job_started": min(line["started"] for line in records),
        "last_job_ended": max(line["ended"] for line in records),
        "master_stopped": max(event["t"] for event in events if event["kind"] == "master-stop"),
        "master_left_queue": gone["master"],
        "slaves_left_queue": gone["slave"],
    }
    return {
        "wall_seconds": wall,
        "cpu_busy": busy,
        "after_first_submit": {name: round(moment - started, 3) for name, moment in stamps.items()},
        **_spans(records),
        "bytes_sent": run["bytes_sent"],
        "shared_fetches": shared_fetches,
        "shared_bytes_moved": shared_fetches * int(size_mb) * (1 << 20),
        **per_job_time(records, seconds),
    }


def per_job_time(records: list[dict[str, Any]], seconds: float) -> dict[str, float]:
    """The span after start-up: each slot's span from its first job's start to its last job's end, summed
    over the slots, over the jobs they ran (issue 23's "s per 0.2 s job"). Where it goes beyond d per job:
    medians over the jobs of a job's own run past d (process start, reading the input) and of the gap before
    the next job on the same slot (outputs back, result, next task, scratch folder); means over the slots of
    how long after the first job their first one started (start-up spread) and how long before the last
    job's end their last one ended."""
    own = statistics.median(record["seconds"] - seconds for record in records)
    gaps = []
    by_slave: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_slave.setdefault(record["slave"], []).append(record)
    for runs in by_slave.values():
        runs.sort(key=lambda record: record["started"])
        gaps += [after["started"] - before["ended"] for before, after in itertools.pairwise(runs)]
    first = min(record["started"] for record in records)
    last = max(record["ended"] for record in records)
    return {
        "slot_span_per_job_seconds": sum(runs[-1]["ended"] - runs[0]["started"] for runs in by_slave.values())
        / len(records),
        "job_overrun_seconds": own,
        "between_jobs_seconds": statistics.median(gaps) if gaps else 0.0,
        "slot_start_spread_seconds": statistics.mean(runs[0]["started"] - first for runs in by_slave.values()),
        "slot_end_spread_seconds": statistics.mean(last - runs[-1]["ended"] for runs in by_slave.values()),
    }


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    if args.table:
        for result in load(args.table):
            print(tables(result, result["runs"]), end="\n\n")
        return 0
    pool, why = pool_description()
    down = why if pool is None else pool_down(pool)
    if pool is None or down:
        print(f"jobs_condor: skipped: {down}", file=sys.stderr)
        return 1
    slots = int(pool.get("cpus", 8)) * int(pool.get("nodes") or 1)
    jobs = args.jobs_per_slot * slots
    queue = PoolQueue(pool)
    runs = []
    for number in range(args.first_round, args.first_round + args.rounds):
        arms = args.arms.split(",")
        shift = number % len(arms)
        order = arms[shift:] + arms[:shift]  # each arm goes first in turn
        for size_mb in (float(s) for s in args.sizes.split(",")):
            for seconds in (float(d) for d in args.durations.split(",")):
                for system in order:
                    print(
                        f"[jobs_condor] round {number + 1}, {system}: {jobs} jobs of {seconds:g} s, "
                        f"{size_mb:g} MB shared, {slots} slots",
                        flush=True,
                    )
                    figures = _arm(queue, system, jobs, seconds, size_mb, slots=slots, options=args.master_options)
                    runs.append({"round": number, "system": system, "seconds": seconds, "size_mb": size_mb, **figures})
                    print(f"[jobs_condor]   {figures}", flush=True)
    facts = {
        "jobs": jobs,
        "slots": slots,
        "nodes": int(pool.get("nodes") or 1),
        "cpus_per_node": int(pool.get("cpus", 8)),
        "cores": len(os.sched_getaffinity(0)),
        "condor_version": pool.get("condor_version"),
        "cycles": _cycles(pool),
        "rounds": args.rounds,
        "master_options": args.master_options,
    }
    print()
    print(tables(facts, runs))
    moments = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in startup(runs).items())
    print(f"\nmwpy, medians after the first condor_submit: {moments}")
    if args.json:
        args.json.write_text(json.dumps({**facts, "runs": runs}, indent=2))
    return 0


def _arm(
    queue: PoolQueue, system: str, jobs: int, seconds: float, size_mb: float, *, slots: int, options: str
) -> dict[str, Any]:
    """One arm's figures, ``{"error": ...}`` if it failed, or ``{"skipped": why}`` if it cannot run here."""
    if system == "common" and (why := common_input_skipped(queue.pool.get("condor_version"))):
        return {"skipped": why}
    try:
        if system == "mwpy":
            return _mwpy(queue, jobs, seconds, size_mb, slots=slots, options=options)
        if system == "floor":
            return _floor(queue, jobs, seconds, size_mb, slots)
        return _plain(queue, jobs, seconds, size_mb, common=system == "common")
    except BenchError as exc:
        return {"error": str(exc)}


def _cycles(pool: dict[str, Any]) -> str:
    """``fast`` (tools/condor_pool.py's 1 s cycles) or ``stock`` (``up --stock-cycles``: HTCondor's own)."""
    config = Path(pool["root"], "etc/condor/config.d/99-mwpy-pool.conf").read_text()
    return "fast" if "NEGOTIATOR_INTERVAL = 1\n" in config else "stock"


#: What the --json files of one experiment share (with the value of files written before it was kept).
_SAME_RUN: tuple[tuple[str, str | None], ...] = (
    ("jobs", None),
    ("slots", None),
    ("nodes", None),
    ("cpus_per_node", None),
    ("cycles", "fast"),
    ("master_options", ""),
)


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """``--json`` files, those of the same pool, N and master options merged into one result (rounds run in
    separate sittings)."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        result = json.loads(path.read_text())
        key = tuple(result.get(name, default) for name, default in _SAME_RUN)
        if key in merged:
            merged[key]["runs"] += result["runs"]
            merged[key]["rounds"] = len({r["round"] for r in merged[key]["runs"]})
        else:
            merged[key] = result
    return list(merged.values())


def cases(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per (S, d): each figure over the rounds in which plain and mwpy succeeded, ratios within a
    round; ``commons`` pairs the common-input arm with mwpy of the same round, where it ran."""
    found = []
    for size in sorted({r["size_mb"] for r in runs}):
        for seconds in sorted({r["seconds"] for r in runs}):
            pairs, commons = [], []
            for number in sorted({r["round"] for r in runs}):
                arms = {
                    r["system"]: r
                    for r in runs
                    if (r["round"], r["size_mb"], r["seconds"]) == (number, size, seconds) and "wall_seconds" in r
                }
                if "plain" in arms and "mwpy" in arms:
                    pairs.append((arms["plain"], arms["mwpy"]))
                if "common" in arms and "mwpy" in arms:
                    commons.append((arms["common"], arms["mwpy"]))
            if pairs:
                found.append({"size_mb": size, "seconds": seconds, "pairs": pairs, "commons": commons})
    return found


def _spread(values: list[float], spec: str) -> str:
    spread = Spread.of(values)
    return "" if spread is None else spread.format(spec)


def table(facts: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The Markdown table: both walls, the speed-up, mwpy's slot use and the shared bytes it moved."""
    jobs, slots = facts["jobs"], facts["slots"]
    lines = [
        f"{jobs} jobs per run on {slots} slots ({facts['nodes']} node x {facts['cpus_per_node']} CPUs, "
        f"{facts['cores']} cores, {facts.get('cycles', 'fast')} cycles), {facts['rounds']} round(s): "
        "median [min-max] over rounds",
        "",
        "| N | job d | shared S | condor_submit | mwpy jobs | speed-up | mwpy ÷ ideal N·d/slots: wall "
        "(first job to last) | mwpy start: first job at | shared moved ÷ (slaves \N{MULTIPLICATION SIGN} S) | "
        "condor_submit, transfer_common_input | speed-up over it |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases(runs):
        seconds, size, pairs = case["seconds"], case["size_mb"], case["pairs"]
        ideal = jobs * seconds / slots
        plain = [p["wall_seconds"] for p, _ in pairs]
        mwpy = [m["wall_seconds"] for _, m in pairs]
        moved = [m["shared_bytes_moved"] / (m["slaves_used"] * size * (1 << 20)) for _, m in pairs]
        lines.append(
            f"| {jobs} | {seconds:g} s | {size:g} MB | {_spread(plain, '.1f')} s | {_spread(mwpy, '.1f')} s | "
            f"{_spread([p / m for p, m in zip(plain, mwpy, strict=True)], '.1f')}\N{MULTIPLICATION SIGN} | "
            f"{_spread([100 * ideal / m for m in mwpy], '.0f')} % "
            f"({_spread([100 * ideal / m['jobs_span_seconds'] for _, m in pairs], '.0f')} %) | "
            f"{_spread([m['after_first_submit']['first_job_started'] for _, m in pairs], '.1f')} s | "
            f"{_spread(moved, '.2f')} | {_common_columns(case['commons'])} |"
        )
    skipped = sorted({f"{r['system']}: {r['skipped']}" for r in runs if "skipped" in r})
    lines += [f"\nSkipped, {why}" for why in skipped]
    return "\n".join(lines)


def tables(facts: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The walls' table (where plain Condor ran beside mwpy), then the spans' table."""
    return f"{table(facts, runs)}\n\n{span_table(facts, runs)}" if cases(runs) else span_table(facts, runs)


def span_table(facts: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The jobs' span, mwpy's and the floor's: after start-up (per slot; s per job and d over it) and first job
    to last (over N·d/slots), mwpy's s per job over the floor's (same rounds), and where the span goes."""
    jobs, slots = facts["jobs"], facts["slots"]
    lines = [
        "| N | job d | shared S | system | after start-up: s per job (span %) | first job to last ÷ N·d/slots | "
        "mwpy ÷ floor, after start-up | beyond d: job's own run; between jobs | slots: first job after the "
        "first; last job before the last |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (size, seconds), arms in _span_cases(runs).items():
        ideal = jobs * seconds / slots
        ratios = [
            both["mwpy"]["slot_span_per_job_seconds"] / both["floor"]["slot_span_per_job_seconds"]
            for both in arms.values()
            if "mwpy" in both and "floor" in both
        ]
        for system in ("mwpy", "floor"):
            done = [by_system[system] for by_system in arms.values() if system in by_system]
            if not done:
                continue
            per_job = [r["slot_span_per_job_seconds"] for r in done]
            lines.append(
                f"| {jobs} | {seconds:g} s | {size:g} MB | {_system_label(system, facts)} | "
                f"{_spread(per_job, '.3f')} s "
                f"({_spread([100 * seconds / x for x in per_job], '.0f')} %) | "
                f"{_spread([100 * ideal / r['jobs_span_seconds'] for r in done], '.0f')} % | "
                f"{_spread(ratios, '.3f') if system == 'mwpy' else ''} | "
                f"{_spread([1000 * r['job_overrun_seconds'] for r in done], '.0f')} ms; "
                f"{_spread([1000 * r['between_jobs_seconds'] for r in done], '.1f')} ms | "
                f"{_spread([r['slot_start_spread_seconds'] for r in done], '.2f')} s; "
                f"{_spread([r['slot_end_spread_seconds'] for r in done], '.2f')} s |"
            )
    return "\n".join(lines)


def _system_label(system: str, facts: dict[str, Any]) -> str:
    """``mwpy``, with the master options it ran with (``--master-options``), or ``floor``."""
    options = facts.get("master_options") if system == "mwpy" else None
    return f"{system} `{options}`" if options else system


def _span_cases(runs: list[dict[str, Any]]) -> dict[tuple[float, float], dict[int, dict[str, dict[str, Any]]]]:
    """(S, d) -> round -> {"mwpy": run, "floor": run}: the runs of those arms that succeeded."""
    found: dict[tuple[float, float], dict[int, dict[str, dict[str, Any]]]] = {}
    for run in sorted(runs, key=lambda r: (r["size_mb"], r["seconds"], r["round"])):
        if run["system"] in ("mwpy", "floor") and "slot_span_per_job_seconds" in run:
            case = found.setdefault((run["size_mb"], run["seconds"]), {})
            case.setdefault(run["round"], {})[run["system"]] = run
    return found


def _common_columns(commons: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """The common-input arm's wall and mwpy's speed-up over it (same rounds), or two empty cells."""
    if not commons:
        return " | "
    walls = [c["wall_seconds"] for c, _ in commons]
    ratios = [c["wall_seconds"] / m["wall_seconds"] for c, m in commons]
    return f"{_spread(walls, '.1f')} s | {_spread(ratios, '.1f')}\N{MULTIPLICATION SIGN}"


def startup(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Where mwpy's start-up and ending go: each moment's median time after the first condor_submit."""
    stamps = [r["after_first_submit"] for r in runs if r["system"] == "mwpy" and "wall_seconds" in r]
    return {name: statistics.median(s[name] for s in stamps) for name in stamps[0]} if stamps else {}


if __name__ == "__main__":
    sys.exit(main())

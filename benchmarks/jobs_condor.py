"""Seed 000's experiment on the real pool: one submit file, run by ``condor_submit`` and by ``mwpy jobs``.

``python -m benchmarks.jobs_condor`` (root, with the pool of ``tools/condor_pool.py up`` running):
for each shared-input size S and job duration d, the same ``jobs.sub`` (N jobs
that each read an S MB input and sleep d seconds) is submitted

* **plain**: ``condor_submit jobs.sub`` (one cluster of N jobs; Condor moves
  the input with every job);
* **mwpy**: ``condor_submit submit/jobs-master.sub -a jobs=jobs.sub``, then,
  once the master has written its resource file and ``mwpy.pyz``,
  ``condor_submit submit/slaves.sub -a program=submit/mwpy_jobs.py -a
  slaves=SLOTS``, as docs/jobs.md tells a user.

Wall time runs from just before the first ``condor_submit`` until no job of
the arm is left in the queue. It prints a Markdown table and the three checks
of issue 10 (speed-up for 0.2 s jobs, slot use for 5 s jobs, shared bytes
moved), and ``--json FILE`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, BenchError
from benchmarks.condor import PoolQueue, pool_description, pool_down
from mwpy.filestore import sha256_of

SUBMIT = REPO / "submit"
JOB = """#!/bin/sh
# Reads the shared input (as a BLAST search reads its database), then works for $1 seconds.
cat shared.bin > /dev/null
sleep "$1"
echo "job $2 done" > "done.$2"
"""


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs_condor", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100, help="jobs per run (default 100)")
    parser.add_argument("--durations", default="0.2,1,5", help="job durations in seconds (default 0.2,1,5)")
    parser.add_argument("--sizes", default="1,50", help="shared input sizes in MB (default 1,50)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    return parser.parse_args(argv)


def _write_jobs(workdir: Path, jobs: int, seconds: float, size_mb: float) -> None:
    with open(workdir / "shared.bin", "wb") as out:
        for _ in range(int(size_mb)):
            out.write(os.urandom(1 << 20))
    (workdir / "job.sh").write_text(JOB)
    (workdir / "job.sh").chmod(0o755)
    (workdir / "jobs.sub").write_text(
        f'executable = job.sh\narguments = "{seconds:g} $(Process)"\ntransfer_input_files = shared.bin\n'
        f"should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\nrequest_memory = 128\n"
        f"output = out.$(Process)\nlog = jobs.log\nqueue {jobs}\n"
    )


def _plain(queue: PoolQueue, jobs: int, seconds: float, size_mb: float) -> dict[str, Any]:
    workdir = queue.new_workdir(f"plain-{seconds:g}s-{size_mb:g}MB")
    _write_jobs(workdir, jobs, seconds, size_mb)
    queue.give(workdir)
    cluster = None
    ok = False
    try:
        started = time.time()
        cluster = queue.submit(workdir, "jobs.sub")
        queue.wait_empty(f"ClusterId == {cluster}", 3600)
        wall = time.time() - started
        done = len(list(workdir.glob("done.*")))
        if done != jobs:
            raise BenchError(f"plain: {done} of {jobs} jobs left their output")
        ok = True
    finally:
        queue.finish(workdir, None if cluster is None else f"ClusterId == {cluster}", keep=not ok)
    return {"wall_seconds": wall, "shared_bytes_moved": jobs * int(size_mb) * (1 << 20)}


def _mwpy(queue: PoolQueue, jobs: int, seconds: float, size_mb: float, slots: int) -> dict[str, Any]:
    workdir = queue.new_workdir(f"mwpy-{seconds:g}s-{size_mb:g}MB")
    _write_jobs(workdir, jobs, seconds, size_mb)
    shutil.copytree(SUBMIT, workdir / "submit")
    queue.give(workdir)
    constraint = f'MwpyMemberId == "mwpy:{workdir / "resource.json"}"'
    ok = False
    try:
        started = time.time()
        queue.submit(workdir, "submit/jobs-master.sub", f"python={queue.pool['job_python']}", "jobs=jobs.sub")
        deadline = time.monotonic() + 120
        while not ((workdir / "resource.json").exists() and (workdir / "mwpy.pyz").exists()):
            if time.monotonic() > deadline:
                raise BenchError(f"no resource file from the jobs master in {workdir}")
            time.sleep(0.02)
        queue.submit(workdir, "submit/slaves.sub", "program=submit/mwpy_jobs.py", f"slaves={slots}")
        queue.wait_empty(constraint, 3600, roles=("master", "slave"))
        wall = time.time() - started
        lines = [json.loads(line) for line in (workdir / "jobs.sub.summary.jsonl").read_text().splitlines()]
        run = lines[-1]["run"]
        records = [line for line in lines if "job" in line]
        if run["failed"] or len(records) != jobs:
            raise BenchError(f"mwpy: {run['failed']} failed, {len(records)} of {jobs} jobs in the summary")
        shared_fetches = run["fetches"].get(sha256_of(workdir / "shared.bin"), 0)
        ok = True
    finally:
        queue.finish(workdir, constraint, keep=not ok)
    first = min(line["started"] for line in records)
    last = max(line["ended"] for line in records)
    return {
        "wall_seconds": wall,
        "first_job_after_seconds": first - started,
        "jobs_span_seconds": last - first,
        "job_seconds": sum(line["seconds"] for line in records),
        "slaves_used": len({line["slave"] for line in records}),
        "bytes_sent": run["bytes_sent"],
        "shared_fetches": shared_fetches,
        "shared_bytes_moved": shared_fetches * int(size_mb) * (1 << 20),
    }


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    pool, why = pool_description()
    down = why if pool is None else pool_down(pool)
    if pool is None or down:
        print(f"jobs_condor: skipped: {down}", file=sys.stderr)
        return 1
    slots = int(pool.get("cpus", 8)) * int(pool.get("nodes") or 1)
    queue = PoolQueue(pool)
    results = []
    for size_mb in (float(s) for s in args.sizes.split(",")):
        for seconds in (float(d) for d in args.durations.split(",")):
            for system in ("mwpy", "plain"):
                print(f"[jobs_condor] {system}: {args.jobs} jobs of {seconds:g} s, {size_mb:g} MB shared", flush=True)
                try:
                    figures = (
                        _mwpy(queue, args.jobs, seconds, size_mb, slots)
                        if system == "mwpy"
                        else _plain(queue, args.jobs, seconds, size_mb)
                    )
                except BenchError as exc:
                    figures = {"error": str(exc)}
                results.append({"system": system, "seconds": seconds, "size_mb": size_mb, **figures})
                print(f"[jobs_condor]   {figures}", flush=True)
    _report(results, args.jobs, slots)
    if args.json:
        args.json.write_text(json.dumps({"jobs": args.jobs, "slots": slots, "runs": results}, indent=2))
    return 0


def _report(results: list[dict[str, Any]], jobs: int, slots: int) -> None:
    """The Markdown table: both walls, the speed-up, mwpy's slot use and the shared bytes it moved."""
    print(f"\n{jobs} jobs per run, {slots} slots (= mwpy slaves)\n")
    print("| job d | shared S | condor_submit | mwpy jobs | speed-up | mwpy slot use | shared moved / (slaves x S) |")
    print("|---|---|---|---|---|---|---|")
    for size in sorted({r["size_mb"] for r in results}):
        for seconds in sorted({r["seconds"] for r in results}):
            mwpy = next(r for r in results if (r["system"], r["size_mb"], r["seconds"]) == ("mwpy", size, seconds))
            plain = next(r for r in results if (r["system"], r["size_mb"], r["seconds"]) == ("plain", size, seconds))
            if "error" in mwpy or "error" in plain:
                print(f"| {seconds:g} s | {size:g} MB | failed | failed | | | |")
                continue
            ideal = jobs * seconds / slots
            moved = mwpy["shared_bytes_moved"] / (mwpy["slaves_used"] * size * (1 << 20))
            print(
                f"| {seconds:g} s | {size:g} MB | {plain['wall_seconds']:.1f} s | {mwpy['wall_seconds']:.1f} s | "
                f"{plain['wall_seconds'] / mwpy['wall_seconds']:.1f}x | {ideal / mwpy['wall_seconds']:.0%} "
                f"(jobs' span: {ideal / mwpy['jobs_span_seconds']:.0%}) | {moved:.2f} |"
            )


if __name__ == "__main__":
    sys.exit(main())

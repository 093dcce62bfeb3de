"""``mwpy jobs SUBMITFILE``: check the submit file here, then run it on local slaves or on the pool.

Everything a user can get wrong is found before a process starts: the file is
parsed, every refused command named, every input file and every output folder
looked for (exit 2, one line); condor_submit's warnings are printed. Then
either :func:`mwpy.pool.local.run_local` runs :mod:`mwpy.jobs.program` as the
master with N local slaves (the same machinery and exit statuses as ``mwpy
local``), or, with ``--pool``, :mod:`mwpy.jobs.pool` submits the master and
the overseer to HTCondor from the submit files inside the package.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mwpy import safe_files, safe_text
from mwpy.errors import MwpyError
from mwpy.jobs import outputs
from mwpy.jobs.description import SubmitDescription
from mwpy.options import positive_float, positive_int
from mwpy.pool.local import run_local

#: The program the master and the slaves run.
PROGRAM = str(Path(__file__).with_name("program.py"))
#: Exit status for a submit file mwpy cannot run.
USAGE = 2
#: Exit status when some job failed.
FAILED = 1


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mwpy jobs`` to the ``mwpy`` command's subcommands."""
    jobs = commands.add_parser(
        "jobs",
        help="run the jobs of an HTCondor submit file as mwpy tasks on reused slaves",
        description="Run every job SUBMIT_FILE queues, as condor_submit would run them, on N local slaves or "
        "(--pool) on the HTCondor pool (docs/jobs.md). --mw-* options for the master go after --.",
    )
    jobs.add_argument("submit_file", help="a plain HTCondor submit description (vanilla universe)")
    jobs.add_argument("--slaves", type=positive_int, default=2, help="most slaves at once (default 2)")
    jobs.add_argument(
        "--pool",
        action="store_true",
        help="run on the HTCondor pool: submit the jobs master and the overseer (scheduler universe), which "
        "submits up to --slaves slave jobs; wait for the end (Ctrl-C leaves the run to the pool)",
    )
    jobs.add_argument("--summary", help="the run summary, JSON lines (default SUBMIT_FILE.summary.jsonl)")
    jobs.add_argument(
        "--cluster", type=int, default=1, help="the $(Cluster) of the jobs (default 1; with --pool: the master job's)"
    )
    jobs.add_argument(
        "--workdir",
        help="folder for the resource file, logs and slave sandboxes (kept); with --pool, instead of SUBMIT_FILE.mwpy",
    )
    jobs.add_argument(
        "--max-output-bytes",
        type=positive_int,
        default=outputs.MAX_OUTPUT_BYTES,
        help=f"most bytes of output one job may send back (default {outputs.MAX_OUTPUT_BYTES})",
    )
    jobs.add_argument(
        "--max-output-files",
        type=positive_int,
        default=outputs.MAX_OUTPUT_FILES,
        help=f"most output files one job may send back (default {outputs.MAX_OUTPUT_FILES})",
    )
    jobs.add_argument(
        "--slave-python",
        default="/usr/bin/python3",
        help="--pool: the Python that runs the slaves on the execute nodes (needs no mwpy; default /usr/bin/python3)",
    )
    jobs.add_argument(
        "--periodic-interval",
        type=positive_float,
        default=60.0,
        help="seconds between evaluations of periodic_hold/release/remove (HTCondor's PERIODIC_EXPR_INTERVAL, "
        "default 60)",
    )
    jobs.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="live progress line (default: on a tty)"
    )


def master_arguments(options: argparse.Namespace) -> list[str]:
    """The program's own arguments (after the checks): absolute paths, so the master may run anywhere."""
    submit = os.path.abspath(options.submit_file)
    summary = os.path.abspath(options.summary or submit + ".summary.jsonl")
    return [
        submit,
        "--summary",
        summary,
        "--cluster",
        str(options.cluster),
        "--base",
        os.getcwd(),
        "--max-output-bytes",
        str(options.max_output_bytes),
        "--max-output-files",
        str(options.max_output_files),
        "--periodic-interval",
        str(options.periodic_interval),
    ]


def check(submit_file: str, cluster: int) -> SubmitDescription:
    """Read and check the file before anything runs; print condor_submit's warnings (raises MwpyError)."""
    description = SubmitDescription(submit_file, cluster=cluster)
    description.check_inputs()
    for warning in description.warnings():
        print(f"mwpy jobs: warning: {warning}", file=sys.stderr)
    return description


def run(options: argparse.Namespace) -> int:
    """``mwpy jobs``: refuse what cannot run (exit 2), then run the master and its slaves, here or on the pool."""
    try:
        description = check(options.submit_file, options.cluster)
    except MwpyError as exc:
        print(f"mwpy jobs: error: {exc}", file=sys.stderr)
        return USAGE
    if description.total == 0:  # condor_submit's words and status: nothing to run is no error
        print(
            f'mwpy jobs: warning: "{options.submit_file}" has only empty "queue" commands -- no jobs queued',
            file=sys.stderr,
        )
        return 0
    if options.pool:
        from mwpy.jobs import pool  # noqa: PLC0415 (the Condor back end only when asked for)

        if options.cluster != 1:
            print("mwpy jobs: error: --cluster: on the pool $(Cluster) is the master job's cluster id", file=sys.stderr)
            return USAGE

        return pool.run(options, [*master_arguments(options), "--placement-shapes"])
    _note_placement(description)
    args = [*master_arguments(options), *options.program_args]
    summary = args[args.index("--summary") + 1]
    started = time.time()
    return run_local(
        PROGRAM,
        options.slaves,
        args,
        workdir=options.workdir,
        progress=options.progress,
        explains=lambda status: status == FAILED and failed_jobs_summarised(summary, since=started),
    )


def _note_placement(description: SubmitDescription) -> None:
    """What the jobs ask of a machine, noted once with local slaves, which are all alike (on a pool the
    overseer keeps slave jobs of each placement's shape)."""
    placements = {placement for placement in description.placements() if placement.describe() != "cpus 1"}
    if placements:
        shown = "; ".join(sorted(placement.describe() for placement in placements)[:3])
        more = f" and {len(placements) - 3} more" if len(placements) > 3 else ""
        note = f"placement ({shown}{more}) applies on a pool; local slaves run every job"
        print(f"mwpy jobs: note: {note}", file=sys.stderr)


def failed_jobs_summarised(summary: str, *, since: float) -> bool:
    """Whether this run (its summary written after ``since``) ended with failed jobs, as its last line says.

    Then exit 1 is the jobs' outcome, which the master has named on stderr: not a master that could not start.
    """
    try:
        with open(summary, "rb") as lines:  # only after a failure, once: a line at a time, whatever its size
            if os.fstat(lines.fileno()).st_mtime < since:
                return False
            last = collections.deque(lines, maxlen=1)
        run = json.loads(last[0])["run"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False
    return isinstance(run, dict) and isinstance(run.get("failed"), int) and run["failed"] > 0


def status_report(resource: str) -> dict[str, Any]:
    """``{"jobs": counts}`` when the computation is an ``mwpy jobs`` run (for ``mwpy status``), else ``{}``.

    The master keeps the counts in ``RESOURCE.jobs`` (mwpy.jobs.summary); a
    file that is missing, too big or not the expected JSON shows nothing.
    """
    try:
        counts = json.loads(safe_files.read_bytes(resource + ".jobs", max_size=1 << 16))
        age = max(0.0, time.time() - os.stat(resource + ".jobs").st_mtime)
    except (MwpyError, ValueError, OSError):
        return {}
    keys = ("total", "finished", "failed")
    if not isinstance(counts, dict) or not all(isinstance(counts.get(key), int) for key in keys):
        return {}
    found = {key: counts[key] for key in keys} | {"summary": str(counts.get("summary", ""))}
    for key in ("held", "waiting_release", "journaled"):
        found[key] = counts[key] if isinstance(counts.get(key), int) else 0
    reasons = counts.get("hold_reasons")
    found["hold_reasons"] = {str(k): str(v) for k, v in reasons.items()} if isinstance(reasons, dict) else {}
    found["batch"] = str(counts.get("batch") or "")
    found["source"] = os.path.basename(resource) + ".jobs"
    found["age_seconds"] = round(age, 1)
    return {"jobs": found}


def status_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``run`` line of ``mwpy status``: jobs finished, failed, held, still to run, journal answers, summary,
    and which file says so (it replaces the resource file's task counts: one source, the fresher).

    Then one ``held`` line per held job (the first few) with its hold reason, as ``condor_q -hold`` shows it.
    Text in a hold reason comes from the job's own expressions: it is shown printable only.
    """
    if "jobs" not in report:
        return []
    jobs = report["jobs"]
    left = jobs["total"] - jobs["finished"] - jobs.get("waiting_release", 0)
    held = f", {jobs['held']} held" if jobs.get("held") else ""
    journal = f"; {jobs['journaled']} answered from the journal" if jobs.get("journaled") else ""
    batch = f"{jobs['batch']}: " if jobs.get("batch") else ""
    # "run", not "jobs": that row is the Condor slave jobs' (mwpy status --condor).
    rows = [
        (
            "run",
            f"{batch}{jobs['finished']} of {jobs['total']} jobs finished ({jobs['failed']} failed){held}, "
            f"{left} to run{journal}; summary {jobs['summary']} "
            f"(from {jobs['source']}, written {jobs['age_seconds']:.0f} s ago)",
        )
    ]
    # a hold reason may quote the job (a file name it made): one safe line
    rows += [("held", f"{job}: {safe_text.one_line(why)[:200]}") for job, why in jobs.get("hold_reasons", {}).items()]
    return rows

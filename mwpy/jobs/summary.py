"""The account of an ``mwpy jobs`` run: the summary (one JSON line per job when it is done for good, a last
line for the run), the job counts ``mwpy status`` shows, and the one line of text a run ends with.

Apart from :mod:`mwpy.jobs.program`, which drives the jobs, because what is written about a job (and how a
file that a job removed is written again) does not depend on how the job ran.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import time
from typing import IO, Any

from mwpy import safe_files, safe_text
from mwpy.jobs import runner
from mwpy.jobs.jobad import Placement
from mwpy.task_records import Result

#: Failed jobs named on stderr at the end (the summary has them all).
SHOWN_FAILURES = 20
#: Characters of each failed job's reason in that list (the summary has all of it).
SHOWN_WHY = 300


def status_path(resource: str) -> str:
    """Where the master keeps its job counts for ``mwpy status``: beside the resource file."""
    return resource + ".jobs"


class Summary:
    """The run summary: one JSON line per job when it is done for good, a last line for the run, one line of text.

    It also keeps the job counts beside the resource file (at most once a
    second, and at the end), where ``mwpy status`` shows them.
    """

    def __init__(self, path: str, total: int, status: str | None, batch: str) -> None:
        self.out: IO[str] = open(path, "w+")  # noqa: SIM115 (kept open for the run, closed by close())
        self.total = total
        self.status = status
        self.batch = batch
        self.counts: collections.Counter[str] = collections.Counter()
        self.placements: collections.Counter[Placement] = collections.Counter()  # jobs made, by what they ask
        self.journaled = 0
        self.held_now: dict[str, str] = {}  # job -> hold reason, of the jobs held now (for good or not yet)
        self.waiting_release = 0  # of those, the ones a periodic_release may still release
        self.failed: list[str] = []  # the first failed jobs in queue order, for the last lines (bounded)
        self._written = 0.0
        self._write_status()

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    @property
    def failures(self) -> int:
        return self.done - self.counts["ok"]

    def job(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        self.counts[record["status"]] += 1
        self.journaled += bool(record.get("journaled"))
        if record["status"] != "ok":
            why = safe_text.one_line(record["why"])[:SHOWN_WHY]  # quotes the job (file names it made): shown safe
            self.failed.append(f"{record['job']} ({why})")
            if len(self.failed) > 10 * SHOWN_FAILURES:
                self.failed = sorted(self.failed, key=_process_order)[:SHOWN_FAILURES]
        self._tick()

    def _tick(self) -> None:
        """At most once a second: make sure the summary is still ours, and write the job counts."""
        now = time.monotonic()
        if now - self._written < 1.0:
            return
        self._written = now
        self._keep_own_file()
        self._write_status()

    def _write_status(self) -> None:
        if self.status is None:
            return
        counts = {
            "total": self.total,
            "finished": self.done,
            "failed": self.failures,
            "held": len(self.held_now),
            "waiting_release": self.waiting_release,
            "hold_reasons": dict(list(self.held_now.items())[:SHOWN_FAILURES]),
            "journaled": self.journaled,
            "batch": self.batch,
            "summary": self.out.name,
        }
        safe_files.write_atomically(self.status, json.dumps(counts).encode(), mode=None)

    def _keep_own_file(self) -> None:
        """The file at the summary's path must be the one written here, or its lines would go nowhere.

        Removed or replaced during the run (by a job sharing the folder, say: outputs never replace it), it is
        written out again in full and the run goes on with it, saying so once.
        """
        path = self.out.name
        try:
            ours = os.path.samestat(os.stat(path), os.fstat(self.out.fileno()))
        except OSError:
            ours = False
        if ours:
            return
        print(f"mwpy jobs: note: {path} was removed or replaced during the run; written again in full", file=sys.stderr)
        self.out.flush()
        mode = os.fstat(self.out.fileno()).st_mode & 0o777  # as the summary was made
        with os.fdopen(os.dup(self.out.fileno()), "rb") as source, safe_files.replacing(path, mode=mode) as copy:
            source.seek(0)
            shutil.copyfileobj(source, copy)
        self.out.close()
        self.out = open(path, "a+")  # noqa: SIM115 (kept open for the run, closed by close())

    def close(self, started: float, counters: dict[str, Any]) -> None:
        self._keep_own_file()
        elapsed = time.time() - started
        run = {
            "jobs": self.total,
            "failed": self.failures,
            "held": self.counts["held"],
            "removed": self.counts["removed"],
            "journaled": self.journaled,
            "batch": self.batch,
            "seconds": elapsed,
            "placements": [{"placement": p.describe(), "jobs": n} for p, n in self.placements.most_common()],
            **counters,
        }
        self.out.write(json.dumps({"run": run}) + "\n")
        self.out.close()
        self._write_status()
        print(f"mwpy jobs: {self.line(elapsed)}")
        if self.failed:
            self.failed.sort(key=_process_order)
            more = self.failures - SHOWN_FAILURES
            shown = ", ".join(self.failed[:SHOWN_FAILURES]) + (f" and {more} more" if more > 0 else "")
            print(f"mwpy jobs: failed: {shown}", file=sys.stderr)

    def line(self, elapsed: float) -> str:
        """``N jobs in S s: X ok, Y failed[, Z held][, W removed][; J answered from the journal]; summary in F``."""
        failed = self.failures - self.counts["held"] - self.counts["removed"]
        parts = [f"{self.counts['ok']} ok", f"{failed} failed"]
        parts += [f"{self.counts[k]} {k}" for k in ("held", "removed") if self.counts[k]]
        journal = f"; {self.journaled} answered from the journal" if self.journaled else ""
        return f"{self.done} jobs in {elapsed:.1f} s: {', '.join(parts)}{journal}; summary in {self.out.name}"


def _process_order(line: str) -> tuple[int, str]:
    """``"1.12 (exit code 3)"`` sorts by its process number, so the list reads in queue order."""
    number = line.split(" ", 1)[0].rpartition(".")[2]
    return (int(number) if number.isdigit() else -1, line)


def outcome_record(job_id: str, result: Result, success_code: int = 0) -> dict[str, Any]:
    """One summary line: how the job ended, its times, and which slave on which host ran it; an exit with the
    job's ``success_exit_code`` is a success, as Condor (and DAGMan) count it."""
    if result.error is not None:
        error = result.error
        why = f"not started: {error.message}" if error.type == "JobSetupError" else f"{error.type}: {error.message}"
        return {"job": job_id, "status": "failed", "why": why, "slave": result.slave_id, "journaled": result.journaled}
    outcome = result.value
    if not isinstance(outcome, runner.JobOutcome):
        return {"job": job_id, "status": "failed", "why": "the slave sent no job outcome", "slave": result.slave_id}
    if outcome.signal is not None:
        why = f"killed by signal {outcome.signal}"
    elif outcome.exit_code != success_code:
        why = f"exit code {outcome.exit_code}"
    else:
        why = "; ".join(outcome.output_errors) if outcome.output_errors else ""
    return {
        "job": job_id,
        "status": "ok" if outcome.succeeded(success_code) else "failed",
        "why": why,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "started": outcome.started,
        "ended": outcome.ended,
        "seconds": round(outcome.ended - outcome.started, 6),
        "slave": result.slave_id,
        "host": outcome.host,
        "pid": outcome.pid,
        "outputs": list(outcome.outputs),
        "output_errors": list(outcome.output_errors),
        "fetched_bytes": outcome.fetched_bytes,
        "journaled": result.journaled,
    }

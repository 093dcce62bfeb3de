"""Slaves that fail before doing any work: count them, so a computation stops instead of restarting them for ever.

A slave whose set-up fails (a slave algorithm that raises before its loop, a
script that does not import on the slave, a missing library) exits non-zero;
batch systems and the local back end start it again, by design, so the same
failure repeats for ever while the master waits. :class:`SetupFailures`
watches the back end's jobs: a back end that counts each job's failed runs
is read exactly (the local back end restarts a slave within half a second,
so one that fails fast can fail and restart between two looks); for one that
does not, each time a job is seen to have exited with a failure counts one,
and once ``limit`` runs have failed while the computation has not yet had a single result, :meth:`problem` names the
failure (the job's last error line). A computation that has had results
never stops this way: its slaves can work, and one that fails later is the
black-hole and retry rules' business.
"""

from __future__ import annotations

from collections.abc import Iterable

from mwpy import safe_text
from mwpy.backends import Job, JobState

#: Failed slave runs, with no result yet, after which a computation gives up.
SETUP_FAILURE_LIMIT = 3


class SetupFailures:
    """Counts failed slave runs seen in successive looks at a back end's jobs."""

    def __init__(self, limit: int = SETUP_FAILURE_LIMIT) -> None:
        self.limit = limit
        self.count = 0
        self.last_reason: str | None = None
        self._reported: set[str] = set()  # jobs whose current failure was counted
        self._counted: dict[str, int] = {}  # failed runs already counted, for back ends that count them

    def look(self, jobs: Iterable[Job]) -> None:
        """One look at the jobs: a job that failed since it was last seen running counts once."""
        for job in jobs:
            if job.failed_runs is not None:
                new = job.failed_runs - self._counted.get(job.job_id, 0)
                if new > 0:
                    self._counted[job.job_id] = job.failed_runs
                    self.count += new
                    self.last_reason = job.reason
            elif job.state is JobState.RUNNING:  # its next failure is a new one
                self._reported.discard(job.job_id)
            elif job.reason is not None and job.job_id not in self._reported:
                self._reported.add(job.job_id)
                self.count += 1
                self.last_reason = job.reason

    def problem(self, results_so_far: int) -> str | None:
        """Why to stop, or None: ``limit`` failed runs and not one result yet."""
        if results_so_far or self.count < self.limit:
            return None
        last = safe_text.one_line(str(self.last_reason))  # quotes the slave: printed and raised
        return f"{self.count} slave runs failed before any task had a result; the last one {last}"

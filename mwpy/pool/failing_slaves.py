"""Slaves that fail before doing any work: count them, so a computation stops instead of restarting them for ever.

A slave whose set-up fails (a slave algorithm that raises before its loop, a
script that does not import on the slave, a missing library) exits non-zero;
batch systems and the local back end start it again, by design, so the same
failure repeats for ever while the master waits. :class:`SetupFailures`
watches the back end's jobs: a back end that counts each job's failed runs
is read exactly (the local back end counts its restarts, which come within
half a second, so a slave that fails fast can fail and restart between two
looks; the Condor back end counts them from the jobs' user log); for one
that does not (a Condor job without a user log), each time a job is seen to have exited with a failure counts one,
and once ``limit`` runs have failed while the computation has not yet had a
single result, :meth:`problem` names the failure (the job's last error line).
Once a slave has connected, only runs that ended because the slave algorithm
itself raised (exit status ``ALGORITHM_ERROR``; a task's exceptions are
caught and reported, never that) count: a slave that dies in a task (a
segfault, ``os._exit``) is the allowed-failures rule's business. A
computation that has had results never stops this way.
"""

from __future__ import annotations

from collections.abc import Iterable

from mwpy import safe_text
from mwpy.backends import Job, JobState
from mwpy.wire.protocol import ExitCode

#: Failed slave runs, with no result yet, after which a computation gives up.
SETUP_FAILURE_LIMIT = 3


class SetupFailures:
    """Counts failed slave runs seen in successive looks at a back end's jobs."""

    def __init__(self, limit: int = SETUP_FAILURE_LIMIT) -> None:
        self.limit = limit
        self.count = 0
        #: Of those, runs whose slave algorithm raised (``ALGORITHM_ERROR``): a set-up failure even after a connect.
        self.algorithm_errors = 0
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
                    self._failed(job, new)
            elif job.state is JobState.RUNNING:  # its next failure is a new one
                self._reported.discard(job.job_id)
            elif job.reason is not None and job.job_id not in self._reported:
                self._reported.add(job.job_id)
                self._failed(job, 1)

    def _failed(self, job: Job, runs: int) -> None:
        """``runs`` more failed runs of ``job``, the last of which its view describes."""
        self.count += runs
        if job.exit_code == ExitCode.ALGORITHM_ERROR:
            self.algorithm_errors += runs
        self.last_reason = job.reason

    def problem(self, results_so_far: int, *, slaves_connected: int = 0) -> str | None:
        """Why to stop, or None: ``limit`` failed set-up runs and not one result yet.

        ``slaves_connected``: slaves that ever connected; once one has, only the
        runs whose slave algorithm raised are set-up failures.
        """
        failures = self.algorithm_errors if slaves_connected else self.count
        if results_so_far or failures < self.limit:
            return None
        last = safe_text.one_line(str(self.last_reason))  # quotes the slave: printed and raised
        return f"{self.count} slave runs failed before any task had a result; the last one {last}"

"""The Condor back end follows the slave jobs' user log on the real pool (issue 24 item 3).

After one query of the schedd, what happens to the jobs -- one finishes, one is
held and released, one is removed -- reaches ``CondorBackend.jobs()`` through
``slaves.log`` (a ``condor_hold`` logs no reason: that one is asked of the
schedd); a log that is truncated sends the back end back to the schedd. The
jobs run ``/bin/sleep`` and ``/bin/true`` from the execute node: no master is
needed, only the file slaves.sub transfers.
"""

from __future__ import annotations

from pathlib import Path

import htcondor2
import pytest

from mwpy.backends import Job, JobState, Launch
from mwpy.backends.htcondor import CondorBackend
from mwpy.names import SLAVES_LOG
from tests.condor_support import RESOURCE, Pool, computation, member_id, query, retried
from tests.support import wait_until

pytestmark = pytest.mark.condor

#: Long enough that the test never waits for the next reconciling query.
NEVER = 24 * 3600.0


def _launch(workdir: Path, executable: str, *arguments: str) -> Launch:
    return Launch(member_id(workdir), str(workdir / RESOURCE), executable, list(arguments), [])


def _act(action: htcondor2.JobAction, job: str) -> None:
    retried(lambda: htcondor2.Schedd().act(action, [job], reason="mwpy test"))


def _states(backend: CondorBackend) -> dict[str, JobState]:
    return {job.job_id: job.state for job in backend.jobs()}


def _job(backend: CondorBackend, job_id: str) -> Job | None:
    return next((job for job in backend.jobs() if job.job_id == job_id), None)


def test_removed_held_released_and_finished_jobs_are_seen_through_the_log_with_one_query(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    (condor_workdir / RESOURCE).write_text("{}\n", encoding="utf-8")  # only transferred: the jobs never read it
    backend = CondorBackend(
        member_id(condor_workdir), resource_file=str(condor_workdir / RESOURCE), reconcile_every=NEVER
    )
    assert backend.jobs() == []
    backend.submit(_launch(condor_workdir, "/bin/sleep", "600"), 3)
    sleepers = sorted(_states(backend))
    backend.submit(_launch(condor_workdir, "/bin/true"), 1)
    assert len(sleepers) == 3
    assert len(_states(backend)) == 4  # known before the log says so: never submitted twice

    def settled() -> bool:
        states = _states(backend)
        return set(states) == set(sleepers) and set(states.values()) == {JobState.RUNNING}

    wait_until(settled, 120, "three sleepers running and the one that exits 0 gone", interval=0.5)
    assert backend.queries["jobs"] == 1, backend.queries  # everything since the first look came from the log
    held, removed, _ = sleepers
    _act(htcondor2.JobAction.Hold, held)  # its log event has no reason: the back end asks the schedd for it
    wait_until(lambda: _states(backend).get(held) is JobState.HELD, 60, "the hold")
    job = _job(backend, held)
    (ad,) = query(f"{computation(condor_workdir)} && ClusterId == {held.split('.')[0]} && ProcId == 0", ["HoldReason"])
    assert job is not None
    assert job.reason == (ad.get("HoldReason") or "held"), (job, ad)
    asked = backend.queries["jobs"]
    _act(htcondor2.JobAction.Release, held)
    wait_until(lambda: _states(backend).get(held) in (JobState.IDLE, JobState.RUNNING), 60, "the release")
    _act(htcondor2.JobAction.Remove, removed)
    wait_until(lambda: removed not in _states(backend), 60, "the removal")
    assert backend.queries["jobs"] == asked, backend.queries  # the release and the removal: from the log

    (condor_workdir / SLAVES_LOG).write_text("", encoding="utf-8")  # truncated: the back end asks the schedd
    assert set(_states(backend)) == set(sleepers) - {removed}
    assert backend.queries["jobs"] == asked + 1, backend.queries
    backend.remove(list(_states(backend)))
    wait_until(lambda: not _states(backend), 60, "the jobs removed")
    backend.close()

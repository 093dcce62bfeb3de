"""The overseer's third view on the real pool: which slave jobs have a slave connected to the master.

Slaves started by Condor report their job id (from the job ad) when they
connect; the master lists them in the resource file (``condor_jobs_connected``),
``mwpy status --json`` and the event log. The overseer removes and replaces a
job that has run longer than ``--connect-limit`` without its slave connecting:
here, a slave on node 2 that cannot reach a master listening on the submit
node's loopback (docs/condor.md, "What a site's network needs").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwpy.backends import JobState
from mwpy.backends.htcondor import CondorBackend
from mwpy.observe import events
from mwpy.overseer import Decision, Limits, Overseer, Verdict
from tests import test_condor_nodes
from tests.condor_support import (
    RESOURCE,
    Pool,
    job_states,
    logs,
    member_id,
    read_resource,
    setup_workdir,
    status_json,
    submit_master,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until
from tests.test_condor_overseer import submit_gated_master

pytestmark = pytest.mark.condor

#: The pool with its second node (the fixture of tests/test_condor_nodes.py).
two_nodes = test_condor_nodes.two_nodes
#: How long the test lets a slave job run without connecting: enough for a slave that can connect to do so.
CONNECT_LIMIT = 20.0


def test_the_master_publishes_the_condor_job_ids_of_its_connected_slaves(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Guards: the resource file, ``mwpy status --json`` and the event log name the jobs whose slaves are in."""
    master, release = submit_gated_master(condor_pool, condor_workdir)
    overseer = Overseer(condor_workdir / RESOURCE, CondorBackend(member_id(condor_workdir)), Limits())
    wait_resource(condor_workdir, lambda r: r.slaves_needed == 3, "the master to ask for 3 slaves")

    def all_connected() -> list[str]:
        overseer.reconcile()
        record = read_resource(condor_workdir)
        return record.condor_jobs_connected if record is not None and len(record.condor_jobs_connected) == 3 else []

    connected = wait_until(all_connected, 120, "3 slaves connected with their job ids", interval=0.5)
    jobs = job_states(condor_workdir)
    assert set(connected) == set(jobs), (connected, jobs, logs(condor_workdir))
    report = status_json(condor_workdir, condor_pool.env())
    assert report["condor_jobs_connected"] == connected
    assert {job["job_id"] for job in report["slave_job_list"]} == set(connected)
    audit = next(condor_workdir.glob("master.*.audit")).read_text(encoding="utf-8")
    for job in connected:
        assert f", Condor job {job}, mwpy" in audit, audit

    release.touch()
    wait_until(lambda: overseer.reconcile().verdict is Verdict.FINISHED and not job_states(condor_workdir), 120,
               "the computation to finish and its slave jobs to leave", interval=1.0)  # fmt: skip
    assert "squares [0, 1, 4]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    assert read_resource(condor_workdir) is not None


def test_a_slave_job_that_never_connects_is_removed_and_replaced_and_the_overseer_says_why(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """Guards (issue 11 item 7): demand, queue and connected slaves reconciled on the real pool.

    The master listens on 127.0.0.1 only; the slave job runs on node 2, where nothing answers
    there, and its slave keeps trying (``--mw-connect-timeout 3600``): Condor sees a running job,
    the master sees no slave. Past the connect limit the overseer removes that job and submits
    another in the same pass, and its log line names the job and the reason.
    """
    setup_workdir(two_nodes, condor_workdir)
    submit_master(
        two_nodes,
        condor_workdir,
        "master_options=--mw-master-host 127.0.0.1 --mw-slave-argument=--mw-connect-timeout=3600",
        "program_args=--seed 5 --max-trial-sets 4 --trials-per-set 1000 --target 1",
    )
    wait_resource(condor_workdir, lambda record: record.slaves_needed >= 1, "the master to ask for slaves")
    lines: list[str] = []
    backend = CondorBackend(member_id(condor_workdir), extra={"requirements": "(MwpyNode =?= 2)"})
    overseer = Overseer(
        condor_workdir / RESOURCE, backend, Limits(max_jobs=1, max_idle=1, batch=1), log=lines.append,
        connect_limit=CONNECT_LIMIT,
    )  # fmt: skip
    assert overseer.reconcile().submitted == 1
    [first] = wait_until(
        lambda: [job for job in backend.jobs() if job.state is JobState.RUNNING], 120, "the slave job running on node 2"
    )

    def removing() -> Decision | None:
        decision = overseer.reconcile()
        return decision if decision.removed else None

    decision = wait_until(removing, 120 + CONNECT_LIMIT, "the never-connected job removed", interval=1.0)
    assert decision is not None
    assert (decision.removed, decision.submitted) == (1, 1), (decision, lines)
    assert f"job {first.job_id} running" in lines[-1], lines
    assert "its slave never connected: removed, replacing" in lines[-1], lines
    wait_until(lambda: first.job_id not in job_states(condor_workdir), 60, "the removed job gone", interval=0.5)
    assert len(job_states(condor_workdir)) == 1  # its replacement
    audit = next(condor_workdir.glob("master.*.audit")).read_text(encoding="utf-8")
    assert "NEW-CLIENT" not in audit  # nobody got through
    record = read_resource(condor_workdir)
    assert record is not None
    assert record.condor_jobs_connected == []


def test_slave_connected_events_carry_the_condor_job_id(condor_pool: Pool, condor_workdir: Path) -> None:
    """Guards (issue 12): the event log's slave-connected lines name the slave's Condor job."""
    setup_workdir(condor_pool, condor_workdir)
    master = submit_master(
        condor_pool,
        condor_workdir,
        "master_options=--mw-events events.jsonl",
        "program_args=--seed 3 --max-trial-sets 4 --trials-per-set 20000 --target 2",
    )
    cluster = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "slaves=2")
    jobs = {f"{cluster}.0", f"{cluster}.1"}  # named by condor_submit: no race with a quick computation's end
    assert "from 80000 points" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    connected = [event for event in events.read_events(condor_workdir / "events.jsonl")
                 if isinstance(event, events.SlaveConnected)]  # fmt: skip
    assert connected, logs(condor_workdir)
    assert {event.job for event in connected} <= jobs, (connected, jobs)

"""Issue 24 item 2 on the real pool: slave jobs with a short lifetime drain, leave by plan and are replaced.

The master passes ``--mw-slave-lifetime`` to the slave jobs the overseer
submits; each counts it from its job's start (``JobCurrentStartDate`` in its
job ad), leaves before it with exit 0 (so the job leaves the queue instead of
being requeued) and the overseer submits a fresh job. What is asserted is read
from sources that are always written: the master's output, the slaves' user
log, their .err files and the marks the tasks leave.
"""

from __future__ import annotations

from pathlib import Path

import htcondor2
import pytest

from tests.condor_support import (
    Pool,
    event_job,
    job_events,
    job_life,
    logs,
    setup_workdir,
    submit_master,
    wait_gone,
    wait_master_done,
)
from tests.test_condor_overseer import start_overseer, stop

pytestmark = pytest.mark.condor

#: Tasks of 0.2-0.4 s: some 45 s of work for two slaves whose lifetime is 15 s.
COUNT = 150
JOBS = 2


def test_slave_jobs_leave_by_plan_before_their_lifetime_ends_and_the_overseer_replaces_them(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    marks = condor_workdir / "marks"
    marks.mkdir()
    condor_pool.give(marks)
    setup_workdir(condor_pool, condor_workdir, ["lifetimes.py"])
    master = submit_master(
        condor_pool,
        condor_workdir,
        "program=lifetimes.py",
        f"program_args={marks} {COUNT}",
        "master_options=--mw-slave-lifetime 15",
    )
    overseer, out = start_overseer(
        condor_pool, condor_workdir, "overseer.out", "--max-jobs", str(JOBS), "--interval", "1"
    )
    try:
        output = wait_master_done(condor_workdir, master, timeout=300)
        wait_gone(condor_workdir, "slave", 60)
    finally:
        stop(overseer)
    assert f"squares {[v * v for v in range(COUNT)]}" in output, logs(condor_workdir)
    assert f"results {COUNT} {list(range(1, COUNT + 1))}" in output  # every result once
    for value in range(COUNT):  # every task started once and ran to its end on that slave: none killed mid-run
        lines = (marks / f"ran-{value}").read_text(encoding="utf-8").split()
        assert lines[0::2] == ["start", "end"], (value, lines)
        assert lines[1] == lines[3], (value, lines)

    events = job_events(condor_workdir)
    lives = {job: job_life(events, job) for job in sorted({event_job(e) for e in events})}
    assert len(lives) > JOBS, (lives, out.read_text())  # slave jobs were replaced
    # No run ended by a signal, and every job that ended left the queue with exit 0. Around the end of the
    # computation a job may end 3 (UNREACHABLE: it started as the finished master left), or still be running after
    # the overseer's finish grace and be removed (evicted, then removed); the marks above show no task was cut.
    for life in lives.values():
        ends = [step for step in life if step.startswith(("ended", "requeued"))]
        assert set(ends) <= {"ended exit 0", "requeued exit 3"}, (lives, logs(condor_workdir))
        assert "evicted" not in life or life[-1] == "removed", (lives, logs(condor_workdir))
    retired = [job for job in lives if "leaving by plan" in _stderr(condor_workdir, job)]
    assert len(retired) >= JOBS, logs(condor_workdir)  # the first two at least lived to their lifetime's end
    for job in retired:  # each left by plan: one run, exit 0, the reason in its .err
        assert lives[job] == ["started", "ended exit 0"], (lives, logs(condor_workdir))
        err = _stderr(condor_workdir, job)
        assert "in its lifetime (--mw-slave-lifetime 15 s;" in err, err
    said = [
        str(event.get("Info", ""))
        for event in events
        if event.type == htcondor2.JobEventType.GENERIC and "leaving by plan" in str(event.get("Info", ""))
    ]
    assert len(said) >= len(retired), said  # each said why in its job's user log too (Chirp)


def _stderr(workdir: Path, job: str) -> str:
    """A slave job's .err file; "" for a job that never ran (submitted near the end, removed before it started)."""
    path = workdir / f"slave.{job}.err"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

"""Graceful eviction on the real pool: ``condor_vacate_job`` on a slave that holds a window of tasks.

Condor sends the job its soft-kill signal (SIGTERM). The slave hands back the
tasks queued in its window, the master re-queues them at once (its client
timeout is far beyond the test's deadline, so nothing else could have), the
job goes back to idle and runs again, and the computation ends with every
result exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.condor_support import (
    Pool,
    finished_jobs,
    in_order,
    job_life,
    job_states,
    logs,
    setup_workdir,
    starts,
    submit_master,
    wait_events,
    wait_master_done,
)
from tests.support import audit_lines, wait_until

pytestmark = pytest.mark.condor

COUNT = 4


def test_a_vacated_slave_hands_its_window_back_its_job_is_requeued_and_no_result_is_lost_or_doubled(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    setup_workdir(condor_pool, condor_workdir, ["evictable.py"])
    master = submit_master(
        condor_pool, condor_workdir, "program=evictable.py", f"program_args={condor_workdir} {COUNT}",
        f"master_options=--mw-slave-window {COUNT} --mw-client-timeout 600",
    )  # fmt: skip
    cluster = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=evictable.py", "slaves=1")
    job = f"{cluster}.0"
    started = condor_workdir / "started-0"
    wait_until(started.exists, 90, f"slave job {job} to start task 0\n{logs(condor_workdir)}", interval=0.2)
    audit = condor_workdir / f"master.{master}.0.audit"

    vacate = condor_pool.inside(condor_workdir, "condor_vacate_job", job)
    assert vacate.returncode == 0, vacate.stdout + vacate.stderr

    def handed_back() -> list[str]:
        return [line for line in audit_lines(audit.read_text(encoding="utf-8")) if "HANDED BACK" in line]

    lines = wait_until(handed_back, 60, f"the master to get the tasks back\n{logs(condor_workdir)}", interval=0.2)
    assert f"HANDED BACK {COUNT - 1} tasks unstarted" in lines[0]
    # The job was evicted, not removed or completed: it went back to idle and is started again.
    events = wait_events(condor_workdir, lambda events: starts(events)[job] >= 2, f"job {job} to start again")
    assert in_order(job_life(events, job), ["started", "evicted", "started"]), job_life(events, job)

    (condor_workdir / "release").touch()
    out = wait_master_done(condor_workdir, master)
    assert f"squares {[v * v for v in range(COUNT)]}" in out, logs(condor_workdir)
    assert f"results {COUNT} [1, 2, 3, 4]" in out, logs(condor_workdir)
    master_audit = audit_lines(audit.read_text(encoding="utf-8"))
    assert any("disconnected (left on a soft-kill signal" in line for line in master_audit), master_audit
    assert not any("client timeout" in line for line in master_audit), master_audit
    ads = finished_jobs(condor_workdir, expected=1)
    assert int(ads[job]["ExitCode"]) == 0, ads  # the second run ended with the computation
    assert not job_states(condor_workdir)

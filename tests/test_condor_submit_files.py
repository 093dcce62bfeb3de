"""submit/master.sub and submit/slaves.sub on a real HTCondor pool, submitted with condor_submit.

Each test lays its work folder out like the repository root (``submit/``,
``examples/``) and runs ``condor_submit submit/master.sub`` then
``condor_submit submit/slaves.sub`` there, as docs/condor.md tells a user to,
changing only submit macros with ``-a``. ``-a python=...`` names the pool's
Python with mwpy installed, as a user without mwpy in /usr/bin/python3 does.
"""

from __future__ import annotations

import math
import os
import re
import signal
from pathlib import Path

import pytest

from tests.condor_support import (
    DEADLINE,
    HELD,
    Pool,
    check_slaves_left_cleanly,
    in_order,
    job_events,
    job_life,
    job_states,
    logs,
    member_id,
    read_resource,
    restart_master_midway,
    setup_workdir,
    starts,
    status_json,
    submit_master,
    wait_events,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until

pytestmark = pytest.mark.condor


def test_master_sub_and_slaves_sub_run_monte_carlo_pi_and_every_slave_job_leaves(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    setup_workdir(condor_pool, condor_workdir)
    master = submit_master(
        condor_pool, condor_workdir, "program_args=--seed 2024 --max-trial-sets 40 --trials-per-set 50000 --target 6"
    )
    slaves = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "slaves=3")
    assert len(job_states(condor_workdir)) <= 3

    out = wait_master_done(condor_workdir, master)
    answer = re.search(r"pi ≈ (\d+\.\d+) ± \d+\.\d+ from (\d+) points", out)
    assert answer is not None, logs(condor_workdir)
    estimate, points = float(answer[1]), int(answer[2])
    assert points == 40 * 50000
    p = math.pi / 4
    assert abs(estimate - math.pi) < 4 * 4 * math.sqrt(p * (1 - p) / points)  # four standard errors

    ads = check_slaves_left_cleanly(condor_workdir, 3)
    assert {job.split(".")[0] for job in ads} == {str(slaves)}
    record = read_resource(condor_workdir)
    assert record is not None
    assert (record.finished, record.tasks_done) == (True, 40)
    assert record.member_id == member_id(condor_workdir)  # what slaves.sub put into +MwpyMemberId

    # `mwpy status` finds the computation's (now absent) slave jobs in the schedd.
    report = status_json(condor_workdir, condor_pool.env())
    assert report["status"] == "finished"
    assert report["slave_jobs"] == {"idle": 0, "running": 0, "held": 0, "total": 0}


def test_a_slave_that_exits_non_zero_is_requeued_and_the_computation_completes(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    marker = condor_workdir / "first-start-failed"  # written by the slave that fails (tests/programs/flaky.py)
    setup_workdir(condor_pool, condor_workdir, ["flaky.py"])
    master = submit_master(condor_pool, condor_workdir, "program=flaky.py")
    # One slave: the computation can only complete if Condor runs the failed job again.
    condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=flaky.py", "slaves=1")

    out = wait_master_done(condor_workdir, master)
    assert f"sum {sum(i * i for i in range(30))}" in out, logs(condor_workdir)
    check_slaves_left_cleanly(condor_workdir, 1)
    failed = marker.read_text(encoding="utf-8")
    life = job_life(job_events(condor_workdir), failed)
    assert in_order(life, ["started", "requeued exit 1", "started", "ended exit 0"]), life  # kept and started again


def test_slaves_submitted_before_the_master_wait_on_hold_and_then_complete(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """The resource file and mwpy.pyz do not exist yet: the slaves' input transfer fails and they are held
    (code 13); slaves.sub's periodic_release lets them try again once the master has written both."""
    setup_workdir(condor_pool, condor_workdir)
    condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "slaves=2")
    wait_until(
        lambda: list(job_states(condor_workdir).values()) == [HELD, HELD], 60, "both slave jobs held", interval=0.5
    )
    master = submit_master(
        condor_pool, condor_workdir, "program_args=--seed 7 --max-trial-sets 10 --trials-per-set 2000"
    )
    out = wait_master_done(condor_workdir, master)
    assert "from 20000 points" in out, logs(condor_workdir)
    check_slaves_left_cleanly(condor_workdir, 2)


def test_a_master_restarted_by_condor_writes_a_fresh_file_and_resumes_with_requeued_slaves(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    release = condor_workdir / "release"
    setup_workdir(condor_pool, condor_workdir, ["journaled.py"])
    count = 12
    master = submit_master(
        condor_pool,
        condor_workdir,
        "program=journaled.py",
        f"program_args={release} {count}",
        "master_options=--mw-journal master.journal --mw-slave-window 1",
    )
    slaves = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=journaled.py", "slaves=2")
    slave_jobs = {f"{slaves}.0", f"{slaves}.1"}
    # Mid-run: the first half done (and journaled), both slaves holding a task of the second half.
    before = wait_resource(
        condor_workdir,
        lambda r: r.tasks_done == count // 2 and r.tasks_running == 2,
        "half of the tasks done and two running",
    )
    # Condor's record of the first starts, read before the restart: whatever it writes later is after it.
    seen = len(wait_events(condor_workdir, lambda events: set(starts(events)) == slave_jobs, "both execute events"))

    condor_pool.restart()  # every daemon and job killed; the queue survives, as after a reboot

    after = wait_resource(
        condor_workdir,
        lambda r: r.master_pid != before.master_pid and not r.finished,
        "a fresh resource file from the restarted master",
    )
    assert after.timestamp > before.timestamp
    assert after.secret != before.secret  # a new master run, not the old file
    assert set(job_states(condor_workdir, "master")) == {f"{master}.0"}  # the same job, started again
    release.touch()

    out = wait_master_done(condor_workdir, master, timeout=DEADLINE + 60)
    assert f"sum {sum(i * i for i in range(count))}, journaled " in out, logs(condor_workdir)
    journaled = re.search(r"journaled (\d+) of", out)
    assert journaled is not None
    assert int(journaled[1]) >= count // 2  # the restarted master did not run the first half again
    check_slaves_left_cleanly(condor_workdir, 2)
    # Both slaves were requeued and ran again: an execute event of each after the restart, in their user log.
    assert set(starts(job_events(condor_workdir)[seen:])) == slave_jobs, logs(condor_workdir)


def test_a_master_killed_with_sigkill_is_started_again_by_condor_and_loses_no_running_task(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """master.sub with a journal, two slaves running keyed tasks (tests/programs/restartable.py); the master
    process is killed with SIGKILL (the kernel out of memory, a kill -9). Condor starts the master job again
    (on_exit_remove), the slaves outlive their master, find the new one in the submit machine's resource file
    (over Chirp: theirs is a copy) and hand the tasks they ran over: every task runs once, no slave job runs
    twice, and the computation ends once (one termination in the master's user log).

    Before, master.sub took a killed master out of the queue, and the slaves waited at the old address.
    """
    restart_master_midway(condor_pool, condor_workdir, lambda master_pid: os.kill(master_pid, signal.SIGKILL))


def test_a_schedd_restart_restarts_the_master_and_loses_no_running_task(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """The same with the schedd killed (SIGKILL, a crash) and started again by condor_master: the slave jobs'
    starters keep running and reconnect within their job lease (HTCondor's own promise), the master job is
    started again, and the slaves hand their work over to it."""

    def crash_the_schedd(master_pid: int) -> None:
        here = os.readlink("/proc/self/ns/net")  # the first node's schedd, not node 2's (its own network)
        root = os.stat(condor_pool.facts["root"])
        for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
            try:
                found = Path(f"/proc/{pid}/comm").read_text().strip() == "condor_schedd"
                found = found and os.readlink(f"/proc/{pid}/ns/net") == here
                found = found and os.stat(f"/proc/{pid}/root").st_ino == root.st_ino
            except OSError:
                continue
            if found:
                os.kill(pid, signal.SIGKILL)
                return
        raise AssertionError("no condor_schedd")

    restart_master_midway(condor_pool, condor_workdir, crash_the_schedd)

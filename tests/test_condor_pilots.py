"""Issue 24: Condor-native pilots, on the real pool.

Item 5, no zombie pilots: once the master job has left the queue
(``condor_rm``), the overseer removes every slave job of the computation in
its next reconciliation and says how the master left, and so does ``mwpy
status``; without an overseer, the slaves of a removed master leave the queue
by themselves (exit 0) within a minute (the master, told by the schedd that
its job was removed, says so and tells them to leave), instead of being
started again and again, while a master Condor starts again (a pool restart)
keeps them. What is asserted is read from sources that are
always written: the resource file, the overseer's output, the slaves' user
log and the schedd's queue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import htcondor2
import pytest

from tests.condor_support import (
    DEADLINE,
    FS_BINDING,
    Pool,
    computation,
    event_job,
    job_events,
    job_life,
    job_states,
    logs,
    query,
    read_resource,
    setup_workdir,
    status_json,
    submit_master,
    wait_gone,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until
from tests.test_condor_overseer import start_overseer, stop, submit_gated_master

pytestmark = pytest.mark.condor

JOB_TERMINATED = htcondor2.JobEventType.JOB_TERMINATED


def remove_master(pool: Pool, workdir: Path, cluster: int) -> None:
    """``condor_rm CLUSTER`` as a user types it: the master job leaves the queue, its resource file stays."""
    done = pool.inside(workdir, "condor_rm", str(cluster))
    assert done.returncode == 0, done.stderr
    wait_until(lambda: not job_states(workdir, "master"), 60, "the master job to leave the queue", interval=0.5)


def slave_lives(workdir: Path) -> dict[str, list[str]]:
    """What happened to each slave job, from the slaves' user log."""
    events = job_events(workdir)
    return {job: job_life(events, job) for job in sorted({event_job(e) for e in events})}


def test_the_overseer_removes_every_slave_job_once_the_master_job_is_removed(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    master, _ = submit_gated_master(condor_pool, condor_workdir)  # its tasks never finish: never released
    record = wait_resource(condor_workdir, lambda r: r.slaves_needed == 3, "the master to ask for 3 slaves")
    assert record.master_condor_job == f"{master}.0"  # the master publishes its own job id
    overseer, out = start_overseer(condor_pool, condor_workdir, "overseer.out", "--interval", "1")
    try:
        wait_until(
            lambda: (r := read_resource(condor_workdir)) is not None and r.slaves_connected["unordered"] == 3,
            90,
            "3 slaves connected",
            interval=0.5,
        )
        remove_master(condor_pool, condor_workdir, master)
        assert overseer.wait(90) == 1, out.read_text()
    finally:
        stop(overseer)
    text = out.read_text()
    assert f"master job {master}.0 removed" in text, text
    assert "the computation has no master; removed its 3 slave jobs" in text, text
    wait_gone(condor_workdir, "slave", 60)
    lives = slave_lives(condor_workdir)
    assert len(lives) == 3, lives
    assert all(life[-1] == "removed" for life in lives.values()), lives  # removed, not ended by themselves

    report = status_json(condor_workdir, condor_pool.env())
    assert report["status"] == "master gone", report
    assert report["master_condor_job"] == f"{master}.0"
    assert report["master_gone"].startswith(f"master job {master}.0 removed"), report
    assert report["slave_jobs"]["total"] == 0


def submit_static(pool: Pool, workdir: Path, release: Path) -> int:
    """docs/condor.md's static recipe: master.sub (gated.py, 2 tasks that wait for ``release``), then slaves.sub
    with 2 slaves and its defaults; returns once both slaves are connected. The master's bindings reach the
    test pool's older schedd with FS_BINDING."""
    setup_workdir(pool, workdir, ["gated.py"])
    master = submit_master(
        pool, workdir, "program=gated.py", f"program_args={release} 2", f"extra_environment={FS_BINDING}"
    )
    pool.condor_submit(workdir, "submit/slaves.sub", "slaves=2", "program=gated.py")
    wait_resource(workdir, lambda r: r.slaves_connected["unordered"] == 2, "2 slaves connected", timeout=90)
    return master


def test_slaves_without_an_overseer_leave_the_queue_within_a_minute_of_condor_rm_of_their_master(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """condor_rm's SIGTERM: the master asks the schedd, finds its job removed, says so in its resource file
    (``master_removed``) and tells its slaves to leave; every slave job leaves by itself (exit 0, on_exit_remove)
    within 60 s with at most 2 starts, not after --mw-abandon-after and 6 restarts."""
    master = submit_static(condor_pool, condor_workdir, condor_workdir / "release")
    remove_master(condor_pool, condor_workdir, master)

    wait_gone(condor_workdir, "slave", 60)  # by themselves: nobody removes them
    lives = slave_lives(condor_workdir)
    assert len(lives) == 2, lives
    assert all(life[-1] == "ended exit 0" for life in lives.values()), (lives, logs(condor_workdir))
    assert all(life.count("started") <= 2 for life in lives.values()), lives
    record = read_resource(condor_workdir)
    assert record is not None, logs(condor_workdir)
    assert (record.master_removed, record.finished) == (True, False)
    audit = (condor_workdir / f"master.{master}.0.audit").read_text()
    assert "MASTER JOB REMOVED (condor_rm)" in audit, audit
    report = status_json(condor_workdir, condor_pool.env())
    assert report["master_gone"] == f"master job {master}.0 removed (its resource file says so)", report


def test_a_pool_restart_keeps_the_slaves_of_the_master_condor_starts_again(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """A schedd that shuts down sends the master SIGTERM too, but its job is not removed: the master says
    nothing of the kind, Condor starts it again, and the same slave jobs serve it to the end."""
    release = condor_workdir / "release"
    master = submit_static(condor_pool, condor_workdir, release)
    first = read_resource(condor_workdir)
    assert first is not None
    first_pid, slave_jobs = first.master_pid, set(slave_lives(condor_workdir))

    condor_pool.restart()
    again = wait_resource(
        condor_workdir,
        lambda r: r.master_pid != first_pid and r.slaves_connected["unordered"] == 2,
        "the restarted master with both slaves back",
        timeout=DEADLINE,
    )
    assert not again.master_removed
    release.touch()
    assert "squares [0, 1]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    wait_gone(condor_workdir, "slave", 60)
    lives = slave_lives(condor_workdir)
    assert set(lives) == slave_jobs, lives  # the same jobs: none left the queue, none was added
    assert all(life[-1] == "ended exit 0" for life in lives.values()), (lives, logs(condor_workdir))


def test_an_overseer_whose_master_job_never_writes_its_resource_file_leaves_the_queue(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """``--master-job``: the master job exits before it writes its file (its program is missing); the overseer,
    which would otherwise wait for the file, says how the master left, exits 1 and leaves the queue."""
    setup_workdir(condor_pool, condor_workdir)
    master = condor_pool.condor_submit(
        condor_workdir, "submit/master.sub", f"python={condor_pool.job_python}", "program=no_such_program.py"
    )
    overseer = condor_pool.condor_submit(
        condor_workdir,
        "submit/overseer.sub",
        f"python={condor_pool.facts['venv_python']}",
        "interval=1",
        f"overseer_options=--master-job {master}.0",
        f"extra_environment={FS_BINDING}",
    )
    wait_until(lambda: not query(computation(condor_workdir)), DEADLINE, "master and overseer to leave", interval=0.5)
    ends = [e for e in job_events(condor_workdir, f"overseer.{overseer}.0.log") if e.type == JOB_TERMINATED]
    assert [(e.get("TerminatedNormally"), e.get("ReturnValue")) for e in ends] == [(True, 1)], logs(condor_workdir)
    out = (condor_workdir / f"overseer.{overseer}.0.out").read_text(encoding="utf-8")
    assert f"giving up: master job {master}.0 exited with status 2" in out, out
    assert not (condor_workdir / "resource.json").exists()


def test_condor_q_shows_what_each_slave_does(condor_pool: Pool, condor_workdir: Path) -> None:
    """Item 3: the slave publishes its state into its job ad over Chirp, and connect/leave lines into its user log."""
    gate = condor_workdir / "gate"
    setup_workdir(condor_pool, condor_workdir, ["metrics_gated.py"])
    master = submit_master(condor_pool, condor_workdir, "program=metrics_gated.py", f"program_args={gate}")
    condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "slaves=1", "program=metrics_gated.py")
    attributes = ["ClusterId", "ProcId", "MwpyState", "MwpyTasksDone", "MwpyMaster", "MwpyLastTaskTime"]

    def published(state: str, done: int) -> list[Any]:
        ads = query(computation(condor_workdir, "slave"), attributes)
        return ads if ads and ads[0].get("MwpyState") == state and ads[0].get("MwpyTasksDone") == done else []

    # Its five tasks answered, the master waits for the gate: the slave is connected and has nothing to do.
    (ad,) = wait_until(lambda: published("idle", 5), 90, "the slave to publish idle, 5 tasks done", interval=0.5)
    record = read_resource(condor_workdir)
    assert record is not None
    assert ad["MwpyMaster"] == f"{record.master_host}:{record.master_port}"
    assert isinstance(ad["MwpyLastTaskTime"], int)
    shown = condor_pool.inside(
        condor_workdir,
        "condor_q",
        "-constraint",
        computation(condor_workdir, "slave"),
        "-af",
        "MwpyState",
        "MwpyTasksDone",
    )
    assert shown.stdout.split() == ["idle", "5"], shown  # as a user types it

    gate.touch()
    assert "[0, 2, 4, 6, 8]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    wait_gone(condor_workdir, "slave", 60)
    lines = [
        str(event.get("Info", ""))
        for event in job_events(condor_workdir)
        if event.type == htcondor2.JobEventType.GENERIC
    ]
    assert any("connected to master" in line for line in lines), lines
    assert any("mwpy slave leaving: exit status 0 OK" in line for line in lines), lines

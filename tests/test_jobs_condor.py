"""``mwpy jobs`` on a real HTCondor pool: submit/jobs-master.sub in the scheduler universe, slaves.sub's slaves.

The work folder is laid out like the repository root and the commands are the
ones docs/jobs.md gives a user: ``condor_submit submit/jobs-master.sub -a
jobs=jobs.sub`` then ``condor_submit submit/slaves.sub -a
program=submit/mwpy_jobs.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import htcondor2
import pytest

from tests.condor_support import (
    COMPLETED,
    DEADLINE,
    FS_BINDING,
    POOL_TOOL,
    REMOVED,
    Pool,
    computation,
    finished_jobs,
    history,
    job_events,
    job_states,
    logs,
    query,
    remove_computation_jobs,
    setup_workdir,
    wait_gone,
    wait_master_done,
    wait_resource,
)
from tests.support import PROGRAMS, wait_until

pytestmark = pytest.mark.condor

JOB_TERMINATED = htcondor2.JobEventType.JOB_TERMINATED


def test_jobs_master_sub_runs_a_submit_file_s_jobs_on_reused_condor_slaves(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    setup_workdir(condor_pool, condor_workdir)
    shared = os.urandom(1_500_000)
    (condor_workdir / "shared.bin").write_bytes(shared)
    shutil.copy(PROGRAMS / "jobs" / "use_shared.sh", condor_workdir / "use_shared.sh")
    (condor_workdir / "jobs.sub").write_text(
        "executable = use_shared.sh\narguments = $(Process)\ntransfer_input_files = shared.bin\n"
        "should_transfer_files = YES\n"
        "output = out.$(Cluster).$(Process)\nlog = jobs.log\nqueue 8\n"
    )
    condor_pool.give(condor_workdir)

    master = condor_pool.condor_submit(condor_workdir, "submit/jobs-master.sub", f"python={condor_pool.job_python}")
    wait_resource(condor_workdir, lambda record: not record.finished, "the jobs master's resource file")
    condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=submit/mwpy_jobs.py", "slaves=2")
    out = wait_master_done(condor_workdir, master)

    assert "mwpy jobs: 8 jobs in" in out, logs(condor_workdir)
    assert "8 ok, 0 failed" in out, logs(condor_workdir)
    lines = [json.loads(line) for line in (condor_workdir / "jobs.sub.summary.jsonl").read_text().splitlines()]
    jobs = {line["job"]: line for line in lines if "job" in line}
    assert sorted(jobs) == sorted(f"{master}.{n}" for n in range(8))  # $(Cluster) is the master job's
    digest = hashlib.sha256(shared).hexdigest()
    for n in range(8):
        assert (condor_workdir / f"sum.{n}").read_text() == digest + "\n"
        assert (condor_workdir / f"big.{n}").read_bytes() == shared
    slaves = {line["slave"] for line in jobs.values()}
    assert lines[-1]["run"]["fetches"][digest] == len(slaves) <= 2, lines[-1]

    wait_gone(condor_workdir, "slave", 60)  # the slaves leave by themselves once the jobs are done
    ads = finished_jobs(condor_workdir, expected=2)
    assert all((ad["JobStatus"], ad["ExitCode"]) == (COMPLETED, 0) for ad in ads.values()), ads


def test_mwpy_jobs_pool_runs_a_submit_file_in_one_command_and_a_restarted_master_resumes_from_its_journal(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Nothing but the installed package and the submit file: the master and the overseer come from inside mwpy.

    A pool restart (a reboot: every daemon and every process in the pool's root stops, this command too)
    brings the master back from the queue; it answers the finished jobs from its journal and says so.
    """
    ran = condor_workdir / "ran.log"
    command, work = record_runs(condor_pool, condor_workdir, f"{ran} 1", "output = out.$(Process)\nqueue 12", "2")
    try:
        _run_restart_and_resume(condor_pool, condor_workdir, work, command, ran)
    finally:
        remove_computation_jobs(work)


def test_condor_rm_of_the_master_of_mwpy_jobs_pool_takes_the_overseer_and_the_slave_jobs_with_it(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Issue 24 item 5 for ``mwpy jobs --pool``: the master job removed mid-run, its overseer removes the slave
    jobs and leaves (its user log: exit 1), and the command says how the run ended and exits 1."""
    ran, never = condor_workdir / "ran.log", condor_workdir / "never"  # the jobs wait for a file never made
    command, work = record_runs(condor_pool, condor_workdir, f"{ran} 0 {never}", "queue 4", "2")
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = run.stderr.readline() if run.stderr is not None else ""
        found = re.search(r"master job (\d+)\.0 and overseer job (\d+)\.0", said)
        assert found is not None, said
        master, overseer = int(found[1]), int(found[2])
        wait_until(lambda: ran.exists() and len(ran.read_text().splitlines()) >= 2, DEADLINE, "2 jobs on slaves")
        removed = condor_pool.inside(condor_workdir, "condor_rm", str(master))
        assert removed.returncode == 0, removed.stderr
        out, err = run.communicate(timeout=DEADLINE)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 1, out + err
    assert f"the master job {master}.0 was removed from the queue" in err, err
    wait_until(lambda: not query(computation(work)), 60, "every job of the run to leave the queue", interval=0.5)
    ends = [e for e in job_events(work, f"overseer.{overseer}.0.log") if e.type == JOB_TERMINATED]
    assert [e.get("ReturnValue") for e in ends] == [1], logs(work)
    said = (work / f"overseer.{overseer}.0.out").read_text(encoding="utf-8")
    assert f"giving up: master job {master}.0 removed" in said, said
    slaves = history(computation(work, "slave"), ["ClusterId", "ProcId", "JobStatus"])
    assert slaves, "slave jobs ran"
    assert all(ad["JobStatus"] == REMOVED for ad in slaves), slaves


def record_runs(pool: Pool, folder: Path, arguments: str, queue: str, slaves: str) -> tuple[list[str], Path]:
    """``jobs.sub`` in ``folder``: record_run.sh's jobs (``$(Process) ARGUMENTS``) with ``queue`` last, given to
    the pool's user; the command that runs it as the user types it (``mwpy jobs jobs.sub --pool --slaves N``,
    inside the pool) and its work folder."""
    shutil.copy(PROGRAMS / "jobs" / "record_run.sh", folder / "record_run.sh")
    (folder / "jobs.sub").write_text(
        f"executable = record_run.sh\narguments = $(Process) {arguments}\nshould_transfer_files = YES\n"
        f"log = jobs.log\n{queue}\n"
    )
    pool.give(folder)
    tool = [sys.executable, str(POOL_TOOL), "exec", "--base", pool.facts["base"], "--cwd", str(folder)]
    command = [*tool, "--env", FS_BINDING, "--", "mwpy", "jobs", "jobs.sub", "--pool", "--slaves", slaves]
    return command, folder / "jobs.sub.mwpy"


def _run_restart_and_resume(pool: Pool, folder: Path, work: Path, command: list[str], ran: Path) -> None:
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    summary = folder / "jobs.sub.summary.jsonl"
    wait_until(lambda: summary.exists() and summary.read_text().count('"ok"') >= 3, 120, "three jobs done")
    said = run.stderr.readline() if run.stderr is not None else ""
    master = int(re.search(r"master job (\d+)\.0", said)[1])  # type: ignore[index]
    pool.restart()
    run.wait(timeout=60)
    wait_until(lambda: not job_states(work, "master"), 180, "the restarted master to finish", interval=1.0)
    out = (work / f"master.{master}.0.out").read_text()
    assert re.search(r"^mwpy jobs: 12 jobs in [\d.]+ s: 12 ok, 0 failed; \d+ answered from the journal;", out, re.M), (
        out
    )
    assert "resumed: finished jobs are answered from the journal" in (work / f"master.{master}.0.err").read_text()
    runs = [line.split()[1] for line in ran.read_text().splitlines()]
    journaled = {line["job"] for line in map(json.loads, summary.read_text().splitlines()) if line.get("journaled")}
    assert journaled, "the restarted master answered from its journal"
    for job in journaled:  # a job answered from the journal ran once, before the restart
        assert runs.count(job.rpartition(".")[2]) == 1
    wait = pool.inside(folder, "condor_wait", "-wait", "60", "jobs.log")  # HTCondor's own reader
    assert (wait.returncode, wait.stdout.strip()) == (0, "All jobs done."), wait.stdout + wait.stderr


def test_mwpy_jobs_pool_runs_each_placement_group_on_slave_jobs_of_its_shape(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Issue 23, item 3: jobs asking for different memory (``request_memory`` per job, from the queue's items)
    run on the overseer's slave jobs made for each request, and all complete."""
    ran = condor_workdir / "ran.log"
    queue = "request_memory = $(mb)\nqueue mb in (600, 600, 700, 700)"
    command, work = record_runs(condor_pool, condor_workdir, f"{ran} 0", queue, "4")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr + logs(work)
        assert re.search(r"4 jobs in [\d.]+ s: 4 ok, 0 failed", done.stdout + done.stderr), done.stdout + done.stderr

        def both_shapes() -> list[Any]:
            ads = history(computation(work, "slave"), ["MwpyShape", "RequestMemory"])
            return ads if {ad.get("MwpyShape") for ad in ads} >= SHAPES else []

        ads = wait_until(both_shapes, 60, "slave jobs of both requests in the schedd's history", interval=1.0)
        for ad in ads:
            if ad.get("MwpyShape") in SHAPES:
                assert ad["RequestMemory"] == int(ad["MwpyShape"].removeprefix("memory=")), ad
    finally:
        remove_computation_jobs(work)


#: The shapes the placement test expects slave jobs made for.
SHAPES = {"memory=600", "memory=700"}

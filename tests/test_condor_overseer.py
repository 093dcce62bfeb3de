"""The overseer against a real HTCondor pool: `mwpy overseer`, the Overseer object, and submit/overseer.sub.

The masters run under Condor from submit/master.sub. Their tasks wait for a
release file the test creates, so slaves hold work exactly as long as a test
needs them to.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from mwpy.backends import Job, JobState, Launch
from mwpy.backends.htcondor import CondorBackend, read_submit_commands
from mwpy.overseer import Limits, Overseer, Verdict
from tests.condor_support import (
    COMPLETED,
    FS_BINDING,
    IDLE,
    RESOURCE,
    Pool,
    assert_the_master_s_resource_file,
    computation,
    finished_jobs,
    history,
    job_events,
    job_life,
    job_states,
    logs,
    member_id,
    query,
    read_resource,
    setup_workdir,
    submit_master,
    wait_gone,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until

pytestmark = pytest.mark.condor


def start_overseer(pool: Pool, workdir: Path, name: str, *options: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``mwpy overseer RESOURCE --backend condor OPTIONS`` on the host; its output goes to ``name``."""
    out = workdir / name
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "mwpy", "overseer", str(workdir / RESOURCE), "--backend", "condor", *options],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=pool.env(),
        )
    return process, out


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def submit_gated_master(pool: Pool, workdir: Path) -> tuple[int, Path]:
    """The gated program as master, wanting 3 slaves whose tasks wait for the returned release file."""
    release = workdir / "release"
    setup_workdir(pool, workdir, ["gated.py"])
    master = submit_master(
        pool, workdir, "program=gated.py", f"program_args={release} 3", "master_options=--mw-slave-window 1"
    )
    return master, release


def test_the_overseer_takes_a_computation_from_zero_slave_jobs_to_the_needed_number_and_back_to_zero(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    master, release = submit_gated_master(condor_pool, condor_workdir)
    wait_resource(condor_workdir, lambda r: r.slaves_needed == 3, "the master to ask for 3 slaves")
    assert job_states(condor_workdir) == {}

    overseer, out = start_overseer(condor_pool, condor_workdir, "overseer.out", "--max-jobs", "6", "--interval", "1")
    try:
        most = 0

        def all_connected() -> bool:
            nonlocal most
            most = max(most, len(job_states(condor_workdir)))
            record = read_resource(condor_workdir)
            return record is not None and record.slaves_connected["unordered"] == 3

        wait_until(all_connected, 90, "3 slaves connected", interval=0.5)
        assert len(job_states(condor_workdir)) == 3
        release.touch()
        assert overseer.wait(90) == 0, out.read_text()
    finally:
        stop(overseer)
    assert most <= 3  # never more jobs than slaves wanted, although --max-jobs allowed 6
    assert "squares [0, 1, 4]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    assert job_states(condor_workdir) == {}  # back to zero: the overseer exits only then
    assert len(finished_jobs(condor_workdir, expected=3)) == 3
    assert "computation finished" in out.read_text()


def test_a_restarted_overseer_does_not_submit_again(condor_pool: Pool, condor_workdir: Path) -> None:
    master, release = submit_gated_master(condor_pool, condor_workdir)
    first, _ = start_overseer(condor_pool, condor_workdir, "overseer-1.out", "--interval", "1")
    try:
        wait_until(lambda: len(job_states(condor_workdir)) == 3, 60, "3 slave jobs", interval=0.5)
    finally:
        first.send_signal(signal.SIGKILL)  # no goodbye: whatever it knew is lost
        first.wait()
    jobs = set(job_states(condor_workdir))

    # A new overseer process: its first reconciliations find the 3 jobs and submit nothing.
    second, second_out = start_overseer(condor_pool, condor_workdir, "overseer-2.out", "--interval", "1")
    try:
        wait_until(lambda: "jobs idle" in second_out.read_text(), 60, "the second overseer's first reconciliation")
        # And the same decision, made twice more here, in-process, by yet another overseer.
        overseer = Overseer(condor_workdir / RESOURCE, CondorBackend(member_id(condor_workdir)), Limits())
        decisions = [overseer.reconcile(), overseer.reconcile()]
        assert [(d.submitted, d.removed) for d in decisions] == [(0, 0), (0, 0)], decisions
        assert set(job_states(condor_workdir)) == jobs
        assert "submitted 0, removed 0" in second_out.read_text()
        assert not re.search(r"submitted [1-9]", second_out.read_text()), second_out.read_text()

        release.touch()
        assert second.wait(90) == 0, second_out.read_text()
    finally:
        stop(second)
    assert "squares [0, 1, 4]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    assert len(finished_jobs(condor_workdir, expected=3)) == 3  # three slave jobs ever, for three slaves
    assert_the_master_s_resource_file(condor_workdir)


@attrs.define
class Recording:
    """A back end that remembers what the overseer saw and removed."""

    backend: CondorBackend
    name: str = "recording"
    seen: list[Job] = attrs.Factory(list)
    removed: list[str] = attrs.Factory(list)

    def jobs(self) -> list[Job]:
        self.seen = self.backend.jobs()
        return self.seen

    def submit(self, launch: Launch, count: int) -> None:
        self.backend.submit(launch, count)

    def remove(self, job_ids: Sequence[str]) -> None:
        self.removed += job_ids
        self.backend.remove(job_ids)

    def poll(self) -> None:
        self.backend.poll()

    def close(self) -> None:
        self.backend.close()


def test_shrinking_removes_idle_jobs_and_never_a_busy_slave(condor_pool: Pool, condor_workdir: Path) -> None:
    release, shrink = condor_workdir / "release", condor_workdir / "shrink"
    # More slave jobs than node 1 has slots, and the jobs kept off node 2: some stay idle, even when an
    # earlier test (tests/test_condor_nodes.py) has added node 2 to the session's pool. Only then do the
    # startds say MwpyNode, so the test asks for "not node 2", which a one-node pool matches too.
    wanted = condor_pool.cpus + 2
    setup_workdir(condor_pool, condor_workdir, ["shrink.py"])
    master = submit_master(
        condor_pool,
        condor_workdir,
        "program=shrink.py",
        f"program_args={release} {shrink} {wanted}",
        "master_options=--mw-slave-window 1",
    )
    backend = Recording(CondorBackend(member_id(condor_workdir), extra={"requirements": "(MwpyNode =!= 2)"}))
    overseer = Overseer(condor_workdir / RESOURCE, backend, Limits(max_jobs=wanted, max_idle=wanted, batch=wanted))

    def busy_and_some_idle() -> bool:
        decision = overseer.reconcile()
        record = read_resource(condor_workdir)
        assert decision.removed == 0, decision
        return (
            record is not None
            and record.tasks_running == 2
            and decision.idle > 0
            and decision.running + decision.idle == wanted
        )

    wait_until(busy_and_some_idle, 120, "two slaves busy and some slave jobs idle", interval=0.5)
    shrink.touch()  # the master now wants no slave beyond those connected
    wait_resource(condor_workdir, lambda r: r.slaves_needed == 0, "the master to want no more slaves")
    decision = overseer.reconcile()

    idle = {job.job_id for job in backend.seen if job.state is JobState.IDLE}
    running = {job.job_id for job in backend.seen if job.state is JobState.RUNNING}
    assert decision.removed > 0, decision
    assert set(backend.removed) <= idle, (backend.removed, backend.seen)
    assert len(running) >= 2
    after = job_states(condor_workdir)
    assert running <= set(after), after  # every running slave is still there
    assert [overseer.reconcile().submitted for _ in range(2)] == [0, 0]  # and nothing is resubmitted

    # Every running slave connected before the end, so each is told to shut down and leaves with status 0.
    wait_resource(condor_workdir, lambda r: r.slaves_connected["unordered"] == len(running), "all slaves connected")
    release.touch()
    assert "values [4, 9]" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    wait_until(lambda: overseer.reconcile().verdict is Verdict.FINISHED and not job_states(condor_workdir), 60, "end")
    history = finished_jobs(condor_workdir, expected=len(running) + len(backend.removed))
    events = job_events(condor_workdir)
    for job in running:
        assert (history[job]["JobStatus"], history[job]["ExitCode"]) == (COMPLETED, 0), history[job]
        assert "started" in job_life(events, job), job_life(events, job)
    for job in backend.removed:
        assert "started" not in job_life(events, job), job_life(events, job)  # removed while idle: never ran


def test_overseer_sub_runs_the_overseer_under_condor(condor_pool: Pool, condor_workdir: Path) -> None:
    setup_workdir(condor_pool, condor_workdir)
    master = submit_master(
        condor_pool, condor_workdir, "program_args=--seed 11 --max-trial-sets 30 --trials-per-set 50000 --target 3"
    )
    overseer = condor_pool.condor_submit(
        condor_workdir,
        "submit/overseer.sub",
        f"python={condor_pool.facts['venv_python']}",  # a venv's own python: overseer.sub starts it through env
        "max_jobs=3",
        "interval=2",
        f"extra_environment={FS_BINDING}",
    )
    out = wait_master_done(condor_workdir, master)
    assert "from 1500000 points" in out, logs(condor_workdir)
    wait_gone(condor_workdir, "overseer", 60)
    overseer_log = (condor_workdir / f"overseer.{overseer}.0.out").read_text()
    assert "computation finished" in overseer_log, logs(condor_workdir)
    assert re.search(r"jobs idle \d+ running \d+ held 0; submitted [1-3]", overseer_log), overseer_log
    # It followed the slaves' user log: the job table's queries are counted and logged when it exits (issue 24).
    assert re.search(r"schedd queries: \d+ in [\d.]+ min \(jobs \d+, master \d+\)", overseer_log), overseer_log
    assert not (condor_workdir / "resource.json.overseer").exists()  # its state file left with it
    (ad,) = finished_jobs(condor_workdir, "overseer", expected=1).values()
    assert ad["ExitCode"] == 0, ad
    assert job_states(condor_workdir) == {}
    assert 1 <= len(finished_jobs(condor_workdir)) <= 3


def test_a_submit_file_s_commands_reach_the_slave_jobs_and_held_jobs_say_why(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """What a --submit-file adds is in the real job ads; a held job's Job carries the schedd's hold reason."""
    extra = condor_workdir / "extra.sub"
    extra.write_text(
        "# no slot has it: the job stays idle and never runs\n"
        "requirements = (TARGET.HasMwpyTestFeature =?= true)\n"
        "Request_Memory = 2048\n"
        '+MwpyTestNote = "from extra.sub"\n',
        encoding="utf-8",
    )
    backend = CondorBackend(member_id(condor_workdir), extra=read_submit_commands(str(extra)))
    launch = Launch(
        member_id=member_id(condor_workdir),
        resource_file=str(condor_workdir / RESOURCE),
        executable="/usr/bin/python3",
        arguments=["program.py", "--mw-slave", "--mw-resource-file", RESOURCE],
        files=[],
    )
    backend.submit(launch, 1)
    (job,) = backend.jobs()
    assert (job.state, job.exit_code, job.reason) == (JobState.IDLE, None, None)
    projection = ["Requirements", "RequestMemory", "PeriodicRelease", "MwpyTestNote", "JobStatus"]
    (ad,) = query(computation(condor_workdir, "slave"), projection)
    assert ad["MwpyTestNote"] == "from extra.sub"
    assert "HasMwpyTestFeature" in str(ad["Requirements"])
    assert (ad["RequestMemory"], ad["JobStatus"]) == (2048, IDLE)
    assert "HoldReasonCode == 13" in str(ad["PeriodicRelease"])  # slaves.sub's policy, on the overseer's jobs too

    backend.remove([job.job_id])
    wait_until(lambda: not backend.jobs(), 30, "the job to leave the queue", interval=0.2)

    # Neither the program nor the resource file exists: the input transfer fails and Condor holds the job.
    plain = CondorBackend(member_id(condor_workdir))
    plain.submit(attrs.evolve(launch, files=[str(condor_workdir / "program.py")]), 1)
    held = wait_until(lambda: [j for j in plain.jobs() if j.state is JobState.HELD], 60, "the job held", interval=0.5)
    assert held[0].reason is not None
    assert "program.py" in held[0].reason or RESOURCE in held[0].reason, held[0].reason


def test_a_pool_restart_with_the_overseer_running_removes_no_queued_slave_job(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Master and overseer (overseer.sub) restart with the pool; the slave jobs stay queued, none removed.

    The slave jobs can never match (their requirements name an attribute no slot has), so they stay
    idle through the restart: the restarted master's first file may say ``slaves_needed: 0`` before it
    has counted its tasks, and an overseer that believed it would remove them all.
    """
    never = condor_workdir / "never.sub"
    never.write_text("requirements = (MwpyNoSuchSlot =?= True)\n", encoding="utf-8")
    master, _release = submit_gated_master(condor_pool, condor_workdir)
    first = wait_resource(condor_workdir, lambda r: r.slaves_needed == 3, "the master to want 3 slaves")
    overseer = condor_pool.condor_submit(
        condor_workdir,
        "submit/overseer.sub",
        f"python={condor_pool.facts['venv_python']}",
        "interval=2",
        f"overseer_options=--submit-file {never}",
        f"extra_environment={FS_BINDING}",
    )
    wait_until(lambda: list(job_states(condor_workdir).values()) == [IDLE] * 3, 60, "3 idle slave jobs", interval=0.5)
    queued = set(job_states(condor_workdir))

    condor_pool.restart()
    out = condor_workdir / f"overseer.{overseer}.0.out"
    wait_resource(condor_workdir, lambda r: r.master_pid != first.master_pid, "the restarted master's file")
    # The restarted overseer has looked at the restarted master's files (its output starts afresh).
    wait_until(
        lambda: out.exists() and "wanted 3 (connected 0 + needed 3)" in out.read_text(encoding="utf-8"),
        90,
        "the restarted overseer to see the restarted master's demand",
        interval=0.5,
    )
    assert set(job_states(condor_workdir)) == queued, logs(condor_workdir)
    removed = history(f"{computation(condor_workdir, 'slave')} && JobStatus == 3", ["ClusterId", "ProcId"])
    assert removed == [], removed
    assert "removed 0" in out.read_text(encoding="utf-8")
    assert master in {int(job.split(".")[0]) for job in job_states(condor_workdir, "master")}

"""The overseer's decisions, fast and without a pool.

Most tests drive ``Overseer.reconcile`` against an in-memory back end whose
queue the test sets directly (held jobs, jobs removed behind the overseer's
back); the last ones run the real local back end, whose slave processes
follow Condor's on_exit_remove contract.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from mwpy import backends, overseer_state, resource_file
from mwpy.backends import Job, JobState, Launch
from mwpy.backends.local import LocalBackend
from mwpy.errors import BackendError, ConfigurationError
from mwpy.overseer import Decision, Limits, Overseer, Verdict
from mwpy.resource_file import ResourceFile
from tests.programs.spool_backend import SpoolBackend, write_job
from tests.support import PROGRAMS, ROOT, wait_until


@attrs.define
class FakeBackend:
    """A queue the test can see and change; submissions and removals are recorded."""

    name: str = "fake"
    queue: dict[str, JobState] = attrs.Factory(dict)
    submitted: list[int] = attrs.Factory(list)
    removed: list[str] = attrs.Factory(list)
    launches: list[Launch] = attrs.Factory(list)
    failures: int = 0
    #: Why held jobs are held, as the batch system says.
    hold_reason: str | None = None
    #: When jobs entered their state (Unix time), as the batch system says; absent: unknown.
    since: dict[str, float] = attrs.Factory(dict)
    _numbers: itertools.count[int] = attrs.Factory(itertools.count)

    def jobs(self) -> list[Job]:
        if self.failures:
            self.failures -= 1
            raise BackendError("schedd restarting")
        return [
            Job(
                job_id,
                state,
                reason=self.hold_reason if state is JobState.HELD else None,
                since=self.since.get(job_id),
            )
            for job_id, state in self.queue.items()
        ]

    def submit(self, launch: Launch, count: int) -> None:
        self.submitted.append(count)
        self.launches.append(launch)
        for _ in range(count):
            self.queue[f"1.{next(self._numbers)}"] = JobState.IDLE

    def remove(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self.removed.append(job_id)
            del self.queue[job_id]

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass

    def set(self, state: JobState, count: int) -> None:
        """Put the first ``count`` jobs not yet in ``state`` into it (the batch system started or held them)."""
        for job_id in [j for j, s in self.queue.items() if s is not state][:count]:
            self.queue[job_id] = state

    def count(self, state: JobState) -> int:
        return sum(s is state for s in self.queue.values())


def write_resource(path: Path, *, needed: int = 0, connected: int = 0, **changes: Any) -> ResourceFile:
    record = ResourceFile(
        computation_status="in-progress",
        timestamp=time.time(),
        update_interval=60.0,
        member_id="mwpy:test",
        master_host="127.0.0.1",
        master_port=1,
        slaves_needed=needed,
        slave_executable="/usr/bin/python3",
        slave_files=[str(path.parent / "program.py")],
        slave_arguments=["program.py", "--mw-slave", "--mw-resource-file", path.name],
        master_pid=1,
        slaves_connected={"ordered": 0, "intermingle": 0, "unordered": connected},
    )
    record = attrs.evolve(record, **changes)
    resource_file.write(path, record)
    return record


@pytest.fixture
def rf(tmp_path: Path) -> Path:
    return tmp_path / "resource.json"


def overseer(rf: Path, backend: FakeBackend, **limits: int) -> Overseer:
    return Overseer(rf, backend, Limits(**limits), finish_grace=0.0)


def test_no_resource_file_yet_means_waiting(rf: Path) -> None:
    backend = FakeBackend()
    assert overseer(rf, backend).reconcile().verdict is Verdict.WAITING
    assert backend.submitted == []


def test_grows_to_what_the_master_wants_in_one_batch_with_the_files_it_names(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=5)
    decision = overseer(rf, backend).reconcile()
    assert (decision.verdict, decision.submitted, decision.wanted) == (Verdict.RUNNING, 5, 5)
    assert backend.submitted == [5]
    launch = backend.launches[0]
    assert (launch.member_id, launch.resource_file, launch.executable) == ("mwpy:test", str(rf), "/usr/bin/python3")


def test_repeated_reconciliations_never_submit_twice(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=4)
    first = overseer(rf, backend)
    first.reconcile()
    backend.set(JobState.RUNNING, 2)
    for _ in range(3):
        assert first.reconcile().submitted == 0
    assert overseer(rf, backend).reconcile().submitted == 0  # a restarted overseer counts the queue first
    assert backend.submitted == [4]


def test_slaves_that_connected_still_count_as_wanted(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=3)
    watcher = overseer(rf, backend)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 3)
    write_resource(rf, needed=0, connected=3)  # all three connected: still wanted, nothing to do
    decision = watcher.reconcile()
    assert (decision.wanted, decision.submitted, decision.removed) == (3, 0, 0)


def test_caps_on_total_idle_and_batch(rf: Path) -> None:
    write_resource(rf, needed=50)
    backend = FakeBackend()
    assert overseer(rf, backend, max_jobs=1000, max_idle=1000, batch=7).reconcile().submitted == 7
    backend = FakeBackend()
    capped = overseer(rf, backend, max_jobs=1000, max_idle=10, batch=100)
    assert capped.reconcile().submitted == 10
    assert capped.reconcile().submitted == 0  # 10 idle already: the idle cap holds
    backend.set(JobState.RUNNING, 4)
    assert capped.reconcile().submitted == 4  # room for 4 more idle ones
    backend = FakeBackend()
    total = overseer(rf, backend, max_jobs=12, max_idle=100, batch=100)
    assert total.reconcile().submitted == 12
    assert total.reconcile().wanted == 12
    assert len(backend.queue) == 12


def test_shrink_removes_idle_jobs_only_never_a_running_slave(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=6)
    watcher = overseer(rf, backend)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 4)
    running = {j for j, s in backend.queue.items() if s is JobState.RUNNING}
    write_resource(rf, needed=0, connected=1)  # wants one slave now: 5 too many, but only 2 are idle
    decision = watcher.reconcile()
    assert decision.removed == 2
    assert set(backend.removed).isdisjoint(running)
    assert {j for j in backend.queue} == running
    assert watcher.reconcile().removed == 0  # nothing idle left to remove; running slaves stay


def test_held_jobs_are_replaced_within_the_caps_and_the_log_says_why_they_are_held(rf: Path) -> None:
    backend = FakeBackend(hold_reason="Error from slot1: No such file /usr/bin/python3")
    write_resource(rf, needed=4)
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(max_jobs=6, max_idle=100, batch=100), log=lines.append)
    watcher.reconcile()
    backend.set(JobState.HELD, 3)  # held behind the overseer's back: they serve nobody
    decision = watcher.reconcile()
    assert (decision.held, decision.submitted) == (3, 2)  # 4 wanted, but 6 jobs at most
    assert backend.count(JobState.HELD) == 3
    assert len(backend.queue) == 6
    assert "held 3 (Error from slot1: No such file /usr/bin/python3); submitted 2, removed 0" in lines[-1]


def test_a_restarted_master_s_first_file_removes_no_idle_job_until_it_states_its_demand(rf: Path) -> None:
    backend = FakeBackend()
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(), log=lines.append)
    first = write_resource(rf, needed=3)
    watcher.reconcile()
    assert len(backend.queue) == 3
    # The master restarts (new pid and port); its first file says 0 before it has counted its tasks.
    restarted = write_resource(rf, needed=0, master_pid=2, master_port=2, timestamp=first.timestamp + 1)
    for _ in range(2):  # however often the overseer looks at that first file
        assert watcher.reconcile().removed == 0
    assert backend.removed == []
    assert len(backend.queue) == 3
    assert any("new master pid 2 at 127.0.0.1:2 (was pid 1 at 127.0.0.1:1)" in line for line in lines), lines
    assert "kept 3 idle although demand is lower: master pid 2 at 127.0.0.1:2 has not stated its demand" in lines[-1]
    # Its next file is its word: now the overseer shrinks, and says why.
    write_resource(rf, needed=1, master_pid=2, master_port=2, timestamp=restarted.timestamp + 1)
    assert watcher.reconcile().removed == 2
    assert "removed 2 idle: demand fell (1 wanted, 3 serving)" in lines[-1]


def test_a_fresh_overseer_waits_one_update_interval_for_a_master_that_writes_no_later_file(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=2)
    overseer(rf, backend).reconcile()
    # A new overseer (the pool restarted) and a master seen for the first time, whose file says 0.
    write_resource(rf, needed=0, master_pid=7, update_interval=1.0)
    watcher = overseer(rf, backend)
    assert watcher.reconcile().removed == 0
    assert len(backend.queue) == 2
    # No later file arrives, but the master had a whole update interval to state its demand.
    wait_until(lambda: watcher.reconcile().removed == 2, timeout=30, what="the idle jobs removed after one interval")
    assert backend.queue == {}


def test_a_master_gone_for_good_has_its_jobs_removed_and_the_overseer_gives_up(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=3)
    watcher = Overseer(rf, backend, Limits(), abandon_after=100.0)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 1)
    # Stale but within the limit (60 s interval + 30 s grace + 100 s): restart safety, the queue stays.
    write_resource(rf, needed=3, timestamp=time.time() - 180)
    decision = watcher.reconcile()
    assert (decision.verdict, decision.removed) == (Verdict.STALE, 0)
    assert len(backend.queue) == 3
    assert watcher.problem is None, watcher.problem
    # Past the limit: every job goes, running ones too, and the overseer says why.
    write_resource(rf, needed=3, timestamp=time.time() - 200)
    decision = watcher.reconcile()
    assert (decision.verdict, decision.removed) == (Verdict.ABANDONED, 3)
    assert backend.queue == {}
    assert "gone for good; removed its 3 slave jobs" in str(watcher.problem)


def test_mwpy_overseer_exits_1_with_one_line_when_the_master_is_gone_for_good(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    write_resource(rf, needed=1, timestamp=time.time() - 200)
    gone = mwpy_cli(
        "overseer", str(rf), "--backend", "local", "--workdir", str(tmp_path / "jobs"), "--abandon-after", "100"
    )
    assert gone.returncode == 1, gone.stdout + gone.stderr
    # The age is read when the command runs, a moment after the file was written (201 s on a loaded machine).
    silent = re.match(r"mwpy overseer: error: master 127\.0\.0\.1:1 \(pid 1\) silent for (\d+) s, ", gone.stderr)
    assert silent is not None, gone.stderr
    assert int(silent[1]) >= 200, gone.stderr
    assert len(gone.stderr.splitlines()) == 1
    assert "Traceback" not in gone.stderr
    assert "--abandon-after SECONDS" in mwpy_cli("overseer", "--help").stdout


def test_every_decision_line_says_why_idle_jobs_wait_and_held_jobs_are_held(rf: Path) -> None:
    backend = FakeBackend(hold_reason="Failed to transfer files: mwpy.pyz: No such file")
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(max_jobs=5), log=lines.append)
    write_resource(rf, needed=5)
    watcher.reconcile()
    assert "submitted 5: 5 wanted, 0 serving" in lines[-1]
    backend.set(JobState.HELD, 1)
    now = time.time()
    backend.since.update({"1.0": now - 125, "1.1": now - 720, "1.2": now - 5, "1.3": now - 200})
    write_resource(rf, needed=5)
    watcher.reconcile()
    assert "2 jobs idle up to 12 min: no slot matched" in lines[-1], lines[-1]
    assert "job 1.0 held for 2 min: Failed to transfer files: mwpy.pyz: No such file" in lines[-1], lines[-1]
    assert "short but at a cap" in lines[-1], lines[-1]


def test_a_running_job_whose_slave_never_connected_is_removed_and_replaced_and_the_log_says_why(rf: Path) -> None:
    """Guards: the three views reconciled (issue 11 item 7): demand, the queue, and the connected slaves' job ids.

    Job 1.0 has run 12 min and its slave never connected (say the master's port is blocked from its
    node); job 1.1's slave is connected. Only 1.0 goes, and one job replaces it in the same pass.
    """
    backend = FakeBackend()
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(), log=lines.append, connect_limit=1.0)
    write_resource(rf, needed=2)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 2)
    backend.since.update({"1.0": time.time() - 720, "1.1": time.time() - 720})
    write_resource(rf, needed=1, connected=1, condor_jobs_connected=["1.1"])
    # This overseer has only just seen this master: the job had no chance to connect to it yet.
    assert watcher.reconcile().removed == 0
    assert "never connected" not in lines[-1]
    assert "1 jobs running up to 12 min without their slave connected (each is replaced once it had 1 s" in lines[-1]
    decision = wait_until(lambda: _removing(watcher), 30, "the never-connected job removed")
    assert decision is not None
    assert (decision.removed, decision.submitted, decision.running) == (1, 1, 1)
    assert backend.removed == ["1.0"]
    assert backend.queue["1.1"] is JobState.RUNNING
    assert "job 1.0 running 12 min, its slave never connected: removed, replacing" in lines[-1], lines[-1]
    assert "submitted 1: 2 wanted, 1 serving" in lines[-1], lines[-1]


def _removing(watcher: Overseer) -> Decision | None:
    """One reconciliation's decision if it removed a job, else None (to wait on)."""
    decision = watcher.reconcile()
    return decision if decision.removed else None


def test_the_connect_limit_spares_short_runs_runs_seen_connected_and_jobs_without_condor_ids(rf: Path) -> None:
    """A job whose slave was seen connected during this run is not judged again when it disappears
    (a slave on its way out); a job of a back end whose ids slaves cannot report (``local.N``) never is."""
    backend = FakeBackend()
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(), log=lines.append, connect_limit=1.0)
    now = time.time()
    backend.queue.update({"2.0": JobState.RUNNING, "local.0": JobState.RUNNING})
    backend.since.update({"2.0": now - 900, "local.0": now - 900})
    write_resource(rf, needed=0, connected=1, condor_jobs_connected=["2.0"])
    watcher.reconcile()  # 2.0 seen connected in this run
    write_resource(rf, needed=0, connected=0)
    wait_until(lambda: watcher.reconcile() and time.time() - now > 1.5, 30, "the limit to pass for the master")
    assert backend.removed == []
    backend.queue["2.1"] = JobState.RUNNING
    backend.since["2.1"] = time.time()
    assert watcher.reconcile().removed == 0  # it has only just started
    backend.since["2.1"] = time.time() - 900  # ... until it has really run past the limit
    assert watcher.reconcile().removed == 1
    assert backend.removed == ["2.1"]
    # A new run of 2.0 (requeued and started again) must connect anew.
    backend.since["2.0"] = time.time() - 800
    assert watcher.reconcile().removed == 1
    assert backend.removed == ["2.1", "2.0"]
    assert set(backend.queue) >= {"local.0"}


def test_overseer_sub_uses_the_same_default_caps_as_mwpy_overseer() -> None:
    macros = dict(
        (key.strip(), value.strip())
        for key, _, value in (
            line.partition("=") for line in (ROOT / "submit" / "overseer.sub").read_text().splitlines()
        )
        if key.strip() in ("max_jobs", "max_idle", "batch")
    )
    defaults = Limits()
    assert macros == {
        "max_jobs": str(defaults.max_jobs),
        "max_idle": str(defaults.max_idle),
        "batch": str(defaults.batch),
    }


def test_jobs_removed_behind_its_back_are_resubmitted(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=3)
    watcher = overseer(rf, backend)
    watcher.reconcile()
    del backend.queue[next(iter(backend.queue))]  # condor_rm by someone
    assert watcher.reconcile().submitted == 1
    assert len(backend.queue) == 3


def test_a_stale_master_gets_no_new_jobs_and_keeps_its_queue(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=2)
    watcher = overseer(rf, backend)
    watcher.reconcile()
    write_resource(rf, needed=5, timestamp=time.time() - 1000)  # master silent far past its interval
    decision = watcher.reconcile()
    assert (decision.verdict, decision.submitted, decision.removed) == (Verdict.STALE, 0, 0)
    assert len(backend.queue) == 2
    write_resource(rf, needed=5)  # a fresh file: the master is back
    assert watcher.reconcile().submitted == 3


def test_finished_removes_every_job_idle_running_and_held(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=6)
    watcher = overseer(rf, backend)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 2)
    backend.set(JobState.HELD, 1)
    write_resource(rf, computation_status="finished")
    decision = watcher.reconcile()
    assert (decision.verdict, decision.removed) == (Verdict.FINISHED, 6)
    assert backend.queue == {}


def test_finished_gives_running_slaves_time_to_leave_by_themselves(rf: Path) -> None:
    backend = FakeBackend()
    write_resource(rf, needed=3)
    watcher = Overseer(rf, backend, Limits(), finish_grace=60.0)
    watcher.reconcile()
    backend.set(JobState.RUNNING, 2)
    write_resource(rf, computation_status="finished")
    assert watcher.reconcile().removed == 1  # the idle one at once
    assert backend.count(JobState.RUNNING) == 2  # told to shut down by the master: they exit 0 themselves
    watcher.finish_grace = 0.0
    assert watcher.reconcile().removed == 2  # still there after the grace: removed


def test_run_outlives_back_end_errors_and_returns_once_no_job_is_left(rf: Path) -> None:
    backend = FakeBackend(failures=2)
    write_resource(rf, needed=2)
    lines: list[str] = []
    watcher = Overseer(rf, backend, Limits(), log=lines.append, finish_grace=0.0)
    stop = threading.Event()
    verdicts: list[Verdict] = []
    thread = threading.Thread(target=lambda: verdicts.append(watcher.run(stop, interval=0.1, poll=0.02)))
    thread.start()
    try:
        wait_until(lambda: len(backend.queue) == 2, 10, "the overseer to submit after two failures")
        assert any("reconciliation failed: schedd restarting" in line for line in lines), lines
        write_resource(rf, computation_status="finished")  # the watchdog wakes it at once
        thread.join(10)
        assert verdicts == [Verdict.FINISHED]
        assert backend.queue == {}
    finally:
        stop.set()
        thread.join()


@attrs.define
class CountingBackend(FakeBackend):
    """Records when the overseer looks at the queue (once per reconciliation)."""

    looks: list[float] = attrs.Factory(list)

    def jobs(self) -> list[Job]:
        self.looks.append(time.monotonic())
        return super().jobs()


def test_the_watcher_wakes_on_rewrites_of_the_file_and_not_on_the_overseer_s_own_reads(rf: Path) -> None:
    """Reading the file must not wake the overseer: it would wake itself forever and spin a core."""
    backend = CountingBackend()
    looks = backend.looks
    write_resource(rf, needed=0)
    watcher = overseer(rf, backend)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), kwargs={"interval": 3600.0, "poll": 0.02})
    thread.start()
    try:
        wait_until(lambda: looks, 10, "the first reconciliation")
        quiet_until = time.monotonic() + 1.0
        stop.wait(1.0)  # a window in which nothing changes the file: no reconciliation may happen in it
        assert [t for t in looks[1:] if t < quiet_until] == []
        write_resource(rf, needed=2)
        wait_until(lambda: backend.submitted == [2], 10, "a reconciliation woken by the rewrite")
    finally:
        stop.set()
        thread.join()


@attrs.define
class RewritingBackend(FakeBackend):
    """Rewrites the resource file the first time the overseer looks at the queue: a master writing its next
    file while the overseer makes its first reconciliation, before its file watcher has started."""

    path: Path | None = None

    def jobs(self) -> list[Job]:
        if self.path is not None:
            write_resource(self.path, needed=2)
            self.path = None
        return super().jobs()


def test_a_rewrite_during_the_first_reconciliation_is_not_missed(rf: Path) -> None:
    """The watcher starts after the first reconciliation (the first slaves start sooner): a file written in
    between must still wake the overseer, not wait for the next interval (an hour here)."""
    write_resource(rf, needed=0)
    backend = RewritingBackend(path=rf)
    stop = threading.Event()
    thread = threading.Thread(target=overseer(rf, backend).run, args=(stop,), kwargs={"interval": 3600.0, "poll": 0.02})
    thread.start()
    try:
        wait_until(lambda: backend.submitted == [2], 10, "a reconciliation of the file written during the first")
    finally:
        stop.set()
        thread.join()


# ---------------------------------------------------------------------- the local back end


def test_local_back_end_keeps_a_failed_slave_queued_and_starts_it_again(tmp_path: Path) -> None:
    """Condor's on_exit_remove contract: exit 1 means run again (with a fresh resource file), exit 0 means done."""
    rf = tmp_path / "resource.json"
    program = tmp_path / "program.py"
    shutil.copy(PROGRAMS / "fails_twice.py", program)
    record = write_resource(rf, slave_executable=sys.executable, slave_files=[str(program)])
    backend = LocalBackend(tmp_path / "jobs", restart_delay=0.05)
    try:
        backend.submit(Launch.of(record, str(rf)), 1)
        failed = wait_until(lambda: backend.jobs()[0].exit_code, 30, "the slave's first run to fail")
        assert (failed, backend.jobs()[0].reason) == (1, "exited with status 1")  # it said nothing on stderr
        wait_until(lambda: not backend.jobs(), 30, "the slave job to leave the queue")
        assert (tmp_path / "jobs" / "local.0" / "runs").read_text() == "3"  # exit 1, exit 1, exit 0: gone
        assert (tmp_path / "jobs" / "local.0" / "resource.json").read_text() == rf.read_text()
    finally:
        backend.close()


def test_a_failed_slave_job_names_its_exit_status_as_the_slaves_stderr_does(tmp_path: Path) -> None:
    """``mwpy status`` and the overseer quote a job's reason: ``exited with status 3`` alone leaves the user to
    look the number up; the slave's own line says ``[exit status 3 UNREACHABLE: ...]`` (docs/exit-codes.md)."""
    rf = tmp_path / "resource.json"
    shutil.copy(PROGRAMS / "gated.py", tmp_path / "program.py")
    arguments = ["program.py", "--mw-slave", "--mw-resource-file", rf.name, "--mw-connect-timeout", "0.5"]
    record = write_resource(rf, slave_executable=sys.executable, slave_arguments=arguments, secret="00" * 32)
    backend = LocalBackend(tmp_path / "jobs", restart_delay=3600)  # nobody listens on port 1: one failed run
    try:
        backend.submit(Launch.of(record, str(rf)), 1)
        wait_until(lambda: backend.jobs()[0].exit_code, 30, "the slave's run to fail")
        assert (backend.jobs()[0].reason or "").startswith("exited with status 3 UNREACHABLE: "), backend.jobs()
    finally:
        backend.close()


def test_the_same_overseer_grows_local_slaves_and_removes_them_when_finished(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    program = tmp_path / "program.py"
    shutil.copy(PROGRAMS / "never_leaves.py", program)
    write_resource(rf, needed=3, slave_executable=sys.executable, slave_files=[str(program)])
    backend = LocalBackend(tmp_path / "jobs")
    watcher = Overseer(rf, backend, Limits(max_jobs=2), finish_grace=0.0)
    try:
        assert watcher.reconcile().submitted == 2  # capped at 2 of the 3 wanted
        wait_until(lambda: [j.state for j in backend.jobs()] == [JobState.RUNNING] * 2, 10, "2 running slaves")
        assert watcher.reconcile().submitted == 0
        write_resource(rf, computation_status="finished", slave_executable=sys.executable)
        assert watcher.reconcile().removed == 2
        assert backend.jobs() == []
    finally:
        backend.close()


# ---------------------------------------------------------------------- the commands


def mwpy_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mwpy", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_mwpy_overseer_with_default_caps_removes_what_is_left_and_exits_0(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    write_resource(rf, computation_status="finished")
    done = mwpy_cli("overseer", str(rf), "--backend", "local", "--workdir", str(tmp_path / "jobs"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{Limits()}" in done.stdout
    assert "Limits(max_jobs=100, max_idle=20, batch=20, max_memory=16384)" in done.stdout
    assert "computation finished: no slave jobs left" in done.stdout


def test_mwpy_status_without_a_schedd_says_so_without_a_traceback(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    write_resource(rf, needed=2)
    no_pool = {**os.environ, "CONDOR_CONFIG": "ONLY_ENV"}  # a configuration that names no schedd
    shown = mwpy_cli("status", str(rf), "--condor", env=no_pool)
    assert shown.returncode == 1
    assert "jobs     unknown: cannot find the schedd" in shown.stdout
    assert "Traceback" not in shown.stderr
    report = json.loads(mwpy_cli("status", str(rf), "--json", "--condor", env=no_pool).stdout)
    assert report["slave_jobs"] is None
    assert "cannot find the schedd" in report["slave_jobs_error"]
    quiet = mwpy_cli("status", str(rf), env=no_pool)  # without --condor: no jobs line, no error
    assert quiet.returncode == 0
    assert "jobs" not in quiet.stdout
    assert "in progress" in quiet.stdout


# ---------------------------------------------------------------------- back ends from outside mwpy

SPOOL_PATH = "tests.programs.spool_backend:SpoolBackend"


def spool_jobs(spool: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(spool.glob("job.*.json"))}


@contextlib.contextmanager
def spool_overseer(
    rf: Path, spool: Path, backend: str, *options: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``mwpy overseer RF --backend BACKEND --spool SPOOL OPTIONS`` running; killed on the way out if still there."""
    script = Path(sys.executable).parent / "mwpy"  # the console script: no `python -m`, which imports from cwd
    assert script.is_file(), f"{script}: install the project (pip install -e .) to get the mwpy command"
    process = subprocess.Popen(
        [str(script), "overseer", str(rf), "--backend", backend, "--spool", str(spool), "--interval", "0.2", *options],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def finish(process: subprocess.Popen[str], rf: Path) -> str:
    """The computation finishes (the file says so): the overseer removes what is left and exits 0; its output."""
    write_resource(rf, computation_status="finished")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    return out


def oversee_with_the_spool(rf: Path, spool: Path, backend: str, env: dict[str, str] | None = None) -> str:
    """Run ``mwpy overseer --backend BACKEND --spool SPOOL`` through a computation: grow, a held job, finish."""
    write_resource(rf, needed=3)
    with spool_overseer(rf, spool, backend, env=env) as process:
        wait_until(lambda: len(spool_jobs(spool)) == 3, 30, "3 job files from the overseer")
        first = spool / "job.0.json"
        write_job(first, {**json.loads(first.read_text()), "state": "held"})  # the batch system holds one
        wait_until(lambda: len(spool_jobs(spool)) == 4, 30, "a job submitted in place of the held one")
        assert {job["member_id"] for job in spool_jobs(spool).values()} == {"mwpy:test"}
        out = finish(process, rf)
    assert spool_jobs(spool) == {}  # every job removed at the end
    return out


def test_a_back_end_defined_outside_mwpy_runs_under_mwpy_overseer_by_its_import_path(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    out = oversee_with_the_spool(tmp_path / "resource.json", spool, SPOOL_PATH)
    assert "with the spool back end" in out
    assert "jobs idle 2 running 0 held 1; submitted 1" in out
    assert "computation finished: no slave jobs left" in out


def test_an_installed_back_end_is_found_by_its_entry_point_name(tmp_path: Path) -> None:
    """A distribution that declares ``[mwpy.backends] spool = ...`` makes ``--backend spool`` work."""
    site = tmp_path / "site"
    dist = site / "mwpy_spool-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mwpy-spool\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[mwpy.backends]\nspool = {SPOOL_PATH}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    spool = tmp_path / "spool"
    spool.mkdir()
    assert "with the spool back end" in oversee_with_the_spool(tmp_path / "resource.json", spool, "spool", env)
    unknown = mwpy_cli("overseer", str(tmp_path / "resource.json"), "--backend", "nope", env=env)
    assert "(known: condor, local, spool;" in unknown.stderr


def test_a_back_end_s_own_options_are_in_the_help_and_its_configuration_errors_exit_2(tmp_path: Path) -> None:
    shown = mwpy_cli("overseer", "--backend", SPOOL_PATH, "--help")
    assert shown.returncode == 0
    assert "--spool SPOOL" in shown.stdout
    assert "--workdir" not in shown.stdout  # the local back end's option: not this back end's
    wrong = mwpy_cli("overseer", str(tmp_path / "resource.json"), "--backend", SPOOL_PATH, "--spool", "/nowhere")
    assert (wrong.returncode, wrong.stderr) == (2, "mwpy overseer: error: --spool: /nowhere is not a folder\n")
    missing = mwpy_cli("overseer", str(tmp_path / "resource.json"), "--backend", SPOOL_PATH)
    assert missing.returncode == 2
    assert "the following arguments are required: --spool" in missing.stderr


def test_a_wrong_back_end_name_is_one_line_naming_the_known_ones_and_exit_2(tmp_path: Path) -> None:
    rf = str(tmp_path / "resource.json")
    unknown = mwpy_cli("overseer", rf, "--backend", "slurm")
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "mwpy overseer: error: unknown back end 'slurm' (known: condor, local; or package.module:attr)\n"
    )
    broken = mwpy_cli("overseer", rf, "--backend", "tests.programs.no_such_module:Backend")
    assert broken.returncode == 2
    assert broken.stderr.startswith("mwpy overseer: error: back end 'tests.programs.no_such_module:Backend': ")
    assert broken.stderr.count("\n") == 1
    not_one = mwpy_cli("overseer", rf, "--backend", "tests.programs.spool_backend:Path")
    assert "has no add_arguments() and create()" in not_one.stderr
    # A back end whose bindings are missing is the machine's problem, not a wrong argument: exit 1.
    unloadable = mwpy_cli("overseer", rf, "--backend", "tests.programs.unloadable_backend:Backend")
    assert unloadable.returncode == 1
    assert unloadable.stderr == (
        "mwpy overseer: error: back end 'tests.programs.unloadable_backend:Backend' cannot be loaded: "
        "No module named 'mwpy_test_bindings_that_are_not_installed'\n"
    )


def test_register_names_a_back_end_in_process() -> None:
    """A program embedding the overseer registers its back end once; the name then works like a built-in."""
    with pytest.raises(ConfigurationError, match="unknown back end 'spool-test'"):
        backends.lookup("spool-test")
    backends.register("spool-test", SpoolBackend)
    assert backends.lookup("spool-test") is SpoolBackend
    assert "spool-test" in backends.names()


def test_status_bounds_the_demand_by_the_running_overseer_s_max_jobs(tmp_path: Path) -> None:
    """Issue 24 item 6: 1,999 queued tasks under ``mwpy overseer --max-jobs 8`` show "8 more needed", said why."""
    rf, spool = tmp_path / "resource.json", tmp_path / "spool"
    spool.mkdir()
    write_resource(rf, needed=1999)
    with spool_overseer(rf, spool, SPOOL_PATH, "--max-jobs", "8") as process:
        wait_until(lambda: overseer_state.path_of(rf).exists(), 30, "the overseer's state file")
        shown = mwpy_cli("status", str(rf), "--no-condor")
        assert "slaves   0 connected, 8 more needed (overseer cap: --max-jobs 8)" in shown.stdout, shown.stdout
        assert json.loads(mwpy_cli("status", str(rf), "--json", "--no-condor").stdout)["overseer_max_jobs"] == 8
        finish(process, rf)
    assert not overseer_state.path_of(rf).exists()  # gone with its overseer: the demand is the master's word again
    write_resource(rf, needed=1999)
    assert "0 connected, 1,999 more needed\n" in mwpy_cli("status", str(rf), "--no-condor").stdout

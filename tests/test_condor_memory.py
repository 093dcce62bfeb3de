"""Memory: slaves report their peak, jobs held for memory are replaced, and the master learns per algorithm.

The pool test runs a task that needs 200 MB in slave jobs that ask for 64 MB.
The test pool holds a job that uses more memory than it asked for when the job
opts in (``MwpyEnforceMemory`` true, set here through ``--submit-file``;
tools/condor_pool.py), as a site's cgroup policy would. The overseer removes
the held job; the master, which knows the slave ran a ``grow`` task when it
reported its peak, learns that ``grow`` tasks need double the job's request
or the peak with a quarter more, whichever is more (mwpy/core/memory.py), and
the task runs in a job the overseer makes for that need. The other tests
drive the overseer's memory decisions for a master from before (no
``learned_memory``) against an in-memory queue (no pool needed).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from mwpy import resource_file
from mwpy.backends import Job, JobState, Launch
from mwpy.backends.htcondor import slave_description
from mwpy.overseer import MIB, Limits, Overseer
from mwpy.resource_file import ResourceFile
from tests.condor_support import (
    RESOURCE,
    Pool,
    computation,
    history,
    logs,
    read_resource,
    setup_workdir,
    submit_master,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until

NEED = 200  # MB the task fills (the slave's peak is a little more)
ASK = 64  # MB the first slave job asks for


@pytest.mark.condor
def test_a_job_held_for_memory_is_replaced_by_one_asking_for_enough_and_the_task_completes(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """The first job is held only once the test has seen its slave's peak published (MwpyPeakPublished,
    set with condor_qedit): Condor's hold and the slave's report race otherwise, and a hold that came first
    would make a replacement that asks for double only, is held again and replaced once more."""
    setup_workdir(condor_pool, condor_workdir, ["hungry.py"])
    release = condor_workdir / "release"
    extra = condor_workdir / "memory.sub"
    extra.write_text(
        f"request_memory = {ASK}\n+MwpyEnforceMemory = (MwpyPeakPublished =?= true) || (RequestMemory > {ASK})\n",
        encoding="utf-8",
    )
    condor_pool.give(extra)
    master = submit_master(condor_pool, condor_workdir, "program=hungry.py", f"program_args={NEED} {release}")
    out = condor_workdir / "overseer.out"
    with out.open("wb") as sink:
        overseer = subprocess.Popen(
            [sys.executable, "-m", "mwpy", "overseer", str(condor_workdir / RESOURCE), "--backend", "condor",
             "--submit-file", str(extra), "--interval", "1"],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=condor_pool.env(),
        )  # fmt: skip
    try:
        peaked = wait_resource(condor_workdir, lambda r: r.slave_peak_memory >= NEED * MIB, "the peak", timeout=120)
        [first] = peaked.condor_jobs_connected  # the job whose slave reported it
        # -forward: the shadow of a running job evaluates the hold on its own copy of the job ad.
        qedit = condor_pool.inside(condor_workdir, "condor_qedit", "-forward", first, "MwpyPeakPublished", "true")
        assert qedit.returncode == 0, qedit.stdout + qedit.stderr
        wait_until(lambda: "exceeded request_memory" in out.read_text(), 120, f"job {first} held and replaced")
        release.touch()
        done = wait_master_done(condor_workdir, master, timeout=240)
        assert overseer.wait(90) == 0, out.read_text()
    finally:
        if overseer.poll() is None:
            overseer.kill()
        overseer.wait()
    report = f"{logs(condor_workdir)}\n--- overseer\n{out.read_text()}"
    assert f"grew {NEED}" in done, report
    ads = history(computation(condor_workdir, "slave"), ["ClusterId", "RequestMemory", "MwpyShape"])
    asked = [(int(ad["RequestMemory"]), ad.get("MwpyShape")) for ad in sorted(ads, key=lambda ad: int(ad["ClusterId"]))]
    log = out.read_text()
    assert f"exceeded request_memory {ASK} MB; removed (the master learns which task algorithm" in log, report
    # The slave had reported its peak while running grow, before the hold: grow tasks now need that peak with
    # a quarter more (more than double here), and the task ran in a job made for that need.
    record = read_resource(condor_workdir)
    assert record is not None, report
    assert record.learned_memory is not None, report
    learned = record.learned_memory["grow"]
    assert learned >= NEED * 5 // 4, record.learned_memory
    assert asked == [(ASK, None), (learned, f"memory={learned}")], report
    said = "".join(path.read_text(errors="replace") for path in condor_workdir.glob("master.*.err"))
    assert f"grow tasks now need {learned} MB" in said, report  # the master's log says so
    assert record.slave_peak_memory >= NEED * MIB, record  # the slave that fitted reported its peak


# ---------------------------------------------------------------------- the decisions, without a pool


@attrs.define
class Queue:
    """An in-memory queue: jobs the test holds, what the overseer submits (with its memory) and removes."""

    name: str = "queue"
    queue: dict[str, Job] = attrs.Factory(dict)
    launches: list[tuple[Launch, int]] = attrs.Factory(list)
    removed: list[str] = attrs.Factory(list)
    _numbers: itertools.count[int] = attrs.Factory(itertools.count)

    def jobs(self) -> list[Job]:
        return list(self.queue.values())

    def submit(self, launch: Launch, count: int) -> None:
        self.launches.append((launch, count))
        for _ in range(count):
            job_id = f"1.{next(self._numbers)}"
            self.queue[job_id] = Job(job_id, JobState.IDLE, memory=launch.memory or 512)

    def remove(self, job_ids: Sequence[str]) -> None:
        self.removed += job_ids
        for job_id in job_ids:
            del self.queue[job_id]

    def hold_for_memory(self, job_id: str) -> None:
        job = self.queue[job_id]
        self.queue[job_id] = attrs.evolve(
            job, state=JobState.HELD, memory_hold=True, reason=f"memory usage exceeded request_memory {job.memory} MB"
        )

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass


def write_resource(path: Path, *, needed: int, peak: int = 0) -> None:
    resource_file.write(
        path,
        ResourceFile(
            computation_status="in-progress", timestamp=time.time(), update_interval=60.0, member_id="mwpy:test",
            master_host="127.0.0.1", master_port=1, slaves_needed=needed, slave_executable="/usr/bin/python3",
            slave_files=[], slave_arguments=["program.py", "--mw-slave"], master_pid=1, slave_peak_memory=peak,
        ),
    )  # fmt: skip


def test_held_for_memory_means_replaced_asking_for_double_up_to_the_cap_then_left_held(tmp_path: Path) -> None:
    """A master from before learning per algorithm (no ``learned_memory``): the held job's whole shape grows."""
    rf, queue, lines = tmp_path / "resource.json", Queue(), list[str]()
    write_resource(rf, needed=1)
    overseer = Overseer(rf, queue, Limits(max_memory=1500), log=lines.append)
    overseer.reconcile()
    assert [(launch.memory, count) for launch, count in queue.launches] == [(None, 1)]  # the default request
    for expected in (1024, 1500):
        (job,) = queue.queue
        queue.hold_for_memory(job)
        decision = overseer.reconcile()
        assert decision.removed == 1
        assert queue.launches[-1][0].memory == expected
        assert any(f"replaced by jobs asking for {expected} MB" in line for line in lines), lines
    (job,) = queue.queue
    queue.hold_for_memory(job)  # already at the cap: nothing more to ask for; it stays held, for people to see
    decision = overseer.reconcile()
    assert (decision.removed, decision.held) == (0, 1)
    assert queue.queue[job].state is JobState.HELD
    assert queue.launches[-1][0].memory == 1500  # held jobs do not serve: as ever, one is added (never above the cap)


def test_new_slave_jobs_ask_for_the_slaves_peak_memory_with_a_quarter_more(tmp_path: Path) -> None:
    rf, queue = tmp_path / "resource.json", Queue()
    write_resource(rf, needed=2, peak=800 * MIB)
    Overseer(rf, queue, Limits()).reconcile()
    assert [(launch.memory, count) for launch, count in queue.launches] == [(1000, 2)]


def test_the_condor_job_asks_for_the_launch_s_memory_but_never_less_than_it_would_have() -> None:
    launch = Launch("mwpy:test", "/w/resource.json", "/usr/bin/python3", ["p.py"], ["/w/p.py"], memory=1000)
    assert slave_description(launch)["request_memory"] == "1000"
    assert slave_description(attrs.evolve(launch, memory=100))["request_memory"] == "512"  # mwpy's default stays
    assert slave_description(launch, {"request_memory": "4096"})["request_memory"] == "4096"  # the user's stays
    assert slave_description(launch, {"Request_Memory": "2 GB"})["request_memory"] == "1000"  # not comparable

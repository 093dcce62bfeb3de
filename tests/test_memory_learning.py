"""Memory learned per task algorithm (issue 24 item 1): a slave held for memory raises its algorithm's need only.

The master's bookkeeping on its own (mwpy/core/memory.py with the real scheduler), a real master with real local
slaves of two shapes (tests/programs/outgrows.py), the overseer's side with an in-memory queue, and what ``mwpy
status`` shows; ``tests/test_condor_memory.py`` runs it on the test pool.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import attrs

from mwpy import resource_file
from mwpy.core.entry import Entry
from mwpy.core.memory import MemoryLearning
from mwpy.core.scheduler import Scheduler
from mwpy.matching import Offer
from mwpy.names import JOB_AD_VARIABLE
from mwpy.overseer import MIB, Limits, Overseer
from mwpy.resources import Resources
from mwpy.task_records import Policy
from tests.condor_support import wait_resource
from tests.programs import outgrows
from tests.support import PROGRAMS, QUIET, mwpy_command, resource_record, wait_until
from tests.test_condor_memory import Queue, write_resource

SMALL = Resources(memory=64)
NOW = 1.0


def submit(sched: Scheduler, algorithm: str, need: Resources | None = None) -> Entry:
    task = Entry(sched.new_id(), algorithm, b"", Policy(resources=need), QUIET)
    sched.add(task)
    return task


def computation() -> tuple[Scheduler, MemoryLearning, list[Entry]]:
    """Two algorithms on small plain slaves; slave-0 runs the first grow task and reports a peak of 210 MB."""
    sched = Scheduler()
    learning = MemoryLearning(sched)
    tasks = [submit(sched, name) for name in ("grow", "score", "grow", "score")]
    sched.join("slave-0", Offer(SMALL))
    assert sched.take("slave-0", NOW)[0] is tasks[0]
    learning.heard("slave-0", 210 * MIB)
    return sched, learning, tasks


def test_a_slave_lost_near_its_memory_limit_raises_the_need_of_the_algorithm_it_ran_only() -> None:
    sched, learning, tasks = computation()
    sched.leave("slave-0")  # held for memory: its tasks come back first
    said = learning.lost("slave-0", suspect=True)
    grow = Resources(memory=263)  # a quarter more than its peak (more than double its 64 MB)
    assert sched.shapes.learned == {"grow": 263}
    assert said == (
        "slave-0 was lost with a peak of 210 MB of the 64 MB it offered while running grow: grow tasks now need "
        "263 MB (2 queued or running moved to that shape)"
    )
    assert [task.policy.resources for task in tasks] == [grow, None, grow, None]
    sched.join("small", Offer(SMALL))
    sched.join("big", Offer(Resources(memory=512)))
    taken = []
    for _ in range(3):  # one at a time (a fresh slave's window), each answered before the next
        taken += (batch := sched.take("small", NOW))
        for task in batch:
            sched.finish("small", task.task_id, 0.1, NOW)
    assert [task.algorithm for task in taken] == ["score", "score"]  # the small shape keeps the other algorithm
    later = submit(sched, "grow")  # and every new grow task needs it from now on
    assert later.policy.resources == grow
    assert [(need, count) for need, count, _ in sched.shape_demand()] == [(grow, 3)]


def test_a_learned_need_keeps_what_the_task_asked_for_and_only_ever_grows() -> None:
    sched = Scheduler()
    learning = MemoryLearning(sched)
    task = submit(sched, "grow", Resources(cpus=2, memory=32))
    sched.join("slave-0", Offer(Resources(cpus=2, memory=100)))
    sched.take("slave-0", NOW)
    learning.heard("slave-0", 95 * MIB)  # 95 % of what it offers: near enough to count
    sched.leave("slave-0")
    learning.lost("slave-0", suspect=True)
    assert task.policy.resources == Resources(cpus=2, memory=200)  # double what it offered
    sched.join("slave-1", Offer(Resources(cpus=2, memory=4096)))
    sched.take("slave-1", NOW)
    learning.heard("slave-1", 100 * MIB)
    sched.leave("slave-1")
    assert learning.lost("slave-1", suspect=True) is None  # far below 4096 MB: not memory, nothing learned
    assert sched.shapes.learned == {"grow": 200}


def test_nothing_is_learned_from_a_planned_leave_a_low_peak_or_a_shape_nobody_offers() -> None:
    sched, learning, tasks = computation()
    sched.leave("slave-0")
    assert learning.lost("slave-0", suspect=False) is None  # by plan, at the end, or sent away
    assert sched.shapes.learned == {}
    sched, learning, tasks = computation()
    sched.shapes.offer([SMALL])  # the master knows its slaves: none could ever run grow with more
    sched.leave("slave-0")
    assert learning.lost("slave-0", suspect=True) is None
    assert tasks[0].policy.resources is None
    sched = Scheduler()
    learning = MemoryLearning(sched)
    submit(sched, "grow")
    sched.join("slave-0", Offer(Resources(memory=1024)))
    sched.take("slave-0", NOW)
    learning.heard("slave-0", 210 * MIB)
    sched.leave("slave-0")
    assert learning.lost("slave-0", suspect=True) is None  # 210 of 1024 MB: lost for another reason


def test_a_task_running_elsewhere_when_memory_is_learned_comes_back_with_the_learned_need(tmp_path: Path) -> None:
    """Two ``grow`` tasks run on two small slaves; the first fills its slave and dies near its limit, which
    teaches that grow needs 200 MB. The second, still running on the other small slave, counts for that need at
    once (the overseer sizes the need's jobs by it), and when its own slave dies it goes to the big slave: it
    does not run out again on a small one (a second death would fail it: ``allowed_failures=1``).

    Only slaves that run as Condor jobs teach memory: each local slave here has a job ad, the file Condor's
    starter names in ``_CONDOR_JOB_AD`` (the slaves inherit the variable)."""
    job, signals, work = tmp_path / ".job.ad", tmp_path / "signals", tmp_path / "work"
    job.write_text("ClusterId = 7\nProcId = 0\n")
    signals.mkdir()
    big = f"memory={2 * outgrows.ENOUGH}"
    command = mwpy_command(
        "local", str(PROGRAMS / "outgrows.py"), "--slaves", "3", "--no-progress", "--workdir", str(work),
        "--slave-resources", f"memory={outgrows.SMALL}", "--slave-resources", big, "--", str(signals),
    )  # fmt: skip
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, JOB_AD_VARIABLE: str(job)},
    ) as master:
        try:
            for name in ("first", "second"):
                wait_until((signals / f"{name}.started").exists, 120, f"the {name} grow task running on a small slave")
            (signals / "first.fill").touch()
            wait_resource(work, lambda r: r.slave_peak_memory >= outgrows.FILL << 20, "the first one's peak heard")
            (signals / "first.die").touch()
            learned = f"memory={2 * outgrows.SMALL}"  # double what the small slave offered
            record = wait_resource(
                work, lambda r: any((s.resources, s.tasks) == (learned, 2) for s in r.shapes), f"2 tasks for {learned}"
            )
            assert list((record.learned_memory or {}).values()) == [2 * outgrows.SMALL]
            for signal in ("second.fill", "second.die", "release"):
                (signals / signal).touch()
            out, err = master.communicate(timeout=180)
        finally:
            master.kill()
    assert master.returncode == 0, err
    assert out.splitlines() == [f"hold {big}", f"first {big}", f"second {big}"], out + err


def test_for_a_learning_master_a_held_job_is_replaced_without_raising_its_shape(tmp_path: Path) -> None:
    """The overseer's side: a master that learns (``learned_memory`` in its file) puts the memory in the need
    of the algorithm, so the held job's shape keeps its request; a master from before gets the old doubling."""
    rf, queue, lines = tmp_path / "resource.json", Queue(), list[str]()
    write_resource(rf, needed=1, peak=210 * MIB)
    record = resource_file.read(rf)
    resource_file.write(rf, attrs.evolve(record, learned_memory={}))
    overseer = Overseer(rf, queue, Limits(), log=lines.append)
    overseer.reconcile()
    assert [(launch.memory, count) for launch, count in queue.launches] == [(None, 1)]  # no peak rule either
    (job,) = queue.queue
    queue.hold_for_memory(job)
    assert overseer.reconcile().removed == 1
    assert queue.launches[-1][0].memory is None
    assert any("removed (the master learns which task algorithm needs more" in line for line in lines), lines


def test_mwpy_status_shows_the_memory_learned_per_algorithm(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    resource_file.write(rf, resource_record(learned_memory={"grow": 263, "fit": 4096}))
    shown = subprocess.run(mwpy_command("status", str(rf), "--no-condor"), capture_output=True, text=True, check=False)
    assert "learned  memory fit 4096 MB; grow 263 MB" in shown.stdout, shown.stdout + shown.stderr
    report = subprocess.run(
        mwpy_command("status", str(rf), "--no-condor", "--json"), capture_output=True, text=True, check=False
    )
    assert json.loads(report.stdout)["learned_memory"] == {"grow": 263, "fit": 4096}

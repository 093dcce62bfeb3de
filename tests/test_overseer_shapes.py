"""The overseer keeps slave jobs per need of the tasks (issue 24, item 1), fast and without a pool.

An in-memory back end that, like Condor's, makes a slave job for a need and
lists each job with the need it was made for (``MwpyShape``); the resource
file states demand and supply per need (``shapes``). What the real schedd
makes of these jobs is tests/test_condor_shapes.py's part.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import htcondor2
import pytest

from mwpy.backends import Job, JobState, Launch
from mwpy.backends.condor_log import JobLog
from mwpy.backends.htcondor import slave_description
from mwpy.core.entry import Entry
from mwpy.core.scheduler import Scheduler
from mwpy.errors import ConfigurationError
from mwpy.matching import Offer
from mwpy.overseer import Limits, Overseer
from mwpy.pool import shape_plan
from mwpy.resource_file import ShapeDemand
from mwpy.resources import Resources, own_shape
from mwpy.task_records import Policy
from tests.support import Quiet
from tests.test_overseer import FakeBackend, write_resource

BIG = Resources(memory="4GB")
NODE1 = Resources(requirements="MwpyNode == 1")


@attrs.define
class ShapedBackend(FakeBackend):
    """FakeBackend whose jobs carry the need they were submitted for, and their memory request."""

    shapes: dict[str, str | None] = attrs.Factory(dict)
    memory: dict[str, int] = attrs.Factory(dict)
    memory_held: set[str] = attrs.Factory(set)

    def jobs(self) -> list[Job]:
        return [
            attrs.evolve(
                job,
                shape=self.shapes.get(job.job_id),
                memory=self.memory.get(job.job_id),
                memory_hold=job.job_id in self.memory_held,
            )
            for job in super().jobs()
        ]

    def submit_shaped(self, launch: Launch, count: int) -> None:
        before = set(self.queue)
        self.submit(launch, count)
        for job_id in set(self.queue) - before:
            self.shapes[job_id] = str(launch.shape)
            self.memory[job_id] = max(launch.memory or 0, launch.shape.memory if launch.shape else 0)

    def hold_for_memory(self, shape: Resources | None) -> str:
        """Hold the one job of ``shape`` for exceeding its memory request, as the schedd would; its id."""
        (job_id,) = self.of(shape)
        self.queue[job_id] = JobState.HELD
        self.memory_held.add(job_id)
        return job_id

    def of(self, shape: Resources | None) -> list[str]:
        key = None if shape is None else str(shape)
        return [job_id for job_id in self.queue if self.shapes.get(job_id) == key]


@pytest.fixture
def rf(tmp_path: Path) -> Path:
    return tmp_path / "resource.json"


def demand(*needs: tuple[Resources, int, int]) -> list[ShapeDemand]:
    return [ShapeDemand(str(need), tasks, slaves) for need, tasks, slaves in needs]


def submitted_for(backend: ShapedBackend) -> dict[str | None, int]:
    """Jobs submitted per need (None: plain), from the launches the back end was given."""
    counts: dict[str | None, int] = {}
    for launch, count in zip(backend.launches, backend.submitted, strict=True):
        key = None if launch.shape is None else str(launch.shape)
        counts[key] = counts.get(key, 0) + count
    return counts


def test_each_need_gets_its_own_slave_jobs_sized_by_its_demand_and_plain_tasks_plain_jobs(rf: Path) -> None:
    # 3 tasks need 4 GB, 2 need node 1, 2 need nothing: 7 slaves needed, none connected.
    write_resource(rf, needed=7, shapes=demand((BIG, 3, 0), (NODE1, 2, 0)))
    backend = ShapedBackend()
    decision = Overseer(rf, backend, Limits()).reconcile()
    assert submitted_for(backend) == {None: 2, str(BIG): 3, str(NODE1): 2}
    assert decision.submitted == decision.wanted == 7
    assert Overseer(rf, backend, Limits()).reconcile().submitted == 0  # idempotent, per shape


def test_a_need_that_connected_slaves_already_satisfy_gets_no_new_job(rf: Path) -> None:
    # Two connected slaves satisfy the 4 GB need: of its 3 tasks, only 1 lacks a slave.
    write_resource(rf, needed=1, connected=2, shapes=demand((BIG, 3, 2)))
    backend = ShapedBackend()
    Overseer(rf, backend, Limits()).reconcile()
    assert submitted_for(backend) == {str(BIG): 1, None: 2}  # the 2 connected slaves are plain jobs here


def test_the_caps_hold_for_all_shapes_together_and_are_shared_in_turn(rf: Path) -> None:
    write_resource(rf, needed=12, shapes=demand((BIG, 5, 0), (NODE1, 5, 0)))
    backend = ShapedBackend()
    decision = Overseer(rf, backend, Limits(batch=4)).reconcile()
    assert submitted_for(backend) == {None: 2, str(BIG): 1, str(NODE1): 1}
    assert decision.submitted == 4
    assert shape_plan.share([0, 5, 1], 4) == [0, 3, 1]


def test_idle_jobs_of_a_need_whose_demand_fell_are_removed_and_its_running_ones_kept(rf: Path) -> None:
    write_resource(rf, needed=4, shapes=demand((BIG, 4, 0)))
    backend = ShapedBackend()
    watcher = Overseer(rf, backend, Limits())
    watcher.reconcile()
    backend.set(JobState.RUNNING, 1)
    # Three of its tasks answered; the running slave connected and took the last one.
    write_resource(rf, needed=0, connected=1, shapes=demand((BIG, 1, 1)))
    decision = watcher.reconcile()
    assert (decision.removed, decision.submitted) == (3, 0)
    assert [backend.queue[job] for job in backend.of(BIG)] == [JobState.RUNNING]
    # The need is gone: its running slave is kept, and no plain job is submitted in its place.
    write_resource(rf, needed=0, connected=1)
    assert (watcher.reconcile().submitted, backend.count(JobState.RUNNING)) == (0, 1)


def test_a_memory_hold_raises_only_its_own_shape_s_request(rf: Path) -> None:
    write_resource(rf, needed=2, shapes=demand((BIG, 1, 0)))
    backend = ShapedBackend()
    watcher = Overseer(rf, backend, Limits())
    watcher.reconcile()
    big = backend.hold_for_memory(BIG)
    backend.launches.clear()
    backend.submitted.clear()
    watcher.reconcile()
    assert big in backend.removed
    (launch,) = backend.launches
    assert (launch.shape, launch.memory) == (BIG, 8192)
    # A plain job wanted later still asks for the default: the hold was the 4 GB shape's.
    write_resource(rf, needed=3, shapes=demand((BIG, 1, 0)))
    watcher.reconcile()
    assert (backend.launches[-1].shape, backend.launches[-1].memory) == (None, None)


def test_a_connected_slave_s_job_held_for_memory_gets_no_plain_replacement_before_the_master_names_the_need(
    rf: Path,
) -> None:
    """The file read right after the hold still lists the held job's slave as connected: counting it would
    submit a plain job that the master's next file (the task's new need) makes useless. Seen in a CI run."""
    write_resource(rf, needed=1, learned_memory={})
    backend = ShapedBackend()
    watcher = Overseer(rf, backend, Limits())
    watcher.reconcile()
    plain = backend.hold_for_memory(None)
    backend.memory[plain] = 64
    write_resource(rf, connected=1, learned_memory={}, condor_jobs_connected=[plain])
    decision = watcher.reconcile()
    assert (decision.removed, decision.submitted, backend.queue) == (1, 0, {})
    # The master noticed: the slave is gone and its task needs 292 MB now; one job of that need, none plain.
    need = Resources(memory="292MB")
    write_resource(rf, needed=1, learned_memory={"grow": 292}, shapes=demand((need, 1, 0)))
    assert watcher.reconcile().submitted == 1
    assert (backend.of(None), len(backend.of(need))) == ([], 1)


def test_a_back_end_without_shaped_jobs_gets_plain_jobs_for_every_task(rf: Path) -> None:
    write_resource(rf, needed=5, shapes=demand((BIG, 3, 0)))
    backend = FakeBackend()
    Overseer(rf, backend, Limits()).reconcile()
    assert (backend.submitted, backend.launches[0].shape) == ([5], None)


def test_a_shape_s_condor_job_asks_for_its_need_on_top_of_the_user_s_description(tmp_path: Path) -> None:
    """condor_submit's language (htcondor2.Submit parses it): the user's larger request stays, the need's
    requirements add to the user's, and ``MwpyShape`` names the need for the overseer and the slave."""
    launch = Launch("mwpy:x", str(tmp_path / "r.json"), "/usr/bin/python3", ["p.py"], [], memory=None)
    need = Resources(cpus=2, memory="8GB", disk="1GB", gpus=1, requirements='Arch == "X86_64"')
    description = slave_description(
        attrs.evolve(launch, shape=need), {"request_cpus": "4", "requirements": "HasDocker"}
    )
    submit = htcondor2.Submit(description)
    assert (submit["request_cpus"], submit["request_memory"], submit["request_disk"]) == ("4", "8192", "1048576")
    assert submit["request_gpus"] == "1"
    assert submit["requirements"] == '(HasDocker) && (Arch == "X86_64")'
    assert submit["MY.MwpyShape"] == '"cpus=2,memory=8192,disk=1024,gpus=1,requirements=Arch == \\"X86_64\\""'


def test_a_slave_of_a_shape_s_job_offers_that_need_s_requirements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ad as the starter writes it (string attributes quoted, quotes escaped)."""
    job = tmp_path / ".job.ad"
    job.write_text(
        'RequestCpus = 1\nRequestMemory = 8192\nMwpyShape = "memory=8192,requirements=Arch == \\"X86_64\\""\n'
    )
    monkeypatch.setenv("_CONDOR_JOB_AD", str(job))
    shape = own_shape()
    assert shape.satisfies(Resources(memory="8GB", requirements='Arch == "X86_64"'))
    assert not shape.satisfies(NODE1)


def test_a_submit_file_may_not_set_the_attribute_the_overseer_counts_shapes_by(tmp_path: Path) -> None:
    launch = Launch("mwpy:x", str(tmp_path / "r.json"), "/usr/bin/python3", ["p.py"], [])
    with pytest.raises(ConfigurationError, match=r"\+MwpyShape is set by mwpy"):
        slave_description(launch, {"+MwpyShape": '"memory=1"'})


def test_a_master_offered_no_shapes_keeps_a_need_no_slave_has_yet_for_the_overseer_s_job() -> None:
    """Item 2: a Condor master is given no shapes (``--mw-slave-resources``): a need no connected slave has is
    queued and stated as demand (what the overseer sizes the need's jobs by), not refused; the slave of the
    job made for it then runs it."""
    sched = Scheduler()
    told: list[str | None] = []

    class Listener(Quiet):
        def unrunnable(self, reason: str | None = None) -> bool:
            told.append(reason)
            return True

    sched.join("plain", Offer(Resources(cpus=1, memory=512)))
    task = Entry(sched.new_id(), "f", b"", Policy(resources=BIG), Listener(), label="fit")
    sched.add(task)
    assert (told, sched.take("plain", 0.0)) == ([], [])
    assert sched.shape_demand() == [(BIG, 1, 0)]
    sched.join("shaped", Offer(Resources(cpus=1, memory=4096)))
    assert sched.take("shaped", 0.0) == [task]


def test_slave_jobs_just_submitted_for_a_need_count_for_it_before_the_schedd_is_asked_again(tmp_path: Path) -> None:
    """The Condor back end's job table knows its new jobs from the submission (mwpy/backends/condor_log.py):
    they must count for their need at once, or the next reconciliation would submit for it again."""
    table = JobLog()
    table.expect(7, range(2), 4096, str(tmp_path / "slaves.log"), now=0.0, shape=str(BIG))
    table.expect(8, range(1), 512, str(tmp_path / "slaves.log"), now=0.0)
    assert sorted((ad["ClusterId"], ad["MwpyShape"]) for ad in table.ads) == [(7, str(BIG)), (7, str(BIG)), (8, None)]

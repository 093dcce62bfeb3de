"""A task's requirements are evaluated against the slave's slot, as HTCondor matches a job to a slot (issue 24).

Before, a need's ``requirements`` had to be the slave's own as text: a big slave on node 1 did not serve a
``MwpyNode == 1`` task, and ``Memory >= 8192`` was not ``(Memory >= 8192)``. Now they are evaluated with
HTCondor's ClassAd library against the slave's machine ad (``_CONDOR_MACHINE_AD``, sent in its Hello); a slave
without one is judged by an ad of its shape (mwpy/matching.py). The ads here are written as the starter writes
``.machine.ad`` (old ClassAd syntax, one attribute a line); the last test runs real local slaves with one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy.core.entry import Entry
from mwpy.core.scheduler import Scheduler
from mwpy.matching import Offer
from mwpy.resources import Resources
from mwpy.task_records import Policy
from tests.support import PROGRAMS, QUIET, reap_spawned, spawn_master, spawn_slave

#: A dynamic slot's machine ad on node 1 of the test pool (tools/condor_pool.py advertises MwpyNode), trimmed.
NODE1_AD = """MyType = "Machine"
Name = "slot1_1@node1.mwpy.pool"
Cpus = 2
Memory = 4096
Disk = 2048000
GPUs = 0
Arch = "X86_64"
OpSys = "LINUX"
MwpyNode = 1
"""
NODE1 = Resources(requirements="MwpyNode == 1")


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    yield
    reap_spawned()


NODE1_SHAPE = Resources(cpus=2, memory=4096)


def serves(requirements: str, ad: str = NODE1_AD, shape: Resources = NODE1_SHAPE) -> bool:
    return Offer(shape, ad).serves(Resources(requirements=requirements))


@pytest.mark.parametrize(
    "requirements",
    ["MwpyNode == 1", "(MwpyNode == 1)", "TARGET.MwpyNode =?= 1", 'Arch == "X86_64" && OpSys == "LINUX"',
     "(Memory >= 2048)", "Memory >= 2048.0", "TARGET.Memory >= MY.RequestMemory", "Cpus > 1 || GPUs > 0"],
)  # fmt: skip
def test_requirements_the_slot_satisfies_are_served_however_written(requirements: str) -> None:
    assert serves(requirements)


@pytest.mark.parametrize(
    "requirements",
    ["MwpyNode == 2", "Memory >= 8192", "(Memory >= 8192)", "HasDocker", "HasDocker == true", "MwpyNode == ",
     'Arch == "ARM"', "Memory / 0 > 1"],
)  # fmt: skip
def test_requirements_the_slot_does_not_satisfy_are_not_served(requirements: str) -> None:
    """False, undefined (an attribute the slot lacks), an error, or no expression at all: not a match."""
    assert not serves(requirements)


def test_the_need_s_requests_are_my_and_numbers_compare_as_numbers() -> None:
    """HTCondor's matchmaking: a job's own attributes are MY, the slot's TARGET; MB compare as numbers."""
    offer = Offer(Resources(cpus=2, memory=4096), NODE1_AD)
    assert offer.serves(Resources(memory=4096, requirements="TARGET.Memory >= MY.RequestMemory"))
    assert not Offer(Resources(cpus=2, memory=8192), NODE1_AD).serves(
        Resources(memory=8192, requirements="TARGET.Memory >= MY.RequestMemory")
    )
    assert not offer.serves(Resources(memory=8192, requirements="MwpyNode == 1"))  # its shape is too small


def test_a_slave_without_a_machine_ad_is_judged_by_its_shape_and_the_requirements_it_offers() -> None:
    """A local slave: Cpus, Memory, Disk (KB) and GPUs of its shape; a custom attribute only by its own text."""
    local = Resources(cpus=4, memory=16384, disk=1000)
    assert serves("Memory >= 8192 && Cpus >= 4 && Disk >= 1024000", "", local)
    assert not serves("Memory >= 32768", "", local)
    assert not serves("MwpyNode == 1", "", local)
    assert serves("MwpyNode == 1", "", Resources(memory=1024, requirements="MwpyNode == 1"))
    assert serves("MwpyNode == 1", "not a ClassAd ((", Resources(memory=1024, requirements="MwpyNode == 1"))
    assert not serves("Memory >= 1", "not a ClassAd ((", Resources())  # an odd ad: its shape alone


def test_the_scheduler_sends_a_node_s_task_to_any_slave_on_that_node() -> None:
    """The case the text comparison got wrong: a big slave on node 1, submitted for another need (or none)."""
    sched = Scheduler()
    sched.join("node2", Offer(Resources(cpus=2, memory=16384), NODE1_AD.replace("MwpyNode = 1", "MwpyNode = 2")))
    sched.join("node1-big", Offer(Resources(cpus=2, memory=16384, requirements="Memory >= 16384"), NODE1_AD))
    task = Entry(sched.new_id(), "f", b"", Policy(resources=NODE1), QUIET)
    sched.add(task)
    assert sched.take("node2", 1.0) == []
    assert sched.take("node1-big", 1.0) == [task]
    assert [(need, tasks, slaves) for need, tasks, slaves in sched.shape_demand()] == [(NODE1, 1, 1)]


def test_a_real_slave_in_a_slot_serves_the_tasks_its_machine_ad_satisfies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real master and a real slave that sees a machine ad (as a Condor job does) and was not made for any
    need: it serves the ``MwpyNode == 1`` tasks and the ``memory=2048`` ones (tests/programs/two_needs.py);
    before, the node's tasks waited for ever. The master is told no shapes (as on Condor), so it waits."""
    ad = tmp_path / ".machine.ad"
    ad.write_text(NODE1_AD)
    gate = tmp_path / "gate"
    gate.touch()  # the master returns as soon as its six tasks are answered
    master = spawn_master(PROGRAMS / "two_needs.py", tmp_path, str(gate), "2048")
    monkeypatch.setenv("_CONDOR_MACHINE_AD", str(ad))
    spawn_slave(PROGRAMS / "two_needs.py", tmp_path)
    assert master.wait(120) == 0, master.err()
    lines = [line.split() for line in master.out().splitlines() if line.startswith(("big ", "node1 "))]
    ran = sorted((kind, node, memory) for kind, *_, node, memory in lines)
    assert ran == [("big", "1", "4096")] * 3 + [("node1", "1", "4096")] * 3, master.out()  # kind, node, slot MB

"""Slave shapes and task resources (issue 24 item 1): a task runs only on a slave that offers what it needs.

The record (``mwpy.Resources``) in HTCondor's terms, the scheduler's matching on its own, a slave's shape from
its Condor slot's machine ad (a real ad file), and real local slaves of two shapes under ``mwpy local`` and
``mwpy.Executor``: each task lands on a slave that satisfies it, and one that no shape on offer satisfies fails
at once with the reason (tests/programs/shaped.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

import mwpy
from mwpy.core.entry import Entry
from mwpy.core.scheduler import Scheduler
from mwpy.errors import ResourceFileError
from mwpy.matching import Offer
from mwpy.observe import statusview
from mwpy.observe.statusview import Extra
from mwpy.resource_file import ResourceFile, read
from mwpy.resources import Resources, own_shape
from mwpy.task_records import Policy
from tests.condor_support import Pool, logs, setup_workdir, submit_master, wait_master_done
from tests.programs import shaped
from tests.support import PROGRAMS, QUIET, Quiet, mwpy_command, wait_until

NOW = 1000.0
BIG = Resources(memory="16GB")


# ---------------------------------------------------------------------- the record


def test_memory_and_disk_are_mb_and_take_htcondor_unit_strings() -> None:
    """request_memory's unit (MB) for a bare number; K/M/G/T with or without B, as condor_submit reads them."""
    assert Resources(memory="16GB").memory == 16384
    assert Resources(memory="512 MB", disk="2T").disk == 2 * 1024 * 1024
    assert Resources(memory=2048).memory == 2048
    assert Resources(memory="1.5G").memory == 1536
    assert Resources(disk="100K").disk == 1  # rounded up: a request never shrinks below what was asked


def test_a_dict_or_the_option_text_give_the_same_record() -> None:
    as_text = Resources.of('cpus=4, memory=16GB,gpus=1,requirements=(HasX && Site == "a,b")')
    as_dict = Resources.of({"cpus": 4, "memory": "16GB", "gpus": 1, "requirements": '(HasX && Site == "a,b")'})
    assert as_text == as_dict == Resources(4, 16384, 0, 1, '(HasX && Site == "a,b")')
    assert Resources.parse(str(as_text)) == as_text  # the option's form round-trips (what a local slave is given)
    assert Resources.of({}) is None  # asking for nothing is running anywhere


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"memory": "lots"}, "memory must be MB or a size such as '16GB', not 'lots'"),
        ({"cpus": -1}, "cpus must be a non-negative integer, not -1"),
        ({"gpus": True}, "gpus must be a non-negative integer, not True"),
        ({"ram": 4}, "unknown key 'ram'"),
        ("memory", "expected KEY=VALUE"),
    ],
)
def test_bad_resources_fail_at_the_decorator_with_one_usage_line(given: object, says: str) -> None:
    with pytest.raises(mwpy.UsageError) as caught:
        mwpy.task(resources=given)  # type: ignore[call-overload]
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_requirements_are_kept_in_one_form_as_htcondor_s_classad_library_prints_them() -> None:
    """Spacing and parentheses around the whole expression do not make another need; inner parentheses are
    the expression's own, and text that does not parse is kept (it matches no slot)."""
    one = Resources(requirements="Memory >= 8192")
    assert Resources(requirements="( Memory>=8192 )") == one == Resources(requirements="((Memory  >= 8192))")
    assert hash(Resources(requirements="(Memory >= 8192)")) == hash(one)
    assert Resources(requirements='(HasX) && (Site=="a,b")').requirements == '(HasX) && (Site == "a,b")'
    assert Resources(requirements="Memory >=").requirements == "Memory >="


def test_with_policy_overrides_the_declared_need_and_keeps_it_when_left_out() -> None:
    assert shaped.big.policy.resources == Resources(memory=8192)
    assert shaped.big.with_policy(tag=1).policy.resources == Resources(memory=8192)
    assert shaped.big.with_policy(resources={"gpus": 1}).policy.resources == Resources(gpus=1)


def test_a_slave_offers_its_condor_slots_machine_ad_and_an_option_overrides_part_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The starter's _CONDOR_MACHINE_AD: Cpus, Memory (MB), Disk (KB), GPUs of the slot (HTCondor manual,
    "Environment variables" of a job); what --mw-slave-resources names wins, the rest comes from the slot."""
    ad = tmp_path / ".machine.ad"
    ad.write_text('Cpus = 4\nMemory = 16000\nDisk = 2048000\nGPUs = 1\nName = "slot1@node"\n')
    monkeypatch.setenv("_CONDOR_MACHINE_AD", str(ad))
    assert own_shape() == Resources(cpus=4, memory=16000, disk=2000, gpus=1)
    assert own_shape(Resources(memory="4GB")) == Resources(cpus=4, memory=4096, disk=2000, gpus=1)


def test_a_slave_offers_its_jobs_requests_before_its_slots_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site holds a job past its RequestMemory whatever its slot has; RequestDisk = DiskUsage (condor_submit's
    default, an expression) says nothing, so the slot's Disk stands."""
    machine, job = tmp_path / ".machine.ad", tmp_path / ".job.ad"
    machine.write_text("Cpus = 1\nMemory = 3000\nDisk = 1024000\n")
    job.write_text("ClusterId = 7\nProcId = 0\nRequestCpus = 1\nRequestMemory = 512\nRequestDisk = DiskUsage\n")
    monkeypatch.setenv("_CONDOR_MACHINE_AD", str(machine))
    monkeypatch.setenv("_CONDOR_JOB_AD", str(job))
    assert own_shape() == Resources(cpus=1, memory=512, disk=1000)


# ---------------------------------------------------------------------- the scheduler


def _submit(sched: Scheduler, need: Resources | None) -> Entry:
    task = Entry(sched.new_id(), "f", b"", Policy(resources=need), QUIET)
    sched.add(task)
    return task


def test_a_task_goes_only_to_a_slave_that_satisfies_it_and_a_needless_one_anywhere() -> None:
    sched = Scheduler()
    sched.join("small", Offer(Resources(cpus=1, memory=1024)))
    sched.join("big", Offer(Resources(cpus=1, memory=32768)))
    needy = [_submit(sched, BIG) for _ in range(3)]
    plain = _submit(sched, None)
    taken_small = sched.take("small", NOW)
    assert taken_small == [plain]  # passes over the three it cannot run
    assert set(sched.take("big", NOW)) | set(sched.take("big", NOW)) <= set(needy)


def test_a_need_no_shape_on_offer_meets_is_unrunnable_at_once_with_the_reason() -> None:
    sched = Scheduler()
    sched.shapes.offer([Resources(memory=1024), Resources(memory=8192)])
    told: list[str | None] = []

    class Listener(Quiet):
        def unrunnable(self, reason: str | None = None) -> bool:
            told.append(reason)
            return True

    sched.add(Entry(sched.new_id(), "f", b"", Policy(resources=BIG), Listener(), label="fit"))
    assert told == ["task 1 fit: needs memory 16384 MB, and no slave on offer has it "
                    "(the slaves' shapes: memory 1024 MB; memory 8192 MB)"]  # fmt: skip
    assert sched.pending_total == 0
    assert [t.label for t in sched.news.drain_unrunnable()] == ["fit"]


def test_without_a_task_that_asks_the_scheduler_does_not_match_at_all() -> None:
    """The common path: slaves of any shape (or none said) take needless tasks, and shapes are not looked at."""
    sched = Scheduler()
    sched.join("a")
    tasks = [_submit(sched, None) for _ in range(3)]
    assert not sched.shapes.active
    assert sched.take("a", NOW) == tasks[:1]


# ---------------------------------------------------------------------- real local slaves


def test_mwpy_local_sends_each_task_to_a_slave_of_its_shape_and_fails_the_unmeetable_one() -> None:
    command = mwpy_command(
        "local", str(PROGRAMS / "shaped.py"), "--slaves", "2", "--no-progress",
        "--slave-resources", "memory=1GB", "--slave-resources", "memory=16GB",
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("big ")] == ["big memory=16384"] * 6
    assert sorted(line for line in lines if line.startswith("small ")) == sorted(
        line for line in lines if re.fullmatch(r"small memory=(1024|16384)", line)
    )
    assert len([line for line in lines if line.startswith("small ")]) == 6
    (huge,) = [line for line in lines if line.startswith("huge ")]
    assert re.fullmatch(
        r"huge NoMatchingSlaveError: task \d+ huge: needs cpus 2, memory 65536 MB, and no slave on offer has it "
        r"\(the slaves' shapes: (cpus \d+, )?memory 1024 MB; (cpus \d+, )?memory 16384 MB\)",
        huge,
    ), huge


def test_mwpy_local_refuses_a_bad_shape_with_one_line_and_status_2() -> None:
    command = mwpy_command("local", str(PROGRAMS / "shaped.py"), "--no-progress", "--slave-resources", "memory=lots")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--slave-resources: memory must be MB or a size such as '16GB', not 'lots'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_executor_deals_its_slaves_among_shapes_and_applies_its_default_need() -> None:
    shapes: list[str | dict[str, str]] = ["memory=1GB", {"memory": "16GB"}]
    with mwpy.Executor(max_workers=2, slave_resources=shapes, resources={"memory": "2GB"}) as ex:
        # A plain function takes the executor's need (2 GB): only the 16 GB slave satisfies it.
        assert {ex.submit(shaped.offered).result(timeout=120) for _ in range(8)} == {"memory=16384"}
        # A task algorithm's own need wins; one no shape meets fails now, not never.
        assert set(ex.map(shaped.big, range(4), timeout=120)) == {"memory=16384"}
        error = ex.submit(shaped.huge).exception(timeout=60)
        assert isinstance(error, mwpy.NoMatchingSlaveError)
        assert isinstance(error, mwpy.UnrunnableTaskError)
        assert re.match(r"task [1-9]\d* huge: needs cpus 2, memory 65536 MB", str(error)), error


def _demand_with_slaves(resource: Path, slaves: int) -> ResourceFile | None:
    """The master's resource file once it shows ``slaves`` slaves connected and a demand per need."""
    try:
        record = read(str(resource))
    except ResourceFileError:
        return None  # not written yet
    return record if record.shapes and record.slaves_connected.get("unordered") == slaves else None


def test_the_resource_file_and_mwpy_status_show_demand_and_supply_per_need(tmp_path: Path) -> None:
    """Three 8 GB tasks held running on the one 16 GB slave: the file says so, and `mwpy status` shows it."""
    release = tmp_path / "release"
    resource = tmp_path / "work" / "resource.json"
    shapes: list[str] = ["memory=1GB", "memory=16GB"]
    with mwpy.Executor(max_workers=2, slave_resources=shapes, workdir=tmp_path / "work") as ex:
        futures = [ex.submit(shaped.waits, str(release)) for _ in range(3)]
        record = wait_until(lambda: _demand_with_slaves(resource, 2), 60, "the demand per need in the resource file")
        assert record is not None
        want = [{"resources": "memory=8192", "tasks": 3, "slaves": 1}]
        assert [attrs.asdict(shape) for shape in record.shapes] == want
        shown = subprocess.run(
            mwpy_command("status", str(resource), "--no-condor"), capture_output=True, text=True, timeout=60, check=True
        )
        assert re.search(r"^shapes\s+memory 8192 MB: 3 tasks, 1 slave$", shown.stdout, re.MULTILINE), shown.stdout
        as_json = subprocess.run(
            mwpy_command("status", str(resource), "--no-condor", "--json"),
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert json.loads(as_json.stdout)["shapes"] == want
        assert "· shapes memory 8192 MB: 3 tasks, 1 slave" in statusview.plain(record, Extra(), None, time.time())
        release.touch()
        assert {future.result(timeout=60) for future in futures} == {"memory=16384"}
    assert read(str(resource)).shapes == []  # every task answered: no demand left


def test_needs_written_differently_are_one_need_in_the_resource_file(tmp_path: Path) -> None:
    """``TARGET.Memory >= 8192`` and ``( TARGET.Memory>=8192 )`` match the same slaves: one need, so one demand
    entry in the resource file and one shape of slave jobs for the overseer, not two (the forms are read and
    printed by HTCondor's ClassAd library)."""
    release = tmp_path / "release"
    resource = tmp_path / "work" / "resource.json"
    written = {"requirements": "( TARGET.Memory>=8192 )"}  # the default need of plain functions
    with mwpy.Executor(
        max_workers=1, slave_resources=["memory=16GB"], resources=written, workdir=resource.parent
    ) as ex:
        futures = [ex.submit(shaped.wait_for, str(release)) for _ in range(2)]
        futures.append(ex.submit(shaped.waits_for_memory, str(release)))  # TARGET.Memory >= 8192
        record = wait_until(lambda: _demand_with_slaves(resource, 1), 60, "the demand per need in the resource file")
        assert record is not None
        assert [attrs.asdict(shape) for shape in record.shapes] == [
            {"resources": "requirements=TARGET.Memory >= 8192", "tasks": 3, "slaves": 1}
        ]
        release.touch()
        assert {future.result(timeout=60) for future in futures} == {"memory=16384"}


def test_the_executor_refuses_slave_shapes_for_condor_slaves() -> None:
    with pytest.raises(mwpy.ConfigurationError, match="slave_resources= shapes local slaves"):
        mwpy.Executor(max_workers=1, backend="condor", slave_resources={"memory": "1GB"})


# ---------------------------------------------------------------------- on the test pool


@pytest.mark.condor
def test_on_condor_a_task_needing_memory_runs_only_in_a_slave_job_that_asked_for_it(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Two slaves.sub clusters (docs/condor.md, "Slave shapes and task resources"): each slave offers its job's
    RequestMemory, so the tasks needing 1000 MB all run in the cluster that asked for 1200 MB."""
    setup_workdir(condor_pool, condor_workdir, ["shaped.py"])
    master = submit_master(condor_pool, condor_workdir, "program=shaped.py", "program_args=1000")
    small = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=shaped.py", "slaves=2",
                                      "slave_memory=256")  # fmt: skip
    big = condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "program=shaped.py", "slaves=1",
                                    "slave_memory=1200")  # fmt: skip
    out = wait_master_done(condor_workdir, master)
    bigs = [line.split()[1] for line in out.splitlines() if line.startswith("big ")]
    smalls = [line.split()[1] for line in out.splitlines() if line.startswith("small ")]
    assert len(bigs) == 6, logs(condor_workdir)
    assert {job.split(".")[0] for job in bigs} == {str(big)}, logs(condor_workdir)
    assert len(smalls) == 6
    assert {job.split(".")[0] for job in smalls} <= {str(small), str(big)}


#: A plain script, as a user writes it: nothing imports HTCondor's bindings before the Executor matches.
UNSCOPED_SCRIPT = """
from pathlib import Path

import mwpy

@mwpy.task(resources={"requirements": "Memory >= 8192"})
def where() -> str:
    args = Path("/proc/self/cmdline").read_bytes().split(b"\\0")
    return args[args.index(b"--mw-slave-resources") + 1].decode()

if __name__ == "__main__":
    with mwpy.Executor(max_workers=2, slave_resources=["memory=1GB", "memory=16GB"]) as ex:
        print(sorted({ex.submit(where).result(timeout=120) for _ in range(6)}))
"""


def test_unscoped_requirements_match_local_shapes_in_a_fresh_process(tmp_path: Path) -> None:
    """``Memory >= 8192`` (the HTCondor manual's form, no ``TARGET.``) is true of a 16 GB slave in a script that
    imported nothing of HTCondor's: the ClassAd library needs the configuration's match semantics, which
    importing ``htcondor2`` sets; without it the need matched no slave (NoMatchingSlaveError)."""
    script = tmp_path / "unscoped.py"
    script.write_text(UNSCOPED_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "['memory=16384']\n", "")

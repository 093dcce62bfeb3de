"""``mwpy jobs``: a job's placement commands become the need of its task (issue 23, item 3).

On a pool (``--pool``) each job's task needs a slave of its placement's shape, and the overseer keeps
slave jobs per need (tests/test_overseer_shapes.py, docs/condor.md section 13): the need is what a
slave job can be submitted with. The submit file is the placement example of tests/test_jobs_oracle.py
(compared there with ``condor_submit -dry-run``).
"""

from __future__ import annotations

from pathlib import Path

from mwpy.jobs.description import SubmitDescription
from mwpy.jobs.jobad import Placement
from mwpy.resources import Resources

PLACED = (
    "executable = /bin/true\nrequest_cpus = 2\nrequest_memory = 1 GB\nrequest_disk = 100 Gb\n"
    'requirements = (OpSysAndVer == "Debian13")\n+ProjectName = "mwpy"\nbatch_name = conformance\n'
    "priority = 5\nqueue 2\n"
)


def test_a_job_s_requests_and_requirements_become_its_need_in_condor_s_units(tmp_path: Path) -> None:
    submit = tmp_path / "placed.sub"
    submit.write_text(PLACED, encoding="utf-8")
    (placement,) = SubmitDescription(str(submit), base=str(tmp_path)).placements()
    # 100 Gb of disk is 104857600 KB in the ad: 102400 MB in a need.
    assert placement.need() == Resources(cpus=2, memory=1024, disk=102400, requirements='(OpSysAndVer == "Debian13")')


def test_requirements_that_name_the_job_s_own_attributes_are_left_out_of_the_need(tmp_path: Path) -> None:
    """A slave job does not carry the job's ``+`` attributes: its requirements naming one would match no slot."""
    submit = tmp_path / "own.sub"
    submit.write_text(
        'executable = /bin/true\n+Wanted = "x86"\nrequirements = (Arch == MY.Wanted)\nrequest_memory = 64\nqueue\n',
        encoding="utf-8",
    )
    (placement,) = SubmitDescription(str(submit), base=str(tmp_path)).placements()
    assert placement.need() == Resources(memory=64)


def test_a_job_that_asks_for_nothing_a_slave_lacks_needs_nothing() -> None:
    assert Placement().need() is None  # one cpu: every slave has it
    assert Placement(memory="ifThenElse(MemoryUsage > 100, 200, 100)").need() is None  # cannot size a job

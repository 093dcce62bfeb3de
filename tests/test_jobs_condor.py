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
import shutil
from pathlib import Path

import pytest

from tests.condor_support import (
    COMPLETED,
    Pool,
    finished_jobs,
    logs,
    setup_workdir,
    wait_gone,
    wait_master_done,
    wait_resource,
)
from tests.support import PROGRAMS

pytestmark = pytest.mark.condor


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

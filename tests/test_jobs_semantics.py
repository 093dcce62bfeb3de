"""``mwpy jobs`` on submit files of the kind HTCondor's developers and DAGMan users write: the holds, exit codes,
inputs and environments Condor gives them, with local slaves (tests/test_jobs_conformance.py compares the same
files with condor_submit on a pool)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import mwpy_command
from tests.test_jobs_run import run_jobs, summary

htcondor2 = pytest.importorskip("htcondor2")


def log_events(path: Path) -> dict[int, list[tuple[object, ...]]]:
    """Each job's user-log events as a log reader (DAGMan, condor_wait) sees them: kind, and a hold's codes."""
    found: dict[int, list[tuple[object, ...]]] = {}
    for event in htcondor2.JobEventLog(str(path)).events(0):
        kind = int(event.type)
        detail = (event["HoldReasonCode"], event["HoldReasonSubCode"]) if kind == 12 else ()
        found.setdefault(event.proc, []).append((kind, *detail))
    return found


def test_a_job_whose_executable_cannot_run_is_held_in_the_user_log_too(tmp_path: Path) -> None:
    """A script whose ``#!`` is not its first line: Condor holds it (code 6, subcode 8) and says so in the log."""
    script = tmp_path / "late_shebang.sh"
    script.write_text("\n#!/bin/sh\necho never\n")
    script.chmod(0o755)
    (tmp_path / "jobs.sub").write_text("executable = late_shebang.sh\nlog = jobs.log\nqueue\n")
    done = run_jobs(tmp_path, slaves=1)
    assert done.returncode == 1, done.stderr
    jobs, _ = summary(tmp_path)
    assert jobs["1.0"]["status"] == "held"
    assert log_events(tmp_path / "jobs.log")[0] == [(0,), (1,), (21,), (4,), (12, 6, 8)]


def test_an_exit_with_the_declared_success_code_is_a_success(tmp_path: Path) -> None:
    """HTCondor's manual (success_exit_code, and DAGMan's retry examples): exit 3 declared success is success."""
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/sh\narguments = \"-c 'exit 3'\"\nsuccess_exit_code = 3\nmax_retries = 2\n"
        "log = jobs.log\nqueue\n"
    )
    done = run_jobs(tmp_path, slaves=1)
    assert done.returncode == 0, done.stderr
    assert "1 ok, 0 failed" in done.stdout
    jobs, run = summary(tmp_path)
    assert (jobs["1.0"]["status"], jobs["1.0"]["exit_code"], run["failed"]) == ("ok", 3, 0)
    assert log_events(tmp_path / "jobs.log")[0] == [(0,), (1,), (5,)]


def test_a_missing_input_holds_its_job_only_and_the_others_run(tmp_path: Path) -> None:
    """HTCondor's manual on skip_filechecks: a missing input is found when the job's files are sent; Condor holds
    that job (code 13, the errno) and runs the others."""
    (tmp_path / "here.txt").write_text("here\n")
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/cat\narguments = $(f)\nshould_transfer_files = YES\ntransfer_input_files = $(f)\n"
        "skip_filechecks = true\noutput = out.$(Process)\nlog = jobs.log\nqueue f in (here.txt, gone.txt)\n"
    )
    done = run_jobs(tmp_path, slaves=1)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "1 ok, 0 failed, 1 held" in done.stdout
    assert (tmp_path / "out.0").read_text() == "here\n"
    jobs, _ = summary(tmp_path)
    assert jobs["1.1"]["status"] == "held"
    assert f"reading from file {tmp_path}/gone.txt: (errno 2) No such file or directory" in jobs["1.1"]["why"]
    assert log_events(tmp_path / "jobs.log")[1] == [(0,), (21,), (4,), (12, 13, 2)]  # as Condor writes them


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_input_that_is_no_regular_file_is_refused_before_any_job(tmp_path: Path, kind: str) -> None:
    """A FIFO or /dev/zero would never end being read: one line, exit status 2, nothing run."""
    source = "/dev/zero"
    if kind == "fifo":
        os.mkfifo(tmp_path / "pipe")
        source = "pipe"
    (tmp_path / "jobs.sub").write_text(
        f"executable = /bin/true\nshould_transfer_files = YES\ntransfer_input_files = {source}\n"
        "log = jobs.log\nqueue 2\n"
    )
    done = run_jobs(tmp_path, slaves=1, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "is not a regular file" in done.stderr
    assert not (tmp_path / "jobs.log").exists()


def test_getenv_passes_the_submitter_s_environment_not_mwpy_s_changes(tmp_path: Path) -> None:
    """Without a Condor configuration the bindings set CONDOR_CONFIG=/dev/null in mwpy's own environment: a job
    with getenv = true gets the environment mwpy jobs was started in, as condor_submit gives it its own."""
    (tmp_path / "jobs.sub").write_text("executable = /usr/bin/env\ngetenv = true\noutput = env.out\nqueue\n")
    environment = {name: value for name, value in os.environ.items() if name != "CONDOR_CONFIG"}
    environment["SUBMITTER_SETTING"] = "kept"
    command = mwpy_command("jobs", "jobs.sub", "--slaves", "1", "--no-progress")
    done = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in (tmp_path / "env.out").read_text().splitlines() if "=" in line)
    assert seen["SUBMITTER_SETTING"] == "kept"
    assert "CONDOR_CONFIG" not in seen


def test_a_refusal_names_every_unsupported_command_at_once(tmp_path: Path) -> None:
    """Three commands mwpy jobs cannot honour (the accounting and container commands of HTCondor's manual): one
    line names all three, so the file is fixed in one go."""
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/true\naccounting_group = group_physics\ncontainer_image = docker://python:3\n"
        "concurrency_limits = license\nqueue\n"
    )
    done = run_jobs(tmp_path, slaves=1, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    named = line.split(": not supported by mwpy jobs: ")[0]
    assert named == "mwpy jobs: error: accounting_group, concurrency_limits, container_image"


def test_job_ad_expressions_are_evaluated_per_run_and_machine_attributes_refused(tmp_path: Path) -> None:
    """HTCondor's manual ($$([ClassAd expression]) in a submit description): NumJobCompletions grows across the
    retries of max_retries, JobBatchName and arithmetic on the job's own attributes come from its ad."""
    (tmp_path / "jobs.sub").write_text(
        "executable = /bin/sh\n"
        "arguments = \"-c 'echo run $$([NumJobCompletions]) of $$([JobBatchName]) next $$([ProcId + 10]);"
        " echo env $RUN >&2; exit 1'\"\n"
        'batch_name = nightly\nenvironment = "RUN=$$([NumJobCompletions])"\nmax_retries = 2\n'
        "output = out\nerror = err\nqueue\n"
    )
    done = run_jobs(tmp_path, slaves=1)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "out").read_text() == "run 2 of nightly next 10\n"  # the third run's (stdout starts again)
    assert (tmp_path / "err").read_text() == "env 2\n"
    machine = tmp_path / "machine"
    machine.mkdir()
    (machine / "jobs.sub").write_text('executable = /bin/echo\narguments = "$$([TARGET.Memory / 2])"\nqueue\n')
    refused = run_jobs(machine, slaves=1, timeout=60)
    assert refused.returncode == 2
    assert "uses TARGET.Memory of the matched machine: mwpy jobs has no machine ad" in refused.stderr

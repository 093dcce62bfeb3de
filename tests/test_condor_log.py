"""The slave jobs' user log, followed (mwpy/backends/condor_log.py): each failed run counts once.

The events are in the form HTCondor 25.14 wrote them in this suite's test
pool (a slave job requeued after exiting 3 is copied from a real
``slaves.log``); ``htcondor2.JobEventLog`` reads them, as it reads the logs of
a real run. No pool is needed: the file is the input.
"""

from __future__ import annotations

from pathlib import Path

from mwpy.backends import Job, JobState
from mwpy.backends.condor_log import FailedRuns
from mwpy.pool.failing_slaves import SetupFailures

EXECUTE = """\
001 ({job}) 2026-11-25 14:19:40 Job executing on host: <10.0.0.5:9618?addrs=10.0.0.5-9618>
...
"""
REQUEUED_AFTER_EXIT_3 = """\
004 ({job}) 2026-11-25 14:19:47 Job was evicted.
\t(0) Job terminated and was requeued
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage
\t529  -  Run Bytes Sent By Job
\t404871  -  Run Bytes Received By Job
\t(1) Normal termination (return value 3)
\tThe job attribute OnExitRemove expression '(ExitBySignal == false) && (ExitCode == 0)' evaluated to FALSE
...
"""
PREEMPTED = """\
004 ({job}) 2026-11-25 14:20:10 Job was evicted.
\t(0) CPU times
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage
\t0  -  Run Bytes Sent By Job
\t0  -  Run Bytes Received By Job
...
"""
HELD = """\
012 ({job}) 2026-11-25 14:21:00 Job was held.
\tError from slot1_2@node7: Failed to execute '/nonexistent/python': No such file or directory
\tCode 6 Subcode 2
...
"""
TERMINATED_OK = """\
005 ({job}) 2026-11-25 14:22:00 Job terminated.
\t(1) Normal termination (return value 0)
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Remote Usage
\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Total Local Usage
\t0  -  Run Bytes Sent By Job
\t0  -  Run Bytes Received By Job
\t0  -  Total Bytes Sent By Job
\t0  -  Total Bytes Received By Job
...
"""


def test_failed_runs_are_counted_per_job_as_the_log_grows_and_preemption_is_not_one(tmp_path: Path) -> None:
    log = tmp_path / "slaves.log"
    one, two = "101.000.000", "101.001.000"
    log.write_text(EXECUTE.format(job=one) + REQUEUED_AFTER_EXIT_3.format(job=one) + EXECUTE.format(job=two))
    runs = FailedRuns()
    runs.follow([str(tmp_path / "not-yet.log"), str(log)])  # a log no job has written yet is tried next time
    assert runs.counts == {"101.0": 1}
    with log.open("a") as file:
        file.write(EXECUTE.format(job=one) + REQUEUED_AFTER_EXIT_3.format(job=one) + PREEMPTED.format(job=two))
        file.write(HELD.format(job=two) + TERMINATED_OK.format(job=one))
    runs.follow([str(log)])  # only what was added: nothing counted twice
    assert runs.counts == {"101.0": 2, "101.1": 1}
    runs.close()


def test_two_runs_that_failed_between_two_looks_both_count_towards_the_set_up_limit(tmp_path: Path) -> None:
    log = tmp_path / "slaves.log"
    job = "7.000.000"
    log.write_text((EXECUTE + REQUEUED_AFTER_EXIT_3).format(job=job) * 3)
    runs = FailedRuns()
    runs.follow([str(log)])
    watch = SetupFailures()
    # At the look the job runs again: a sampling watcher would see nothing; the log says 3 runs failed.
    watch.look(
        [Job("7.0", JobState.RUNNING, exit_code=3, reason="exited with status 3", failed_runs=runs.counts["7.0"])]
    )
    assert watch.problem(0) == "3 slave runs failed before any task had a result; the last one exited with status 3"
    runs.close()

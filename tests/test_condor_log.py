"""The slave jobs' user log, followed (mwpy/backends/condor_log.py): each failed run counts once, and the
job table follows submit, execute, evicted, held, released, terminated and aborted events, asking for a
query of the schedd only when the log leaves a doubt.

The events are in the form HTCondor 25.14 wrote them in this suite's test
pool (a slave job requeued after exiting 3 is copied from a real
``slaves.log``); ``htcondor2.JobEventLog`` reads them, as it reads the logs of
a real run. No pool is needed: the file is the input.
"""

from __future__ import annotations

from pathlib import Path

from mwpy.backends import Job, JobState
from mwpy.backends.condor_log import RECONCILE_EVERY, JobLog
from mwpy.pool.failing_slaves import SetupFailures

SUBMIT = """\
000 ({job}) 2026-11-25 14:19:30 Job submitted from host: <10.0.0.1:9618?addrs=10.0.0.1-9618>
...
"""
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
RELEASED = """\
013 ({job}) 2026-11-25 14:21:30 Job was released.
\tvia condor_release (by user me)
...
"""
ABORTED = """\
009 ({job}) 2026-11-25 14:23:00 Job was aborted.
\tvia condor_rm (by user me)
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
    runs = JobLog()
    runs.watch(str(tmp_path / "not-yet.log"))  # a log no job has written yet is tried next time
    runs.watch(str(log))
    runs.follow()
    assert runs.counts == {"101.0": 1}
    with log.open("a") as file:
        file.write(EXECUTE.format(job=one) + REQUEUED_AFTER_EXIT_3.format(job=one) + PREEMPTED.format(job=two))
        file.write(HELD.format(job=two) + TERMINATED_OK.format(job=one))
    runs.follow()  # only what was added: nothing counted twice
    assert runs.counts == {"101.0": 2, "101.1": 1}
    runs.close()


def test_two_runs_that_failed_between_two_looks_both_count_towards_the_set_up_limit(tmp_path: Path) -> None:
    log = tmp_path / "slaves.log"
    job = "7.000.000"
    log.write_text((EXECUTE + REQUEUED_AFTER_EXIT_3).format(job=job) * 3)
    runs = JobLog()
    runs.watch(str(log))
    runs.follow()
    watch = SetupFailures()
    # At the look the job runs again: a sampling watcher would see nothing; the log says 3 runs failed.
    watch.look(
        [Job("7.0", JobState.RUNNING, exit_code=3, reason="exited with status 3", failed_runs=runs.counts["7.0"])]
    )
    assert watch.problem(0) == "3 slave runs failed before any task had a result; the last one exited with status 3"
    runs.close()


def _states(table: JobLog) -> dict[str, tuple[int, int | None]]:
    """Each job's JobStatus (1 idle, 2 running, 5 held) and last exit code, as the table holds them."""
    return {f"{ad['ClusterId']}.{ad['ProcId']}": (ad["JobStatus"], ad.get("ExitCode")) for ad in table.ads}


def test_the_table_follows_a_job_through_submit_run_requeue_hold_release_removal_and_exit(tmp_path: Path) -> None:
    """Guards (issue 24 item 3): after one query, the log alone tells each job's state; no doubt, no query."""
    log = tmp_path / "slaves.log"
    log.write_text("")
    table = JobLog()
    table.watch(str(log))
    table.follow()
    assert table.needs_query(0.0, RECONCILE_EVERY)  # nothing known before the first query
    table.reconciled([], now=0.0)
    table.expect(101, range(3), 1024, str(log), now=0.0)  # submitted by this back end
    assert not table.needs_query(1.0, RECONCILE_EVERY)
    one, two, three = "101.000.000", "101.001.000", "101.002.000"
    with log.open("a") as file:
        file.write("".join(SUBMIT.format(job=job) for job in (one, two, three)))
        file.write(EXECUTE.format(job=one) + EXECUTE.format(job=two) + EXECUTE.format(job=three))
    table.follow()
    assert _states(table) == {"101.0": (2, None), "101.1": (2, None), "101.2": (2, None)}
    with log.open("a") as file:
        file.write(REQUEUED_AFTER_EXIT_3.format(job=one) + HELD.format(job=two) + ABORTED.format(job=three))
    table.follow()
    assert _states(table) == {"101.0": (1, 3), "101.1": (5, None)}
    assert {ad["HoldReasonCode"] for ad in table.ads if ad["JobStatus"] == 5} == {6}
    with log.open("a") as file:
        file.write(RELEASED.format(job=two) + EXECUTE.format(job=two) + TERMINATED_OK.format(job=two))
    table.follow()
    assert _states(table) == {"101.0": (1, 3)}
    assert {ad["RequestMemory"] for ad in table.ads} == {1024}
    assert not table.needs_query(2.0, RECONCILE_EVERY)
    assert table.needs_query(RECONCILE_EVERY, RECONCILE_EVERY)  # and, in any case, now and then
    table.close()


def test_a_job_the_table_does_not_know_asks_for_a_query_once_and_another_computations_jobs_then_not(
    tmp_path: Path,
) -> None:
    """Two computations may share a folder and so its slaves.log: a query tells theirs from ours once."""
    log = tmp_path / "slaves.log"
    log.write_text(SUBMIT.format(job="5.000.000"))
    table = JobLog()
    table.watch(str(log))
    table.follow()
    table.reconciled([], now=0.0)  # the query: cluster 5 is not this computation's
    with log.open("a") as file:
        file.write(EXECUTE.format(job="5.000.000"))
    table.follow()
    assert not table.needs_query(1.0, RECONCILE_EVERY)
    with log.open("a") as file:
        file.write(SUBMIT.format(job="6.000.000"))  # submitted behind the back end's back
    table.follow()
    assert table.needs_query(1.0, RECONCILE_EVERY)
    table.close()


def test_a_log_lost_or_truncated_falls_back_to_a_query(tmp_path: Path) -> None:
    log = tmp_path / "slaves.log"
    log.write_text((SUBMIT + EXECUTE).format(job="8.000.000"))
    table = JobLog()
    table.expect(8, range(1), None, str(log), now=0.0)
    table.follow()
    table.reconciled([{"ClusterId": 8, "ProcId": 0, "JobStatus": 2, "UserLog": str(log)}], now=0.0)
    table.follow()
    assert not table.needs_query(1.0, RECONCILE_EVERY)
    log.write_text(SUBMIT.format(job="8.000.000"))  # shorter than what was read: truncated and rewritten
    table.follow()
    assert table.needs_query(1.0, RECONCILE_EVERY)
    table.reconciled([{"ClusterId": 8, "ProcId": 0, "JobStatus": 2, "UserLog": str(log)}], now=1.0)
    table.follow()
    assert not table.needs_query(2.0, RECONCILE_EVERY)
    log.unlink()  # lost: the job can only be seen in the queue
    table.follow()
    assert table.needs_query(2.0, RECONCILE_EVERY)
    table.close()


def test_one_log_named_two_ways_is_read_once(tmp_path: Path) -> None:
    """slaves.sub's log beside the resource file and the job ad's UserLog may spell one file differently."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    log = real / "slaves.log"
    log.write_text((EXECUTE + REQUEUED_AFTER_EXIT_3).format(job="9.000.000"))
    table = JobLog()
    table.watch(str(tmp_path / "link" / "slaves.log"))
    table.reconciled([{"ClusterId": 9, "ProcId": 0, "JobStatus": 1, "UserLog": str(log)}], now=0.0)
    table.follow()
    assert table.counts == {"9.0": 1}
    assert table.followed({"UserLog": str(log)})
    table.close()

"""A job's policy as Condor's shadow and schedd apply it: the ad condor_submit writes, evaluated by classad2.

The expected outcomes are Condor's, as tests/test_jobs_conformance.py sees
them on the test pool (a job held by on_exit_hold with its own reason and
subcode, released by periodic_release, requeued while on_exit_remove is
false, removed by periodic_remove) and as ``UserPolicy::AnalyzePolicy``
orders the checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwpy.jobs.description import JobSpec, SubmitDescription
from mwpy.jobs.policy import COMPLETED, HELD, IDLE, REMOVED, Exit, JobLife, Verdict

T0 = 1_700_000_000.0


def _job(tmp_path: Path, commands: str) -> JobSpec:
    path = tmp_path / "jobs.sub"
    path.write_text(f"executable = /bin/true\n{commands}\nqueue\n")
    return next(SubmitDescription(path, base=str(tmp_path)).jobs())


def _run(life: JobLife, now: float, exit_code: int | None = 0, signal: int | None = None) -> Verdict:
    life.start(now)
    return life.exit(Exit(exit_code, signal, wall=1.0), now + 1).verdict


def test_only_a_file_with_policy_commands_keeps_classads(tmp_path: Path) -> None:
    assert not _job(tmp_path, "request_memory = 100").ad.policy  # the fast path: a job that exits completes
    assert _job(tmp_path, "on_exit_remove = true").ad.policy


def test_max_retries_runs_a_failing_job_until_it_succeeds_or_its_retries_are_spent(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "max_retries = 2"), T0)
    assert [_run(life, T0 + n, exit_code=1) for n in range(2)] == [Verdict.REQUEUE, Verdict.REQUEUE]
    assert _run(life, T0 + 10, exit_code=1) == Verdict.COMPLETE  # NumJobCompletions 3 > JobMaxRetries 2
    assert (life.status, life.ad["NumJobStarts"], life.ad["ExitCode"]) == (COMPLETED, 3, 1)
    succeeding = JobLife(_job(tmp_path, "max_retries = 5"), T0)
    assert [_run(succeeding, T0, exit_code=1), _run(succeeding, T0 + 5, exit_code=0)] == [
        Verdict.REQUEUE,
        Verdict.COMPLETE,
    ]


def test_success_exit_code_and_retry_until(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "success_exit_code = 3\nretry_until = 7"), T0)
    assert _run(life, T0, exit_code=0) == Verdict.REQUEUE  # 0 is not success here
    assert _run(life, T0 + 5, exit_code=7) == Verdict.COMPLETE  # retry_until's futility code


def test_on_exit_hold_holds_with_its_own_reason_and_subcode_and_periodic_release_releases(tmp_path: Path) -> None:
    life = JobLife(
        _job(
            tmp_path,
            'on_exit_hold = ExitCode != 0\non_exit_hold_reason = strcat("failed with ", ExitCode)\n'
            "on_exit_hold_subcode = ExitCode\n"
            "periodic_release = NumJobStarts < 3 && (CurrentTime - EnteredCurrentStatus) > 60",
        ),
        T0,
    )
    assert _run(life, T0, exit_code=4) == Verdict.HOLD
    assert (life.status, life.hold_reason, life.ad["HoldReasonCode"], life.ad["HoldReasonSubCode"]) == (
        HELD,
        "failed with 4",
        3,
        4,
    )
    life.ad["EnteredCurrentStatus"] = int(T0)  # CurrentTime is time(): make the hold a minute old
    assert life.periodic(T0 + 61).verdict == Verdict.RELEASE
    assert life.status == IDLE
    assert "PeriodicRelease" in life.ad["ReleaseReason"]


def test_a_job_held_with_a_release_that_can_never_fire_is_held_for_good(tmp_path: Path) -> None:
    release = "periodic_release = NumJobStarts < 2 && (CurrentTime - EnteredCurrentStatus) > 60"
    life = JobLife(_job(tmp_path, f"on_exit_hold = true\n{release}"), T0)
    assert _run(life, T0) == Verdict.HOLD
    assert not life.held_for_good(T0)  # a minute later it is released
    life.apply(life.periodic(T0 + 120), T0 + 120)
    assert _run(life, T0 + 130) == Verdict.HOLD  # NumJobStarts is 2 now: never again
    assert life.held_for_good(T0 + 130)


def test_the_default_hold_reason_is_condor_s_sentence(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "on_exit_hold = ExitCode == 5"), T0)
    _run(life, T0, exit_code=5)
    assert life.hold_reason == "The job attribute OnExitHold expression 'ExitCode == 5' evaluated to TRUE"


def test_periodic_remove_and_an_undefined_expression(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "periodic_remove = NumHolds >= 1\non_exit_hold = true"), T0)
    assert _run(life, T0) == Verdict.HOLD
    assert life.periodic(T0 + 5).verdict == Verdict.REMOVE
    assert life.status == REMOVED
    quiet = JobLife(_job(tmp_path, "periodic_remove = NoSuchAttribute > 3\nmax_retries = 1"), T0)
    assert quiet.periodic(T0).verdict == Verdict.STAY  # undefined does not fire


def test_submitted_on_hold_waits_for_a_release(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "hold = true\nperiodic_release = true"), T0)
    assert (life.status, life.ad["HoldReasonCode"]) == (HELD, 15)
    assert life.periodic(T0 + 1).verdict == Verdict.RELEASE


@pytest.mark.parametrize(
    ("command", "code", "why"),
    [
        ("allowed_job_duration = 30", 46, "The job exceeded allowed job duration of 00:30"),
        ("allowed_execute_duration = 90", 47, "The job exceeded allowed execute duration of 01:30"),
    ],
)
def test_a_running_job_past_its_allowed_duration_is_held(tmp_path: Path, command: str, code: int, why: str) -> None:
    life = JobLife(_job(tmp_path, command), T0)
    life.start(T0)
    assert life.periodic(T0 + 10, {"RemoteWallClockTime": 10.0}).verdict == Verdict.STAY
    decision = life.periodic(T0 + 100, {"RemoteWallClockTime": 100.0})
    assert (decision.verdict, decision.code, decision.reason) == (Verdict.HOLD, code, why)


def test_periodic_hold_sees_the_running_job_s_usage(tmp_path: Path) -> None:
    life = JobLife(_job(tmp_path, "periodic_hold = MemoryUsage > 100\nperiodic_hold_subcode = 7"), T0)
    life.start(T0)
    assert life.periodic(T0 + 5, {"MemoryUsage": 50}).verdict == Verdict.STAY
    decision = life.periodic(T0 + 10, {"MemoryUsage": 200})
    assert (decision.verdict, decision.code, decision.subcode) == (Verdict.HOLD, 3, 7)

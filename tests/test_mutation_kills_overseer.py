"""The overseer's decisions and the log lines an operator reads, against an in-memory queue (docs/mutation.md).

tests/test_overseer.py covers what the overseer does; these pin the exact
counts it reports and the lines it logs (its only voice in a shared pool),
found missing by mutation testing.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from mwpy import resource_file
from mwpy.backends import Job, JobState, Launch
from mwpy.overseer import Decision, Limits, Overseer, Verdict
from mwpy.resource_file import ResourceFile


@attrs.define
class Queue:
    """A batch queue the test sets directly; submissions and removals are recorded."""

    name: str = "queue"
    jobs_by_id: dict[str, Job] = attrs.Factory(dict)
    submitted: list[int] = attrs.Factory(list)
    removed: list[str] = attrs.Factory(list)
    _numbers: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))

    def jobs(self) -> list[Job]:
        return list(self.jobs_by_id.values())

    def submit(self, launch: Launch, count: int) -> None:
        self.submitted.append(count)
        for _ in range(count):
            self.add(JobState.IDLE)

    def remove(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self.removed.append(job_id)
            del self.jobs_by_id[job_id]

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass

    def add(self, state: JobState, reason: str | None = None) -> str:
        job_id = f"7.{next(self._numbers)}"
        self.jobs_by_id[job_id] = Job(job_id, state, reason=reason)
        return job_id


def write(path: Path, *, needed: int = 0, **changes: Any) -> None:
    record = ResourceFile(
        computation_status="in-progress",
        timestamp=time.time(),
        update_interval=60.0,
        member_id="m",
        master_host="127.0.0.1",
        master_port=1,
        slaves_needed=needed,
        slave_executable="/usr/bin/python3",
        slave_files=[],
        slave_arguments=[],
        master_pid=1,
    )
    resource_file.write(path, attrs.evolve(record, **changes))


@pytest.fixture
def rf(tmp_path: Path) -> Path:
    return tmp_path / "resource.json"


def watch(rf: Path, queue: Queue, lines: list[str], *, grace: float = 0.0, **limits: int) -> Overseer:
    return Overseer(rf, queue, Limits(**limits), log=lines.append, finish_grace=grace)


def test_waiting_and_giving_up_are_said_once_each_and_giving_up_keeps_the_reason(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    overseer = watch(rf, queue, lines)
    assert overseer.reconcile() == Decision(Verdict.WAITING)
    assert overseer.reconcile() == Decision(Verdict.WAITING)
    assert lines == [f"waiting: {rf}: no such resource file"]
    no_problem = overseer.problem
    assert no_problem is None
    rf.write_text("[]")
    assert overseer.reconcile() == Decision(Verdict.INVALID)
    assert overseer.problem == f"{rf}: not a JSON object"
    assert lines[1:] == [f"giving up: {rf}: not a JSON object"]
    assert queue.submitted == []


def test_the_running_line_gives_the_sums_the_queue_and_what_was_done(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.RUNNING)
    queue.add(JobState.HELD, "disk quota")
    queue.add(JobState.HELD)
    write(rf, needed=2, slaves_connected={"ordered": 1, "unordered": 2})
    decision = watch(rf, queue, lines).reconcile()
    assert decision == Decision(Verdict.RUNNING, submitted=4, removed=0, idle=0, running=1, held=2, wanted=5)
    assert lines == [
        "wanted 5 (connected 3 + needed 2); jobs idle 0 running 1 held 2 (disk quota); submitted 4, removed 0"
        " -- submitted 4: 5 wanted, 1 serving; job 7.2 held: disk quota; job 7.3 held: no reason given"
    ]


def test_held_jobs_without_a_reason_and_other_jobs_reasons_are_not_quoted(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.HELD)
    queue.add(JobState.RUNNING, "not held")
    queue.add(JobState.HELD, "first reason")
    queue.add(JobState.HELD, "second reason")
    write(rf, needed=1)
    watch(rf, queue, lines).reconcile()
    assert "held 3 (first reason); " in lines[0]
    queue2, lines2 = Queue(), list[str]()
    queue2.add(JobState.HELD)
    queue2.add(JobState.IDLE, "idle with a note")
    watch(rf, queue2, lines2).reconcile()
    assert "jobs idle 1 running 0 held 1; submitted 0, removed 0" in lines2[0]


def test_wanted_is_capped_by_max_jobs_and_shrinking_removes_the_surplus_idle_jobs(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    write(rf, needed=8)
    overseer = watch(rf, queue, lines, max_jobs=5)
    assert overseer.reconcile().wanted == 5
    assert queue.submitted == [5]
    write(rf, needed=2)
    decision = overseer.reconcile()
    assert (decision.wanted, decision.removed, decision.idle) == (2, 3, 5)
    assert queue.removed == ["7.3", "7.4", "7.5"]  # the newest, which are least likely to be matched soon
    assert len(queue.jobs_by_id) == 2


def test_no_submission_when_exactly_served_and_the_caps_count_what_is_queued(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    for _ in range(3):
        queue.add(JobState.RUNNING)
    queue.add(JobState.IDLE)
    write(rf, needed=4)
    assert watch(rf, queue, lines).reconcile() == Decision(Verdict.RUNNING, 0, 0, idle=1, running=3, wanted=4)
    write(rf, needed=9)
    # 5 short, 6 jobs at most: 4 queued leave room for 2
    assert watch(rf, queue, [], max_jobs=6, max_idle=100, batch=100).reconcile().submitted == 2
    # 3 short, 4 idle at most: 3 idle leave room for 1
    assert watch(rf, queue, [], max_jobs=100, max_idle=4, batch=100).reconcile().submitted == 1
    # 2 short, batches of 1
    assert watch(rf, queue, [], max_jobs=100, max_idle=100, batch=1).reconcile().submitted == 1
    assert len(queue.jobs_by_id) == 8


def test_a_stale_file_reports_the_queue_and_says_why_nothing_is_submitted(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.IDLE)
    queue.add(JobState.RUNNING)
    queue.add(JobState.HELD)
    write(rf, needed=5, timestamp=time.time() - 1000, update_interval=60.0)
    decision = watch(rf, queue, lines).reconcile()
    assert decision == Decision(Verdict.STALE, idle=1, running=1, held=1)
    assert len(lines) == 1
    assert lines[0].startswith("master silent for 100")
    assert re.fullmatch(
        r"master silent for 100\d s \(update interval 60 s\): not submitting; keeping 3 jobs queued "
        r"\(they are removed if it stays silent 2\d\d\d s more\)",
        lines[0],
    ), lines[0]


def test_finishing_says_what_it_removed_and_what_it_waits_for(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.IDLE)
    queue.add(JobState.HELD)
    queue.add(JobState.RUNNING)
    write(rf, computation_status="finished")
    overseer = watch(rf, queue, lines, grace=30.0)
    decision = overseer.reconcile()
    assert decision == Decision(Verdict.FINISHED, removed=2, idle=1, running=1, held=1)
    assert queue.removed == ["7.1", "7.2"]
    assert lines == ["computation finished: removed 2 slave jobs; 1 running ones get 30 s more to exit by themselves"]
    overseer.finish_grace = 0.0  # the grace is over
    assert overseer.reconcile() == Decision(Verdict.FINISHED, removed=1, running=1)
    assert lines[-1] == "computation finished: removed 1 slave jobs"
    assert overseer.reconcile() == Decision(Verdict.FINISHED)
    assert lines[-1] == "computation finished: no slave jobs left"


def test_the_finish_grace_counts_from_the_first_finished_reconciliation(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.RUNNING)
    write(rf, computation_status="finished")
    # A grace far longer than the test: however slowly the machine runs it, the second look is within it.
    overseer = watch(rf, queue, lines, grace=30.0)
    assert overseer.reconcile().removed == 0
    assert lines[-1].endswith("1 running ones get 30 s more to exit by themselves")
    time.sleep(1.1)  # the time that passes, not a wait for an outcome
    assert overseer.reconcile().removed == 0  # part of the grace gone: still waiting, and the log counts down
    left = int(lines[-1].split(" get ")[1].split(" s ")[0])
    assert left <= 29, lines[-1]
    overseer.finish_grace = 1.0  # (a shorter grace) now over
    assert overseer.reconcile().removed == 1
    zero = Queue()
    zero.add(JobState.RUNNING)
    assert watch(rf, zero, [], grace=0.0).reconcile().removed == 1  # no grace: removed at once


def test_idle_jobs_are_kept_for_a_master_that_has_not_stated_its_demand_and_the_line_says_how_many(
    rf: Path,
) -> None:
    queue, lines = Queue(), list[str]()
    for _ in range(5):
        queue.add(JobState.IDLE)
    write(rf, needed=2, demand_stated=False)
    overseer = watch(rf, queue, lines)
    assert overseer.reconcile() == Decision(Verdict.RUNNING, 0, 0, idle=5, wanted=2)
    assert queue.removed == []
    assert lines == [
        "wanted 2 (connected 0 + needed 2); jobs idle 5 running 0 held 0; submitted 0, removed 0"
        " -- kept 3 idle although demand is lower: master pid 1 at 127.0.0.1:1 has not stated its demand yet"
        " (waiting for its next file, at most 60 s)"
    ]
    write(rf, needed=5, demand_stated=False)  # exactly served: nothing kept, nothing to explain
    assert overseer.reconcile() == Decision(Verdict.RUNNING, 0, 0, idle=5, wanted=5)
    assert lines[1:] == ["wanted 5 (connected 0 + needed 5); jobs idle 5 running 0 held 0; submitted 0, removed 0"]


def test_a_shortfall_the_caps_forbid_filling_is_said_with_its_size(rf: Path) -> None:
    queue, lines = Queue(), list[str]()
    queue.add(JobState.IDLE)
    queue.add(JobState.IDLE)
    write(rf, needed=5)
    limits = Limits(max_jobs=100, max_idle=2, batch=20)
    overseer = Overseer(rf, queue, limits, log=lines.append, finish_grace=0.0)
    assert overseer.reconcile() == Decision(Verdict.RUNNING, 0, 0, idle=2, wanted=5)
    assert lines == [
        "wanted 5 (connected 0 + needed 5); jobs idle 2 running 0 held 0; submitted 0, removed 0"
        f" -- 3 short but at a cap ({limits})"
    ]
    queue.add(JobState.RUNNING)
    queue.add(JobState.RUNNING)
    queue.add(JobState.RUNNING)
    assert overseer.reconcile() == Decision(Verdict.RUNNING, 0, 0, idle=2, running=3, wanted=5)
    assert lines[1:] == ["wanted 5 (connected 0 + needed 5); jobs idle 2 running 3 held 0; submitted 0, removed 0"]

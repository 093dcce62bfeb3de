"""Issue 24 item 4: ``mwpy status --explain TASK`` says why a task is not running.

A real master and a real slave process; the command runs as a user types it
and reads the resource file, the one source every master writes. The tasks
wait for their own release file (tests/programs/gated.py), so the test decides
which task is done, which runs and which wait. Task ids are the ones results
and the event log give: 1 for the first task submitted.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import classad2
import pytest

from mwpy import resource_file
from mwpy.backends.condor_match import why_idle
from mwpy.core import board
from mwpy.core.entry import Entry
from mwpy.core.scheduler import Scheduler
from mwpy.errors import InvalidResourceFileError
from mwpy.observe import events as ev
from mwpy.observe import explain as explaining
from mwpy.resource_file import Flight, TaskBoard, TooLong, Waiting
from mwpy.task_records import DEFAULT_POLICY
from tests.support import (
    PROGRAMS,
    QUIET,
    mwpy_command,
    reap_spawned,
    resource_record,
    spawn_master,
    spawn_slave,
    wait_until,
)

GATED = PROGRAMS / "gated.py"
SHAPED = PROGRAMS / "shaped.py"


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    yield
    reap_spawned()


def explain(workdir: Path, task: int, *options: str) -> subprocess.CompletedProcess[str]:
    """``mwpy status resource.json --explain TASK --no-condor`` (no schedd is asked: this test has no pool)."""
    command = mwpy_command("status", str(workdir / "resource.json"), "--no-condor", "--explain", str(task), *options)
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def says(workdir: Path, task: int, words: str) -> str:
    """The explanation of ``task`` when it contains ``words`` (the file is rewritten every second), else "".

    Exit 3 (unknown task) is "not yet": the master's first resource file comes before its first task.
    """
    done = explain(workdir, task)
    assert done.returncode in (0, 3), done.stderr
    return done.stdout if words in done.stdout else ""


def test_explain_says_done_running_waiting_behind_n_and_refuses_an_unknown_id(tmp_path: Path) -> None:
    release = tmp_path / "release"
    events = tmp_path / "events.jsonl"
    master = spawn_master(
        GATED, tmp_path, "--mw-resource-file-update-interval", "1", "--mw-events", str(events), str(release), "5"
    )

    # No slave yet: every task waits, and the reason is that no slave is connected.
    text = wait_until(lambda: says(tmp_path, 3, "behind 2 tasks"), 60, "task 3 waiting behind tasks 1 and 2")
    assert "no slave is connected; the master wants 5" in text, text
    report = json.loads(explain(tmp_path, 3, "--json").stdout)  # the same lines, for scripts
    assert report["task"] == 3
    assert report["explanation"][1:] == [
        "waiting in the queue behind 2 tasks",
        "no slave is connected; the master wants 5",
    ]

    unknown = explain(tmp_path, 9)
    assert unknown.returncode == 3
    assert unknown.stdout == ""
    assert unknown.stderr == "mwpy status: error: task 9 is unknown: the master has issued tasks 1 to 5\n"

    spawn_slave(GATED, tmp_path)  # a slave starting fresh runs one task at a time: task 1, the rest queued
    text = wait_until(lambda: says(tmp_path, 1, "running on slave-"), 60, "task 1 running")
    assert text.splitlines()[0].startswith("task 1, as of the resource file written ")
    text = wait_until(lambda: says(tmp_path, 4, "behind 2 tasks"), 60, "task 4 behind tasks 2 and 3")
    assert "1 slave connected (1 task running)" in text, text

    Path(f"{release}.0").touch()  # task 1 ends; task 2 takes its place
    wait_until(lambda: says(tmp_path, 2, "running on slave-"), 60, "task 2 running")
    text = wait_until(lambda: says(tmp_path, 1, "done:"), 60, "task 1 done")
    assert "done: its result (a value or its error) went to the program" in text, text
    assert master.alive()  # done while the computation goes on
    with_log = explain(tmp_path, 1, "--events", str(events)).stdout  # which of the two: the event log knows
    assert "done: its value went to the program (the event log records no failure that ended it)" in with_log

    release.touch()
    assert master.wait(60) == 0, master.err()
    assert "done: the computation has finished" in explain(tmp_path, 5).stdout


def test_a_board_that_leaves_tasks_out_does_not_call_an_unlisted_task_done(tmp_path: Path) -> None:
    """Past its bounds the board says how much it left out; a task it does not list may still be queued."""
    board = TaskBoard(
        issued=50_000,
        flights=[Flight(slave="slave-0", since=990.0, tasks=[7])],
        queued=[Waiting(slave="", runs=[8, 10, 20, 29])],
        queued_beyond=40_000,
    )
    record = resource_record(timestamp=1000.0, slaves_connected={"unordered": 1}, task_board=board)
    assert explaining.explain(record, 25, now=1001.0)[1] == "waiting in the queue behind 8 tasks"
    window = TaskBoard(
        issued=9,
        flights=[Flight(slave="slave-0", since=990.0, tasks=[1, 2])],
        queued=[Waiting(slave="slave-2", runs=[5, 6])],
    )
    windowed = resource_record(timestamp=1000.0, task_board=window)
    assert explaining.explain(windowed, 2, now=1001.0)[1].startswith("sent to slave-0, which runs 1 task before it")
    assert explaining.explain(windowed, 6, now=1001.0)[1] == (
        "waiting for its ordered slave slave-2, behind 1 of that slave's tasks"
    )
    assert (
        explaining.explain(windowed, 3, now=1001.0)[1] == "done: its result (a value or its error) went to the program"
    )
    # what the task asks of a slave, once tasks carry resources (issue 24 item 1), is said with why it waits
    assert explaining.explain(record, 25, need="16 GB of memory", now=1001.0)[2] == "it needs: 16 GB of memory"
    line = explaining.explain(record, 30_000, now=1001.0)[-1]
    assert line.startswith("not among the 14 tasks the resource file lists as sent or queued: done, or queued")
    assert "leaves out 40000 queued tasks" in line
    # the board survives the file's own strict reading, and a bad run is refused there
    path = tmp_path / "resource.json"
    resource_file.write(path, record)
    assert resource_file.read(path).task_board == board
    text = path.read_text().replace("20,\n", "200,\n", 1)
    path.write_text(text)
    with pytest.raises(InvalidResourceFileError, match="runs must be pairs of task ids"):
        resource_file.read(path)


# The slots and the job are ClassAds as the collector and the schedd give them (condor_status -l / condor_q -l),
# cut to the attributes that matter here.
SLOT = '[Name = "slot1@node"; State = "Unclaimed"; Memory = 2048; OpSys = "LINUX"; Requirements = START; START = true]'
JOB = (
    '[Requirements = ((HasGpu is true)) && (TARGET.Memory >= RequestMemory) && (TARGET.OpSys == "LINUX"); '
    'RequestMemory = 1024; LastRejMatchReason = "no match found"]'
)


def test_an_idle_job_names_the_terms_of_its_requirements_no_slot_meets() -> None:
    """What ``condor_q -better-analyze`` would name: the one term no slot meets, not the whole expression."""
    slots = [classad2.ClassAd(SLOT), classad2.ClassAd(SLOT.replace("2048", "512"))]
    job = classad2.ClassAd(JOB)
    assert why_idle(job, slots) == (
        "its Requirements match none of the pool's 2 slots: no slot meets ((HasGpu is true)) "
        "(the schedd: no match found)"
    )
    job["Requirements"] = classad2.ExprTree("TARGET.Memory >= RequestMemory")
    assert why_idle(job, slots).startswith("slots that match it: 1, 1 free; it waits for the next negotiation")
    slots[0]["START"] = classad2.ExprTree("false")  # the slot's owner refuses every job
    assert why_idle(job, slots).startswith("slots its Requirements match: 1, all refuse it (their START policy)")
    slots[0]["START"], slots[0]["State"] = classad2.ExprTree("true"), "Claimed"
    assert why_idle(job, slots).startswith("slots that match it: 1, all busy")
    assert why_idle(job, []).startswith("the pool has no execute slot")


def test_the_board_of_a_huge_scattered_queue_stays_small_and_says_what_it_left_out() -> None:
    """A real scheduler with 30,000 queued tasks of which no two ids are consecutive, and 300 slaves each running
    one: the board keeps to its bounds, and what it lists is where the tasks are."""
    sched = Scheduler()
    entries = [Entry(sched.new_id(), "work", b"", DEFAULT_POLICY, QUIET) for _ in range(60_300)]
    for entry in entries[:300] + entries[300::2]:  # the odd ones past 300 are never queued: no run is longer than 1
        sched.add(entry)
    for number in range(300):
        sched.join(f"slave-{number}")
        assert [task.task_id for task in sched.take(f"slave-{number}", now=5.0)] == [number + 1]

    snapshot = board.snapshot(sched, now=10.0)
    assert snapshot.issued == 60_300
    assert not snapshot.flights_complete
    assert sum(len(flight.tasks) for flight in snapshot.flights) == board.MAX_IN_FLIGHT
    assert snapshot.flights[0].tasks == [1]
    (shared,) = snapshot.queued
    assert shared.runs[:4] == [301, 301, 303, 303]  # in the order they will be sent
    assert len(shared.runs) == 2 * board.MAX_RUNS
    assert snapshot.queued_beyond == 30_000 - board.MAX_RUNS
    size = len(resource_file.dumps(resource_record(task_board=snapshot)))
    assert size < 96 * 1024, size  # the file travels with every slave job


def test_with_the_event_log_a_task_says_how_it_ended_and_how_often_it_failed(tmp_path: Path) -> None:
    """The event log's task-failed lines (written by the master's own writer) name each failed task."""
    path = tmp_path / "events.jsonl"
    writer = ev.EventWriter(path, clock=lambda: 990.0)
    for task, retried in ((4, True), (4, False), (9, True)):
        writer.task_failed(
            task=task, slave="slave-2", algorithm="work", error="ValueError", message="bad\ninput",
            traceback="", retried=retried,
        )  # fmt: skip
    writer.flush(force=True)
    writer.close()
    assert explaining.failures_of(path, 7) == ([], None)
    failures, problem = explaining.failures_of(path, 4)
    assert (len(failures), problem) == (2, None)
    board = TaskBoard(issued=10, queued=[Waiting(slave="", runs=[9, 10])])
    record = resource_record(timestamp=1000.0, task_board=board)
    assert explaining.explain(record, 4, failures=failures, now=1001.0)[1].startswith(
        "done: it failed and its error went to the program: ValueError: bad input (on slave-2 at "
    )
    assert explaining.explain(record, 9, failures=explaining.failures_of(path, 9)[0], now=1001.0)[1:3] == [
        "waiting in the queue: it is next",
        "it failed 1 time before; the last: ValueError: bad input (on slave-2 at "
        + time.strftime("%H:%M:%S", time.localtime(990.0))
        + ")",
    ]
    path.write_bytes(path.read_bytes() + b'{"v": 1, "t": 9')  # a line cut short: what was read is kept
    failures, problem = explaining.failures_of(path, 4)
    assert len(failures) == 2
    assert problem is not None


def test_a_task_whose_shape_no_connected_slave_has_says_so_and_the_board_records_its_need(tmp_path: Path) -> None:
    """Issue 24 item 4: a master offered no shapes (as under Condor) and a slave of 1 GB: the 8 GB tasks wait for
    a slave of their shape, and ``--explain`` says so; the small ones run. tests/programs/shaped.py submits the
    six 8 GB tasks first (ids 1 to 6), then six small ones."""
    spawn_master(SHAPED, tmp_path, "--mw-resource-file-update-interval", "1")
    spawn_slave(SHAPED, tmp_path, "--mw-slave-resources", "memory=1GB")
    text = wait_until(lambda: says(tmp_path, 2, "no slave of its shape"), 60, "task 2 waiting for its shape")
    assert "no slave of its shape is connected: it needs memory 8192 MB (" in text, text
    assert "1 slave connected" in text, text
    record = resource_file.read(tmp_path / "resource.json")
    assert record.task_board is not None
    assert [need.resources for need in record.task_board.needs] == ["memory=8192", "cpus=2,memory=65536"]


def test_a_task_no_connected_slave_would_live_to_finish_says_slave_lifetime_too_short() -> None:
    """Issue 24 item 4: every connected slave leaves by plan (mwpy/lifetime.py) before a simulate task would end:
    the board lists those tasks (``too_long``); they wait for a fresh slave, and ``--explain`` says why."""
    board = TaskBoard(
        issued=9, queued=[Waiting(slave="", runs=[5, 9])], too_long=[TooLong("simulate", 40.0, [6, 7, 9, 9])]
    )
    record = resource_record(timestamp=1000.0, slaves_connected={"unordered": 2}, task_board=board)
    lines = explaining.explain(record, 6, now=1001.0)
    assert lines[2] == (
        "slave lifetime too short: simulate tasks have taken up to 40.0 s on the connected slaves, and all 2 "
        "leave by plan before one that long would end; it waits for a fresh slave"
    )
    assert not any("lifetime" in line for line in explaining.explain(record, 8, now=1001.0))  # a quick kind


def test_a_master_job_that_left_after_finishing_is_not_called_lost() -> None:
    """A master that finished (its file says so) and then left the queue ended the computation; only one that left
    before it finished (``condor_rm``, a crash) leaves the computation without a master."""
    board = TaskBoard(issued=5)
    gone = "master job 52.0 exited with status 0 at 10:00:00"
    finished = resource_record(timestamp=1000.0, computation_status="finished", slaves_needed=0, task_board=board)
    assert explaining.explain(finished, 3, master_gone=gone, now=1001.0)[1] == f"{gone}: the computation finished"
    removed = "master job 52.0 removed at 10:00:00 (via condor_rm (by user me))"
    lost = explaining.explain(resource_record(timestamp=1000.0, task_board=board), 3, master_gone=removed, now=1001.0)
    assert lost[1] == f"{removed}: the computation has no master, and nothing runs any more"


def test_the_board_applies_the_slaves_own_rule_per_algorithm_to_their_measured_runs() -> None:
    """The master's side of the lifetime line is the slave's rule (mwpy.lifetime.RunTimes, one home): the
    longest run of the task's algorithm on each slave, times SAFETY, against the time it has left, from its
    Hello. A kind it never ran: its longest run of any. A slave without a lifetime takes anything."""
    sched = Scheduler()
    for algorithm in ("slow", "slow", "quick", "other", "quick"):
        sched.add(Entry(sched.new_id(), algorithm, b"", DEFAULT_POLICY, QUIET))
    sched.join("slave-0")
    (first,) = sched.take("slave-0", now=1.0)
    sched.finish("slave-0", first.task_id, 40.0, now=41.0)  # the slave measured a slow run of 40 s
    (second,) = sched.take("slave-0", now=41.0)
    sched.finish("slave-0", second.task_id, 40.0, now=81.0)
    (third,) = sched.take("slave-0", now=81.0)
    sched.finish("slave-0", third.task_id, 1.0, now=82.0)  # a quick one of 1 s: task 4 (other) waits
    leaves = time.time() + 30.0
    shown = board.snapshot(sched, 0.0, leave_at={"slave-0": leaves})
    assert shown.too_long == [TooLong("other", 40.0, [4, 4])]  # a kind it never ran: its longest of any; quick fits
    assert board.snapshot(sched, 0.0, leave_at={"slave-0": time.time() + 60.0}).too_long == []  # 50 s fit
    sched.join("slave-1")
    assert board.snapshot(sched, 0.0, leave_at={"slave-0": leaves}).too_long == []  # slave-1 has no lifetime


def test_explain_says_slave_lifetime_too_short_for_a_real_slave_that_would_not_start_the_task(
    tmp_path: Path,
) -> None:
    """End to end: a real master, a real slave with ``--mw-slave-lifetime``, and ``mwpy status --explain``
    from the command line. Task 1 runs and ends (its run is measured), task 2 runs until the test releases it;
    once the slave's time left is shorter than the measured run (times its margin), a queued task's
    explanation says "slave lifetime too short" -- the slave's own rule, which it then applies: released, it
    leaves by plan (exit 0) and hands the rest back, and a fresh slave finishes the computation, no task lost."""
    release = tmp_path / "release"
    master = spawn_master(GATED, tmp_path, "--mw-resource-file-update-interval", "1", str(release), "5")
    # 30 s: far above the slave's start-up plus task 1 plus task 2's expected run on a loaded machine, so that
    # task 2 starts (the slave's own check) and the slave is still connected when its time runs short.
    slave = spawn_slave(GATED, tmp_path, "--mw-slave-lifetime", "30")
    wait_until(lambda: says(tmp_path, 1, "running on slave-"), 60, "task 1 running")
    Path(f"{release}.0").touch()  # task 1 ends: the slave and the master measure its run
    wait_until(lambda: says(tmp_path, 2, "running on slave-"), 60, "task 2 running")
    text = wait_until(lambda: says(tmp_path, 5, "slave lifetime too short"), 60, "the lifetime line of task 5")
    assert re.search(
        r"^slave lifetime too short: gated tasks have taken up to [\d.]+ (ms|s) on the connected slaves, and all 1 "
        r"leave by plan before one that long would end; it waits for a fresh slave$",
        text,
        re.MULTILINE,
    ), text
    assert "waiting in the queue behind" in text, text
    release.touch()
    assert slave.wait(60) == 0, slave.err()
    assert "leaving by plan: " in slave.err(), slave.err()  # no gated task fits, or its lifetime is over: by then
    spawn_slave(GATED, tmp_path)
    assert master.wait(60) == 0, master.err()
    assert "squares [0, 1, 4, 9, 16]" in master.out(), master.out()

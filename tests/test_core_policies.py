"""Task policies when slaves die, and slave groups: real slave processes, SIGKILLed mid-task.

The master runs inside the test process (``LocalMaster``) so that the test can
act between events; the slaves are real processes of tests/programs/workload.py.
A slave is killed while it is inside ``block``, which announces itself with a
marker file holding its pid and then waits for a release file, so "mid-task"
is certain, not a matter of timing.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from mwpy import ExitCode, LoopEvents, SlaveKind
from tests.programs.workload import block, nap, whoami
from tests.support import PROGRAMS, LocalMaster, local_master, wait_until

WORKLOAD = PROGRAMS / "workload.py"


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    with local_master(WORKLOAD, tmp_path) as master:
        yield master


def started_pid(lm: LocalMaster, name: str) -> int:
    """Drive the master until ``block(.., name)`` runs on some slave; that slave's pid."""
    marker = lm.workdir / f"started-{name}"

    def pid() -> int:
        return int(marker.read_text()) if marker.exists() else 0

    return lm.drive_until(pid, f"task {name!r} to start on a slave")


def release(lm: LocalMaster, name: str) -> None:
    (lm.workdir / f"release-{name}").touch()


def round_trip(lm: LocalMaster) -> int:
    """Run one unordered ``whoami`` to completion; the pid that ran it.

    With one slave taking unordered work, everything queued before it has been
    answered by then: a later duplicate of an earlier task cannot slip by.
    """
    result = lm.result_of(whoami.submit().task_id)
    assert result.ok, result.error
    value: int = result.value
    return value


def test_killed_slave_s_task_runs_again_on_another_slave_and_answers_exactly_once(lm: LocalMaster) -> None:
    first = lm.start_slave()
    assert round_trip(lm) == first.pid
    task_id = block.submit(str(lm.workdir), "k").task_id
    assert started_pid(lm, "k") == first.pid

    first.kill()
    release(lm, "k")
    second = lm.start_slave()
    result = lm.result_of(task_id)

    assert result.ok
    assert result.value == second.pid  # the re-queued task ran on the new slave
    assert round_trip(lm) == second.pid
    assert len(lm.results_of(task_id)) == 1
    assert lm.unrunnable == []
    assert "slave-0 -> disconnected" in lm.audit_text()


def test_killed_slave_s_task_without_retry_comes_back_unrunnable_exactly_once(lm: LocalMaster) -> None:
    mw = lm.mw
    first = lm.start_slave()
    future = block.with_policy(retry=False, tag="no-retry").submit(str(lm.workdir), "k")
    task_id = future.task_id
    assert started_pid(lm, "k") == first.pid

    first.kill()
    events = wait_until(lambda: mw.loop(timeout=0.1), 30, "the master to report the unrunnable task")
    assert events == LoopEvents(unrunnable=1)
    assert mw.num_unrunnable_tasks == 1
    [task] = mw.unrunnable_tasks()
    assert (task.task_id, task.tag, task.policy.retry) == (task_id, "no-retry", False)
    assert isinstance(future.exception(timeout=0), mwpy.UnrunnableTaskError)  # its future says so too
    assert task.args == (str(lm.workdir), "k")
    assert mw.unrunnable_tasks() == []
    assert mw.num_unrunnable_tasks == 0
    assert mw.pending_tasks() == 0

    release(lm, "k")
    second = lm.start_slave()
    assert round_trip(lm) == second.pid
    assert lm.results_of(task_id) == []  # never run again
    assert lm.unrunnable == []


def test_ordered_tasks_of_a_killed_ordered_slave_become_unrunnable(lm: LocalMaster) -> None:
    lm.mw.allocate_slaves(1, "ordered")
    slave = lm.start_slave()
    sid = lm.connected_slave()
    to_it = block.with_policy(sid=sid, tag="ordered")
    running = to_it.submit(str(lm.workdir), "k").task_id
    queued = to_it.submit(str(lm.workdir), "never").task_id
    assert started_pid(lm, "k") == slave.pid

    slave.kill()
    lm.drive_until(lambda: len(lm.unrunnable) == 2 and lm.disconnected, "both ordered tasks to become unrunnable")
    assert sorted(t.task_id for t in lm.unrunnable) == [running, queued]
    assert all(t.sid == sid and t.tag == "ordered" for t in lm.unrunnable)
    assert lm.disconnected == [sid]
    assert lm.results == []
    assert lm.mw.pending_tasks() == 0


def test_ordered_task_with_do_it_anyway_moves_to_an_unordered_slave_when_its_slave_dies(lm: LocalMaster) -> None:
    lm.mw.allocate_slaves(1, "ordered")
    ordered = lm.start_slave()
    sid = lm.connected_slave()
    unordered = lm.start_slave()
    assert round_trip(lm) == unordered.pid  # only the unordered slave takes unordered work
    task_id = block.with_policy(sid=sid, do_it_anyway=True).submit(str(lm.workdir), "k").task_id
    assert started_pid(lm, "k") == ordered.pid

    ordered.kill()
    release(lm, "k")
    result = lm.result_of(task_id)

    assert result.ok
    assert result.value == unordered.pid
    assert result.slave_id != sid
    assert lm.unrunnable == []
    lm.drive_until(lambda: lm.disconnected, "the ordered slave's disconnection to be reported")
    assert lm.disconnected == [sid]


# ---------------------------------------------------------------------- slaves that go quiet


def test_busy_slave_outlives_the_client_timeout_thanks_to_heartbeats(tmp_path: Path) -> None:
    # Client timeout 3 s: a slave beating every 3/4 s leaves ~2 s of slack for a loaded machine (with 1 s,
    # a starved heartbeat thread dropped the slave); the task spans two timeouts of the master's clock, a
    # lower bound that load only lengthens. Heartbeat spacing at its boundary: test_guarantees_reliability.
    timeout = 3.0
    with local_master(WORKLOAD, tmp_path, "--mw-client-timeout", f"{timeout:g}") as lm:
        slave = lm.start_slave()
        task_id = block.submit(str(lm.workdir), "k").task_id
        assert started_pid(lm, "k") == slave.pid
        until = time.monotonic() + 2 * timeout
        lm.drive_until(lambda: time.monotonic() > until, "two client timeouts to pass")
        assert "disconnected" not in lm.audit_text()
        release(lm, "k")
        assert lm.result_of(task_id).value == slave.pid


def test_silent_slave_is_dropped_after_the_client_timeout_and_its_task_runs_elsewhere(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-client-timeout", "1") as lm:
        frozen = lm.start_slave()
        task_id = block.submit(str(lm.workdir), "k").task_id
        assert started_pid(lm, "k") == frozen.pid
        os.kill(frozen.pid, signal.SIGSTOP)
        lm.drive_until(lambda: "(client timeout)" in lm.audit_text(), "the master to drop the silent slave")

        release(lm, "k")
        other = lm.start_slave()
        assert lm.result_of(task_id).value == other.pid
        os.kill(frozen.pid, signal.SIGCONT)
        assert frozen.wait() == ExitCode.MASTER_LOST  # it wakes up to a closed connection
        assert round_trip(lm) == other.pid
        assert len(lm.results_of(task_id)) == 1


# ---------------------------------------------------------------------- slave groups


def test_connecting_slaves_fill_ordered_then_intermingle_then_unordered(lm: LocalMaster) -> None:
    mw = lm.mw
    mw.allocate_slaves(1, "ordered")
    mw.allocate_slaves(1, "intermingle")
    lm.drive_until(lambda: lm.resource().slaves_needed == 2, "2 slaves needed")
    lm.start_slave()
    first = lm.connected_slave()
    second_proc = lm.start_slave()
    second = lm.connected_slave()
    lm.start_slave()
    lm.drive_until(
        lambda: lm.resource().slaves_connected == {"ordered": 1, "intermingle": 1, "unordered": 1},
        "one slave in each group in the resource file",
    )
    assert mw.slave_kind(first) is SlaveKind.ORDERED
    assert mw.slave_kind(second) is SlaveKind.INTERMINGLE
    assert lm.connected == [first, second]  # the unordered slave is not announced
    assert lm.resource().slaves_needed == 0

    second_proc.kill()
    lm.drive_until(lambda: lm.disconnected, "the intermingle slave's disconnection to be reported")
    assert lm.disconnected == [second]
    assert mw.slave_kind(second) is None
    lm.drive_until(lambda: lm.resource().slaves_needed == 1, "the resource file to ask for a replacement")


def test_ordered_tasks_run_only_on_their_slave_in_submission_order_and_intermingle_takes_unordered(
    lm: LocalMaster,
) -> None:
    lm.mw.allocate_slaves(1, "ordered")
    lm.mw.allocate_slaves(1, "intermingle")
    lm.start_slave()
    ordered = lm.connected_slave()
    intermingle_proc = lm.start_slave()
    intermingle = lm.connected_slave()

    to_ordered = [nap.with_policy(sid=ordered).submit(0.0, i).task_id for i in range(30)]
    unordered = [whoami.submit().task_id for _ in range(15)]
    to_intermingle = [nap.with_policy(sid=intermingle).submit(0.0, i).task_id for i in range(10)]
    everything = {*to_ordered, *unordered, *to_intermingle}
    lm.drive_until(lambda: {r.task_id for r in lm.results} >= everything, "every result")

    by_id = {r.task_id: r for r in lm.results}
    assert len(lm.results) == len(everything)
    arrived = [r.value for r in lm.results if r.task_id in to_ordered]
    assert arrived == list(range(30))  # run (and answered) in submission order
    assert {by_id[t].slave_id for t in to_ordered} == {ordered}
    assert {by_id[t].slave_id for t in to_intermingle} == {intermingle}
    # the ordered slave never takes unordered work; the intermingle slave does
    assert {by_id[t].slave_id for t in unordered} == {intermingle}
    assert {by_id[t].value for t in unordered} == {intermingle_proc.pid}


def test_intermingle_slave_prefers_its_own_ordered_tasks(lm: LocalMaster) -> None:
    lm.mw.allocate_slaves(1, "intermingle")
    lm.start_slave()
    sid = lm.connected_slave()
    unordered = [nap.submit(0.0, ("unordered", i)).task_id for i in range(5)]
    own = [nap.with_policy(sid=sid).submit(0.0, ("own", i)).task_id for i in range(5)]
    lm.drive_until(lambda: len(lm.results) == 10, "all ten results")
    assert [r.task_id for r in lm.results] == own + unordered


def test_free_slave_moves_an_ordered_slave_to_unordered_once_its_ordered_task_is_done(lm: LocalMaster) -> None:
    mw = lm.mw
    mw.allocate_slaves(1, "ordered")
    slave = lm.start_slave()
    sid = lm.connected_slave()
    task_id = block.with_policy(sid=sid).submit(str(lm.workdir), "k").task_id
    assert started_pid(lm, "k") == slave.pid

    mw.free_slave(sid)
    lm.pump()
    assert mw.slave_kind(sid) is SlaveKind.ORDERED  # still busy with an ordered task
    release(lm, "k")
    assert lm.result_of(task_id).ok
    assert mw.slave_kind(sid) is SlaveKind.UNORDERED
    assert round_trip(lm) == slave.pid  # it takes unordered work now
    lm.drive_until(
        lambda: lm.resource().slaves_connected == {"ordered": 0, "intermingle": 0, "unordered": 1},
        "the resource file to show the slave as unordered",
    )
    assert lm.resource().slaves_needed == 0  # no replacement wanted for the freed slave
    assert lm.disconnected == []


def test_allocate_and_deallocate_slaves_set_slaves_needed_in_the_resource_file(lm: LocalMaster) -> None:
    mw = lm.mw

    def needed(count: int) -> None:
        lm.drive_until(lambda: lm.resource().slaves_needed == count, f"slaves_needed == {count}")

    needed(0)
    mw.allocate_slaves(3, "ordered")
    needed(3)
    mw.deallocate_slaves(2, "ordered")
    needed(1)
    lm.start_slave()
    lm.connected_slave()
    needed(0)
    mw.allocate_slaves(2, "unordered")
    needed(2)
    mw.deallocate_slaves(5, "unordered")  # never below zero
    needed(0)

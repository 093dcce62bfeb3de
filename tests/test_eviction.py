"""Graceful eviction with real processes: a slave that gets SIGTERM (Condor's soft-kill signal).

It must stop taking tasks, send the results it finished, hand the tasks
queued in its window back at once, and exit ``EVICTED`` (9, non-zero, so
Condor keeps a vacated job queued). The master's client timeout is far
beyond each test's deadline, so only the hand-back can have re-queued the
tasks: what is asserted is the order of events, not how fast they came.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from mwpy import ExitCode
from tests.programs.evictable import gated, quick
from tests.support import PROGRAMS, audit_lines, catches, local_master, wait_until

PROGRAM = PROGRAMS / "evictable.py"
#: Far longer than any wait here: a task re-queued within a test was handed back, not timed out.
CLIENT_TIMEOUT = "600"


def test_a_slave_told_to_leave_by_sigterm_sends_its_results_and_hands_its_window_back(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    options = ("--mw-slave-window", "4", "--mw-slave-result-group", "4", "--mw-client-timeout", CLIENT_TIMEOUT,
               "--mw-events", str(events))  # fmt: skip
    with local_master(PROGRAM, tmp_path, *options) as master:
        done = quick.submit(3)  # finishes at once; held for a result group, then sent while task 1 runs
        running = gated.submit(str(tmp_path), 1)  # the task the slave is running when the signal comes
        # Queued behind it. retry=False: a slave that vanished with them would make them unrunnable;
        # a slave that hands them back unstarted has them queued again.
        queued = [gated.with_policy(retry=False).submit(str(tmp_path), value) for value in (2, 3)]
        first = master.start_slave()
        master.drive_until((tmp_path / "started-1").exists, "the slave to start task 1")
        # A finished result never waits behind a running task (issue 21): it comes while task 1 runs.
        master.drive_until(lambda: len(master.results) == 1, "the quick task's result")
        assert master.mw._sched.running_total == 3  # the other three are in its window
        first.popen.send_signal(signal.SIGTERM)
        master.drive_until(lambda: "HANDED BACK" in master.audit_text(), "the slave to hand its tasks back")
        assert first.wait() == ExitCode.EVICTED, first.err()
        # Before any other slave exists: the finished result came back, the other three are queued again.
        assert [r.task_id for r in master.results] == [done.task_id]
        assert master.results[0].value == 9
        assert master.mw.num_runnable_tasks == 3
        assert master.unrunnable == []
        lines = audit_lines(master.audit_text())
        handed = next(line for line in lines if "HANDED BACK" in line)
        assert "HANDED BACK 2 tasks unstarted" in handed
        left = next(line for line in lines if "disconnected (left on a soft-kill signal" in line)
        assert lines.index(handed) < lines.index(left)
        slave_lines = audit_lines(first.out() + first.err())
        assert any("SIGTERM: leaving; 2 queued tasks handed back" in line for line in slave_lines), slave_lines

        (tmp_path / "release").touch()
        master.start_slave()
        ids = [running.task_id, *(future.task_id for future in queued)]
        master.drive_until(lambda: len(master.results) == 4, "every task's result")
        assert sorted(r.task_id for r in master.results) == sorted([done.task_id, *ids])  # none lost, none twice
        assert {r.task_id: r.value for r in master.results if r.task_id in ids} == dict(
            zip(ids, [1, 4, 9], strict=True)
        )
        assert master.unrunnable == []
    # The event log, in order: the two handed back re-queued, then the slave gone with the one it ran;
    # the second slave connects only after that.
    logged = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]
    kinds = [
        (line["kind"], line.get("n", line.get("in_flight")))
        for line in logged
        if line["kind"] in ("tasks-requeued", "slave-disconnected", "slave-connected")
    ]
    (gone, *_) = [line for line in logged if line["kind"] == "slave-disconnected"]
    assert gone["cause"] == "eof", "an evicted slave left, as documented: no read/write/protocol error"
    assert kinds[:4] == [("slave-connected", None), ("tasks-requeued", 2), ("slave-disconnected", 1),
                         ("tasks-requeued", 1)]  # fmt: skip
    assert kinds[4] == ("slave-connected", None)


def test_an_idle_slave_leaves_on_sigterm_at_once_with_nothing_to_hand_back(tmp_path: Path) -> None:
    with local_master(PROGRAM, tmp_path, "--mw-client-timeout", CLIENT_TIMEOUT) as master:
        slave = master.start_slave()
        master.drive_until(master.mw.connected_slaves, "the slave to connect")
        master.drive_until(lambda: catches(slave.popen.pid, signal.SIGTERM), "the slave to handle SIGTERM")
        slave.popen.send_signal(signal.SIGTERM)
        master.drive_until(lambda: not master.mw.connected_slaves(), "the slave to leave")
        assert slave.wait() == ExitCode.EVICTED
        assert "HANDED BACK 0 tasks unstarted" in master.audit_text()
        wait_until(lambda: not slave.alive(), 10, "the slave process to end")

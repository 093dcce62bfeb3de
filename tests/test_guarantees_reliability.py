"""docs/reliability.md and docs/resource-file.md, tested at their boundaries (issue 14).

The master runs in the test process (``LocalMaster``) so the test can act
between events; slaves are real processes of tests/programs/guarantees.py,
whose tasks count their runs in files and wait on release files. Each
docstring names the documented statement; docs/guarantees.md maps them back.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import ExitCode, resource_file
from mwpy.wire import protocol
from tests.programs import trust_net
from tests.programs.guarantees import BROKEN, attempts, gated_or_broken, hold_until_released, ordered_fail, undecodable
from tests.support import PROGRAMS, LocalMaster, Proc, local_master, spawn_master, wait_until

PROGRAM = PROGRAMS / "guarantees.py"
DEADLINE = 60.0


def sid_of(lm: LocalMaster, slave: Proc) -> str:
    """Drive the master until ``slave`` has connected; its slave id."""

    def sid() -> str:
        marker = f", pid {slave.pid}, "
        lines = [line for line in lm.audit_text().splitlines() if " connecting [" in line and marker in line]
        return lines[0].split(" [A] ", 1)[1].split(" ", 1)[0] if lines else ""

    return lm.drive_until(sid, f"slave {slave.pid} to connect", DEADLINE)


def started(lm: LocalMaster, key: str) -> int:
    """Drive until ``hold_until_released(.., key)`` runs somewhere; that slave's pid."""
    marker = lm.workdir / f"started-{key}"
    return lm.drive_until(lambda: int(marker.read_text()) if marker.exists() else 0, f"{key} to start", DEADLINE)


def release(lm: LocalMaster, key: str) -> None:
    (lm.workdir / f"release-{key}").touch()


def test_failed_ordered_task_is_not_retried_and_never_runs_on_another_slave(tmp_path: Path) -> None:
    """reliability.md: "Ordered tasks are not retried" (a failed ordered task comes back failed at once).

    Two slaves, --mw-task-attempts 3: a failing task addressed to the ordered
    slave runs exactly once, there, and its failure is the result. Re-queued
    to the unordered pool it would run again on the unordered slave.
    """
    with local_master(PROGRAM, tmp_path, "--mw-task-attempts", "3") as lm:
        lm.mw.allocate_slaves(1, "ordered")
        ordered = lm.start_slave()
        sid = lm.connected_slave(DEADLINE)
        unordered = lm.start_slave()
        sid_of(lm, unordered)
        task_id = ordered_fail.with_policy(sid=sid).submit(str(tmp_path), "o").task_id
        result = lm.result_of(task_id, DEADLINE)
        assert result.error is not None
        assert result.error.type == "ValueError"
        assert result.slave_id == sid
        # an unordered round trip after it: anything re-queued before it has run by now
        probe = hold_until_released.submit(str(tmp_path), "probe").task_id
        release(lm, "probe")
        assert lm.result_of(probe, DEADLINE).value == unordered.pid
        assert attempts(tmp_path, "o") == [ordered.pid]
        assert len(lm.results_of(task_id)) == 1
        assert "queued to run again" not in lm.audit_text()


def test_result_decode_error_is_not_retried(tmp_path: Path) -> None:
    """reliability.md: failures that would recur on any slave (ResultDecodeError) are not retried.

    The task's value pickles on the slave but cannot be unpickled by the
    master. With --mw-task-attempts 3 and two slaves, it must run exactly
    once and come back as one failed result.
    """
    with local_master(PROGRAM, tmp_path, "--mw-task-attempts", "3") as lm:
        slaves = [lm.start_slave() for _ in range(2)]
        for slave in slaves:
            sid_of(lm, slave)
        task_id = undecodable.submit(str(tmp_path), "u").task_id
        result = lm.result_of(task_id, DEADLINE)
        assert result.error is not None
        assert result.error.type == "ResultDecodeError"
        probes = [
            hold_until_released.submit(str(tmp_path), f"p{i}").task_id for i in range(2)
        ]  # both slaves answer once more
        for i in range(2):
            release(lm, f"p{i}")
        lm.drive_until(lambda: all(lm.results_of(p) for p in probes), "the probes", DEADLINE)
        assert len(attempts(tmp_path, "u")) == 1
        assert len(lm.results_of(task_id)) == 1


def test_black_hole_is_told_to_leave_at_exactly_max_failures_not_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reliability.md: a slave is told to leave (exit 7) when --mw-slave-max-failures of its failed
    tasks have since succeeded elsewhere: at the 3rd with max 3, not at the 2nd.

    Window 1 per slave makes the order of events the test's: the good slave is
    held busy while the broken one fails the three tasks (then blocks in a
    task of its own, so it cannot take them again); the good slave then runs
    them one at a time, each gated by a release file.
    """
    options = ("--mw-slave-max-failures", "3", "--mw-task-attempts", "5", "--mw-slave-window", "1")
    with local_master(PROGRAM, tmp_path, *options) as lm:
        good = lm.start_slave()
        sid_of(lm, good)
        busy = hold_until_released.submit(str(tmp_path), "good").task_id
        assert started(lm, "good") == good.pid
        with monkeypatch.context() as patch:
            patch.setenv(BROKEN, "1")
            hole = lm.start_slave()
        hole_sid = sid_of(lm, hole)
        keys = ["k0", "k1", "k2"]
        ids = [gated_or_broken.submit(str(tmp_path), key).task_id for key in keys]
        parked = hold_until_released.submit(str(tmp_path), "hole").task_id
        assert started(lm, "hole") == hole.pid
        assert all(attempts(tmp_path, key) == [hole.pid] for key in keys)

        release(lm, "good")
        assert lm.result_of(busy, DEADLINE).ok
        for count, (key, task_id) in enumerate(zip(keys, ids, strict=True), start=1):
            release(lm, key)
            result = lm.result_of(task_id, DEADLINE)
            assert result.ok, result.error
            assert result.slave_id != hole_sid
            told = f"{hole_sid} -> told to leave" in lm.audit_text()
            assert told == (count == 3), f"after {count} of its failed tasks succeeded elsewhere: told={told}"
        release(lm, "hole")
        lm.drive_until(lambda: not hole.alive(), "the black hole to leave", DEADLINE)
        assert hole.returncode == ExitCode.TOLD_TO_LEAVE
        assert lm.result_of(parked, DEADLINE).slave_id != hole_sid  # its task in flight went to the good slave
        assert all(sorted(attempts(tmp_path, key)) == sorted([hole.pid, good.pid]) for key in keys)
        assert len(lm.results) == 5
        assert good.alive()
    assert good.wait(DEADLINE) == 0


def test_master_tells_slaves_to_beat_every_quarter_client_timeout(tmp_path: Path) -> None:
    """reliability.md: slaves send a heartbeat whenever they have sent nothing for client_timeout/4.

    The interval is the master's word in Welcome; a raw member of the
    computation (a master process with --mw-client-timeout 8) reads it: 2 s.
    """
    spawn_master(PROGRAM, tmp_path, "--mw-client-timeout", "8", "wait", str(tmp_path / "stop"))
    record = resource_file.read(tmp_path / "resource.json")
    assert record.secret is not None
    session = trust_net.authenticate(record.master_port, bytes.fromhex(record.secret))
    with session.sock:
        session.send(protocol.Hello(record.member_id, "h", 1, "0", 1 << 20))
        welcome = session.receive(DEADLINE)
    assert isinstance(welcome, protocol.Welcome)
    assert welcome.heartbeat_interval == 2.0
    (tmp_path / "stop").touch()


def test_busy_slave_beats_well_inside_the_client_timeout(tmp_path: Path) -> None:
    """reliability.md: a busy slave is never silent for long: heartbeats every client_timeout/4.

    A proxy between slave and master notes when each slave frame passes while
    the slave is inside a long task. Beating every quarter, the longest gap is
    3/8 of the timeout; beating every timeout, it is at least the timeout, and
    the master drops the slave. The bound asserted, 3/4 of the timeout, leaves
    1.5 s for a loaded machine (a wall-clock bound because the guarantee is one).
    """
    timeout = 4.0
    seen: list[float] = []

    def note(direction: str, index: int, frame: bytes) -> bytes:
        if direction == "c2s":
            seen.append(time.monotonic())
        return frame

    proxy = trust_net.Proxy(0, note)
    try:
        with local_master(PROGRAM, tmp_path, "--mw-client-timeout", f"{timeout:g}") as lm:
            proxy.target = lm.mw.port
            slave = lm.start_slave("--mw-master-port", str(proxy.port))
            task_id = hold_until_released.submit(str(tmp_path), "long").task_id
            assert started(lm, "long") == slave.pid
            first = len(seen)
            lm.drive_until(lambda: len(seen) >= first + 6, "six frames from the busy slave", DEADLINE)
            gaps = [b - a for a, b in itertools.pairwise(seen[first:])]
            assert max(gaps) < 0.75 * timeout, gaps
            release(lm, "long")
            assert lm.result_of(task_id, DEADLINE).value == slave.pid
            assert "disconnected" not in lm.audit_text()
    finally:
        proxy.close()


def test_resource_file_rewrites_on_changes_are_at_most_one_a_second(tmp_path: Path) -> None:
    """resource-file.md: rewritten at once when slaves needed change, debounced to at most one write a second.

    The test changes slaves_needed between every pass of the event loop; each
    rewrite's own timestamp must be at least a second after the previous one,
    and the last change must still reach the file.
    """
    with local_master(PROGRAM, tmp_path) as lm:
        stamps: list[float] = []

        def toggle_and_note() -> None:
            lm.mw.allocate_slaves(1, "ordered")
            lm.pump(0.01)
            lm.mw.deallocate_slaves(1, "ordered")
            lm.pump(0.01)
            stamp = lm.resource().timestamp
            if not stamps or stamps[-1] != stamp:
                stamps.append(stamp)

        wait_until(lambda: len(stamps) >= 4, DEADLINE, "four rewrites", step=toggle_and_note)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert min(gaps) >= 0.99, gaps  # the master's own clock: a lower bound, load only makes it longer
        lm.mw.allocate_slaves(2, "ordered")
        lm.drive_until(lambda: lm.resource().slaves_needed == 2, "the last change to reach the file", DEADLINE)


def test_map_yields_in_input_order_when_results_really_arrive_out_of_order(tmp_path: Path) -> None:
    """README: mw.map yields values in input order; as_completed yields them as they arrive.

    Input 0 waits for a release file that the input iterator creates only
    when map pulls input 2, which it does only after a result arrived, and
    the only result that can arrive then is input 1's. So results certainly
    arrive 1 before 0, and map must still yield 0 first.
    """
    keys = [f"m{i}" for i in range(4)]
    for key in keys[1:]:
        release_file = tmp_path / f"release-{key}"
        release_file.touch()

    def inputs() -> Iterator[str]:
        for i, key in enumerate(keys):
            if i == 2:
                (tmp_path / "release-m0").touch()
            yield key

    with local_master(PROGRAM, tmp_path, "--mw-slave-window", "1") as lm:  # one task per slave at a time
        slaves = [lm.start_slave() for _ in range(2)]
        for slave in slaves:
            sid_of(lm, slave)
        folders = [str(tmp_path)] * len(keys)
        arrival = [r.tag for r in lm.mw.as_completed(hold_until_released, folders, inputs(), window=2)]
        assert arrival.index(1) < arrival.index(0), arrival
        (tmp_path / "release-m0").unlink()
        values = list(lm.mw.map(hold_until_released, folders, inputs(), window=2))
        assert len(values) == len(keys)
        started_by = [int((tmp_path / f"started-{key}").read_text()) for key in keys]
        assert values == started_by  # each value is the pid that ran that input: input order


def test_resource_file_is_rewritten_every_update_interval(tmp_path: Path) -> None:
    """resource-file.md: written every --mw-resource-file-update-interval seconds, with nothing changed.

    Three rewrites must come (a condition with a deadline), each at least the
    interval after the one before (the master's own timestamps: a lower bound).
    """
    with local_master(PROGRAM, tmp_path, "--mw-resource-file-update-interval", "1") as lm:
        stamps: list[float] = []

        def rewritten() -> bool:
            stamp = lm.resource().timestamp
            if not stamps or stamps[-1] != stamp:
                stamps.append(stamp)
            return len(stamps) >= 4

        lm.drive_until(rewritten, "three periodic rewrites", DEADLINE)
        assert min(b - a for a, b in itertools.pairwise(stamps)) >= 0.99, stamps
        assert lm.resource().update_interval == 1.0

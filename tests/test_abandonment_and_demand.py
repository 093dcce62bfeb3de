"""Issue 11, items 1 and 2, on the master and slave side (the overseer's side is in tests/test_overseer.py).

* A master does not present a demand it has not stated: until its algorithm
  first runs the loop, its resource file says ``demand_stated: false``, and an
  overseer removes no idle job on it however long that takes.
* A slave whose master is gone for good (its resource file stale for longer
  than ``--mw-abandon-after`` beyond the stale point) leaves the queue: exit 0
  with one line, so Condor's ``on_exit_remove`` removes its job. Within the
  limit it waits for its master instead of exiting 3 (issue 24 item 5: no
  hour of restarts).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs

from mwpy import ExitCode, resource_file
from mwpy.overseer import Limits, Overseer
from mwpy.resource_file import ResourceFile
from tests.support import (
    PROGRAMS,
    PYTHON,
    TRUST_STREAM,
    resource_record,
    spawn,
    spawn_slave,
    wait_until,
    write_resource_file,
)

#: A resource file's update interval in these tests, and the grace that goes with it (10 s at least).
INTERVAL, GRACE = 4.0, 10.0
LIMIT = 100.0


def write(path: Path, **changes: Any) -> ResourceFile:
    return write_resource_file(path, **{"update_interval": INTERVAL, **changes})


def test_overdue_and_abandoned_at_their_edges() -> None:
    record = resource_record(timestamp=1000.0, update_interval=INTERVAL)
    edge = 1000.0 + INTERVAL + GRACE
    assert record.overdue(now=edge) == 0
    assert not record.abandoned(LIMIT, now=edge + LIMIT - 0.01)
    assert not record.abandoned(LIMIT, now=edge + LIMIT)
    assert record.abandoned(LIMIT, now=edge + LIMIT + 0.01)
    assert not attrs.evolve(record, computation_status="finished").abandoned(LIMIT, now=edge + 1e6)


def test_a_slave_past_the_abandonment_limit_leaves_the_queue_at_once(tmp_path: Path) -> None:
    """Exit 0 (on_exit_remove takes the job out of the queue) with one line naming the limit."""
    rf = tmp_path / "resource.json"
    write(rf, timestamp=time.time() - (INTERVAL + GRACE + LIMIT + 5))
    slave = spawn_slave(TRUST_STREAM, tmp_path, "--mw-abandon-after", f"{LIMIT:g}")
    assert slave.wait(60) == ExitCode.OK, slave.err()
    lines = slave.err().strip().splitlines()
    assert len(lines) == 1, lines
    assert "gone for good" in lines[0]
    assert "--mw-abandon-after 100" in lines[0]


def test_a_slave_whose_master_job_was_removed_leaves_the_queue_at_once(tmp_path: Path) -> None:
    """The master's file says its Condor job was removed (condor_rm): a slave job that starts now exits 0 with one
    line at once (on_exit_remove takes it out) instead of waiting ``--mw-abandon-after`` for a master that will
    not come back; the file is fresh, so nothing else would tell it."""
    rf = tmp_path / "resource.json"
    write(rf, master_removed=True, master_condor_job="52.0")
    slave = spawn_slave(TRUST_STREAM, tmp_path)
    assert slave.wait(60) == ExitCode.OK, slave.err()
    lines = slave.err().strip().splitlines()
    assert len(lines) == 1, lines
    assert "the master's Condor job was removed (condor_rm)" in lines[0], lines


def test_a_slave_on_a_stale_file_waits_for_its_master_then_leaves_the_queue(tmp_path: Path) -> None:
    """Issue 24 item 5: no restarts while the master is gone. Within the limit the slave does not exit 3
    (Condor would start it again and again); it waits for its master at the file's address and, once the
    limit is reached with nobody there, exits 0 with one line."""
    rf = tmp_path / "resource.json"
    write(rf, timestamp=time.time() - (INTERVAL + GRACE + LIMIT - 3))
    slave = spawn_slave(TRUST_STREAM, tmp_path, "--mw-abandon-after", f"{LIMIT:g}")
    assert slave.wait(60) == ExitCode.OK, slave.err()
    lines = slave.err().strip().splitlines()
    assert len(lines) == 1, lines
    assert "gone for good: no answer at" in lines[0]
    assert "--mw-abandon-after 100" in lines[0]


def test_a_slave_that_cannot_reach_a_fresh_master_names_its_exit_status(tmp_path: Path) -> None:
    """docs/exit-codes.md: the one line says the status by number and name, and that Condor keeps the job queued."""
    write(tmp_path / "resource.json")
    slave = spawn_slave(TRUST_STREAM, tmp_path, "--mw-connect-timeout", "0.5")
    assert slave.wait(60) == ExitCode.UNREACHABLE, slave.err()
    (line,) = slave.err().strip().splitlines()
    assert "cannot reach the master" in line
    assert line.endswith("[exit status 3 UNREACHABLE: Condor keeps the job queued]"), line


def test_the_default_abandonment_limit_is_five_minutes(tmp_path: Path) -> None:
    """docs/exit-codes.md: a slave leaves at most 300 s past the stale point (the overseer keeps its hour)."""
    rf = tmp_path / "resource.json"
    write(rf, timestamp=time.time() - (INTERVAL + GRACE + 300 + 60))
    slave = spawn_slave(TRUST_STREAM, tmp_path)
    assert slave.wait(60) == ExitCode.OK, slave.err()
    assert "--mw-abandon-after 300 s" in slave.err()


def read_or_none(path: Path) -> ResourceFile | None:
    return resource_file.read(path) if path.exists() else None


def stated_or_none(path: Path) -> ResourceFile | None:
    record = resource_file.read(path)
    return record if record.demand_stated else None


class _Queue:
    """A back end with idle jobs only, that records what the overseer removes."""

    name = "queue"

    def __init__(self, idle: int) -> None:
        from mwpy.backends import Job, JobState  # noqa: PLC0415

        self.jobs_now = [Job(f"1.{i}", JobState.IDLE) for i in range(idle)]
        self.removed: list[str] = []

    def jobs(self) -> list[Any]:
        return [job for job in self.jobs_now if job.job_id not in self.removed]

    def submit(self, launch: Any, count: int) -> None:
        raise AssertionError("nothing should be submitted")

    def remove(self, job_ids: Any) -> None:
        self.removed += list(job_ids)

    def poll(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_master_states_its_demand_only_once_its_algorithm_runs_the_loop(tmp_path: Path) -> None:
    """Guards issue 11 item 1: a slow-starting master's files say demand_stated false, and no idle job goes."""
    gate = tmp_path / "gate"
    rf = tmp_path / "resource.json"
    master = spawn(
        [
            PYTHON,
            str(PROGRAMS / "slow_start.py"),
            "--mw-master",
            "--mw-resource-file",
            str(rf),
            "--mw-resource-file-update-interval",
            "1",
            "--mw-master-host",
            "127.0.0.1",
            str(gate),
            "3",
        ],
        tmp_path,
        "master",
    )
    first = wait_until(lambda: read_or_none(rf), 60, "the master's first resource file")
    assert first is not None
    assert first.demand_stated is False
    assert first.slaves_needed == 0  # written before the algorithm submitted: not its word
    queue = _Queue(idle=5)
    overseer = Overseer(rf, queue, Limits(), log=lambda line: None)
    seen = time.monotonic()
    assert overseer.reconcile().removed == 0
    # However long the master takes (here over two update intervals), the overseer removes nothing.
    wait_until(lambda: time.monotonic() - seen > 2.5 * first.update_interval, 60, "two update intervals")
    assert overseer.reconcile().removed == 0
    assert queue.removed == []
    gate.touch()
    stated = wait_until(lambda: stated_or_none(rf), 60, "the master to state its demand")
    assert stated is not None
    assert stated.slaves_needed >= 1  # its three tasks, not the 0 of a master that has not counted
    slave = spawn_slave(PROGRAMS / "slow_start.py", tmp_path)
    assert slave.wait(60) == ExitCode.OK, slave.err()
    assert master.wait(60) == 0, master.err()

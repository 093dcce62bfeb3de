"""Per-task timeouts on real slave processes: interrupted, stuck, and stopped (SIGSTOP) slaves.

A task past its timeout fails with ``mwpy.TaskTimeoutError``. The slave
interrupts it (SIGALRM); a task that does not stop within the grace period
makes its slave exit with status 8 (a fresh one replaces it under a batch
system); a slave that does not answer at all (stopped) is dropped by the
master, heartbeats or not, and the task fails all the same.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from mwpy.core.outcomes import MASTER_TIMEOUT_GRACE
from mwpy.wire.protocol import ExitCode
from tests.programs.workload import block, sleepy, stubborn
from tests.support import LocalMaster, local_master
from tests.test_core_policies import started_pid
from tests.test_core_tasks import WORKLOAD


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    with local_master(WORKLOAD, tmp_path) as master:
        yield master


def test_a_task_past_its_timeout_is_interrupted_and_the_slave_carries_on(lm: LocalMaster) -> None:
    slave = lm.start_slave()
    future = sleepy.with_policy(timeout=0.5).submit(60)
    with pytest.raises(mwpy.TaskTimeoutError, match=r"timeout of 0\.5 s") as caught:
        future.result(timeout=60)
    assert isinstance(caught.value, TimeoutError)  # except TimeoutError: catches it too
    assert sleepy.submit(0).result(timeout=60) == slave.pid  # same slave, still working
    assert slave.alive()


def test_a_task_within_its_timeout_is_not_disturbed(lm: LocalMaster) -> None:
    lm.start_slave()
    assert sleepy.with_policy(timeout=30).submit(0.1).result(timeout=60) > 0


def test_the_option_sets_the_timeout_of_tasks_without_one(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-task-timeout", "0.5") as lm:
        lm.start_slave()
        with pytest.raises(mwpy.TaskTimeoutError):
            sleepy.submit(60).result(timeout=60)
        assert sleepy.with_policy(timeout=30).submit(1.0).result(timeout=60) > 0  # its own wins


def test_a_task_that_ignores_the_interruption_ends_its_slave_with_status_8(lm: LocalMaster) -> None:
    slave = lm.start_slave()
    future = stubborn.with_policy(timeout=0.5).submit(600)
    with pytest.raises(mwpy.TaskTimeoutError, match="did not stop"):
        future.result(timeout=60)
    assert slave.wait(30) == ExitCode.TASK_STUCK
    replacement = lm.start_slave()  # what a batch system (or mwpy local) does with a non-zero exit
    assert sleepy.submit(0).result(timeout=60) == replacement.pid


def test_a_stopped_slave_is_dropped_and_its_task_times_out_despite_no_answer(lm: LocalMaster) -> None:
    slave = lm.start_slave()
    future = block.with_policy(timeout=3).submit(str(lm.workdir), "stopped")
    assert started_pid(lm, "stopped") == slave.pid
    os.kill(slave.pid, signal.SIGSTOP)  # well within the 3 s: it never gets to interrupt the task
    try:
        with pytest.raises(mwpy.TaskTimeoutError, match="stopped answering"):
            future.result(timeout=60 + MASTER_TIMEOUT_GRACE)
        assert "ran past its timeout of 3 s" in lm.audit_text()
        assert lm.mw.connected_slaves() == {}
    finally:
        os.kill(slave.pid, signal.SIGCONT)
    other = lm.start_slave()
    assert sleepy.submit(0).result(timeout=60) == other.pid


def test_wrong_timeouts_are_refused() -> None:
    with pytest.raises(mwpy.ConfigurationError, match="timeout"):
        sleepy.with_policy(timeout=0)
    with pytest.raises(mwpy.ConfigurationError, match="timeout"):
        mwpy.task(timeout=-1)

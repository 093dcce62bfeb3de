"""Futures in the master algorithm: ``submit()`` returns a TaskFuture whose ``result()`` drives the loop.

The rule for ``mw.results()``: every result of a task submitted with
``submit()`` still appears there (CL-MW's loop API is unchanged); the future is
a second view of the same result. A cancelled task never produces one.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from tests.programs.workload import checked, square
from tests.support import LocalMaster, local_master
from tests.test_core_tasks import WORKLOAD


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    with local_master(WORKLOAD, tmp_path, "--mw-task-attempts", "1") as master:
        yield master


def test_submit_returns_a_future_whose_result_drives_the_loop(lm: LocalMaster) -> None:
    lm.start_slave()
    future = square.submit(7)
    assert isinstance(future, cf.Future)
    assert isinstance(future, mwpy.TaskFuture)
    assert isinstance(future.task_id, int)
    assert future.result(timeout=60) == 49  # nobody called mw.loop(): result() did
    [result] = lm.mw.results()  # ... and the loop API still sees the result
    assert (result.task_id, result.value) == (future.task_id, 49)


def test_loop_serves_the_slaves_while_undrained_results_wait(lm: LocalMaster) -> None:
    # Found on the pool (tests/programs/two_needs.py's first version): results collected through futures
    # stay in mw.results() too; a loop() that then returned at once, before any I/O, never answered the
    # next task, and `while not future.done(): mw.loop()` spun for ever.
    lm.start_slave()
    assert square.submit(2).result(timeout=60) == 4  # its result now waits in mw.results(), undrained
    later = square.submit(5)
    deadline = time.monotonic() + 60
    while not later.done():
        assert time.monotonic() < deadline, "loop() did no I/O while an earlier result waited undrained"
        events = lm.mw.loop(timeout=1.0)
        assert events.results >= 1  # it still reports the waiting results at once, as CL-MW's loop does
    assert later.result() == 25
    assert sorted(result.value for result in lm.mw.results()) == [4, 25]


def test_a_failed_task_s_future_raises_its_own_exception(lm: LocalMaster) -> None:
    lm.start_slave()
    future = checked.submit(-2)
    with pytest.raises(ValueError, match="negative: -2") as caught:
        future.result(timeout=60)
    assert isinstance(caught.value.__cause__, mwpy.RemoteTraceback)
    [result] = lm.mw.results()
    assert result.error is not None  # Result.error is as it was for the loop API
    assert result.error.type == "ValueError"


def test_result_with_a_timeout_gives_up_without_a_slave(lm: LocalMaster) -> None:
    future = square.submit(3)
    with pytest.raises(cf.TimeoutError):
        future.result(timeout=0.3)
    assert not future.done()


def test_a_cancelled_task_never_runs_nor_reaches_results(lm: LocalMaster) -> None:
    doomed = square.submit(2)
    kept = square.submit(3)
    assert doomed.cancel()
    assert lm.mw.pending_tasks() == 2  # dropped when it would have left for a slave
    lm.start_slave()
    assert kept.result(timeout=60) == 9
    lm.drive_until(lambda: lm.mw.pending_tasks() == 0, "the cancelled task to be dropped")
    assert [r.task_id for r in lm.mw.results()] == [kept.task_id]
    with pytest.raises(cf.CancelledError):
        doomed.result()


def test_another_thread_waits_while_the_master_s_thread_drives(lm: LocalMaster) -> None:
    lm.start_slave()
    future = square.submit(5)
    seen: list[int] = []
    waiter = threading.Thread(target=lambda: seen.append(future.result(timeout=60)))
    waiter.start()
    lm.drive_until(future.done, "the result")
    waiter.join(60)
    assert seen == [25]


def test_submitters_return_futures_too(lm: LocalMaster) -> None:
    lm.start_slave()
    futures = [square.with_policy(tag="t")(i) for i in range(5)]
    assert [f.result(timeout=60) for f in futures] == [0, 1, 4, 9, 16]

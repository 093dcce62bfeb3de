"""mwpy.futures.LightFuture: a concurrent.futures.Future without a Condition until someone needs one.

Futures settled before anyone looked, settled while another thread waits, and
looked at through every concurrent.futures entry point must behave exactly as
the standard Future does: no lost wake-up, no callback run twice or never.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading

import pytest

from mwpy.futures import LightFuture

#: A generous deadline for waits that must end at once (never reached unless a wake-up is lost).
DEADLINE = 30.0


def test_a_future_settled_before_anyone_looked_reads_like_any_future() -> None:
    done, failed = LightFuture[int](), LightFuture[int]()
    done._finish(7, None)
    failed._finish(None, ValueError("boom"))
    assert done.done()
    assert not done.running()
    assert not done.cancelled()
    assert done.result(timeout=0) == 7
    assert done.exception(timeout=0) is None
    with pytest.raises(ValueError, match="boom"):
        failed.result(timeout=0)
    assert isinstance(failed.exception(timeout=0), ValueError)
    assert not done.cancel()
    finished, pending = concurrent.futures.wait([done, failed], timeout=0)
    assert finished == {done, failed}
    assert not pending
    assert set(concurrent.futures.as_completed([done, failed], timeout=DEADLINE)) == {done, failed}
    seen: list[concurrent.futures.Future[int]] = []
    done.add_done_callback(seen.append)  # already done: called at once
    assert seen == [done]


def test_waiters_in_other_threads_are_woken_by_every_kind_of_settling() -> None:
    futures = [LightFuture[int]() for _ in range(300)]
    results: dict[int, object] = {}
    called: list[int] = []

    def wait_for(index: int) -> None:
        future = futures[index]
        if index % 3 == 0:
            results[index] = future.result(timeout=DEADLINE)
        elif index % 3 == 1:
            finished, _ = concurrent.futures.wait([future], timeout=DEADLINE)
            results[index] = future.result(timeout=0) if finished else "lost"
        else:
            future.add_done_callback(functools.partial(_record, called, index))
            results[index] = next(concurrent.futures.as_completed([future], timeout=DEADLINE)).result()

    waiters = [threading.Thread(target=wait_for, args=(i,)) for i in range(len(futures))]
    for waiter in waiters:
        waiter.start()
    for index, future in enumerate(futures):  # races each waiter as it makes (or not) the condition
        assert future._mark_running()
        future._finish(index, None)
    for waiter in waiters:
        waiter.join(DEADLINE)
    assert results == {i: i for i in range(len(futures))}
    assert sorted(called) == [i for i in range(len(futures)) if i % 3 == 2]


def _record(called: list[int], index: int, future: concurrent.futures.Future[int]) -> None:
    called.append(index)


def test_a_cancelled_future_stays_cancelled_and_is_not_started() -> None:
    future = LightFuture[int]()
    seen: list[concurrent.futures.Future[int]] = []
    future.add_done_callback(seen.append)
    assert future.cancel()
    assert future.cancelled()
    assert future.done()
    assert not future._mark_running()  # set_running_or_notify_cancel's answer for a cancelled future
    future._finish(1, None)  # a late result changes nothing
    assert future.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=0)
    assert seen == [future]


def test_a_running_or_finished_future_cannot_be_cancelled() -> None:
    running, finished = LightFuture[int](), LightFuture[int]()
    assert running._mark_running()
    assert running.running()
    finished._finish(1, None)
    assert not running.cancel()
    assert not finished.cancel()
    assert not running.cancelled()
    assert not finished.cancelled()
    finished._finish(2, None)  # settling twice keeps the first result, as the executors need
    assert finished.result() == 1

"""``multiprocessing.Manager()`` proxies in tasks, a ProcessPoolExecutor idiom.

CPython's own executor tests do it: test_concurrent_futures/util.py makes
its events with ``self.manager.Event()`` for process pools and sets them from
workers. A local slave is given the caller's authkey (spawn gives it to its
children); where a proxy cannot reach its manager (a Condor slave on another
machine; here, a manager that has stopped) the task's error says why.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest

import mwpy
from tests.programs import executor_work as work

TIMEOUT = 120


@pytest.fixture(scope="module")
def manager() -> Iterator[multiprocessing.managers.SyncManager]:
    with multiprocessing.Manager() as made:
        yield made


def test_a_manager_s_dict_and_event_work_on_local_slaves(manager: multiprocessing.managers.SyncManager) -> None:
    table, event = manager.dict(), manager.Event()
    with mwpy.Executor(max_workers=2) as ex:
        assert sorted(ex.map(work.put, [table] * 4, range(4), range(10, 14), timeout=TIMEOUT)) == [0, 1, 2, 3]
        assert ex.submit(work.set_event, event).result(timeout=TIMEOUT)
    assert dict(table) == {0: 10, 1: 11, 2: 12, 3: 13}
    assert event.is_set()


def test_a_proxy_that_cannot_reach_its_manager_says_where_proxies_work() -> None:
    with multiprocessing.Manager() as stopped:
        table = stopped.dict()
    with mwpy.Executor(max_workers=1) as ex:
        error = ex.submit(work.put, table, 1, 2).exception(timeout=TIMEOUT)
    assert error is not None
    assert any("Manager() proxy" in note and "local slaves" in note for note in getattr(error, "__notes__", ()))

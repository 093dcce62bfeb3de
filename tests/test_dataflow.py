"""Futures as arguments of an Executor's calls: dispatched once their inputs are done, with their values.

What dask.distributed's ``client.submit(f, future)`` does (its test_client.py "test_submit_dependencies"-like
chains, fan-in and failure propagation are the model): a failed input fails its dependents with its own exception,
a cancelled one cancels them, a future of another executor is refused at submit().
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import mwpy
from mwpy.data import client
from mwpy.errors import UsageError
from mwpy.observe import events as ev
from tests.programs import dataflow_work as work
from tests.support import ROOT, run_local, used_beside_its_holder, wait_until


@pytest.fixture(scope="module")
def executor() -> Iterator[mwpy.Executor]:
    with mwpy.Executor(max_workers=2) as ex:
        yield ex


def test_a_chain_of_100_dependent_calls_gives_the_right_value(executor: mwpy.Executor) -> None:
    future = executor.submit(work.inc, 0)
    for _ in range(99):
        future = executor.submit(work.inc, future)
    assert future.result(timeout=120) == 100


def test_futures_nested_in_lists_dicts_and_keywords_are_replaced_by_their_values(executor: mwpy.Executor) -> None:
    one, two, three = (executor.submit(work.inc, n) for n in (0, 1, 2))
    future = executor.submit(work.combine, one, [two, (three, 10)], c=three, d={"x": [one, {"y": two}]})
    assert future.result(timeout=60) == 1 + (2 + 3 + 10) + 3 + (1 + 2)


def test_a_fan_in_of_1000_futures_into_one_call(executor: mwpy.Executor) -> None:
    futures = [executor.submit(work.inc, n) for n in range(1000)]
    assert executor.submit(work.total, futures).result(timeout=120) == sum(range(1, 1001))


def test_map_takes_futures(executor: mwpy.Executor) -> None:
    futures = [executor.submit(work.inc, n) for n in range(20)]
    assert list(executor.map(work.inc, futures, timeout=60)) == [n + 2 for n in range(20)]


def test_a_failed_input_fails_its_dependents_with_its_own_exception(executor: mwpy.Executor) -> None:
    bad = executor.submit(work.refuse, 3)
    dependent = executor.submit(work.combine, 1, [2, bad])
    second = executor.submit(work.inc, dependent)
    with pytest.raises(work.Refused, match="no 3") as caught:
        dependent.result(timeout=60)
    assert "argument 1 (a future of refuse) failed" in caught.value.__notes__
    with pytest.raises(work.Refused):
        second.result(timeout=60)
    assert not getattr(bad.exception(), "__notes__", None)  # the input's own exception is left as it was


def test_cancelling_an_input_cancels_its_dependents(executor: mwpy.Executor, tmp_path: Path) -> None:
    go = tmp_path / "go"
    blockers = [executor.submit(work.wait_for, str(go)) for _ in range(2)]  # both slaves busy
    queued = executor.submit(work.inc, 1)
    dependent = executor.submit(work.inc, queued)
    further = executor.submit(work.combine, 0, [dependent])
    try:
        assert not dependent.done()
        assert queued.cancel()
        assert dependent.cancelled()
        assert further.cancelled()
        done, _ = cf.wait([dependent, further], timeout=60)  # counted as done: nothing hangs
        assert done == {dependent, further}
    finally:
        go.touch()
    assert [b.result(timeout=60) for b in blockers] == [0, 0]


def test_a_cancelled_future_as_argument_gives_a_cancelled_call(executor: mwpy.Executor, tmp_path: Path) -> None:
    go = tmp_path / "go"
    blockers = [executor.submit(work.wait_for, str(go)) for _ in range(2)]
    queued = executor.submit(work.inc, 1)
    try:
        assert queued.cancel()
        assert executor.submit(work.inc, queued).cancelled()
    finally:
        go.touch()
    assert [b.result(timeout=60) for b in blockers] == [0, 0]


def test_a_dependent_call_can_be_cancelled_while_it_waits(executor: mwpy.Executor, tmp_path: Path) -> None:
    go = tmp_path / "go"
    blocker = executor.submit(work.wait_for, str(go))
    dependent = executor.submit(work.inc, blocker)
    try:
        assert dependent.cancel()
        done, _ = cf.wait([dependent], timeout=60)
        assert done == {dependent}
    finally:
        go.touch()
    assert blocker.result(timeout=60) == 0


def test_futures_of_another_or_a_closed_executor_are_refused(executor: mwpy.Executor) -> None:
    with mwpy.Executor(max_workers=1) as other:
        foreign = other.submit(work.inc, 1)
        with pytest.raises(UsageError, match=r"argument 0 is a future of another mwpy.Executor"):
            executor.submit(work.inc, foreign)
        foreign.result(timeout=60)
    with pytest.raises(UsageError, match=r"keyword argument 'd' is a future of an executor that was shut down"):
        executor.submit(work.combine, 1, 2, d=[foreign])


def test_a_plain_future_from_elsewhere_is_refused_clearly(executor: mwpy.Executor) -> None:
    with cf.ThreadPoolExecutor(1) as threads:
        plain = threads.submit(int, "4")
        with pytest.raises(UsageError, match=r"argument 0 is a concurrent.futures._base.Future not made by this"):
            executor.submit(work.inc, plain)


def test_an_argument_that_cannot_be_pickled_still_raises_pickles_error(executor: mwpy.Executor) -> None:
    with pytest.raises(TypeError, match="lock"):
        executor.submit(work.inc, cast(Any, threading.Lock()))


def test_a_master_algorithm_passes_futures_to_submit_and_map() -> None:
    done = run_local(ROOT / "tests" / "programs" / "dataflow_master.py", slaves=2)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "chain 50" in lines
    assert f"fan-in {sum(n + 2 for n in range(10))}" in lines
    notes = ["argument 0 (a future of refuse) failed", "argument 0 (a future of total) failed"]
    assert f"failed LookupError no 2 {notes}" in lines
    assert "wrong call TypeError" in lines  # at submit(), not once the inputs are done


# ---------------------------------------------------------------------- large values stay where they were made

#: A value well above what a result frame carries (codec.SPILL_ABOVE, 16 MiB): it stays on its slave.
LARGE = 48 << 20


def _peak_rss() -> int:
    """This process's (the master's) peak resident set so far, in bytes."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def _caches(events: Path) -> dict[str, ev.SlaveCache]:
    """Each slave's last cache counters in the event log."""
    found = [e for e in ev.read_events(events) if isinstance(e, ev.SlaveCache)] if events.exists() else []
    return {e.slave: e for e in found}


def test_a_large_value_used_as_an_argument_stays_on_its_slave_and_the_dependent_runs_there(tmp_path: Path) -> None:
    """The producer's slave keeps the value (content-addressed, in its cache) and the master only its
    reference: the dependent runs on that slave, no transfer, 0 bytes through the master, whose peak memory does
    not grow by the value. ``result()`` in the caller then fetches it on demand (Ray's and dask's object
    locality: a consumer goes where its input is)."""
    events = tmp_path / "events.jsonl"
    with mwpy.Executor(max_workers=2, options=["--mw-events", str(events)]) as ex:
        list(ex.map(work.inc, range(20)))  # both slaves up, the master's loop warm
        before = _peak_rss()
        made = ex.submit(work.large, LARGE)
        ran_on, made_on, size = ex.submit(work.where, made).result(timeout=120)
        assert (ran_on, size) == (made_on, LARGE)
        assert _peak_rss() - before < LARGE // 2
        moved = ex.file_counters()
        assert (moved["bytes_sent"], moved["bytes_received"], moved["held_bytes"]) == (0, 0, 0)
        hit = wait_until(lambda: [c for c in _caches(events).values() if c.hits], 60, "the holder's cache hit")
        assert [(c.misses, c.bytes_fetched) for c in hit] == [(0, 0)]  # used where it was: nothing fetched
        pid, data = made.result(timeout=120)
        assert (pid, len(data)) == (made_on, LARGE)
        assert ex.file_counters()["held_fetches"] == 1  # fetched once, when asked for
    assert [(e.task, e.way) for e in _moves(events)] == [("large", "local")]


def test_a_dependent_elsewhere_fetches_the_large_value_from_its_holder_once(tmp_path: Path) -> None:
    """With the holder busy, the dependent runs on the other slave after a moment, which fetches the value from
    the holder's file service, authenticated: one transfer, still 0 bytes through the master."""
    events, parked, pid_file = tmp_path / "events.jsonl", tmp_path / "parked", tmp_path / "producer"
    parked.mkdir()
    with mwpy.Executor(max_workers=2, options=["--mw-events", str(events)]) as ex:
        list(ex.map(work.inc, range(20)))
        made = ex.submit(work.large, LARGE, str(pid_file))
        blockers = [ex.submit(work.park, str(parked)) for _ in range(2)]
        wait_until(lambda: len(list(parked.glob("*.parked"))) == 2, 60, "both slaves parked")
        producer = pid_file.read_text(encoding="utf-8")
        dependent = ex.submit(work.where, made)
        assert used_beside_its_holder(parked, producer, dependent, blockers) == LARGE
        moved = ex.file_counters()
        assert (moved["bytes_sent"], moved["bytes_received"], moved["held_bytes"]) == (0, 0, 0)
        fetched = wait_until(lambda: [c for c in _caches(events).values() if c.misses], 60, "the consumer's fetch")
        assert [c.misses for c in fetched] == [1]  # one transfer, of the value and its few bytes of framing
        assert LARGE < fetched[0].bytes_fetched < LARGE + 4096
    assert [(e.task, e.way, e.slave != e.holder) for e in _moves(events)] == [("large", "peer", True)]


def _moves(events: Path) -> list[ev.ValueMoved]:
    return [e for e in ev.read_events(events) if isinstance(e, ev.ValueMoved)]


def _parked_apart(ex: mwpy.Executor, parked: Path, producer: str) -> tuple[list[Any], str]:
    """Both slaves kept busy (the producer's among them); the other one's pid."""
    blockers = [ex.submit(work.park, str(parked)) for _ in range(2)]
    wait_until(lambda: len(list(parked.glob("*.parked"))) == 2, 60, "both slaves parked")
    assert producer in {p.stem for p in parked.glob("*.parked")}
    return blockers, next(p.stem for p in parked.glob("*.parked") if p.stem != producer)


def test_a_value_its_holder_cannot_serve_goes_through_the_master_streamed_from_disk(tmp_path: Path) -> None:
    """Execute points often accept no inbound connection (the OSPool's do not): the consumer's slave cannot
    reach the holder, so the holder sends the value to the master's file service, which keeps it on disk and
    serves it from there; the event log says so, and the master's memory does not grow by the value."""
    events, parked, pid_file = tmp_path / "events.jsonl", tmp_path / "parked", tmp_path / "producer"
    parked.mkdir()
    with mwpy.Executor(max_workers=2, options=["--mw-events", str(events)]) as ex:
        list(ex.map(work.inc, range(20)))
        made = ex.submit(work.large, LARGE, str(pid_file))
        assert str(ex.submit(work.refuse_peers, made).result(timeout=120)) == pid_file.read_text(encoding="utf-8")
        before = _peak_rss()
        producer = pid_file.read_text(encoding="utf-8")
        blockers, other = _parked_apart(ex, parked, producer)
        dependent = ex.submit(work.where, made)
        (parked / f"{other}.go").touch()  # the other slave takes it, and cannot fetch from the holder
        wait_until(lambda: any(isinstance(e, ev.TaskFailed) for e in ev.read_events(events)), 60, "the refused fetch")
        (parked / f"{producer}.go").touch()  # the holder is free to send it to the master
        _, made_on, size = dependent.result(timeout=120)
        assert (str(made_on), size) == (producer, LARGE)
        assert all(b.result(timeout=60) for b in blockers)
        moved = ex.file_counters()
        assert _peak_rss() - before < LARGE // 2  # streamed to and from disk, never whole in memory
    assert moved["bytes_received"] > LARGE  # the holder sent it once, to the master's disk
    ways = [(e.way, e.slave) for e in _moves(events) if e.way != "local"]
    assert ways[0] == ("relayed", "master")
    assert [way for way, _ in ways[1:]] == ["via-master"]


def test_a_dependent_made_before_its_input_was_relayed_is_sent_again_with_the_master_s_copy(tmp_path: Path) -> None:
    """Guards: a dependent pickled while its input was on a holder its peers cannot reach, and run elsewhere only
    after that value was relayed to the master (another's fetch failed first: here the caller's ``result()``),
    is sent again with the master's copy and gets the value.

    Before, its failed fetch found no input left to recover (the value was at the master already) and the call
    failed with ValueNotFetchedError: in a fan-out on execute points that accept no inbound connection, every
    dependent still queued when the relay ended failed so."""
    parked, again, pid_file = tmp_path / "parked", tmp_path / "again", tmp_path / "producer"
    parked.mkdir()
    again.mkdir()
    with mwpy.Executor(max_workers=2, options=["--mw-slave-window", "1"]) as ex:
        list(ex.map(work.inc, range(20)))
        made = ex.submit(work.large, LARGE, str(pid_file))
        assert str(ex.submit(work.refuse_peers, made).result(timeout=120)) == pid_file.read_text(encoding="utf-8")
        producer = pid_file.read_text(encoding="utf-8")
        blockers, other = _parked_apart(ex, parked, producer)
        fetched: list[Any] = []
        caller = threading.Thread(target=lambda: fetched.append(made.result(timeout=120)))
        caller.start()  # the master cannot fetch it from the holder either: a relay is queued, pinned there
        service = ex._core.service
        wait_until(lambda: any(f._label.endswith("(relay)") and f._task_id is not None for f in list(service._waiting)),
                   60, "the relay queued")  # fmt: skip
        blockers.append(ex.submit(work.park, str(again)))  # the holder's next task after the relay
        dependent = ex.submit(work.where, made)  # pickled with the holder's handle: the relay has not run
        (parked / f"{producer}.go").touch()  # the holder relays the value, then parks again
        wait_until((again / f"{producer}.parked").exists, 60, "the holder parked again")
        caller.join(timeout=120)
        assert len(fetched[0][1]) == LARGE
        (parked / f"{other}.go").touch()  # the other slave takes the dependent, and cannot reach the holder
        try:
            ran_on, made_on, size = dependent.result(timeout=120)
        finally:
            (again / f"{producer}.go").touch()  # whatever happened, the executor's slaves are free to stop
        assert (str(ran_on), str(made_on), size) == (other, producer, LARGE)
        assert all(b.result(timeout=60) for b in blockers)


def test_shutdown_while_the_caller_fetches_a_value_from_a_silent_holder_ends_with_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: the executor shuts down while another thread's ``result()`` fetches a held value from a holder
    that has gone silent (stopped here); that fetch times out and needs the engine's thread to make the value
    again, so the shutdown's own fetch of held values waits its turn: the caller gets the value, the shutdown
    ends, nothing hangs.

    Before, the engine's thread blocked on the caller's fetch lock at shutdown while the caller waited for the
    engine's thread to run the producer again: both waited for ever."""
    monkeypatch.setattr(client, "IO_TIMEOUT", 3.0)  # the master's fetch from the silent holder gives up soon
    pid_file = tmp_path / "producer"
    ex = mwpy.Executor(max_workers=2, options=["--mw-client-timeout", "5"])
    made = ex.submit(work.large, LARGE, str(pid_file))
    wait_until(made.done, 120, "the producer")
    producer = int(pid_file.read_text(encoding="utf-8"))
    service = ex._core.service
    fetched: list[Any] = []
    caller = threading.Thread(target=lambda: fetched.append(made.result(timeout=120)), daemon=True)
    os.kill(producer, signal.SIGSTOP)
    try:
        caller.start()
        wait_until(service._fetching.locked, 60, "the caller's fetch under way")
        stopping = threading.Thread(target=ex.shutdown, daemon=True)
        stopping.start()  # the engine's thread finds nothing left to run while the caller's fetch hangs
        caller.join(timeout=120)
        stopping.join(timeout=120)
        assert not caller.is_alive(), "the caller's result() hangs"
        assert not stopping.is_alive(), "the shutdown hangs"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(producer, signal.SIGKILL)
    pid, data = fetched[0]
    assert pid != producer  # made again on the other slave
    assert len(data) == LARGE


def test_a_value_whose_holder_died_is_made_again_once_and_nothing_is_lost(tmp_path: Path) -> None:
    """Lineage, as dask and TaskVine do it: the holder is killed before its value is used; the dependent's
    slave cannot fetch it, the holder cannot send it, so the producer runs again (counted in the event log) and
    the dependent gets the value; one result each, nothing hangs."""
    events, pid_file = tmp_path / "events.jsonl", tmp_path / "producer"
    with mwpy.Executor(max_workers=2, options=["--mw-events", str(events)]) as ex:
        list(ex.map(work.inc, range(20)))
        made = ex.submit(work.large, LARGE, str(pid_file))
        wait_until(made.done, 120, "the producer")
        producer = int(pid_file.read_text(encoding="utf-8"))
        os.kill(producer, signal.SIGKILL)
        ran_on, made_on, size = ex.submit(work.where, made).result(timeout=120)
        assert size == LARGE
        assert producer not in (ran_on, made_on)
        pid, data = made.result(timeout=120)  # the caller gets the value made again, from its new holder
        assert (pid, len(data)) == (made_on, LARGE)
    recomputed = [e for e in _moves(events) if e.way == "recomputed"]
    assert [(e.task, e.holder != "") for e in recomputed] == [("large", True)]


def test_a_value_evicted_from_its_holder_s_bounded_cache_is_made_again(tmp_path: Path) -> None:
    """Memory on slaves stays within ``--mw-cache-size``: a second large value evicts the first, and the
    call that takes the first makes it again from its producer's call (an evicted value that had gone to the
    master would be fetched from there)."""
    events = tmp_path / "events.jsonl"
    options = ["--mw-events", str(events), "--mw-cache-size", str(LARGE + LARGE // 2)]
    with mwpy.Executor(max_workers=1, options=options) as ex:
        first = ex.submit(work.large, LARGE)
        second = ex.submit(work.large, LARGE)
        wait_until(lambda: first.done() and second.done(), 120, "both values made")
        assert ex.submit(work.where, first).result(timeout=120)[2] == LARGE
        wait_until(lambda: [c for c in _caches(events).values() if c.evictions], 60, "the holder's eviction")
    assert [(e.way, e.task) for e in _moves(events) if e.way != "local"] == [("recomputed", "large")]


def test_after_shutdown_a_held_value_the_program_kept_is_there_and_an_intermediate_says_why_not() -> None:
    """As with any executor, ``result()`` works after the ``with`` block: a held value the program still
    references is fetched before the slaves stop. One that went to another call as an argument (an
    intermediate) is not: its ``result()`` then says why at once, never hangs."""
    with mwpy.Executor(max_workers=2) as ex:
        kept = ex.submit(work.large, LARGE)
        intermediate = ex.submit(work.large, LARGE)
        assert ex.submit(work.where, intermediate).result(timeout=120)[2] == LARGE
        wait_until(kept.done, 120, "the kept value")
    assert len(kept.result(timeout=10)[1]) == LARGE
    with pytest.raises(mwpy.MwpyError, match=r"stopped with the executor .* call result\(\) before shutdown"):
        intermediate.result(timeout=10)

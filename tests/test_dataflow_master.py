"""A master algorithm's large values stay where they were made, as an Executor's do (tests/test_dataflow.py).

A task whose future is another task's argument keeps a value above ``codec.SPILL_ABOVE`` on its slave; the
dependent task runs there, or its slave fetches the value from the holder; ``fut.result()`` and
``mw.results()`` fetch it on demand; a value whose holder died is made again. The master runs in the test
process (``LocalMaster``) with real slave processes, and the test waits through the futures, which drive its
loop: nothing here drains ``mw.results()`` unless it says so (draining fetches held values, by design).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy.observe import events as ev
from tests.programs.held_values import large, park, refuse_peers, wait_for, where
from tests.support import PROGRAMS, LocalMaster, local_master, used_beside_its_holder, wait_until

PROGRAM = PROGRAMS / "held_values.py"
#: A value well above what a result frame carries (codec.SPILL_ABOVE, 16 MiB): it stays on its slave.
LARGE = 48 << 20


@pytest.fixture
def master(tmp_path: Path) -> Iterator[LocalMaster]:
    """A master with two connected slaves and an event log."""
    with local_master(PROGRAM, tmp_path, "--mw-events", str(tmp_path / "events.jsonl")) as started:
        started.start_slave()
        started.start_slave()
        started.drive_until(lambda: len(started.mw.connected_slaves()) == 2, "both slaves", 60)
        yield started


def _moves(master: LocalMaster) -> list[ev.ValueMoved]:
    """The value-moved events of the run, once it finished (the event log is complete then)."""
    master.finish()
    return [e for e in ev.read_events(master.workdir / "events.jsonl") if isinstance(e, ev.ValueMoved)]


def _through_master(master: LocalMaster) -> tuple[int, int, int]:
    """Bytes the master's file service sent and received, and bytes it fetched from holders."""
    moved = master.mw.file_counters()
    return moved["bytes_sent"], moved["bytes_received"], moved["held_bytes"]


def test_a_large_future_passed_to_a_task_stays_on_its_slave_and_the_dependent_runs_there(
    master: LocalMaster,
) -> None:
    """0 bytes of the value through the master: the dependent runs on the holder and takes it from its cache.
    The master algorithm's own ``result()`` then fetches it, once, and ``mw.results()`` lists the right value."""
    made = large.submit(LARGE)
    dependent = where.submit(made)
    ran_on, made_on, size = dependent.result(timeout=120)
    assert (ran_on, size) == (made_on, LARGE)
    assert _through_master(master) == (0, 0, 0)
    pid, data = made.result(timeout=120)
    assert (pid, len(data)) == (made_on, LARGE)
    assert master.mw.file_counters()["held_fetches"] == 1
    listed = {result.task_id: result.value for result in master.mw.results()}
    assert listed[made.task_id] == (pid, data)  # the loop API sees the value, not a reference
    assert listed[dependent.task_id] == (ran_on, made_on, size)
    assert master.mw.file_counters()["held_fetches"] == 1  # the future kept what it fetched
    assert [(e.task, e.way) for e in _moves(master)] == [("large", "local")]


def test_a_dependent_elsewhere_fetches_the_held_value_from_its_holder(master: LocalMaster, tmp_path: Path) -> None:
    """With the holder busy, the dependent runs on the other slave after a moment, which fetches the value from
    the holder's file service, authenticated: still 0 bytes through the master."""
    parked, pid_file = tmp_path / "parked", tmp_path / "producer"
    parked.mkdir()
    made = large.submit(LARGE, str(pid_file))
    dependent = where.submit(made)
    blockers = [park.submit(str(parked)) for _ in range(2)]  # one a slave at first: the holder's comes next
    wait_until(lambda: len(list(parked.glob("*.parked"))) == 2, 60, "both slaves parked", step=master.mw.loop_once)
    producer = pid_file.read_text(encoding="utf-8")
    assert used_beside_its_holder(parked, producer, dependent, blockers) == LARGE
    assert _through_master(master) == (0, 0, 0)
    assert [(e.task, e.way) for e in _moves(master)] == [("large", "peer")]


def test_mw_map_over_large_futures_leaves_each_value_where_it_was_made(master: LocalMaster) -> None:
    made = [large.submit(LARGE) for _ in range(2)]
    used = list(master.mw.map(where, made))
    assert [(ran_on, size) for ran_on, _, size in used] == [(made_on, LARGE) for _, made_on, _ in used]
    assert _through_master(master) == (0, 0, 0)
    assert [(e.task, e.way) for e in _moves(master)] == [("large", "local")] * 2


def test_a_held_value_its_holder_cannot_serve_is_relayed_through_the_master(
    master: LocalMaster, tmp_path: Path
) -> None:
    """The holder accepts no inbound connection: the dependent's slave cannot fetch the value, so the holder
    sends it to the master's file service (mwpy's own task, pinned to it) and the dependent takes it there."""
    parked, pid_file = tmp_path / "parked", tmp_path / "producer"
    parked.mkdir()
    made = large.submit(LARGE, str(pid_file))
    assert str(refuse_peers.submit(made).result(timeout=120)) == pid_file.read_text(encoding="utf-8")
    blockers = [park.submit(str(parked)) for _ in range(2)]
    wait_until(lambda: len(list(parked.glob("*.parked"))) == 2, 60, "both slaves parked", step=master.mw.loop_once)
    producer = pid_file.read_text(encoding="utf-8")
    other = next(p.stem for p in parked.glob("*.parked") if p.stem != producer)
    dependent = where.submit(made)
    (parked / f"{other}.go").touch()  # the other slave takes it, and cannot fetch from the holder
    events = master.workdir / "events.jsonl"

    def refused() -> bool:
        return any(isinstance(e, ev.TaskFailed) for e in ev.read_events(events))

    wait_until(refused, 60, "the refused fetch", step=master.mw.loop_once)
    (parked / f"{producer}.go").touch()  # the holder is free to send it to the master
    _, made_on, size = dependent.result(timeout=120)
    assert (str(made_on), size) == (producer, LARGE)
    assert all(b.result(timeout=60) for b in blockers)
    assert master.mw.file_counters()["bytes_received"] > LARGE  # the holder sent it once, to the master's disk
    ways = [(e.way, e.slave) for e in _moves(master) if e.way != "local"]
    assert ways[0] == ("relayed", "master")
    assert [way for way, _ in ways[1:]] == ["via-master"]


def test_mw_results_fetches_a_held_value_its_future_never_asked_for(master: LocalMaster) -> None:
    made = large.submit(LARGE)
    assert where.submit(made).result(timeout=120)[2] == LARGE
    assert master.mw.file_counters()["held_fetches"] == 0
    listed = {result.task_id: result.value for result in master.mw.results()}
    assert len(listed[made.task_id][1]) == LARGE
    assert master.mw.file_counters()["held_fetches"] == 1


def test_keyed_streamed_and_unshared_results_reach_the_master_as_before(master: LocalMaster) -> None:
    """A task with a journal key, a ``mw.map`` stream's task, a task nobody passes on: their values come to
    the master (each through its file service: too large for a frame), never held on a slave."""
    keyed = large.with_policy(key="big").submit(LARGE)
    assert where.submit(keyed).result(timeout=120)[2] == LARGE
    plain = large.submit(LARGE)
    assert len(plain.result(timeout=120)[1]) == LARGE
    assert [len(data) for _, data in master.mw.map(large, [LARGE])] == [LARGE]
    moved = master.mw.file_counters()
    assert moved["bytes_received"] > 3 * LARGE
    assert (moved["held_fetches"], moved["held_bytes"]) == (0, 0)
    assert _moves(master) == []


def test_a_held_value_whose_holder_died_before_use_is_made_again_once(master: LocalMaster, tmp_path: Path) -> None:
    """Lineage: the holder is killed after the producer finished and before the dependent runs (it waits for
    a gate too); the other slave cannot fetch the value, nobody can send it, so the producer runs again,
    counted in the event log, and both the dependent and the master algorithm get the value."""
    pid_file, go = tmp_path / "producer", tmp_path / "go"
    made = large.submit(LARGE, str(pid_file))
    gate = wait_for.submit(str(go))
    dependent = where.submit(made, gate)
    assert made.exception(timeout=120) is None  # done, and not fetched
    producer = int(pid_file.read_text(encoding="utf-8"))
    os.kill(producer, signal.SIGKILL)
    go.touch()
    ran_on, made_on, size = dependent.result(timeout=120)
    assert size == LARGE
    assert producer not in (ran_on, made_on)
    pid, data = made.result(timeout=120)  # the value made again, from its new holder
    assert (pid, len(data)) == (made_on, LARGE)
    recomputed = [e for e in _moves(master) if e.way == "recomputed"]
    assert [e.task for e in recomputed] == ["large"]

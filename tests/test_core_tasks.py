"""Task algorithms end to end: arguments, failures, submission errors, tags, target numbers, map.

Real slave processes of tests/programs/workload.py; the master runs in the test
process (``LocalMaster``) so results can be compared as Python objects.
"""

from __future__ import annotations

import datetime
import importlib.util
import itertools
import threading
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import mwpy
from mwpy import NotInMasterError, RemoteTraceback, Result, Submitter
from mwpy.task import lookup
from mwpy.task_records import Policy
from tests.programs.workload import (
    block,
    checked,
    fail,
    nap,
    nested_submit,
    signature,
    size_of,
    square,
    unpicklable_result,
    whoami,
)
from tests.support import PROGRAMS, LocalMaster, local_master

WORKLOAD = PROGRAMS / "workload.py"


def plain_square(x: int) -> int:
    """Not decorated: not a task algorithm."""
    return x * x


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    # one attempt per task: a task that raises is answered at once (mwpy retries it elsewhere by default)
    with local_master(WORKLOAD, tmp_path, "--mw-task-attempts", "1") as master:
        yield master


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("only a",), {"c": "keyword-only c"}),
    ((1, 2, 3, 4, 5), {"c": None, "d": b"\x00\xff", "z": [1, {"k": (2, 3)}], "y": {1, 2}, "a1": 1.5}),
    ((), {"a": "a by name", "b": "b by name", "c": 3}),
    (("a", "b", "extra"), {"c": 0, "d": "d given", "kwarg": frozenset({"x"})}),
    ((Fraction(1, 3),), {"c": datetime.date(2015, 1, 2), "nested": {"deep": [Decimal("1.10")]}}),
]


def test_every_kind_of_parameter_arrives_intact_on_the_slave(lm: LocalMaster) -> None:
    lm.start_slave()
    ids = [signature.submit(*args, **kwargs).task_id for args, kwargs in CALLS]
    for task_id, (args, kwargs) in zip(ids, CALLS, strict=True):
        result = lm.result_of(task_id)
        assert result.ok, result.error
        assert result.algorithm == "signature"
        # the slave saw exactly what a local call sees: defaults filled in, *args and **kwargs kept
        assert result.value == signature(*args, **kwargs)
        assert list(result.value["kwargs"]) == [k for k in kwargs if k not in ("a", "b", "c", "d")]
    second = lm.result_of(ids[1]).value
    assert (second["a"], second["b"], second["args"], second["c"], second["d"]) == (1, 2, (3, 4, 5), None, b"\x00\xff")
    assert second["kwargs"] == {"z": [1, {"k": (2, 3)}], "y": {1, 2}, "a1": 1.5}


def test_calling_a_task_algorithm_runs_it_here() -> None:
    assert square(7) == 49
    assert signature(1, c=2) == {"a": 1, "b": 2, "args": (), "c": 2, "d": 4, "kwargs": {}}


@pytest.mark.parametrize(
    ("kind", "message", "shown"),
    [
        ("ValueError", "bad value 42", "bad value 42"),
        ("KeyError", "missing", "'missing'"),
        ("SystemExit", "a task called sys.exit", "a task called sys.exit"),
    ],
)
def test_a_task_that_raises_gives_a_failed_result_and_the_slave_keeps_working(
    lm: LocalMaster, kind: str, message: str, shown: str
) -> None:
    slave = lm.start_slave()
    before = lm.result_of(whoami.submit().task_id)
    failed = lm.result_of(fail.with_policy(tag="t").submit(kind, message).task_id)
    after = lm.result_of(whoami.submit().task_id)

    assert not failed.ok
    assert failed.value is None
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == (kind, shown)
    assert "Traceback (most recent call last)" in failed.error.traceback
    assert "in fail" in failed.error.traceback
    assert failed.tag == "t"
    assert failed.slave_id == before.slave_id == after.slave_id
    assert before.value == after.value == slave.pid  # same process: it survived
    assert slave.alive()
    lm.finish()
    assert slave.wait() == 0


def test_a_result_that_cannot_be_pickled_fails_cleanly(lm: LocalMaster) -> None:
    slave = lm.start_slave()
    failed = lm.result_of(unpicklable_result.submit().task_id)
    assert failed.error is not None
    assert "pickle" in (failed.error.type + failed.error.message).lower()
    assert lm.result_of(square.submit(3).task_id).value == 9
    assert slave.alive()


def test_submit_on_a_slave_fails_the_task_with_not_in_master_error(lm: LocalMaster) -> None:
    lm.start_slave()
    failed = lm.result_of(nested_submit.submit().task_id)
    assert failed.error is not None
    assert failed.error.type == "NotInMasterError"
    assert "square.submit()" in failed.error.message


def test_submit_and_target_numbers_outside_a_master_raise_not_in_master_error() -> None:
    with pytest.raises(NotInMasterError, match=r"square\.submit\(\) can only be called while the master"):
        square.submit(1)
    with pytest.raises(NotInMasterError):
        square.with_policy(tag=1).submit(1)
    with pytest.raises(NotInMasterError):
        square.target_number = 3
    with pytest.raises(NotInMasterError):
        square.pending_tasks()
    with pytest.raises(NotInMasterError):
        square.upto_target_number()


# A lambda argument travels by value since issue 22 (cloudpickle); a lock and a generator cannot travel at all.
@pytest.mark.parametrize("argument", [threading.Lock(), (x for x in range(3))])
def test_unpicklable_arguments_raise_at_submit_with_a_clear_message(lm: LocalMaster, argument: object) -> None:
    with pytest.raises(TypeError, match=r"cannot send the arguments of task 'square'"):
        square.submit(argument)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"cannot send the arguments of task 'square'"):
        square.with_policy(tag="x").submit(argument)  # type: ignore[arg-type]
    assert lm.mw.pending_tasks() == 0  # nothing half-queued


def test_arguments_bigger_than_the_write_buffer_raise_at_submit(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-max-write-buffer-size", "4096") as lm:
        with pytest.raises(ValueError, match=r"--mw-max-write-buffer-size 4096"):
            size_of.submit(b"x" * 10_000)
        assert lm.mw.pending_tasks() == 0
        assert size_of.submit(b"x" * 100).task_id > 0


# ---------------------------------------------------------------------- task policy


def test_tags_come_back_unchanged_and_with_policy_submits_under_a_fixed_policy(lm: LocalMaster) -> None:
    lm.start_slave()
    tag = {"run": 3, "path": ("a", "b"), "when": None, "lock": threading.Lock()}  # need not be picklable
    submitter = square.with_policy(tag=tag)
    assert isinstance(submitter, Submitter)
    assert submitter.policy == Policy(tag=tag)
    ids = [submitter(i).task_id for i in range(5)] + [submitter.submit(10).task_id]
    plain = square.submit(4).task_id
    values = {lm.result_of(t).task_id: lm.result_of(t) for t in [*ids, plain]}
    assert [values[t].value for t in ids] == [0, 1, 4, 9, 16, 100]
    assert all(values[t].tag == tag for t in ids)
    assert values[plain].tag is None
    assert len({*ids, plain}) == 7  # every submit gets its own task id


def test_target_numbers_per_algorithm_and_general(lm: LocalMaster) -> None:
    mw = lm.mw
    assert (square.target_number, square.pending_tasks(), square.upto_target_number()) == (0, 0, 0)
    square.target_number = 5
    whoami.target_number = 2
    mw.target_number = 10
    assert (square.target_number, whoami.target_number, mw.target_number) == (5, 2, 10)
    assert square.upto_target_number() == 5
    assert mw.upto_target_number() == 10

    first = [square.submit(i).task_id for i in range(3)]
    whoami.submit()
    assert (square.pending_tasks(), square.upto_target_number()) == (3, 2)
    assert (whoami.pending_tasks(), whoami.upto_target_number()) == (1, 1)
    assert (mw.pending_tasks(), mw.upto_target_number()) == (4, 6)
    assert mw.num_runnable_tasks == 4

    for i in range(4):
        square.submit(i)
    assert square.upto_target_number() == 0  # above target: never negative
    square.target_number = -3
    assert square.target_number == 0

    lm.start_slave()
    lm.drive_until(lambda: len(lm.results) == 8, "all eight results")
    assert {r.task_id for r in lm.results} >= set(first)
    assert (square.pending_tasks(), whoami.pending_tasks(), mw.pending_tasks()) == (0, 0, 0)
    assert mw.upto_target_number() == 10
    assert whoami.upto_target_number() == 2


# ---------------------------------------------------------------------- convenience API


def test_map_yields_values_in_input_order(lm: LocalMaster) -> None:
    lm.start_slave()
    lm.start_slave()
    # early inputs take longest, so results usually arrive out of order on two slaves; that they
    # certainly do and map keeps input order: test_guarantees_reliability.py::test_map_yields_in_input_order_*
    delays = [0.2, 0.1, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0]
    values = list(lm.mw.map(nap, delays, range(len(delays)), window=4))
    assert values == list(range(len(delays)))
    assert list(lm.mw.map(square, range(100))) == [i * i for i in range(100)]
    assert lm.mw.results() == []  # map's results go only to map


def test_map_raises_the_task_s_own_exception_at_the_failed_input(lm: LocalMaster) -> None:
    lm.start_slave()
    values = lm.mw.map(checked, [1, 2, -3, 4])
    assert [next(values), next(values)] == [1, 2]
    with pytest.raises(ValueError, match="negative: -3") as caught:
        next(values)
    cause = caught.value.__cause__
    assert isinstance(cause, RemoteTraceback)  # the slave's traceback, as concurrent.futures attaches it
    assert "ValueError: negative: -3" in str(cause)
    result = cause.result
    assert isinstance(result, Result)
    assert result.error is not None
    assert (result.error.type, result.error.message) == ("ValueError", "negative: -3")


def test_map_with_a_chunksize_runs_one_task_per_chunk_and_keeps_input_order(lm: LocalMaster) -> None:
    lm.start_slave()
    lm.start_slave()
    values = lm.mw.map(square, range(101), chunksize=7)
    assert next(values) == 0
    assert lm.mw.tasks_total == 15  # 101 calls in tasks of 7: the total counts tasks, as the progress bar does
    assert list(values) == [i * i for i in range(1, 101)]
    assert lm.mw.tasks_total == 15
    echoed = list(lm.mw.map(signature, ["x", "y", "z"], chunksize=2, c="same c", extra=1))
    assert [v["a"] for v in echoed] == ["x", "y", "z"]
    assert all(v["c"] == "same c" and v["kwargs"] == {"extra": 1} for v in echoed)
    assert list(lm.mw.map(square, iter(range(5)), chunksize=100)) == [0, 1, 4, 9, 16]  # a generator: one short chunk


def test_a_chunk_that_raises_makes_map_raise_the_call_s_exception(lm: LocalMaster) -> None:
    lm.start_slave()
    values = lm.mw.map(checked, [1, 2, 3, -4, 5, 6], chunksize=3)
    assert [next(values), next(values), next(values)] == [1, 2, 3]
    with pytest.raises(ValueError, match="negative: -4"):
        next(values)


def test_map_chunksize_mistakes_fail_at_the_call(lm: LocalMaster) -> None:
    with pytest.raises(mwpy.ConfigurationError, match="chunksize must be at least 1"):
        lm.mw.map(square, [1], chunksize=0)
    with pytest.raises(mwpy.ConfigurationError, match=r"key .* cannot be given with chunksize > 1"):
        lm.mw.map(square, [1], chunksize=2, key=str)
    with pytest.raises(TypeError, match=r"square\.submit\(\)"):  # a wrong call fails on the master, not a slave
        list(lm.mw.map(square, [1, 2], [3, 4], chunksize=2))


@pytest.mark.timeout(60)  # an eager as_completed would read the endless input forever
def test_as_completed_is_lazy_and_bounded_by_its_window(lm: LocalMaster) -> None:
    lm.start_slave()
    mw = lm.mw
    consumed = 0

    def numbers() -> Iterator[int]:
        nonlocal consumed
        for i in itertools.count():
            consumed += 1
            yield i

    seen: list[int] = []
    for result in mw.as_completed(square, numbers(), window=3):
        seen.append(result.value)
        assert consumed - len(seen) <= 3  # never more than the window outstanding
        assert mw.pending_tasks() <= 3
        if len(seen) == 20:
            break
    assert sorted(seen) == [i * i for i in range(20)]
    assert consumed <= 23  # an endless input was read only as far as needed
    assert mw.results() == []


def test_a_program_imported_a_second_time_under_another_name_keeps_its_task_algorithms() -> None:
    """A program run as ``__main__`` and imported by name defines each task twice, from the same source."""
    again = importlib.util.spec_from_file_location("workload_again", WORKLOAD)
    assert again is not None
    assert again.loader is not None
    module = importlib.util.module_from_spec(again)
    again.loader.exec_module(module)  # registers square, blob, ... a second time: no error
    assert module.square(4) == 16
    assert lookup("square") is not None

    def square(x: int) -> int:  # the same name, but another definition: a real clash
        return x * x

    with pytest.raises(mwpy.MwpyError, match="defined twice"):
        mwpy.task(name="square")(square)


def test_a_plain_function_given_to_map_is_a_type_error_naming_the_fix(lm: LocalMaster) -> None:
    with pytest.raises(TypeError, match=r"decorate plain_square with @mwpy\.task"):
        lm.mw.map(plain_square, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"mwpy\.Executor"):
        lm.mw.as_completed(plain_square, [1, 2])  # type: ignore[arg-type]


def test_keyword_arguments_go_to_every_call_of_the_map_forms(lm: LocalMaster) -> None:
    lm.start_slave()
    values = list(lm.mw.map(signature, ["x", "y"], c="same c", extra=1))
    assert [v["a"] for v in values] == ["x", "y"]
    assert all(v["c"] == "same c" and v["kwargs"] == {"extra": 1} for v in values)
    results = list(lm.mw.as_completed(signature, ["z"], c="c again"))
    assert results[0].value["c"] == "c again"


def test_breaking_out_of_as_completed_cancels_what_has_not_started(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-slave-window", "1") as lm:
        lm.start_slave()
        mw = lm.mw
        for _ in mw.as_completed(nap, [0.0] * 200, range(200), window=100):
            break  # one result is enough
        lm.drive_until(lambda: mw.pending_tasks() == 0, "the rest to be dropped", timeout=60)
        assert mw._sched.cancelled_total >= 90  # at most the one in the slave's window still ran
        assert lm.results == []  # drive_until drains mw.results() into lm.results


def test_closing_a_chunked_map_cancels_the_chunks_not_started(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-slave-window", "1") as lm:
        lm.start_slave()
        mw = lm.mw
        values = mw.map(nap, [0.0] * 2000, range(2000), chunksize=10, window=100)
        assert next(values) == 0
        values.close()  # kept referenced: only an explicit close can cancel (as with the generator of chunksize 1)
        lm.drive_until(lambda: mw.pending_tasks() == 0, "the rest to be dropped", timeout=60)
        assert mw._sched.cancelled_total >= 90  # chunks, each 10 calls: at most a few still ran
        assert lm.results == []  # drive_until drains mw.results() into lm.results


def test_breaking_out_of_map_pulls_back_what_waits_in_a_slave_s_window(tmp_path: Path) -> None:
    """Closing a map asks the slave for the tasks queued in its window: they come back unrun.

    Every task but the first waits for its own release file, so when the map
    is closed the slave is in (or about to start) the second, the rest of its
    window queued behind it. That one is released only once the master has
    sent its Cancel, which the slave reads before it would start another: what
    ran does not depend on how fast the machine is. (Result group 1: the first
    result is not held on the slave while the second task runs.) The slave
    then serves on: its emptied queue is not a reason to fail.
    """
    (tmp_path / "release-t0").touch()
    with local_master(WORKLOAD, tmp_path, "--mw-slave-window", "50", "--mw-slave-result-group", "1") as lm:
        slave = lm.start_slave()
        mw = lm.mw
        values = mw.map(block, [str(tmp_path)] * 200, [f"t{i}" for i in range(200)], window=100)
        assert next(values) == slave.pid
        values.close()  # the slave holds up to 50 of them: asked back, never run
        lm.drive_until(lambda: "slave-0 <- CANCEL" in lm.audit_text(), "the master to ask its window back")
        (tmp_path / "release-t1").touch()
        lm.drive_until(lambda: mw.pending_tasks() == 0, "the rest to be dropped or given back", timeout=60)
        ran = {marker.name.removeprefix("started-") for marker in tmp_path.glob("started-*")}
        assert ran <= {"t0", "t1"}, sorted(ran)  # nothing queued behind the running task ever started
        assert mw._sched.done_total <= 2
        assert mw._sched.cancelled_total >= 98  # of the 100 submitted (map keeps at most window=100)
        assert lm.results == []  # no result of the closed map reaches mw.results()
        assert lm.result_of(whoami.submit().task_id).value == slave.pid

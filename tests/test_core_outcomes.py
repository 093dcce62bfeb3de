"""What a result means, without a socket: mwpy/core/outcomes.py with a real scheduler, journal and facts.

The engine hands :class:`Outcomes` each Results message; these tests hand it
the same tuples a slave sends (values and failures made by the codec the
slave uses) and check what reaches the task's listener, ``mw.results()``,
the scheduler's books and the facts the audit and the event log render.
Time is passed in, as the engine does.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import attrs
import pytest

from mwpy.core.facts import Facts, Observer, Outcome, StrayResult, TaskFailed, TaskTimedOut
from mwpy.core.journal import Journal
from mwpy.core.outcomes import MASTER_TIMEOUT_GRACE, Outcomes
from mwpy.core.scheduler import Entry, Scheduler
from mwpy.errors import TaskTimeoutError
from mwpy.task import DEFAULT_POLICY, Policy, Result, task_exception
from mwpy.wire import codec
from mwpy.wire.protocol import ResultItem
from tests.support import Quiet

NOW = 500.0


@attrs.define
class Kept(Quiet):
    """A task's listener that keeps its results; ``public``: they go to ``mw.results()`` too."""

    public: bool = True
    settled: list[Result] = attrs.field(factory=list)

    def settle(self, result: Result) -> bool:
        self.settled.append(result)
        return self.public


class Heard(Observer):
    """The facts reported, in order."""

    def __init__(self) -> None:
        self.facts: list[object] = []
        self.finished: list[tuple[str, str, Outcome]] = []

    def stray_result(self, fact: StrayResult) -> None:
        self.facts.append(fact)

    def task_failed(self, fact: TaskFailed) -> None:
        self.facts.append(fact)

    def task_timed_out(self, fact: TaskTimedOut) -> None:
        self.facts.append(fact)

    def task_finished(self, sid: str, algorithm: str, outcome: Outcome, run: float, wait: float) -> None:
        self.finished.append((sid, algorithm, outcome))


@attrs.define
class Setup:
    sched: Scheduler
    outcomes: Outcomes
    heard: Heard

    def submit(self, policy: Policy = DEFAULT_POLICY, *, key: str | None = None, public: bool = True) -> Entry:
        entry = Entry(self.sched.new_id(), "f", codec.encode_arguments("f", (), {}), policy, Kept(public), key=key)
        if not self.outcomes.replay(entry):
            self.sched.add(entry)
        return entry

    def run_on(self, sid: str, entry: Entry) -> None:
        assert self.sched.take(sid, NOW) == [entry]


def setup(*slaves: str, journal: Journal | None = None, **scheduling: int) -> Setup:
    sched = Scheduler(**scheduling)
    for sid in slaves:
        sched.join(sid)
    heard = Heard()
    return Setup(sched, Outcomes(sched, Facts([heard]), journal), heard)


def value(task_id: int, result: object, run: float = 0.25) -> ResultItem:
    return (task_id, True, codec.encode_value(result), run)


def raised(task_id: int, exc: Exception) -> ResultItem:
    try:
        raise exc
    except Exception as caught:
        return (task_id, False, codec.encode_error(caught), 0.1)


def settled(entry: Entry) -> list[Result]:
    assert isinstance(entry.listener, Kept)
    return entry.listener.settled


def test_a_value_reaches_the_listener_and_the_results_and_the_task_leaves_the_books() -> None:
    s = setup("a")
    entry = s.submit()
    s.run_on("a", entry)
    assert s.outcomes.take("a", [value(entry.task_id, {"x": 1})], {entry.task_id: ("out", "")}, NOW) == []
    [result] = settled(entry)
    assert (result.value, result.slave_id, result.compute_time, result.stdout, result.ok) == ({"x": 1}, "a", 0.25,
                                                                                              "out", True)  # fmt: skip
    assert s.outcomes.results == [result]
    assert (s.sched.pending_total, s.sched.running_total, s.sched.done_total) == (0, 0, 1)
    assert s.heard.finished == [("a", "f", "ok")]


def test_a_listener_may_keep_its_results_from_mw_results() -> None:
    s = setup("a")
    entry = s.submit(public=False)
    s.run_on("a", entry)
    s.outcomes.take("a", [value(entry.task_id, 7)], None, NOW)
    assert [r.value for r in settled(entry)] == [7]
    assert s.outcomes.results == []


def test_a_result_for_a_task_the_slave_does_not_hold_is_reported_and_ignored() -> None:
    s = setup("a", "b")
    entry = s.submit()
    s.run_on("a", entry)
    s.outcomes.take("b", [value(entry.task_id, 1), value(99, 2)], None, NOW)
    assert s.heard.facts == [StrayResult("b", entry.task_id), StrayResult("b", 99)]
    assert settled(entry) == []
    assert s.sched.running_total == 1


def test_a_failure_runs_again_while_its_policy_allows_then_goes_to_the_program() -> None:
    s = setup("a", "b", task_attempts=2)
    entry = s.submit()
    s.run_on("a", entry)
    s.outcomes.take("a", [raised(entry.task_id, ValueError("first"))], None, NOW)
    assert settled(entry) == []  # queued to run again, on another slave first
    assert s.sched.take("b", NOW) == [entry]
    s.outcomes.take("b", [raised(entry.task_id, ValueError("second"))], None, NOW)
    [result] = settled(entry)
    assert isinstance(task_exception(result), ValueError)
    assert str(task_exception(result)) == "second"
    assert [(f.sid, f.retried) for f in s.heard.facts if isinstance(f, TaskFailed)] == [("a", True), ("b", False)]
    assert [outcome for _, _, outcome in s.heard.finished] == ["retried", "error"]


def test_retry_on_narrows_which_failures_run_again() -> None:
    s = setup("a", "b")
    entry = s.submit(Policy(retries=3, retry_on=(OSError,)))
    s.run_on("a", entry)
    s.outcomes.take("a", [raised(entry.task_id, KeyError("not an OSError"))], None, NOW)
    [result] = settled(entry)
    assert isinstance(task_exception(result), KeyError)


def test_a_value_the_master_cannot_unpickle_fails_at_once_whatever_the_retries() -> None:
    s = setup("a")
    entry = s.submit(Policy(retries=5))
    s.run_on("a", entry)
    s.outcomes.take("a", [(entry.task_id, True, b"not a pickle", 0.1)], None, NOW)
    [result] = settled(entry)
    assert result.error is not None
    assert result.error.type == "ResultDecodeError"


def test_a_success_elsewhere_proves_the_slave_a_task_failed_on_a_black_hole() -> None:
    s = setup("bad", "good", task_attempts=2, black_hole_failures=1)
    entry = s.submit()
    s.run_on("bad", entry)
    assert s.outcomes.take("bad", [raised(entry.task_id, OSError("disk"))], None, NOW) == []
    assert s.sched.take("good", NOW) == [entry]
    assert s.outcomes.take("good", [value(entry.task_id, "fine")], None, NOW) == ["bad"]


def test_a_keyed_success_is_journaled_and_answers_the_same_key_later(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    s = setup("a", journal=journal)
    first = s.submit(key="k")
    s.run_on("a", first)
    s.outcomes.take("a", [value(first.task_id, [1, 2])], None, NOW)
    s.outcomes.commit()
    again = s.submit(key="k")  # answered from the journal: never queued
    [replayed] = settled(again)
    assert (replayed.value, replayed.journaled, replayed.slave_id) == ([1, 2], True, "a")
    assert s.sched.pending_total == 0
    unkeyed = s.submit()
    assert settled(unkeyed) == []
    journal.close()


def test_a_task_past_its_timeout_fails_and_names_the_slave_to_drop() -> None:
    s = setup("a", fixed_window=2)
    late, behind = s.submit(Policy(timeout=2.0)), s.submit()
    assert s.sched.take("a", NOW) == [late, behind]
    assert s.outcomes.overdue(NOW + 2.0 + MASTER_TIMEOUT_GRACE) == []
    edge = math.nextafter(NOW + 2.0 + MASTER_TIMEOUT_GRACE, math.inf)
    assert s.outcomes.overdue(edge) == [("a", f"task {late.task_id} ran past its timeout of 2 s")]
    [result] = settled(late)
    exc = task_exception(result)
    assert isinstance(exc, TaskTimeoutError)
    assert str(exc) == "the task ran past its timeout of 2 s on a, which stopped answering for it"
    assert s.heard.facts == [TaskTimedOut("a", late.task_id, 2.0)]
    assert settled(behind) == []  # its slave is dropped next: it follows its policy then


def test_a_task_too_big_for_a_slave_s_frames_fails_with_the_sizes() -> None:
    s = setup("a")
    entry = s.submit()
    s.run_on("a", entry)
    s.outcomes.too_large("a", entry, 100, NOW)
    [result] = settled(entry)
    assert result.error is not None
    assert result.error.type == "TaskTooLarge"
    assert result.error.message == f"{len(entry.payload)} bytes of arguments; a accepts frames of at most 100 bytes"
    assert s.sched.pending_total == 0


@pytest.mark.parametrize("public", [True, False])
def test_a_failure_that_is_not_retried_keeps_the_slave_s_traceback(public: bool) -> None:
    s = setup("a")
    entry = s.submit(public=public)
    s.run_on("a", entry)
    s.outcomes.take("a", [raised(entry.task_id, RuntimeError("boom"))], None, NOW)
    [result] = settled(entry)
    assert result.error is not None
    assert "raise exc" in result.error.traceback
    assert pickle.loads(result.error.pickled or b"").args == ("boom",)
    assert (s.outcomes.results == [result]) is public

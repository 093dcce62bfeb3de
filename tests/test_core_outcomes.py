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
import sqlite3
from pathlib import Path

import attrs
import pytest

from mwpy.core.entry import Death, Entry
from mwpy.core.facts import (
    Facts,
    JournalEntryUnusable,
    Observer,
    Outcome,
    StrayResult,
    TaskFailed,
    TaskTimedOut,
)
from mwpy.core.journal import Journal
from mwpy.core.outcomes import EXIT_WAIT, MASTER_TIMEOUT_GRACE, Outcomes
from mwpy.core.scheduler import Scheduler
from mwpy.errors import KilledSlaveError, TaskTimeoutError
from mwpy.observe.task_output import OutputKeeper
from mwpy.task_records import DEFAULT_POLICY, Policy, Result, TaskError, task_exception
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
        self.finished: list[tuple[str, str, Outcome, float, float]] = []

    def stray_result(self, fact: StrayResult) -> None:
        self.facts.append(fact)

    def task_failed(self, fact: TaskFailed) -> None:
        self.facts.append(fact)

    def task_timed_out(self, fact: TaskTimedOut) -> None:
        self.facts.append(fact)

    def journal_entry_unusable(self, fact: JournalEntryUnusable) -> None:
        self.facts.append(fact)

    def task_finished(self, sid: str, algorithm: str, outcome: Outcome, run: float, wait: float) -> None:
        self.finished.append((sid, algorithm, outcome, run, wait))


@attrs.define
class Setup:
    sched: Scheduler
    outcomes: Outcomes
    heard: Heard

    def submit(self, policy: Policy = DEFAULT_POLICY, *, key: str | None = None, public: bool = True) -> Entry:
        """A task tagged ``t<id>``, queued 2 s before ``NOW`` (the event log's wait), unless the journal answers it."""
        task_id = self.sched.new_id()
        payload = codec.encode_arguments("f", (), {})
        entry = Entry(task_id, "f", payload, policy, Kept(public), tag=f"t{task_id}", key=key)
        entry.queued_at = NOW - WAIT
        if not self.outcomes.replay(entry):
            self.sched.add(entry)
        return entry

    def run_on(self, sid: str, entry: Entry) -> None:
        assert self.sched.take(sid, NOW) == [entry]


#: How long each task waited in the master's queue before it was sent at NOW.
WAIT = 2.0


def setup(*slaves: str, journal: Journal | None = None, **scheduling: int) -> Setup:
    sched = Scheduler(**scheduling)
    for sid in slaves:
        sched.join(sid)
    heard, printed = Heard(), OutputKeeper()  # the master's keeper of what tasks print (mwpy/master.py)
    return Setup(sched, Outcomes(sched, Facts([heard, printed]), journal, printed=printed.take), heard)


def value(task_id: int, result: object, run: float = 0.001) -> ResultItem:
    return (task_id, True, codec.encode_value(result), run)


def raised(task_id: int, exc: Exception) -> ResultItem:
    try:
        raise exc
    except Exception as caught:
        return (task_id, False, codec.encode_error(caught), 0.1)


def settled(entry: Entry) -> list[Result]:
    assert isinstance(entry.listener, Kept)
    return entry.listener.settled


def ran(
    entry: Entry,
    sid: str,
    run: float,
    *,
    value: object = None,
    error: TaskError | None = None,
    journaled: bool = False,
    stdout: str = "",
    stderr: str = "",
) -> Result:
    """The Result ``entry`` should get from a run of ``run`` s on ``sid``."""
    return Result(entry.task_id, entry.algorithm, sid, entry.tag, run, value, error, journaled, stdout, stderr)


def test_a_value_reaches_the_listener_and_the_results_and_the_task_leaves_the_books() -> None:
    s = setup("a")
    entry = s.submit()
    s.run_on("a", entry)
    assert s.outcomes.take("a", [value(entry.task_id, {"x": 1})], {entry.task_id: ("out", "err")}, NOW) == []
    expected = ran(entry, "a", 0.001, value={"x": 1}, stdout="out", stderr="err")
    assert settled(entry) == [expected]
    assert s.outcomes.results == [expected]
    assert (s.sched.pending_total, s.sched.running_total, s.sched.done_total) == (0, 0, 1)
    assert s.sched.window("a") == 5  # the slave's compute time was booked: a window of 5 ms of 1 ms tasks
    assert s.heard.finished == [("a", "f", "ok", 0.001, WAIT)]
    s.outcomes.commit()  # no journal: nothing to do, nothing fails


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
    entry, other = s.submit(), s.submit()
    s.run_on("a", entry)
    assert s.sched.take("b", NOW) == [other]
    # One message: the failure queues its task again, and the result after it is still taken.
    s.outcomes.take("a", [raised(entry.task_id, ValueError("first"))], None, NOW)
    s.outcomes.take("b", [value(other.task_id, 1)], None, NOW)
    assert settled(entry) == []  # queued to run again, on another slave first
    assert s.sched.take("b", NOW) == [entry]
    s.outcomes.take("b", [raised(entry.task_id, ValueError("second"))], None, NOW)
    [result] = settled(entry)
    assert result == ran(entry, "b", 0.1, error=result.error)
    assert isinstance(task_exception(result), ValueError)
    assert str(task_exception(result)) == "second"
    failed = [f for f in s.heard.facts if isinstance(f, TaskFailed)]
    assert [(f.sid, f.retried, f.message) for f in failed] == [("a", True, "first"), ("b", False, "second")]
    assert result.error is not None
    assert failed[1] == TaskFailed(
        "b", entry.task_id, "f", "ValueError", "second", result.error.traceback, "", "", False
    )
    assert s.heard.finished == [
        ("a", "f", "retried", 0.1, WAIT), ("b", "f", "ok", 0.001, WAIT), ("b", "f", "error", 0.1, WAIT),
    ]  # fmt: skip


def test_a_failure_and_a_success_in_one_message_are_both_taken() -> None:
    s = setup("a", task_attempts=2, fixed_window=2)
    failing, fine = s.submit(), s.submit()
    assert s.sched.take("a", NOW) == [failing, fine]
    s.outcomes.take("a", [raised(failing.task_id, OSError("once")), value(fine.task_id, 2)], None, NOW)
    assert [r.value for r in settled(fine)] == [2]
    assert settled(failing) == []  # it runs again


def test_a_failed_task_s_output_goes_with_its_fact() -> None:
    s = setup("a")
    entry = s.submit()
    s.run_on("a", entry)
    s.outcomes.take("a", [raised(entry.task_id, KeyError("k"))], {entry.task_id: ("printed", "warned")}, NOW)
    [fact] = s.heard.facts
    assert isinstance(fact, TaskFailed)
    assert (fact.task_id, fact.algorithm, fact.error, fact.stdout, fact.stderr) == (entry.task_id, "f", "KeyError",
                                                                                      "printed", "warned")  # fmt: skip
    assert "raise exc" in fact.traceback


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
    assert result == ran(entry, "a", 0.1, error=result.error)
    assert result.error is not None
    assert result.error.type == "ResultDecodeError"


def test_a_success_elsewhere_proves_the_slave_a_task_failed_on_a_black_hole() -> None:
    s = setup("bad", task_attempts=2, black_hole_failures=1, fixed_window=2)
    first, second = s.submit(), s.submit()
    assert s.sched.take("bad", NOW) == [first, second]  # alone: both are its share
    failures = [raised(first.task_id, OSError("disk")), raised(second.task_id, OSError("disk"))]
    assert s.outcomes.take("bad", failures, None, NOW) == []
    s.sched.join("good")
    assert s.sched.take("good", NOW) == [first]  # its share of the two (bad still counts as a taker)
    assert s.outcomes.take("good", [value(first.task_id, "fine")], None, NOW) == ["bad"]
    assert s.sched.take("good", NOW) == [second]
    assert s.outcomes.take("good", [value(second.task_id, "fine")], None, NOW) == ["bad"]  # each proof counts


def test_a_success_of_the_slave_s_own_clears_its_record() -> None:
    s = setup("flaky", "good", task_attempts=2, black_hole_failures=1)
    failed, mine = s.submit(), s.submit()
    s.run_on("flaky", failed)
    s.outcomes.take("flaky", [raised(failed.task_id, OSError("once"))], None, NOW)
    assert s.sched.take("flaky", NOW) == [mine]  # the failed one waits for another slave
    s.outcomes.take("flaky", [value(mine.task_id, 1)], None, NOW)  # it can run tasks after all
    s.run_on("good", failed)
    assert s.outcomes.take("good", [value(failed.task_id, 2)], None, NOW) == []


def test_a_keyed_success_is_journaled_and_answers_the_same_key_later(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    s = setup("a", journal=journal)
    first = s.submit(key="k")
    s.run_on("a", first)
    s.outcomes.take("a", [value(first.task_id, [1, 2], run=0.25)], None, NOW)
    s.outcomes.commit()
    again = s.submit(key="k")  # answered from the journal: never queued
    assert settled(again) == [ran(again, "a", 0.25, value=[1, 2], journaled=True)]
    assert s.sched.pending_total == 0
    unkeyed = s.submit()
    assert settled(unkeyed) == []
    journal.close()


NOT_HERE = b"cnowhere_module_of_this_mwpy\nThing\n."  # a pickle naming a class this mwpy does not have


@pytest.mark.parametrize(
    ("algorithm", "value", "digest_matches", "why"),
    [
        ("f", codec.encode_value(2), False, "damaged: its digest does not match"),
        ("g", codec.encode_value(1), True, "written for algorithm 'g'"),
        ("f", NOT_HERE, True, "its value does not unpickle here"),
    ],
)
def test_an_unusable_journal_entry_is_treated_as_absent_and_said_so(
    tmp_path: Path, algorithm: str, value: bytes, digest_matches: bool, why: str
) -> None:
    """Issue 25: an entry that was damaged, names another algorithm or does not unpickle runs its task again
    (before: a failed task that never ran again), and a fact says why."""
    path = tmp_path / "journal.db"
    journal = Journal(path)
    journal.record("k", algorithm, codec.encode_value(1) if not digest_matches else value, "a", 0.25)
    journal.close()
    if not digest_matches:
        with sqlite3.connect(path) as db:
            db.execute("update results set value = ?", (value,))
        db.close()
    journal = Journal(path)
    s = setup("a", journal=journal)
    entry = s.submit(key="k")
    assert settled(entry) == []
    assert s.sched.pending_total == 1  # queued to run
    (fact,) = s.heard.facts
    assert isinstance(fact, JournalEntryUnusable)
    assert (fact.key, fact.task_id) == ("k", entry.task_id)
    assert fact.why.startswith(why)
    journal.close()


@pytest.mark.parametrize(
    "blob",
    [pickle.dumps(codec._Stored("0" * 64, 20_000_000)), NOT_HERE],
    ids=["stored-on-the-previous-master", "does-not-unpickle-here"],
)
def test_a_handed_over_result_that_does_not_decode_here_runs_its_task_again(tmp_path: Path, blob: bytes) -> None:
    """Guards: a slave that outlived its master hands over a success this master cannot read (a large value it
    stored on the previous master's file service, gone with it; a value that does not unpickle here): the task
    runs again and nothing is journaled, as for a journal entry that does not unpickle.

    Before, the task failed with ResultDecodeError (never retried) and the program got that error for a task
    that had succeeded."""
    path = tmp_path / "journal.db"
    journal = Journal(path)
    journal.dispatched([("k", "host-a", 4242, "", 0.0)])  # the previous master gave "k" to slave a
    journal.close()
    journal = Journal(path)
    sched = Scheduler()
    sched.join("b")
    outcomes = Outcomes(sched, Facts([Heard()]), journal, lease=3600.0, gone=lambda holder: False)
    entry = Entry(sched.new_id(), "f", codec.encode_arguments("f", (), {}), DEFAULT_POLICY, Kept(), key="k")
    assert outcomes.park(entry)  # its slave may run it still
    outcomes.handover("a2", ("host-a", 4242), [("k", "f", (9, True, blob, 1.0))])
    assert settled(entry) == []
    assert sched.take("b", NOW) == [entry]  # runs again
    assert (sched.pending_total, sched.done_total) == (1, 0)
    outcomes.commit()
    assert journal.lookup("k") is None
    journal.close()


def test_two_tasks_of_one_key_parked_for_a_slave_of_the_previous_master_are_both_answered(tmp_path: Path) -> None:
    """Guards: a program that submits one key twice (``mw.map`` over inputs with a repeat, keyed by input) while
    that key's slave of the previous master has not handed over yet: both tasks get the slave's result, as a
    journaled key answers every later task of that key, and none is left pending.

    Before, the second task took the first one's place in the wait: the first was never answered nor run,
    its future never settled and ``mw.pending_tasks()`` never reached 0."""
    path = tmp_path / "journal.db"
    journal = Journal(path)
    journal.dispatched([("k", "host-a", 4242, "", 0.0)])
    journal.close()
    journal = Journal(path)
    sched = Scheduler()
    outcomes = Outcomes(sched, Facts([Heard()]), journal, lease=3600.0, gone=lambda holder: False)
    twins = [Entry(sched.new_id(), "f", codec.encode_arguments("f", (), {}), DEFAULT_POLICY, Kept(), key="k")
             for _ in range(2)]  # fmt: skip
    assert all(outcomes.park(entry) for entry in twins)
    assert sched.pending_total == 2
    outcomes.handover("a2", ("host-a", 4242), [("k", "f", (9, True, codec.encode_value(7), 1.0))])
    assert [[result.value for result in settled(entry)] for entry in twins] == [[7], [7]]
    assert (sched.pending_total, sched.done_total) == (0, 2)
    journal.close()


def test_without_a_journal_a_key_is_only_a_name() -> None:
    s = setup("a")
    entry = s.submit(key="k")
    s.run_on("a", entry)
    s.outcomes.take("a", [value(entry.task_id, 3)], None, NOW)
    assert settled(entry) == [ran(entry, "a", 0.001, value=3)]


def test_a_task_past_its_timeout_fails_and_names_the_slave_to_drop() -> None:
    s = setup("a", fixed_window=2)
    late, behind = s.submit(Policy(timeout=2.0)), s.submit()
    assert s.sched.take("a", NOW) == [late, behind]
    assert s.outcomes.overdue(NOW + 2.0 + MASTER_TIMEOUT_GRACE) == []
    edge = math.nextafter(NOW + 2.0 + MASTER_TIMEOUT_GRACE, math.inf)
    assert s.outcomes.overdue(edge) == [("a", f"task {late.task_id} ran past its timeout of 2 s")]
    [result] = settled(late)
    assert result == ran(late, "a", edge - NOW, error=result.error)
    exc = task_exception(result)
    assert isinstance(exc, TaskTimeoutError)
    assert str(exc) == "the task ran past its timeout of 2 s on a, which stopped answering for it"
    assert s.heard.facts == [TaskTimedOut("a", late.task_id, 2.0)]
    assert settled(behind) == []  # its slave is dropped next: it follows its policy then
    assert (s.sched.running_total, s.sched.done_total) == (1, 1)  # the late one left the slave's books


def test_the_next_task_s_timeout_counts_from_the_result_before_it() -> None:
    s = setup("a", fixed_window=2)
    first, second = s.submit(Policy(timeout=2.0)), s.submit(Policy(timeout=2.0))
    assert s.sched.take("a", NOW) == [first, second]
    s.outcomes.take("a", [value(first.task_id, 1)], None, NOW + 5.0)  # the second started only now
    assert s.outcomes.overdue(NOW + 5.0 + 2.0 + MASTER_TIMEOUT_GRACE) == []


def test_a_task_too_big_for_a_slave_s_frames_fails_with_the_sizes() -> None:
    s = setup("a", fixed_window=2)
    big, small = s.submit(Policy(timeout=5.0)), s.submit(Policy(timeout=5.0))
    assert s.sched.take("a", NOW) == [big, small]
    s.outcomes.too_large("a", big, 100, NOW + 1.0)
    message = f"{len(big.payload)} bytes of arguments; a accepts frames of at most 100 bytes"
    assert settled(big) == [ran(big, "a", 0.0, error=TaskError("TaskTooLarge", message, ""))]
    assert (s.sched.pending_total, s.sched.running_total) == (1, 1)
    # The small one runs from the moment the big one was refused, not from when both were sent.
    assert s.outcomes.overdue(NOW + 1.0 + 5.0 + MASTER_TIMEOUT_GRACE) == []


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


def dying(slaves: tuple[str, ...], told: dict[tuple[str, int], str], allowed: int = 1) -> Setup:
    """Slaves ``slaves`` with pids 1, 2, ...; ``told``: how the back end says (host, pid) ended, so far."""
    sched = Scheduler(fixed_window=2)
    for sid in slaves:
        sched.join(sid)
    heard = Heard()
    outcomes = Outcomes(
        sched, Facts([heard]), allowed_failures=allowed, how_ended=lambda death: told.get((death.host, death.pid))
    )
    return Setup(sched, outcomes, heard)


def test_a_slave_that_dies_holding_several_tasks_blames_none_and_each_runs_again_alone() -> None:
    """Which one it ran is not known (it may hold the first one's result to send with the second's)."""
    s = dying(("a", "b"), {}, allowed=0)
    first, second = s.submit(), s.submit()
    s.submit(), s.submit()  # with two slaves, a's fair share of four tasks is two
    assert s.sched.take("a", NOW) == [first, second]
    s.outcomes.slave_died(Death("a", "h", 1), NOW)
    s.sched.leave("a")
    assert [(d.sid, d.others) for d in first.deaths + second.deaths] == [("a", 1), ("a", 1)]
    assert (s.sched.pending_total, s.sched.done_total) == (4, 0)  # no death allowed, yet neither failed
    assert s.sched.take("b", NOW) == [first]  # alone: if b dies now, it is surely first's doing
    assert s.sched.take("b", NOW) == []  # nothing joins it, not even the tasks never suspected
    s.outcomes.slave_died(Death("b", "h", 2), NOW)
    s.sched.leave("b")
    s.outcomes.settle_killed(NOW + EXIT_WAIT)
    [result] = settled(first)
    assert result.error is not None
    assert result.error.message.startswith("f killed 1 slaves that ran it (allowed failures: 0)")
    assert "a (pid 1 on h): connection lost while running it (holding 1 other tasks too)" in result.error.message
    assert second.deaths[0].others == 1
    assert settled(second) == []


def test_past_its_allowed_failures_a_task_fails_with_how_each_slave_ended() -> None:
    told = {("h", 1): "killed by SIGSEGV"}
    s = dying(("a", "b", "c"), told)
    entry = s.submit()
    for pid, sid in enumerate(("a", "b"), start=1):
        s.run_on(sid, entry)
        s.outcomes.slave_died(Death(sid, "h", pid), NOW)
        s.sched.leave(sid)
    assert s.sched.take("c", NOW) == []  # it left the books: no third slave gets it
    s.outcomes.settle_killed(NOW + EXIT_WAIT / 2)
    assert settled(entry) == []  # the back end has not said how the second slave ended yet
    told[("h", 2)] = "exited with status 3 without a result"
    s.outcomes.settle_killed(NOW + EXIT_WAIT / 2)
    [result] = settled(entry)
    exc = task_exception(result)
    assert isinstance(exc, KilledSlaveError)
    assert exc.function == "f"
    assert exc.deaths == ("a (pid 1 on h): killed by SIGSEGV", "b (pid 2 on h): exited with status 3 without a result")
    assert (s.sched.pending_total, s.sched.done_total) == (0, 1)


def test_a_task_fails_after_exit_wait_even_if_the_back_end_never_says() -> None:
    s = dying(("a",), {}, allowed=0)
    entry = s.submit()
    s.run_on("a", entry)
    s.outcomes.slave_died(Death("a", "h", 1), NOW)
    s.outcomes.settle_killed(NOW + EXIT_WAIT)
    [result] = settled(entry)
    assert result.error is not None
    assert result.error.message.endswith("a (pid 1 on h): connection lost while running it")


def test_a_policy_s_allowed_failures_wins_over_the_master_s() -> None:
    s = dying(("a", "b"), {}, allowed=0)
    entry = s.submit(Policy(allowed_failures=1))
    s.run_on("a", entry)
    s.outcomes.slave_died(Death("a", "h", 1), NOW)
    s.sched.leave("a")
    assert s.sched.take("b", NOW) == [entry]

"""The facts a master reports (mwpy/core/facts.py): each kind reaches the observers that hear it, and no others.

The audit's, the log's and the event log's renderings are pinned end to end
by tests/test_facts_golden.py; these pin the fan-out itself, which the hot
path relies on: a per-task kind nobody listens to costs a ``None`` test, and
one the event log listens to calls the writer's own method.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from mwpy.core import facts
from mwpy.core.facts import Facts, Observer, Outcome
from mwpy.observe.event_renderer import EventRenderer
from mwpy.observe.events import EventWriter


class Counter(Observer):
    """Hears departures and finished tasks."""

    def __init__(self) -> None:
        self.heard: list[object] = []

    def slave_left(self, fact: facts.SlaveLeft) -> None:
        self.heard.append(fact)

    def task_finished(self, sid: str, algorithm: str, outcome: Outcome, run: float, wait: float) -> None:
        self.heard.append((sid, outcome))


LEFT = facts.SlaveLeft("slave-1", "eof", "EOF", 3, 2, 1, 1, 0)


def test_every_kind_of_record_has_its_observer_method() -> None:
    records = {cls for _, cls in inspect.getmembers(facts, inspect.isclass) if issubclass(cls, tuple)}
    assert records == set(facts.KINDS)
    for name in [*facts.KINDS.values(), *facts.HOT_KINDS]:
        assert callable(getattr(Observer, name))


def test_a_fact_reaches_each_observer_that_hears_its_kind_once() -> None:
    first, second = Counter(), Counter()
    report = Facts([first, second, Observer()])
    report(LEFT)
    report(facts.Accepted("127.0.0.1:1"))  # heard by nobody: no error, no effect
    assert first.heard == second.heard == [LEFT]


def test_a_per_task_kind_nobody_hears_is_none_and_one_heard_by_one_is_its_own_method() -> None:
    alone = Counter()
    report = Facts([alone, Observer()])
    assert report.tasks_dispatched is None
    assert report.results_received is None
    assert report.task_finished == alone.task_finished  # no call of ours in between
    both = Counter()
    fanned = Facts([alone, both]).task_finished
    assert fanned is not None
    fanned("slave-2", "f", "ok", 0.1, 0.0)
    assert alone.heard[-1] == both.heard[-1] == ("slave-2", "ok")


def test_the_event_log_counts_finished_tasks_with_the_writer_s_own_method(tmp_path: Path) -> None:
    with EventWriter(tmp_path / "events.jsonl") as writer:
        report = Facts([EventRenderer(writer)])
        assert report.task_finished == writer.task_finished
        assert report.tasks_dispatched == writer.tasks_dispatched
        assert report.results_received is None

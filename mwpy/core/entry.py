"""A task in the master's books: the :class:`Entry` the scheduler files and moves, the :class:`Listener` it
reports to, and the :class:`Death` of a slave that ran it.

The records apart from the rules (mwpy/core/scheduler.py): the intake, the streams, the engine and the
outcomes make and read entries without the scheduler's queues and slots.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, Protocol

import attrs

from mwpy.task_records import Policy, Result, Task

__all__ = ["WIRE_ITEM", "Death", "Entry", "Listener"]


class Listener(Protocol):
    """Who hears what becomes of one task: ``submit()``'s future, an executor's future, a ``map`` stream's item.

    The scheduler calls the first three; the master's outcomes call
    :meth:`settle` with the task's result. Each returns at once (they run on
    the master's hot path, in its thread).
    """

    def may_start(self) -> bool:
        """Asked as the task is about to leave for a slave: False (it was cancelled) drops it unsent."""
        ...

    def began(self) -> None:
        """The task is the first in flight on its slave, which runs tasks in the order sent: it runs now."""
        ...

    def unrunnable(self, reason: str | None = None) -> bool:
        """Its slave vanished and its policy forbids running it again (or, ``reason``, no slave on offer can run
        it); True: ``mw.unrunnable_tasks()`` lists it."""
        ...

    def settle(self, result: Result) -> bool:
        """Its result (a value or a failure); True: ``mw.results()`` gets it too."""
        ...


class Entry:
    """The scheduler's record of one task: what to run and for whom, and the bookkeeping of its runs.

    Private to the master (the user sees :class:`~mwpy.task_records.Task` and
    :class:`~mwpy.task_records.Result`). ``tag`` and ``key`` are the task's own, not
    read from its policy on the way, so that ``mw.map`` gives each item its
    position and journal key without a policy per item.
    """

    __slots__ = (
        "task_id", "algorithm", "label", "payload", "policy", "listener", "tag", "key",
        "attempts", "failed_on", "retry_after", "sent_at", "queued_at", "deaths", "prefer", "prefer_until",
    )  # fmt: skip

    def __init__(
        self,
        task_id: int,
        algorithm: str,
        payload: bytes,
        policy: Policy,
        listener: Listener,
        *,
        tag: Any = None,
        key: str | None = None,
        label: str | None = None,
    ) -> None:
        self.task_id = task_id
        self.algorithm = algorithm
        #: The name results, messages and the event log give the task: its algorithm's, or for a call of
        #: mwpy's own (an Executor's ``mwpy.call_function``) the user's function it runs.
        self.label = label or algorithm
        #: The pickled ``(args, kwargs)`` (mwpy/wire/codec.py).
        self.payload = payload
        self.policy = policy
        self.listener = listener
        #: Handed back with the result; the journal's name for the task.
        self.tag = tag
        self.key = key
        #: Times the task was sent to a slave.
        self.attempts = 0
        #: (slave id, that slave's failure streak) for each run that raised; see Scheduler.succeeded.
        self.failed_on: tuple[tuple[str, int], ...] = ()  # a tuple: no list per task (the collector's work)
        #: A slave it failed on may take it again only after this (monotonic clock).
        self.retry_after = 0.0
        #: When the task last left for a slave: with the slave's last result, when it started.
        self.sent_at = 0.0
        #: When it was submitted (stamped only when someone reads it): the event log's queue wait is
        #: ``sent_at - queued_at``.
        self.queued_at = 0.0
        #: The slaves that died while running it (mwpy/core/outcomes.py fails it past its allowed failures).
        self.deaths: tuple[Death, ...] = ()
        #: The slave that holds its largest input (a value that stayed where it was made): other slaves leave
        #: it to that one until ``prefer_until`` (monotonic clock; set when one first passes it over).
        self.prefer: str | None = None
        self.prefer_until = 0.0

    def __repr__(self) -> str:
        return f"<Entry task {self.task_id} {self.algorithm!r}>"

    def task(self) -> Task:
        """The task as the master algorithm sees it (``mw.unrunnable_tasks()``)."""
        policy = self.policy
        if self.tag is not policy.tag or self.key != policy.key:
            policy = attrs.evolve(policy, tag=self.tag, key=self.key)  # mw.map's item: its own position and key
        return Task(self.task_id, self.algorithm, self.payload, policy)


class Death(NamedTuple):
    """A slave that died while it ran a task: who it was, to ask later how it ended (its exit status)."""

    sid: str
    host: str
    pid: int
    #: Its Condor job (CLUSTER.PROC), if it ran as one, and when (Unix time) its connection ended.
    job: str | None = None
    at: float = 0.0
    #: How many other tasks the slave held when it died: with any, which one it was running is not known.
    others: int = 0
    #: Seconds it had been silent when the master dropped it (its client timeout); 0: its connection ended.
    silent: float = 0.0


#: What a Tasks frame carries for an entry, (task id, algorithm, payload): attrgetter's tuple, made with no Python
#: call per task (a list comprehension is one, in this Python).
WIRE_ITEM = operator.attrgetter("task_id", "algorithm", "payload")

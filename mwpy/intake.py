"""How tasks get into a master from its helpers, and how those helpers wait: the internal surface of a Master.

:class:`~mwpy.master.Master` is the user's API. ``submit()``'s futures (mwpy/futures.py), the ``map`` streams
(mwpy/streams.py) and ``mwpy.Executor`` need a little more: to queue a task with its own listener, to run loop
passes while they wait, to pull cancelled tasks back. Rather than reach into the master's parts, they use its
:class:`Intake`, which the master hands to the futures and streams it makes (and lends the executor as
``Master._intake``: ``Master._SHARED_WITH``). It holds the references they need, each written once here
(CPython's ``_ExecutorManagerThread`` keeps the executor's internals the same way), and knows none of them:
it queues whatever listener it is given.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from mwpy.core import facts
from mwpy.core.entry import Entry, Listener
from mwpy.core.outcomes import Outcomes
from mwpy.core.scheduler import Scheduler
from mwpy.data.shares import SharedObjects
from mwpy.errors import ComputationFinishedError
from mwpy.held_tasks import Holding, Watched
from mwpy.net.engine import TICK, Engine
from mwpy.task_records import Policy, Result

L = TypeVar("L", bound=Listener)


class Intake:
    """Submission and waiting for one master's helpers (futures, streams, an executor's thread)."""

    def __init__(
        self,
        sched: Scheduler,
        engine: Engine,
        outcomes: Outcomes,
        shares: SharedObjects,
        report: facts.Facts,
        *,
        max_frame: int,
        timed: bool,
    ) -> None:
        self._sched = sched
        self._engine = engine
        self._outcomes = outcomes
        self._facts = report
        #: The books of values that stay on their slaves (mwpy/held_tasks.py): made with the first task that
        #: takes futures as arguments.
        self._holding: Holding | None = None
        #: The largest arguments a frame carries (``--mw-max-write-buffer-size``).
        self.max_frame = max_frame
        #: The master's file service, for ``TaskAlgorithm.encode``: ``mwpy.File`` arguments, arguments too large.
        self.store = shares
        shares.on_spill = self._releasing  # arguments the file service took for a task go when it is done
        outcomes.received = shares  # and results slaves stored there are taken from it
        #: ``map``'s keyword arguments with the large ones shared once per slave.
        self.share_large = shares.share_large
        #: Whether tasks need their queue time (only the event log and the metrics exporter read it).
        self._timed = timed
        #: The thread that runs the master: only there does waiting drive the loop.
        self.owner = threading.get_ident()
        #: Set by the master when the computation is finished: no more tasks.
        self.finished = False
        #: Inputs of sized streams not submitted yet, for ``tasks_total``; None until such a stream starts.
        self.ahead: int | None = None

    def _releasing(self) -> None:
        """Arguments were spilled: from now on each task that leaves the books tells the file service."""
        self._sched.on_leave = self.store.release

    # ------------------------------------------------------------------ tasks in

    def submit(self, algorithm: str, payload: bytes, policy: Policy, listener: Callable[[int, Intake], L]) -> L:
        """``submit()``: queue a task (its arguments checked and pickled) whose result goes to ``mw.results()`` and
        to the listener made for it with its id (a future: mwpy/futures.py, which the intake does not know)."""
        task_id = self._sched.new_id()
        made = listener(task_id, self)
        entry = Entry(task_id, algorithm, payload, policy, made, tag=policy.tag, key=policy.key)
        if self._timed or entry.key is not None or self.finished:
            self._add(entry)
        else:
            self._sched.add(entry)  # the hot path: no queue time to stamp, no journal to ask
        return made

    def new_id(self) -> int:
        """The id of a task about to be queued with :meth:`enqueue`."""
        return self._sched.new_id()

    def enqueue(self, entry: Entry) -> int:
        """Queue a task (its id from :meth:`new_id`) whose arguments ``TaskAlgorithm.encode`` checked and
        pickled, maybe in another thread; returns its id."""
        self._add(entry)
        return entry.task_id

    def enqueuer(self) -> Callable[[Entry], object]:
        """What queues many tasks without a journal key (an Executor's map, a batch at a time): :meth:`enqueue`,
        or, with no queue time to stamp and the computation going on, the scheduler's own ``add``, as
        ``submit()``'s hot path does (two calls fewer per task)."""
        return self.enqueue if self._timed or self.finished else self._sched.add

    def _add(self, entry: Entry) -> None:
        if self.finished:
            raise ComputationFinishedError("the computation has finished; no more tasks can be submitted")
        if self._timed:
            entry.queued_at = time.monotonic()  # the event log's queue wait starts here
        if entry.key is None or not self._outcomes.replay(entry):  # a key may be answered from the journal
            if entry.key is None or not self._outcomes.park(entry):  # or wait for a slave of the previous master
                self._sched.add(entry)
        else:
            self.store.release(entry.payload)

    def cancel(self, task_ids: list[int]) -> list[int]:
        """Cancelled futures: tasks still queued here are dropped when they would leave (their listener says no);
        those in a slave's window are asked back (Cancel), and what the slave gives back leaves the books.
        Returns the ids asked back from slaves."""
        if self.finished:
            return []  # every slave has been told to shut down
        asked: list[int] = []
        for sid, ids in self._sched.holders(task_ids).items():
            self._engine.cancel(sid, ids)
            asked += ids
        return asked

    def holding(self, own: Callable[[int, Intake], Watched]) -> Holding:
        """The books of values that stay on their slaves (mwpy/held_tasks.py), made on first use; ``own``
        makes the futures of mwpy's own tasks (the futures' module knows them, the intake does not)."""
        if self._holding is None:
            self._holding = Holding(self, self._outcomes.hold, self._facts, own)
        return self._holding

    def results(self) -> list[Result]:
        """``mw.results()``: what arrived since the last call, each value that stayed on its slave fetched now."""
        results, self._outcomes.results = self._outcomes.results, []
        return results if self._holding is None else self._holding.drained(results)

    def count_submitted_as_total(self) -> None:
        """Without a declared total, the total is every task submitted so far (for an Executor, which has no
        lazy map: its ``map`` makes every future at once, as ``concurrent.futures`` does)."""
        self.ahead = self.ahead or 0

    def expect_slaves(self, count: int) -> None:
        """``count`` slaves will come (an Executor's ``max_workers``): a short queue is shared among them all,
        not taken whole by the first to connect."""
        self._sched.expected_slaves = count

    @property
    def tasks_done(self) -> int:
        return self._sched.done_total

    @property
    def slaves_greeted(self) -> int:
        """Slaves that ever connected."""
        return self._engine.slaves_greeted

    # ------------------------------------------------------------------ waiting

    def step(self, wait: float = TICK) -> None:
        """One pass of the loop (in the thread that runs the master)."""
        self._engine.step(wait)

    def wake(self) -> None:
        """Cut the engine's wait short: the one call safe from another thread."""
        self._engine.wake()

    def wait_for(self, future: concurrent.futures.Future[Any], task_id: int, timeout: float | None) -> None:
        """Drive the loop until ``future`` is done or ``timeout`` passes (only in the thread that runs the master)."""
        if future.done() or threading.get_ident() != self.owner:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while not future.done():
            if self.finished:
                raise ComputationFinishedError(f"the computation finished before task {task_id} had a result")
            wait = TICK if deadline is None else min(TICK, deadline - time.monotonic())
            if wait <= 0:
                return
            self._engine.step(wait)

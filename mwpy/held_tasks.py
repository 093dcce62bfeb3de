"""A master algorithm's large values that stay on the slaves that made them, as an Executor's do.

The rule: a task keeps its value on its slave (if it pickles to more than
:data:`~mwpy.wire.codec.SPILL_ABOVE` bytes, mwpy/data/holding.py) when, as it
leaves for that slave, its future is an argument of another task still waiting
for it (``task.submit(fut)``, ``mw.map(task, futures)``), and it has no journal
key (the journal keeps values). The master then records only the handle; the
dependent task carries the handle, runs preferably on the holder
(mwpy/core/scheduler.py) and otherwise its slave fetches the value from the
holder's file service. Tasks of a ``mw.map``/``mw.as_completed`` stream, and
tasks whose futures nobody passed on, send their values to the master as ever.

A held value is still there for the master algorithm: ``fut.result()`` fetches
it on demand (once; the future keeps it), and so does ``mw.results()`` for a
held task's result it hands over, so nothing reads a handle for a value. Both
must come before the master finishes (its slaves stop with it). A value that
cannot be fetched (its holder unreachable, gone, or its cache evicted it) is
relayed through the master's file service or made again from its task's call
(mwpy/lineage.py, shared with ``mwpy.Executor``), and the event log says so;
only in the master's thread, which drives the loop that does it.

What a task pays for this: nothing unless futures are arguments (no record
per task; a truthiness check per Tasks frame, a type check per ``result()``).
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from mwpy import names, safe_text
from mwpy.core import facts
from mwpy.core.entry import Entry, Listener
from mwpy.data.shares import SharedObjects
from mwpy.errors import ComputationFinishedError
from mwpy.lineage import Lineage
from mwpy.task_records import Policy, Result
from mwpy.wire import codec

log = safe_text.logger("mwpy.master")


class Side(Protocol):
    """What this module uses of the master's intake (mwpy/intake.py, which makes the books)."""

    @property
    def store(self) -> SharedObjects: ...
    @property
    def owner(self) -> int: ...
    @property
    def finished(self) -> bool: ...
    def new_id(self) -> int: ...
    def enqueue(self, entry: Entry) -> int: ...
    def step(self, wait: float = ...) -> None: ...


class Watched(Listener, Protocol):
    """A future as this module watches it: ``submit()``'s (mwpy/futures.py's ``TaskFuture``)."""

    task_id: int
    label: str
    _call: tuple[str, bytes, Policy] | None

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self, timeout: float | None = None) -> Any: ...
    def holder(self) -> tuple[int, str] | None: ...
    def leaves_holding(self, entry: Entry, sid: str) -> None: ...
    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object], /) -> None: ...


class Holding:
    """One master's held values: which tasks hold, and getting a held value (made with the first task that
    takes futures as arguments)."""

    def __init__(
        self,
        side: Side,
        hold: dict[int, Callable[[Entry, str], None]],
        report: facts.Facts,
        own: Callable[[int, Any], Watched],
    ) -> None:
        """``hold``: the tasks to hold (``Outcomes.hold``); ``own(task_id, side)``: a future of mwpy's
        own task (a relay, a producer made again), which never reaches ``mw.results()``."""
        self._side = side
        self._hold = hold
        self._own = own
        #: What recovers a held value that could not be fetched (relayed, or made again).
        self.lineage = Lineage(self, report, side.store, log)
        #: Held tasks whose results wait for ``mw.results()`` (their value fetched then, through the future).
        self._listed: dict[int, Watched] = {}

    def watch(self, given: Watched) -> None:
        """``given`` is a waiting task's input: if it leaves for a slave from now on, its value stays there."""
        if given.done() or given.task_id in self._hold:
            return
        self._hold[given.task_id] = given.leaves_holding
        given.add_done_callback(self._settled)

    def _settled(self, future: Any) -> None:
        self._hold.pop(future.task_id, None)
        if not future.cancelled() and future.holder() is not None:
            self._listed[future.task_id] = future

    def fetch(self, future: Any) -> Any:
        """``future``'s value, which its slave holds: fetched from there and kept by the future. Only the master's
        thread, which drives the loop, can have a lost value made again (elsewhere its loss is raised)."""
        wait = self._wait if threading.get_ident() == self._side.owner else None
        return self.lineage.fetched(future, self._side.store.held, wait, self._gone)

    def drained(self, results: list[Result]) -> list[Result]:
        """``mw.results()``'s results with each held value fetched now (through its future, which keeps it)."""
        if not self._listed:
            return results
        return [self._fetched(result) if type(result.value) is codec.Held else result for result in results]

    def _fetched(self, result: Result) -> Result:
        return attrs.evolve(result, value=self._listed.pop(result.task_id).result())

    def _wait(self, done: threading.Event) -> None:
        """Drive the master's loop until a held value is relayed or made again."""
        side = self._side
        while not done.is_set():
            if side.finished:
                raise ComputationFinishedError("the computation finished before a held value was made again")
            side.step()

    def _gone(self) -> str | None:
        if not self._side.finished:
            return None
        return "stopped with the computation (it went to another task as an argument): call result() before then"

    # ------------------------------------------------------------------ what mwpy/lineage.py asks of the master

    def new_future(self, label: str) -> Watched:
        future = self._own(self._side.new_id(), self._side)
        future.label = label
        return future

    def own_call(
        self, future: Watched, name: str, payload: bytes, policy: Policy, *, prefer: str | None, pinned: bool
    ) -> None:
        """Queue mwpy's own task; a producer made again keeps its value where it runs, as its first run did."""
        entry = Entry(future.task_id, name, payload, policy, future, label=future.label)
        entry.prefer, entry.prefer_until = prefer, math.inf if pinned else 0.0
        future._call = (name, payload, policy)
        if name != names.RELAY:
            self.watch(future)
        self._side.enqueue(entry)

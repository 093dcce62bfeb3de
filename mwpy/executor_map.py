"""``Executor.map``'s calls as one stream: no future per input, results handed to the caller in input order.

A future per input cost the caller's thread and the engine's thread a
Condition or a lock per task, and the two share the GIL, so ``Executor.map``
ran at half the master algorithm API's rate (docs/performance.md, scenario 6).
A :class:`MapStream` is what ``mw.map`` does for a master (mwpy/streams.py)
with a thread between them: the caller pickles inputs and hands them to the
engine's thread ``SUBMIT_BATCH`` at a time (one lock, at most one wake-up);
the engine's thread queues a small listener per input (:class:`_Item`),
keeping at most ``QUEUED_AHEAD`` of a map's calls waiting for a slave (the
rest wait as pickled bytes), and files each result by its input's position; the caller takes
them in order and sleeps only when the next one has not come, woken once by
that one.

What ``concurrent.futures.Executor.map`` promises still holds: inputs are
submitted at once (up to ``window_bytes`` of pickled arguments not yet
returned), a value is not kept once yielded (issue 14406), a timeout raises
``TimeoutError`` and closing the iterator cancels every call not started
(those waiting in a slave's window are pulled back), ``shutdown(cancel_futures=
True)`` makes the calls not started raise ``CancelledError``, a broken executor
raises ``BrokenExecutor``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from mwpy.core.entry import Entry
from mwpy.intake import Intake
from mwpy.task_records import Policy, Result, task_exception, unrunnable_error
from mwpy.wire import codec

R = TypeVar("R")

#: Inputs ``Executor.map`` hands the engine's thread at once (one lock and at most one wake-up each).
SUBMIT_BATCH = 1024
#: A map's calls queued in the master and not sent to a slave yet, at most; the rest wait handed over as
#: pickled bytes. With 10^5 calls queued at once (``concurrent.futures``' contract: every input submitted now),
#: their tasks and listeners made the cyclic collector's passes about 1.5 µs of the engine's thread per call
#: (docs/performance.md, scenario 6); bytes are not the collector's to scan. Calls sent (in slaves' windows)
#: do not count: however many slaves there are, each gets its window. A pass sends far fewer than this.
QUEUED_AHEAD = 4096
#: What a task's exception is raised as by ``map``, as by the executor's futures (``SystemExit`` too).
RAISED_AS_ITSELF = (Exception, SystemExit)

#: Pickles one call's arguments (and keyword arguments) for one function: what ``Executor._encoder`` gives.
OneCall = Callable[[tuple[Any, ...], dict[str, Any]], bytes]
#: ``Executor._encoder``: for a function, its task name, label and :data:`OneCall`.
Encoder = Callable[[Callable[..., Any]], tuple[str, str, OneCall]]


class Service(Protocol):
    """What a stream needs of its executor's service (mwpy/executor.py ``_Service``)."""

    #: Calls of map streams resolved; counted by the engine's thread alone (shutdown waits for them).
    map_resolved: int

    def hand_over(self, submission: MapBatch) -> None:
        """Queue a batch for the engine's thread (raises if the executor is shut down or broken)."""

    def withdraw(self, stream: MapStream[Any]) -> None:
        """Have the engine's thread call :meth:`MapStream.pull_back`."""

    def wake_later(self, stream: MapStream[Any]) -> None:
        """Have the engine's thread call :meth:`MapStream.wake` once its pass is over (engine's thread)."""

    def held_value(self, held: codec.Held) -> Any:
        """A value its slave holds, fetched from there now (the caller's thread)."""


class MapStream(Generic[R]):
    """One ``Executor.map`` call: inputs in (caller's thread), results out in input order (engine's thread in).

    It holds the executor weakly, through its ``encode`` (as CPython's
    ``map(buffersize=)`` does): a map left unread does not keep the executor
    from being collected and shut down; what was not submitted then never is.
    """

    def __init__(
        self,
        encoder: Encoder,
        fn: Callable[..., R],
        policy: Policy,
        service: Service,
        *,
        calls: Iterator[tuple[Any, ...]],
        kwargs: dict[str, Any],
        window_bytes: int,
    ) -> None:
        """``kwargs``: what every call gets besides its input's arguments (``map``'s keyword arguments, a large
        one already shared): pickled with each call as the arguments are, the function still by its reference
        made once, where a ``functools.partial`` holding them cost each call the function pickled again."""
        self._encoder = weakref.WeakMethod(encoder)
        self._one: tuple[str, str, OneCall] | None = None  # made with the first input: (name, label, pickler)
        self._fn, self._policy, self._calls, self._limit = fn, policy, calls, window_bytes
        self._kwargs = kwargs
        self.service = service
        # The caller's side.
        self._sizes: collections.deque[int] = collections.deque()  # pickled bytes of each input not yet returned
        self._held = 0
        self._submitted = 0  # inputs handed over
        self._returned = 0  # inputs whose value was taken
        self._exhausted = False
        # Shared: written by the engine's thread, taken by the caller's (one dict operation each, under the GIL).
        self._arrived: dict[int, Any] = {}  # a value, or _Failed: what the call gives the caller
        self._wakeup = threading.Condition(threading.Lock())
        self._awaited = -1  # the input the caller sleeps on (set under _wakeup)
        self._broken: BaseException | None = None
        #: Cleared when the caller closes the iterator: its calls not started are dropped.
        self.open = True
        #: Set by ``shutdown(cancel_futures=True)``: calls not started end with ``CancelledError``.
        self.cancelling = False
        #: The engine's side: the listener of each call queued and not resolved, by task id.
        self.live: dict[int, _Item] = {}
        #: Of those, the calls that have left for a slave (may_start said yes).
        self.sent = 0
        self._unqueued: collections.deque[MapBatch] = collections.deque()  # handed over, not all queued yet

    # ------------------------------------------------------------------ the caller's thread

    def fill(self) -> None:
        """Pickle and hand over inputs while those not returned hold less than ``window_bytes`` (or none)."""
        encoder = self._encoder()
        if encoder is None:  # the executor was collected: what was not submitted never is
            self._exhausted = True
        while not self._exhausted and (self._held < self._limit or self._submitted == self._returned):
            first, batch = self._submitted, self._pickled(encoder)
            if batch:
                self._hand_over(first, batch)

    def _pickled(self, encoder: Encoder | None) -> list[bytes]:
        """The next inputs pickled: :data:`SUBMIT_BATCH` at most, until those not returned hold ``window_bytes``.

        The caller's hot loop: what it needs is in local variables, not looked up per input.
        """
        calls: Iterator[tuple[Any, ...]] = itertools.islice(self._calls, SUBMIT_BATCH)
        if self._one is None:  # what every call shares, looked up with the first input (the function's reference)
            first = next(calls, None)
            if first is None or encoder is None:
                self._exhausted = True
                return []
            self._one = encoder(self._fn)
            calls = itertools.chain((first,), calls)
        one, kwargs, sizes, limit = self._one[2], self._kwargs, self._sizes, self._limit
        held, batch = self._held, []
        for args in calls:
            payload = one(args, kwargs)
            batch.append(payload)
            sizes.append(len(payload))
            held += len(payload)
            if held >= limit:
                break
        else:
            self._exhausted = len(batch) < SUBMIT_BATCH
        self._held = held
        self._submitted += len(batch)
        return batch

    def _hand_over(self, first: int, batch: list[bytes]) -> None:
        assert self._one is not None  # made with the batch's first input
        name, label, _ = self._one
        self.service.hand_over(MapBatch(self, name, label, first, batch))

    def values(self, end: float | None) -> Generator[R, None, None]:
        """The values in input order, each by ``end`` (monotonic) if given; closing it cancels the rest."""
        arrived, sizes, refill_at = self._arrived, self._sizes, self._limit // 2
        try:
            while self._returned < self._submitted:
                index = self._returned
                self._returned = index + 1
                self._held -= sizes.popleft()
                # Nothing here keeps a value or its result once yielded (issue 14406).
                yield _value(arrived.pop(index) if index in arrived else self._wait(index, end), self.service)
                if not self._exhausted and self._held <= refill_at:
                    self.fill()  # half the window at once: one input per value was a hand-over (and a pass) each
        finally:
            self.close()

    def _wait(self, index: int, end: float | None) -> Any:
        with self._wakeup:
            self._awaited = index
            while index not in self._arrived:
                if self._broken is not None:
                    raise self._broken
                wait = None if end is None else end - time.monotonic()
                if wait is not None and wait <= 0:
                    raise TimeoutError
                self._wakeup.wait(wait)
            self._awaited = -1
        return self._arrived.pop(index)

    def close(self) -> None:
        """The caller is done (or gave up): calls not started are dropped, or pulled back from slaves' windows."""
        if self.open:
            self.open = False
            self.service.withdraw(self)

    def cancel(self) -> None:
        """``shutdown(cancel_futures=True)``: calls not started end with ``CancelledError`` (any thread)."""
        self.cancelling = True
        self.service.withdraw(self)

    def break_with(self, error: BaseException) -> None:
        """The executor broke: the caller's wait for a value not come raises ``error`` (any thread)."""
        with self._wakeup:
            self._broken = error
            self._wakeup.notify()

    # ------------------------------------------------------------------ the engine's thread

    def take(self, batch: MapBatch, intake: Intake) -> None:
        """A batch handed over: its inputs wait here until :meth:`feed` queues them (engine's thread)."""
        self._unqueued.append(batch)
        _count_ahead(intake, len(batch))  # the total the live view shows counts them already

    def feed(self, intake: Intake) -> bool:
        """Queue inputs handed over while fewer than :data:`QUEUED_AHEAD` of this map's calls wait for a slave;
        those of a map closed or cancelled meanwhile are dropped unsent. True while some wait here."""
        if not self.open or self.cancelling:
            self._drop_unqueued(intake)
            return False
        unqueued = self._unqueued
        while unqueued and (room := QUEUED_AHEAD - len(self.live) + self.sent) > 0:
            if unqueued[0].queue_in(intake, room):
                unqueued.popleft()
        return bool(unqueued)

    def arrive(self, item: _Item, outcome: Result | BaseException) -> None:
        """``item``'s call is resolved: file its outcome, wake the caller if it sleeps on it."""
        if self.live.pop(item.task_id, None) is None:
            return  # resolved already (pulled back, then its result came anyway)
        self.sent -= item.sent
        if isinstance(outcome, BaseException) or outcome.error is not None:
            self._resolve(item.index, _Failed(outcome))
        else:  # the value alone waits for the caller: the result goes now, young (less for the collector)
            self._resolve(item.index, outcome.value)

    def _resolve(self, index: int, filed: Any) -> None:
        self.service.map_resolved += 1
        if self.open:
            self._arrived[index] = filed
            if self._awaited == index:
                self.service.wake_later(self)

    def wake(self) -> None:
        """Wake the caller, asleep on a value that came in the engine's last pass (engine's thread).

        Not as the value comes: a frame brings many results, and a caller woken
        by the first took the GIL from the engine's thread while it filed the
        rest, then slept again on the next: a hand-over per value, not per pass.
        """
        with self._wakeup:
            self._wakeup.notify()

    def pull_back(self, intake: Intake) -> None:
        """Calls not started end as cancelled now, as cancelled futures do: those in slaves' windows are asked
        back, those still queued here are dropped unsent when the scheduler reaches them (no slave need come
        for shutdown to see them resolved), those not queued yet at once."""
        waiting = [item for item in self.live.values() if not item.running]
        intake.cancel([item.task_id for item in waiting])
        for item in waiting:
            self.arrive(item, concurrent.futures.CancelledError())
        self._drop_unqueued(intake)

    def _drop_unqueued(self, intake: Intake) -> None:
        while self._unqueued:
            batch = self._unqueued.popleft()
            left = batch.left()
            _count_ahead(intake, -len(left))
            for index in left:
                self._resolve(index, _Failed(concurrent.futures.CancelledError()))


class _Item:
    """The scheduler's listener (mwpy/core/entry.py) of one input's call."""

    __slots__ = ("stream", "index", "task_id", "sent", "running")

    def __init__(self, stream: MapStream[Any], index: int, task_id: int) -> None:
        self.stream = stream
        self.index = index
        self.task_id = task_id
        self.sent = False  # left for a slave (counted in stream.sent until resolved)
        self.running = False

    def may_start(self) -> bool:
        stream = self.stream
        if stream.open and not stream.cancelling:
            if not self.sent:
                self.sent = True
                stream.sent += 1
            return True
        stream.arrive(self, concurrent.futures.CancelledError())
        return False

    def began(self) -> None:
        self.running = True

    def unrunnable(self, reason: str | None = None) -> bool:
        self.stream.arrive(self, unrunnable_error(self.task_id, reason))
        return False

    def settle(self, result: Result) -> bool:
        self.stream.arrive(self, result)
        return False  # an executor's results are its callers', not mw.results()'s


class MapBatch:
    """Inputs of one stream handed to the engine's thread at once: the pickled arguments of inputs ``first``,
    ``first + 1``, ... (a list of bytes, which the collector does not track, rather than a tuple per input), of
    which the first ``queued`` are queued in the master."""

    __slots__ = ("stream", "name", "label", "first", "inputs", "queued")

    def __init__(self, stream: MapStream[Any], name: str, label: str, first: int, inputs: list[bytes]) -> None:
        self.stream, self.name, self.label, self.first, self.inputs = stream, name, label, first, inputs
        self.queued = 0

    def __len__(self) -> int:
        return len(self.inputs)

    def left(self) -> range:
        """The positions of the inputs not queued yet."""
        return range(self.first + self.queued, self.first + len(self.inputs))

    def queue_in(self, intake: Intake, room: int) -> bool:
        """Queue the next ``room`` inputs' calls at most (engine's thread); True once all are queued."""
        stream, name, label, policy, inputs = self.stream, self.name, self.label, self.stream._policy, self.inputs
        live, new_id, enqueue = stream.live, intake.new_id, intake.enqueuer()
        start = self.queued
        end = min(len(inputs), start + room)
        for offset in range(start, end):
            task_id = new_id()
            item = live[task_id] = _Item(stream, self.first + offset, task_id)
            enqueue(Entry(task_id, name, inputs[offset], policy, item, label=label))
        self.queued = end
        _count_ahead(intake, start - end)
        return end == len(inputs)


def _count_ahead(intake: Intake, change: int) -> None:
    """Inputs handed over and not queued are in the master's ``tasks_total`` as inputs still to submit."""
    intake.ahead = (intake.ahead or 0) + change


def _value(filed: Any, service: Service) -> Any:
    """A call's value (one its slave holds fetched from there), or its exception raised as a future would."""
    if type(filed) is _Failed:
        filed.raise_it()
    if type(filed) is codec.Held:
        return service.held_value(filed)
    return filed


class _Failed:
    """What a call that gave no value files in its value's place: its failed result or its exception (a user's
    value never is one of these, so any value, an exception object too, is filed and returned as itself)."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: Result | BaseException) -> None:
        self.outcome = outcome

    def raise_it(self) -> NoReturn:
        """Raise the exception as a future would: a task's own as itself (``SystemExit`` too)."""
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        raise task_exception(self.outcome, RAISED_AS_ITSELF)

"""``mw.map`` and ``mw.as_completed``: a task per input, submitted lazily within a window, results streamed back.

Inputs are consumed only as the window has room (``window`` tasks at most in
the master, and arguments of at most ``window_bytes`` bytes, pickled, beyond
the first: :data:`WINDOW_BYTES` unless the caller says), so an endless iterable streams with bounded memory
whatever the size of its items; a sized one
says in advance how many tasks the run has (the progress bar's total). Each
input's task reports to its own listener (:class:`_Item`), which puts the
result in the stream's queue and never in ``mw.results()``. Closing a stream
(``break``, an exception, garbage collection) drops what has not left for a
slave and asks slaves to give back what waits in their windows.

These use the master through its intake (mwpy/intake.py), which the master
hands them: queueing a prepared task, running passes, cancelling, and the
count of inputs still to come. They know no master (it imports them).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs

from mwpy import calls, dataflow
from mwpy.core.entry import Entry
from mwpy.errors import ConfigurationError
from mwpy.task import TaskAlgorithm
from mwpy.task_records import Policy, Result, TaskError, task_exception, unrunnable_error
from mwpy.wire import codec

if TYPE_CHECKING:
    from mwpy.intake import Intake

T = TypeVar("T")

#: Pickled arguments a stream keeps in the master at most (beyond one task's), besides its ``window`` in tasks,
#: unless ``window_bytes`` says otherwise: with 1 MB arguments, 10,000 tasks ahead grew a master to 6.2 GB before
#: the first result (issue 22). ``Executor.map`` takes the same default.
WINDOW_BYTES = 256 << 20
#: A stream's window: (tasks, bytes of pickled arguments).
Window = tuple[int, int]


def as_completed(
    intake: Intake,
    algorithm: TaskAlgorithm[..., Any],
    iterables: tuple[Iterable[Any], ...],
    *,
    window: Window,
    key: Callable[..., str] | None,
    kwargs: dict[str, Any],
) -> Generator[Result, None, None]:
    """``mw.as_completed``: each Result as it arrives (its ``tag`` is its input's position)."""
    algorithm = _check_algorithm("as_completed", algorithm)
    kwargs = intake.share_large(kwargs) if kwargs else kwargs
    calls_ = _Calls(algorithm, algorithm.policy, zip(*iterables, strict=False), _known_length(iterables), key, kwargs)
    return _as_they_come(_stream(intake, calls_, window))


def in_order(
    intake: Intake,
    algorithm: TaskAlgorithm[..., Any],
    iterables: tuple[Iterable[Any], ...],
    *,
    window: Window,
    key: Callable[..., str] | None,
    chunksize: int,
    kwargs: dict[str, Any],
) -> Generator[Any, None, None]:
    """``mw.map``: values in input order; a failure raises the task's exception, as itself."""
    algorithm = _check_algorithm("map", algorithm)
    if chunksize < 1:
        raise ConfigurationError("chunksize must be at least 1")
    kwargs = intake.share_large(kwargs) if kwargs else kwargs
    each = zip(*iterables, strict=False)
    size = _known_length(iterables)
    if key is None and chunksize == 1 and dataflow.any_future_among(iterables):  # each waits for its futures
        from mwpy.futures import submit_task  # noqa: PLC0415 (futures sit above the streams)

        return dataflow.in_order([submit_task(intake, algorithm, algorithm.policy, call, kwargs) for call in each])
    if chunksize == 1:
        return _in_order(_stream(intake, _Calls(algorithm, algorithm.policy, each, size, key, kwargs), window))
    if key is not None:
        raise ConfigurationError("key names one call's task: it cannot be given with chunksize > 1")
    chunks = _chunks(algorithm, each, chunksize, kwargs)
    calls_ = _Calls(calls.map_chunk, algorithm.policy, chunks, None if size is None else -(-size // chunksize))
    return _flattened(_in_order(_stream(intake, calls_, window)))


@attrs.frozen
class _Calls:
    """What one stream submits: a task of ``algorithm`` per item of ``each``, under ``policy``.

    ``size`` is how many items there will be, when the inputs tell (for the
    total); ``key(*args)`` names each task for the journal.
    """

    algorithm: TaskAlgorithm[..., Any]
    policy: Policy
    each: Iterator[tuple[Any, ...]]
    size: int | None
    key: Callable[..., str] | None = None
    kwargs: dict[str, Any] = attrs.field(factory=dict)


class _Stream:
    """One stream's state, shared by its items' listeners."""

    __slots__ = ("open", "arrived", "live")

    def __init__(self) -> None:
        #: Cleared when the consumer closes the stream: queued tasks are then dropped unsent.
        self.open = True
        self.arrived: deque[tuple[int, Result]] = deque()
        #: Tasks submitted and not answered: on close, slaves are asked to give them back.
        self.live: set[int] = set()


class _Item:
    """The listener (mwpy/core/entry.py) of one input's task: its result goes to the stream, in its place."""

    __slots__ = ("stream", "index", "task_id")

    def __init__(self, stream: _Stream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.task_id = 0  # known once submitted

    def may_start(self) -> bool:
        return self.stream.open

    def began(self) -> None:
        pass

    def unrunnable(self, reason: str | None = None) -> bool:
        error = TaskError(*codec.failure_of(unrunnable_error(self.task_id, reason)))
        self.stream.arrived.append((self.index, Result(self.task_id, "", "", self.index, 0.0, error=error)))
        return False

    def settle(self, result: Result) -> bool:
        self.stream.live.discard(result.task_id)
        self.stream.arrived.append((self.index, result))
        return False  # a stream's results are its own, not mw.results()'s


def _stream(intake: Intake, calls_: _Calls, window: Window) -> Generator[tuple[int, Result], None, None]:
    """Submit ``calls_`` lazily, at most ``window`` (tasks, bytes) outstanding; yield (input position, result)."""
    if window[0] < 1:
        raise ConfigurationError("window must be at least 1")
    if window[1] < 1:
        raise ConfigurationError("window_bytes must be at least 1")
    return _streaming(intake, calls_, *window)


def _streaming(
    intake: Intake, calls_: _Calls, window: int, window_bytes: int
) -> Generator[tuple[int, Result], None, None]:
    algorithm, policy, key, kwargs = calls_.algorithm, calls_.policy, calls_.key, calls_.kwargs
    stream = _Stream()
    arrived, live = stream.arrived, stream.live
    items = enumerate(calls_.each)
    ahead = _Ahead(intake, calls_.size)
    outstanding = 0
    held = 0  # bytes of pickled arguments of the tasks outstanding
    sizes: dict[int, int] = {}  # input position -> its task's bytes, while outstanding
    exhausted = False
    try:
        while True:
            while not exhausted and outstanding < window and (held < window_bytes or not outstanding):
                item = next(items, None)
                if item is None:
                    exhausted = True
                    break
                index, args = item
                ahead.took_one()
                payload = algorithm.encode(args, kwargs, intake.max_frame, intake.store)
                sizes[index] = len(payload)
                held += len(payload)
                listener = _Item(stream, index)
                listener.task_id = intake.enqueue(
                    Entry(intake.new_id(), algorithm.name, payload, policy, listener, tag=index,
                          key=None if key is None else key(*args))
                )  # fmt: skip
                if not arrived or arrived[-1][0] != index:  # not answered at once from the journal
                    live.add(listener.task_id)
                outstanding += 1
            if not arrived:
                if exhausted and not outstanding:
                    return
                while not arrived:
                    intake.step()
            outstanding -= 1
            answered = arrived.popleft()
            held -= sizes.pop(answered[0], 0)
            yield answered
    finally:
        stream.open = False
        ahead.close()
        if live:
            intake.cancel(list(live))  # those waiting in a slave's window come back unrun


class _Ahead:
    """What one sized stream has still to submit, kept in its master's total.

    Sized inputs tell the total before their tasks exist, for the progress
    bar and the ETA; an unsized one (a generator) says nothing.
    """

    def __init__(self, intake: Intake, size: int | None) -> None:
        self._intake = intake
        self._left = size or 0
        if size is not None:
            intake.ahead = (intake.ahead or 0) + size

    def took_one(self) -> None:
        """One input became a task (now counted as queued)."""
        if self._left:
            self._left -= 1
            self._intake.ahead = max(0, (self._intake.ahead or 0) - 1)

    def close(self) -> None:
        """The stream ended, perhaps early (``break``): what it never submitted will not run."""
        if self._left and self._intake.ahead is not None:
            self._intake.ahead = max(0, self._intake.ahead - self._left)
        self._left = 0


def _check_algorithm(form: str, algorithm: object) -> TaskAlgorithm[Any, Any]:
    """A plain function given to ``mw.map``: say what to do instead of failing deep inside."""
    if not isinstance(algorithm, TaskAlgorithm):
        name = getattr(algorithm, "__qualname__", type(algorithm).__name__)
        raise TypeError(
            f"mw.{form}() runs task algorithms: decorate {name} with @mwpy.task "
            "(or use mwpy.Executor, which takes plain module-level functions)"
        )
    return algorithm


def _known_length(iterables: tuple[Iterable[Any], ...]) -> int | None:
    """How many calls zipping ``iterables`` makes, if they are all sized; ``None`` otherwise (a generator)."""
    if not iterables or not all(isinstance(i, Sized) for i in iterables):
        return None
    return min(len(cast(Sized, i)) for i in iterables)


def chunked(items: Iterator[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter): ``mw.map``'s and ``Executor.map``'s chunks."""
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _chunks(
    algorithm: TaskAlgorithm[..., Any], calls_: Iterator[tuple[Any, ...]], size: int, kwargs: dict[str, Any]
) -> Iterator[tuple[str, list[tuple[Any, ...]], dict[str, Any]]]:
    """``mw.map(..., chunksize=size)``: the arguments of ``calls.map_chunk``, each call's checked at the call site."""
    for chunk in chunked(calls_, size):
        for args in chunk:
            algorithm.check_arguments(args, kwargs)
        yield algorithm.name, chunk, kwargs


def _as_they_come(stream: Generator[tuple[int, Result], None, None]) -> Generator[Result, None, None]:
    try:
        for _, result in stream:
            yield result
    finally:
        stream.close()  # cancels what has not started


def _in_order(stream: Generator[tuple[int, Result], None, None]) -> Generator[Any, None, None]:
    """Values of (position, result) pairs in input order; a failure raises the task's exception."""
    early: dict[int, Result] = {}
    next_index = 0
    try:
        for index, result in stream:
            early[index] = result
            while next_index in early:
                ready = early.pop(next_index)
                next_index += 1
                if ready.error is not None:
                    raise task_exception(ready)
                yield ready.value
    finally:
        stream.close()  # cancels what has not started


def _flattened(chunks: Generator[list[Any], None, None]) -> Generator[Any, None, None]:
    """The values of ``mw.map(..., chunksize=n)``'s chunks, one by one; closing this closes ``chunks`` (which
    cancels what has not started), as ``itertools.chain`` would not."""
    try:
        for values in chunks:
            yield from values
    finally:
        chunks.close()

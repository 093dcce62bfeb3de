"""Futures as arguments: a call that takes another task's future runs once that future is done, on its value.

Found only when the arguments fail to pickle (a future refuses to, :meth:`mwpy.futures.LightFuture.__reduce__`),
so calls without futures pay nothing for this. The dependent's future is made at once and waits, pending and
cancellable, while done-callbacks count its inputs down; the values are put in place and the call pickled in the
thread the last input settled in (the engine's), then queued as any call. Small values travel through the master;
a large one stays on the slave that made it and the call carries its handle (mwpy/data/holding.py).
"""

from __future__ import annotations

import concurrent.futures
import copy
import threading
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeVar

R = TypeVar("R")

#: The containers searched for futures, at any depth (exactly these types: a subclass is left as it is).
_CONTAINERS = (list, tuple, dict, set, frozenset)


def futures_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, concurrent.futures.Future[Any]]]:
    """Every future among the arguments, with where it is (``argument 0``, ``keyword argument 'x'``)."""
    found: list[tuple[str, concurrent.futures.Future[Any]]] = []
    for index, arg in enumerate(args):
        _search(arg, f"argument {index}", found)
    for name, arg in kwargs.items():
        _search(arg, f"keyword argument {name!r}", found)
    return found


def _search(obj: Any, where: str, found: list[tuple[str, concurrent.futures.Future[Any]]]) -> None:
    if isinstance(obj, concurrent.futures.Future):
        found.append((where, obj))
    elif type(obj) in _CONTAINERS:
        for item in obj.values() if type(obj) is dict else obj:
            _search(item, where, found)


def any_future_among(iterables: tuple[Iterable[Any], ...]) -> bool:
    """Whether a ``map``'s inputs given as lists or tuples hold futures: then each call is submitted on its own
    (a dependent call) and :func:`in_order` gives the values; other iterables stream as always."""
    return any(type(inputs) in (list, tuple) and futures_in(tuple(inputs), {}) for inputs in iterables)


def in_order(futures: list[concurrent.futures.Future[R]], end: float | None = None) -> Generator[R, None, None]:
    """``map``'s values from calls submitted one by one, in input order, by ``end`` (``time.monotonic()``);
    closing it cancels the calls not started, as ``map`` does."""
    try:
        for future in futures:
            yield future.result(None if end is None else max(0.0, end - time.monotonic()))
    finally:
        for future in futures:
            future.cancel()


def _result(future: concurrent.futures.Future[Any]) -> Any:
    return future.result()


def with_values(obj: Any, value_of: Callable[[Any], Any] = _result) -> Any:
    """``obj`` with each future (at any depth of the containers searched) replaced by ``value_of(future)``
    (its value; an Executor's gives a value its slave holds as the handle that names it there)."""
    if isinstance(obj, concurrent.futures.Future):
        return value_of(obj)
    kind = type(obj)
    if kind is dict:
        return {key: with_values(value, value_of) for key, value in obj.items()}
    if kind in _CONTAINERS:
        return kind([with_values(item, value_of) for item in obj])
    return obj


def failed_input(exc: BaseException, where: str, label: str) -> BaseException:
    """The input's own exception for its dependent, noted with which input failed (a copy: the input's future
    keeps its exception as it was; one that does not copy is given as it is)."""
    try:
        again = copy.copy(exc)
    except Exception:
        return exc
    again.__notes__ = [*getattr(exc, "__notes__", ()), f"{where} (a future of {label}) failed"]
    again.__cause__, again.__traceback__ = exc.__cause__, exc.__traceback__
    return again


class Inputs:
    """A dependent call's input futures, counted down by their done-callbacks, in whatever thread settles them.

    ``ready()`` is called once, when all are done with values; ``failed(exc)`` once, at the first that failed;
    ``cancelled()`` once, at the first cancelled. Whichever comes first wins; the rest are ignored.
    """

    def __init__(
        self,
        inputs: list[tuple[str, concurrent.futures.Future[Any]]],
        label_of: Callable[[concurrent.futures.Future[Any]], str],
        *,
        ready: Callable[[], None],
        failed: Callable[[BaseException], None],
        cancelled: Callable[[], None],
    ) -> None:
        self._lock = threading.Lock()
        self._where = {id(future): (where, future) for where, future in reversed(inputs)}  # a future's first place
        self._left = len(self._where)
        self._label_of = label_of
        self._ready, self._failed, self._cancelled = ready, failed, cancelled

    def watch(self) -> None:
        """Register the done-callbacks (an input done already calls it at once, here)."""
        for _where, future in list(self._where.values()):
            future.add_done_callback(self._one_done)

    def _one_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            if self._left <= 0:
                return
            self._left -= 1
            bad = future.cancelled() or future.exception() is not None
            if bad:
                self._left = 0
            elif self._left:
                return
        if future.cancelled():
            self._cancelled()
        elif bad:
            where, _ = self._where.get(id(future), ("an argument", future))
            exc = future.exception()
            assert exc is not None
            self._failed(failed_input(exc, where, self._label_of(future)))
        else:
            self._ready()

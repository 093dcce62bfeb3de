"""What a master does when a large value that stayed on its slave cannot be had from there: an Executor's
(mwpy/executor_service.py) and a master algorithm's (mwpy/held_tasks.py) alike.

A dependent call whose slave cannot fetch its input from the holder (the
holder's address unreachable or refused: execute points that accept no
inbound connection, a firewall; or the holder gone) fails there with
:class:`~mwpy.data.service.ValueNotFetchedError`. Its future does not settle:
the master asks the holder, by a step of mwpy's own pinned to that slave
(:data:`~mwpy.names.RELAY`), to send the value to the master's file service,
which takes it to disk as it arrives and offers it to every slave from there,
streamed from disk, never read whole (:meth:`SharedObjects.offer_relayed`);
the dependent is then sent again with that handle. If the holder cannot send
it (it died, or its cache evicted the value), the producer runs again from its
call (lineage, as dask and TaskVine do) and the dependent follows. The same
happens when ``result()`` in the caller cannot fetch a held value
(:meth:`Lineage.fetched`). Each step is an event (``value-moved``:
``relayed``, ``recomputed``), and each use of a held value says which way it
went (``local``, ``peer``, ``via-master``).

One level deep: a producer run again whose own inputs were lost fails with
that error, as any call does.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol, TypeVar, cast

from mwpy import names
from mwpy.core import facts
from mwpy.data.service import FileServiceError
from mwpy.data.shares import SharedObjects
from mwpy.errors import MwpyError, SharedObjectError
from mwpy.task_records import DEFAULT_POLICY, Policy
from mwpy.wire import codec

#: What a future's holder reads once its value was relayed to the master's file service.
MASTER: Final = "master"
#: How many times a dependent call is sent again after its input could not be fetched, before it fails.
MAX_RECOVERIES: Final = 3

Then = Callable[[BaseException | None], None]


class Holds(Protocol):
    """A future as :func:`held_among` reads it."""

    def holder(self) -> tuple[int, str] | None: ...


H = TypeVar("H", bound=Holds)


def held_among(inputs: Iterable[H]) -> tuple[str | None, tuple[H, ...]]:
    """Where a dependent task should run, the slave that holds the largest of its inputs' held values (the
    least to move), and the inputs whose values are held; (None, ()) when none is."""
    held = [(found, given) for given in inputs if (found := given.holder()) is not None]
    if not held:
        return None, ()
    return max(held, key=lambda pair: pair[0])[0][1], tuple(given for _, given in held)


class Future(Protocol):
    """What this module reads and sets of a future whose value may stay on its slave (an Executor's,
    mwpy/executor_service.py; a master algorithm's, mwpy/futures.py)."""

    _holder: str
    _result: Any
    _call: Any
    _again: Callable[[], None] | None
    _recoveries: int

    @property
    def _label(self) -> str: ...
    @property
    def _held_inputs(self) -> tuple[Future, ...]: ...
    def holder(self) -> tuple[int, str] | None: ...
    def _end(self, value: Any, exception: BaseException | None) -> None: ...
    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object], /) -> None: ...


class Service(Protocol):
    """What this module asks of the master's side: futures, and calls of mwpy's own (an Executor's service,
    mwpy/executor_service.py; a master algorithm's intake, mwpy/held_tasks.py)."""

    def new_future(self, label: str) -> Any: ...

    def own_call(
        self, future: Any, name: str, payload: bytes, policy: Policy, *, prefer: str | None, pinned: bool
    ) -> None: ...


class Lineage:
    """The relays and re-runs under way, each shared by every dependent (and caller) waiting on that value."""

    def __init__(self, service: Service, report: facts.Facts, store: SharedObjects, log: logging.Logger) -> None:
        self._service = service
        self._facts = report
        self._store = store
        self._log = log
        self._lock = threading.Lock()
        self._repairs: dict[Future, list[Then]] = {}  # a lost input -> who waits for it
        #: Producers run again because their value was lost, and values relayed through the master.
        self.recomputed = 0
        self.relayed = 0

    def used(self, dependent: Future, slave: str) -> None:
        """``dependent`` ran on ``slave``: say which way each held input reached it (engine's thread)."""
        for given in dependent._held_inputs:
            found = given.holder()
            if found is not None:
                size, holder = found
                way = "via-master" if holder == MASTER else "local" if holder == slave else "peer"
                self._facts(facts.ValueMoved(given._label, size, holder, slave, way))

    def fetched(
        self,
        future: Future,
        fetch: Callable[[codec.Shared], Any],
        wait: Callable[[threading.Event], object] | None,
        gone: Callable[[], str | None],
    ) -> Any:
        """``future``'s value, which its slave holds: fetched by its handle (``fetch``) and kept by the future
        from then on (one fetch, whoever asks again). One that cannot be fetched is relayed or made again
        (:meth:`repair`), ``wait`` waiting for that (None: nobody can wait here, the error is raised), at most
        :data:`MAX_RECOVERIES` times. ``gone()``: why the slaves are no more, once they stopped (nothing can be
        fetched then)."""
        tries = 0
        while type(future._result) is codec.Held:
            held = future._result
            stopped = gone()
            if stopped is not None:
                raise SharedObjectError(f"{future._label}: its value stayed on slave {future._holder}, which {stopped}")
            try:
                future._result = fetch(held.handle)
            except FileServiceError as exc:  # its holder is gone or out of reach: relayed, or made again
                self._log.info("%s: its value cannot be fetched from slave %s (%s)", future._label, future._holder, exc)
                tries += 1
                if tries > MAX_RECOVERIES or wait is None:
                    raise
                self._repaired(future, wait)
                continue
            self._log.info("%s: its value (%d bytes) fetched from %s", future._label, held.handle.size, future._holder)
        return future._result

    def _repaired(self, future: Future, wait: Callable[[threading.Event], object]) -> None:
        """Wait (``wait``) until ``future``'s held value is relayed or made again; raise what stopped that."""
        back: list[BaseException | None] = []
        done = threading.Event()

        def then(error: BaseException | None) -> None:
            back.append(error)
            done.set()

        self.repair(future, then)
        wait(done)
        if back[0] is not None:
            raise back[0]

    def recover(self, dependent: Future) -> bool:
        """``dependent``'s slave could not fetch a held input: relay or re-make each, then send it again.
        False if there is nothing left to try (it then fails with its error)."""
        lost = [given for given in dependent._held_inputs if given._holder != MASTER]
        dependent._recoveries += 1
        again = dependent._again
        if dependent._recoveries > MAX_RECOVERIES or again is None:
            return False
        if not lost:  # relayed to the master after it was pickled (another's fetch failed first): the master's copy
            again()
            return True
        left = [len(lost)]

        def one_back(error: BaseException | None) -> None:
            if error is not None:
                dependent._end(None, error)
                return
            with self._lock:
                left[0] -= 1
                if left[0]:
                    return
            again()

        for given in lost:
            self.repair(given, one_back)
        return True

    def repair(self, producer: Future, then: Then) -> None:
        """Make ``producer``'s held value available again (relayed, else made again), then call ``then``
        with None, or with the error that stopped it (any thread)."""
        with self._lock:
            waiting = self._repairs.get(producer)
            if waiting is not None:
                waiting.append(then)
                return
            self._repairs[producer] = [then]
        held = producer._result
        if type(held) is not codec.Held or producer._holder == MASTER:
            self._recompute(producer)
            return
        relay = self._service.new_future(f"{producer._label} (relay)")
        relay.add_done_callback(lambda done: self._relayed(producer, done))
        payload = codec.encode_value(held.handle.digest)
        self._service.own_call(relay, names.RELAY, payload, DEFAULT_POLICY, prefer=producer._holder, pinned=True)

    def _relayed(self, producer: Future, relay: concurrent.futures.Future[Any]) -> None:
        if relay.exception() is not None:
            self._recompute(producer)
            return
        digest, size = relay.result()
        try:
            handle = self._store.offer_relayed(digest, size)
        except MwpyError:
            self._recompute(producer)
            return
        self.relayed += 1
        self._facts(facts.ValueMoved(producer._label, size, producer._holder, MASTER, "relayed"))
        producer._result, producer._holder = codec.Held(handle), MASTER
        self._done(producer, None)

    def _recompute(self, producer: Future) -> None:
        call = producer._call
        if call is None:
            self._done(producer, SharedObjectError(f"the value of {producer._label} was lost and cannot be made again"))
            return
        held = producer._result
        size = held.handle.size if type(held) is codec.Held else 0
        self.recomputed += 1
        self._facts(facts.ValueMoved(producer._label, size, producer._holder, "", "recomputed"))
        again = self._service.new_future(producer._label)
        again.add_done_callback(lambda done: self._recomputed(producer, done))
        name, payload, policy = call
        self._service.own_call(again, name, payload, policy, prefer=None, pinned=False)

    def _recomputed(self, producer: Future, again: concurrent.futures.Future[Any]) -> None:
        error = again.exception()
        if error is None:
            made = cast(Future, again)
            producer._result, producer._holder, producer._call = made._result, made._holder, made._call
        self._done(producer, error)

    def _done(self, producer: Future, error: BaseException | None) -> None:
        with self._lock:
            waiting = self._repairs.pop(producer, [])
        for then in waiting:
            then(error)

"""An :class:`mwpy.Executor`'s running side: the engine's thread (:class:`Service`, which owns the master and
takes the callers' submissions through a thread-safe queue), and the futures it settles.

Apart from mwpy/executor_core.py, which turns a caller's calls into submissions (their functions and
arguments pickled, their policies) and builds the executor: this module is what runs once it is built, and
what the futures, the engine's thread and a shutdown share.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures._base import CANCELLED, PENDING
from typing import Any, ClassVar, Final, TypeVar

import attrs

from mwpy import safe_text
from mwpy.core.entry import Entry
from mwpy.data.service import ValueNotFetchedError
from mwpy.errors import MwpyError, SlavesFailError
from mwpy.executor_map import RAISED_AS_ITSELF, MapBatch, MapStream
from mwpy.futures import LightFuture
from mwpy.intake import Intake
from mwpy.lineage import Lineage
from mwpy.master import Master
from mwpy.net.engine import TICK
from mwpy.observe.audit import Audit
from mwpy.pool.slave_pool import SlavePool
from mwpy.task_records import Policy, Result, unrunnable_error
from mwpy.wire import codec

#: The failure of a call whose slave could not fetch an input that another slave holds.
LOST: Final = ValueNotFetchedError.__qualname__

#: How long leaving after Ctrl-C waits, at most, for the slaves to stop and the folders to go.
INTERRUPTED_WAIT = 10.0
#: The executor's log lines, under the name of the module its users import.
log = safe_text.logger("mwpy.executor")
#: The standard futures' logger: a done callback's error is logged there, as ``Future`` logs it.
FUTURES_LOG = logging.getLogger("concurrent.futures")

R = TypeVar("R")


class Future(LightFuture[R]):
    """A future of an executor: it settles from its task's result and tells the executor once it is done.

    Named as the standard class, so its repr reads ``<Future at 0x… state=…>``
    as every ``concurrent.futures`` future's does. A
    :class:`~mwpy.futures.LightFuture`, so a future nobody waits on costs no
    Condition; the executor's bookkeeping is called directly instead of
    through ``add_done_callback`` (which would make one for every future).
    """

    #: What the submitting side (mwpy/executor_core.py) sets and reads of a future it made: its label, whether
    #: its inputs are pending, its executor's service (a future of another executor is refused), and settling
    #: it with an input's failure.
    _SHARED_WITH: ClassVar = {
        "_label": ("mwpy.executor_core",),
        "_pending_inputs": ("mwpy.executor_core",),
        "_service": ("mwpy.executor_core",),
        "_end": ("mwpy.executor_core", "mwpy.lineage"),
        "_held_inputs": ("mwpy.executor_core", "mwpy.lineage"),
        "_again": ("mwpy.executor_core", "mwpy.lineage"),
        "_recoveries": ("mwpy.lineage",),
        "_holder": ("mwpy.lineage",),
        "_result": ("mwpy.lineage",),
        "_call": ("mwpy.lineage",),
    }
    #: A task's ``SystemExit`` comes back as itself, as the standard executors give it.
    RAISED_AS_ITSELF = RAISED_AS_ITSELF
    #: The user's function's name, for the message of a dependent call whose input this future failed.
    _label = ""
    #: Whether its call waits for futures among its arguments, not queued yet (mwpy/dataflow.py).
    _pending_inputs = False
    #: The slave whose result settled it (read for a value that slave holds; ``master`` once relayed there).
    _holder = ""
    #: Its call's (name, payload, policy), to make its value again if the slave that holds it loses it
    #: (mwpy/lineage.py); not the Call, which holds this future (a cycle keeps an executor alive).
    _call: tuple[str, bytes, Policy] | None = None
    #: A dependent call's inputs whose values stay on their slaves, and how to send it again (set while it
    #: has some), and how often it was sent again because one could not be fetched.
    _held_inputs: tuple[Future[Any], ...] = ()
    _again: Callable[[], None] | None = None
    _recoveries = 0
    #: Whether its held value went to a dependent call as an argument: then it is not fetched at shutdown.
    _consumed = False

    def __init__(self, service: Service) -> None:  # no super().__init__(): LightFuture's does nothing
        self._service = service
        #: The master's id of its task, once the engine's thread has queued it (for pulling it back on cancel).
        self._task_id: int | None = None

    def result(self, timeout: float | None = None) -> R:
        """The value; one its slave holds (a :class:`~mwpy.wire.codec.Held`) is fetched from there now, once."""
        value: Any = super().result(timeout)
        if type(value) is codec.Held:
            return self._service.fetch_held(self)  # type: ignore[no-any-return]
        return value  # type: ignore[no-any-return]

    def as_argument(self) -> Any:
        """Its value as a dependent call's argument (it is done): a held value's handle, so the value stays on
        its slave and the call's slave takes it from there (mwpy/data/holding.py)."""
        value: Any = super().result()
        if type(value) is not codec.Held:
            return value
        self._consumed = True
        return value.handle

    def holder(self) -> tuple[int, str] | None:
        """(size, slave) of a held value, for running a dependent call where it is; None if not held."""
        value = self._result
        return (value.handle.size, self._holder) if type(value) is codec.Held else None

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._service.one_done(self)
        if self._pending_inputs:  # no queue will reach it to say it is cancelled: said now
            self._notify_cancelled()
        return True

    def _notify_cancelled(self) -> None:
        """The engine reached this cancelled future's task and dropped it: CANCELLED_AND_NOTIFIED, as the
        standard executors make it when they reach its work item, so ``wait()`` and ``as_completed()`` count it.
        Once: a task asked back from a slave may be reached again, and a second notice raises."""
        if self._state == CANCELLED:
            self.set_running_or_notify_cancel()

    # The scheduler's Listener (mwpy/core/entry.py), called in the engine's thread.

    def may_start(self) -> bool:
        """The task may leave for a slave unless this future was cancelled."""
        if self.cancelled():
            self._notify_cancelled()
            return False
        return True

    def began(self) -> None:
        """The task is first in flight on its slave: this future is running (no longer cancellable). One
        cancelled stays so: asked back from the slave's window, it comes first there before the slave answers."""
        if self._state == PENDING:
            self._mark_running()

    def unrunnable(self, reason: str | None = None) -> bool:
        self._end(None, unrunnable_error(self._task_id or 0, reason))
        return False

    def settle(self, result: Result) -> bool:
        """The task's result settles this future (unless it was cancelled before it started); never mw.results()."""
        if not self.done():  # cancelled before it started (a task dropped for a full frame, say)
            error = result.error
            if error is not None and error.type == LOST and self._service.lineage.recover(self):
                return False  # its input is relayed or made again, then it is sent again
            self._holder = result.slave_id
            self._settle_with(result)
            if type(result.value) is codec.Held:
                self._service.held_futures.add(self)
            self._service.one_done(self)
            if self._held_inputs:
                if error is None:
                    self._service.lineage.used(self, result.slave_id)
                self._held_inputs, self._again = (), None  # _again holds this future: no cycle left behind
        return False

    def _end(self, value: Any, exception: BaseException | None) -> None:
        if not self.done():
            self._finish(value, exception)
            self._service.one_done(self)

    def _invoke_callbacks(self) -> None:
        """Call the done callbacks as ``Future`` does, logging what one raises, ``SystemExit`` too.

        They run on the engine's thread, which a callback's ``sys.exit()``
        would end, breaking the executor for every other call.
        """
        for callback in self._done_callbacks:
            try:
                callback(self)
            except (Exception, SystemExit):
                FUTURES_LOG.exception("exception calling callback for %r", self)


@attrs.frozen
class Call:
    """What ``submit()`` hands the engine's thread: one call and its future."""

    future: Future[Any]
    name: str
    payload: bytes
    policy: Policy
    label: str
    #: The slave that holds its largest input, where it should run (a dependent call's; None: anywhere), and
    #: whether only there (mwpy's relay of a value that slave holds; others run it once that one is gone).
    prefer: str | None = None
    pinned: bool = False

    def queue_in(self, intake: Intake) -> None:
        """Queued even if cancelled already: its listener drops it unsent (and notifies its waiters) when the
        scheduler reaches it, as a standard executor does its work item; one_done pulls back one a slave holds."""
        future = self.future
        entry = Entry(intake.new_id(), self.name, self.payload, self.policy, future, label=self.label)
        entry.prefer, entry.prefer_until = self.prefer, math.inf if self.pinned else 0.0
        future._task_id, future._call = intake.enqueue(entry), (self.name, self.payload, self.policy)


class Service:
    """What an executor's engine thread and futures share: the master it owns, the queue that feeds it.

    Apart from :class:`Executor` so that nothing running keeps the executor
    alive: dropping it without ``shutdown()`` shuts this down.
    """

    def __init__(self, master: Master, pool: SlavePool, audit: Audit, member_id: str) -> None:
        self._master = master
        self._pool = pool
        self._audit = audit
        self._member_id = member_id
        #: The master's internal surface (Master._SHARED_WITH): queueing tasks, running passes, waking it.
        self.intake = master._intake
        self.intake.count_submitted_as_total()  # futures are made eagerly: what was submitted is the total
        self._lock = threading.Lock()
        self._fetching = threading.Lock()  # one held value fetched at a time (fetch_held)
        #: Futures whose values stay on their slaves: those still referenced and not another call's argument
        #: are fetched before the slaves stop (result() after shutdown works, as with any executor).
        self.held_futures: weakref.WeakSet[Future[Any]] = weakref.WeakSet()
        #: What recovers a held value that could not be fetched (relayed, or made again).
        self.lineage = Lineage(self, master._facts, self.intake.store, log)
        #: Notified when the engine's thread takes the queue: a map's caller waits on it to keep pace.
        self._taken = threading.Condition(self._lock)
        self._incoming: list[Call | MapBatch] = []  # guarded by _lock: the engine's thread takes it all at once
        self._cancelled: list[Future[Any]] = []  # cancelled futures whose tasks may sit in a slave's window
        self._waiting: set[Future[Any]] = set()  # futures not yet done (for shutdown: how many, which to cancel)
        self._streams: weakref.WeakSet[MapStream[Any]] = weakref.WeakSet()  # map streams (to cancel or break)
        self._withdrawn: list[MapStream[Any]] = []  # streams closed or cancelled: pull back what slaves hold
        self._to_wake: list[MapStream[Any]] = []  # streams whose caller sleeps on a value come this pass (engine's)
        self._feeding: dict[MapStream[Any], None] = {}  # streams with inputs not queued yet, in order (engine's)
        #: Calls of map streams handed over (under _lock) and resolved (by the engine's thread alone).
        self._map_submitted = 0
        self.map_resolved = 0
        self._closing = False
        self._interrupted = False  # Ctrl-C: the slaves are stopped, not waited for
        self._broken: BaseException | None = None
        self._stopped = threading.Event()  # set when the engine's thread has stopped all and removed its folder
        self._thread = threading.Thread(target=self._serve, name="mwpy-executor", daemon=True)
        self._thread.start()
        atexit.register(self.shutdown)

    @property
    def closing(self) -> bool:
        """Whether ``shutdown()`` was called: no more work is taken."""
        return self._closing

    def _check_open(self) -> None:
        """Refuse new work once broken or shut down, as the standard executors do (under _lock)."""
        if self._broken is not None:
            raise broken_executor(self._broken)
        if self._closing:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def adopt(self, future: Future[Any]) -> None:
        """A dependent call's future, counted now (shutdown waits for it) and queued once its inputs are done."""
        with self._lock:
            self._check_open()
            self._waiting.add(future)

    def hand_over(self, submission: Call | MapBatch, *, adopted: bool = False) -> None:
        """Queue ``submission`` (a call, or a batch of a map's) for the engine's thread; wake it if its queue
        was empty. An ``adopted`` call (:meth:`adopt`) was taken before any shutdown: it is queued still."""
        with self._lock:
            if adopted:
                if self._broken is not None:  # its future was ended with the rest
                    return
            else:
                self._check_open()
            if isinstance(submission, Call):
                if not adopted:
                    self._waiting.add(submission.future)
            else:
                self._streams.add(submission.stream)
                self._map_submitted += len(submission)
            # The engine's thread takes the whole list under this lock before it waits: only the first
            # submission after that must wake it (a system call per submit was a fifth of its cost).
            wake = not self._incoming
            self._incoming.append(submission)
        if wake:
            self.intake.wake()
        if isinstance(submission, MapBatch):
            self._keep_pace()

    def _keep_pace(self) -> None:
        """A map's caller stays at most one batch ahead of the engine's thread.

        Pickling 10^5 inputs in one go held the GIL for most of it: the engine's
        thread regained it only at the switch interval and lost it again at its
        next system call, so the slaves idled while the caller pickled.
        """
        with self._taken:
            while len(self._incoming) > 1 and self._broken is None and self._thread.is_alive():
                self._taken.wait(TICK)

    def wake_later(self, stream: MapStream[Any]) -> None:
        """``stream``'s caller sleeps on a value that came: wake it once this pass is over (engine's thread)."""
        self._to_wake.append(stream)

    def withdraw(self, stream: MapStream[Any]) -> None:
        """A map stream closed or cancelled: its calls in slaves' windows are asked back (engine's thread)."""
        with self._lock:
            self._withdrawn.append(stream)
        with contextlib.suppress(OSError):  # the engine may be closed already
            self.intake.wake()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """:meth:`Executor.shutdown`."""
        with self._lock:
            self._closing = True
            doomed = list(self._waiting) if cancel_futures else []
            streams = list(self._streams) if cancel_futures else []
        for future in doomed:
            future.cancel()
        for stream in streams:
            stream.cancel()
        with contextlib.suppress(OSError):  # the engine may be closed already
            self.intake.wake()
        if wait:
            # An Event, not Thread.join: a join cut short by Ctrl-C marks the thread stopped (CPython 3.11's
            # bpo-45274 fix releases its lock), and the wait below would not wait.
            try:
                self._stopped.wait()
            except KeyboardInterrupt:  # Ctrl-C while waiting for a task: stop the slaves, leave nothing behind
                self.interrupt()
                self._wait_interrupted()
                raise
            atexit.unregister(self.shutdown)

    def interrupt(self) -> None:
        """Ctrl-C in the ``with`` block: take no more work, break every future not done and stop the slaves
        (a hung task must not keep them) (Executor.__exit__)."""
        with self._lock:
            self._closing = True
            self._interrupted = True
        self._break(KeyboardInterrupt("interrupted (Ctrl-C)"))
        with contextlib.suppress(OSError):  # the engine may be closed already
            self.intake.wake()

    def _wait_interrupted(self) -> None:
        """Wait for the engine's thread to stop its slaves and remove its folders; more Ctrl-C do not cut that
        short (they would leave them), a stuck back end does after :data:`INTERRUPTED_WAIT` seconds."""
        deadline = time.monotonic() + INTERRUPTED_WAIT
        while not self._stopped.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(KeyboardInterrupt):
                self._stopped.wait(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ the engine's thread

    def fetch_held(self, future: Future[Any]) -> Any:
        """``future``'s value, which its slave holds: fetched from there (mwpy/data/shares.py) in the caller's
        thread, one at a time, and kept by the future from then on (mwpy/lineage.py)."""
        with self._fetching:
            return self._fetch_held(future)

    def _fetch_held(self, future: Future[Any]) -> Any:
        """:meth:`fetch_held`, under ``_fetching``: the engine's thread cannot wait for a repair (it makes it)."""
        wait = None if threading.current_thread() is self._thread else threading.Event.wait
        return self.lineage.fetched(future, self.intake.store.held, wait, self._gone)

    def _gone(self) -> str | None:
        """Why a held value can no longer be fetched: the executor's slaves stopped."""
        if not self._stopped.is_set():
            return None
        return "stopped with the executor (it went to another call as an argument): call result() before shutdown"

    def new_future(self, label: str) -> Future[Any]:
        """A future of mwpy's own call (mwpy/lineage.py), labelled."""
        future: Future[Any] = Future(self)
        future._label = label
        return future

    def own_call(
        self, future: Future[Any], name: str, payload: bytes, policy: Policy, *, prefer: str | None, pinned: bool
    ) -> None:
        """Queue mwpy's own call (a relay, a producer run again), counted and queued while shutting down too."""
        with self._lock:
            broken = self._broken
            if broken is None:
                self._waiting.add(future)
        if broken is not None:
            future._end(None, broken_executor(broken))
            return
        self.hand_over(Call(future, name, payload, policy, future._label, prefer, pinned), adopted=True)

    def held_value(self, held: codec.Held) -> Any:
        """A value its slave holds (a map's, a future's), fetched from there now (mwpy/data/shares.py)."""
        return self.intake.store.held(held.handle)

    def one_done(self, future: Future[Any]) -> None:
        """``future`` is done (settled, cancelled or broken); once per future, whoever calls first."""
        with self._lock:
            if future not in self._waiting:
                return
            self._waiting.discard(future)
            last = self._closing and not self._waiting
            pull_back = future._task_id is not None and future.cancelled()
            if pull_back:
                self._cancelled.append(future)  # the engine's thread asks its slave to give it back
        if last or pull_back:
            self.intake.wake()

    def _serve(self) -> None:
        """Own the master: feed it submissions, run passes, finish when shut down and idle."""
        intake, looked = self.intake, False
        try:
            with self._master, contextlib.ExitStack() as leaving:
                leaving.callback(self._stop_slaves_if_interrupted)  # a slave in a hung task would not hear the master
                leaving.callback(self._pool.stop_overseeing)  # before the master, leaving, tells its slaves to go
                while True:
                    self._take_submissions()
                    self._pull_back()
                    self._wake_callers()
                    with self._lock:
                        done = self._closing and self._idle()
                    if done and self._bring_held():
                        break
                    intake.step(TICK)
                    if not looked and intake.tasks_done:
                        # The overseer's first look (it finds slaves that died before connecting) comes after the
                        # first result, or its timer, whichever first: its thread, loading the overseer and reading
                        # the back end's jobs, would hold the interpreter while the first task goes and comes back.
                        looked = True
                        self._pool.look_now()
                    problem = self._pool.setup_problem(intake.tasks_done, slaves_connected=intake.slaves_greeted)
                    if problem is not None:  # slaves that cannot start (the script fails on them) restart for ever
                        raise SlavesFailError(problem)
        except BaseException as exc:
            log.error("executor %s stopped: %r", self._member_id, exc)
            self._break(exc)
        finally:
            try:
                self._pool.stop()
                self._audit.close()
                self._pool.work.remove()
            finally:
                self._stopped.set()

    def _bring_held(self) -> bool:
        """Shutting down: fetch the held values the program may still read (engine's thread, slaves still up).
        False, fetching nothing, while a caller's thread fetches one: that fetch may need this thread to run a
        relay or a producer again, so passes go on until it is done."""
        if not self._fetching.acquire(blocking=False):
            return False
        try:
            for future in list(self.held_futures):
                if not future._consumed and type(future._result) is codec.Held:
                    try:
                        self._fetch_held(future)
                    except (MwpyError, OSError) as exc:
                        log.warning("%s: its value could not be fetched before the slaves stopped: %s",
                                    future._label, exc)  # fmt: skip
        finally:
            self._fetching.release()
        return True

    def _idle(self) -> bool:
        """Nothing submitted is left to run (under _lock)."""
        return not self._waiting and not self._incoming and self.map_resolved == self._map_submitted

    def _pull_back(self) -> None:
        """Cancelled futures and withdrawn streams: ask their slaves to give back tasks waiting in their windows
        (engine thread)."""
        with self._lock:
            futures, self._cancelled = self._cancelled, []
            streams, self._withdrawn = self._withdrawn, []
        for stream in streams:
            stream.pull_back(self.intake)
        if futures:
            held = set(self.intake.cancel([future._task_id for future in futures if future._task_id is not None]))
            for future in futures:
                if future._task_id in held:  # out of the master's queue: nothing else will reach it here
                    future._notify_cancelled()

    def _wake_callers(self) -> None:
        """Wake the map callers whose awaited value came in the last pass (engine's thread)."""
        streams, self._to_wake = self._to_wake, []
        for stream in streams:
            stream.wake()

    def _take_submissions(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
            self._taken.notify_all()
        for submission in incoming:
            if isinstance(submission, MapBatch):
                submission.stream.take(submission, self.intake)
                self._feeding[submission.stream] = None
            else:
                submission.queue_in(self.intake)
        if self._feeding:
            self._feeding = {stream: None for stream in self._feeding if stream.feed(self.intake)}

    def _stop_slaves_if_interrupted(self) -> None:
        if self._interrupted:
            self._pool.stop()

    def _break(self, exc: BaseException) -> None:
        with self._lock:
            self._broken = exc
            doomed = list(self._waiting)
            streams = list(self._streams)
        for future in doomed:
            future._end(None, broken_executor(exc))
        for stream in streams:
            stream.break_with(broken_executor(exc))


def broken_executor(cause: BaseException) -> concurrent.futures.BrokenExecutor:
    """What a broken executor's futures and ``submit()`` raise: the reason in its text and as its cause."""
    broken = concurrent.futures.BrokenExecutor(f"the mwpy executor stopped: {cause}")
    broken.__cause__ = cause
    return broken

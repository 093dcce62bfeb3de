"""What an :class:`mwpy.Executor` runs: its master, its slaves' pool, and the calls handed to them.

Apart from the public face (mwpy/executor.py) so that importing ``mwpy.Executor`` loads next to nothing: a
plain local executor starts its slaves first (mwpy/executor_early.py) and imports this module, and the mwpy
engine under it, while they start, instead of before. How an executor is built, and why, is said at the top
of mwpy/executor.py.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import secrets
import shutil
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures._base import CANCELLED, PENDING
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs

from mwpy import backends, calls, dataflow, safe_files, safe_text
from mwpy.backends.local import LocalBackend
from mwpy.core.entry import Entry
from mwpy.errors import ConfigurationError, SlavesFailError, UsageError
from mwpy.executor_early import (
    LOCAL_HOST,
    SPAWN_PROGRAM,
    WORK_PREFIX,
    EarlySlaves,
    main_script,
    pass_authkey,
    search_path,
)
from mwpy.executor_map import RAISED_AS_ITSELF, MapBatch, MapStream, OneCall
from mwpy.futures import LightFuture
from mwpy.intake import Intake
from mwpy.master import Master
from mwpy.names import AUDIT_FILE, INITIALIZER_FILE, SPAWN_COPY
from mwpy.net.engine import TICK
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.options import Options, parse
from mwpy.pool.slave_pool import SlavePool, WorkFolder
from mwpy.resources import Resources, own_shape
from mwpy.streams import WINDOW_BYTES, chunked
from mwpy.task import TaskAlgorithm
from mwpy.task_records import DEFAULT_POLICY, Policy, Result, unrunnable_error
from mwpy.wire import codec

__all__ = ["ExecutorCore", "Future"]

R = TypeVar("R")

#: Resource-file refresh interval: the overseer learns of new work at most this late (writes are debounced).
UPDATE_INTERVAL = 1.0
#: How long leaving after Ctrl-C waits, at most, for the slaves to stop and the folders to go.
INTERRUPTED_WAIT = 10.0
#: Distinct large functions sent by value whose handles are kept (each was shared once).
LARGE_FUNCTIONS_KEPT = 64

#: One slave shape as ``slave_resources=`` takes it.
Shape = Resources | Mapping[str, Any] | str
#: The executor's log lines, under the name of the module its users import.
log = safe_text.logger("mwpy.executor")
#: The standard futures' logger: a done callback's error is logged there, as ``Future`` logs it.
FUTURES_LOG = logging.getLogger("concurrent.futures")


class Future(LightFuture[R]):
    """A future of an executor: it settles from its task's result and tells the executor once it is done.

    Named as the standard class, so its repr reads ``<Future at 0x… state=…>``
    as every ``concurrent.futures`` future's does. A
    :class:`~mwpy.futures.LightFuture`, so a future nobody waits on costs no
    Condition; the executor's bookkeeping is called directly instead of
    through ``add_done_callback`` (which would make one for every future).
    """

    #: A task's ``SystemExit`` comes back as itself, as the standard executors give it.
    RAISED_AS_ITSELF = RAISED_AS_ITSELF
    #: The user's function's name, for the message of a dependent call whose input this future failed.
    _label = ""
    #: Whether its call waits for futures among its arguments, not queued yet (mwpy/dataflow.py).
    _pending_inputs = False

    def __init__(self, service: _Service) -> None:  # no super().__init__(): LightFuture's does nothing
        self._service = service
        #: The master's id of its task, once the engine's thread has queued it (for pulling it back on cancel).
        self._task_id: int | None = None

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
            self._settle_with(result)
            self._service.one_done(self)
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
class _Call:
    """What ``submit()`` hands the engine's thread: one call and its future."""

    future: Future[Any]
    name: str
    payload: bytes
    policy: Policy
    label: str

    def queue_in(self, intake: Intake) -> None:
        """Queued even if cancelled already: its listener drops it unsent (and notifies its waiters) when the
        scheduler reaches it, as a standard executor does its work item; one_done pulls back one a slave holds."""
        future = self.future
        future._task_id = intake.enqueue(Entry(intake.new_id(), self.name, self.payload, self.policy, future,
                                               label=self.label))  # fmt: skip


class ExecutorCore:
    """An executor's working part (:class:`mwpy.Executor`'s arguments, checked already): the master, in the
    engine's thread of its :class:`_Service`, the slaves' pool, and the pickling of calls.

    Held by its executor alone: a map stream holds it weakly (mwpy/executor_map.py), and its service, which
    the engine's thread and the futures hold, does not hold it.
    """

    def __init__(
        self,
        max_workers: int,
        initializer: Callable[..., object] | None,
        initargs: tuple[Any, ...],
        *,
        backend: str,
        backend_arguments: Sequence[str],
        options: Sequence[str],
        workdir: str | os.PathLike[str] | None,
        quiet: bool,
        resources: Shape | None,
        slave_resources: Shape | Sequence[Shape] | None,
        member_id: str,
        early: EarlySlaves | None,
    ) -> None:
        #: What a task needs when its function does not say (``resources=``).
        self._resources = Resources.of(resources)
        shapes = _shapes(slave_resources)
        if shapes and backend != "local":
            raise ConfigurationError("slave_resources= shapes local slaves; a Condor slave offers its slot's resources")
        # Slaves load the script as __mp_main__: what they pickle from it (an exception class, say) names that.
        if "__main__" in sys.modules:
            sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
        pickled = None if initializer is None else _pickled_initializer(initializer, initargs)
        work = WorkFolder.make(workdir, prefix=WORK_PREFIX) if early is None else WorkFolder(Path(early.folder), True)
        with contextlib.ExitStack() as undo:  # a wrong option or back end leaves no folder behind
            undo.callback(work.remove)
            initializing: Path | None = None
            if pickled is not None:
                initializing = work.path / INITIALIZER_FILE
                initializing.write_bytes(pickled)
            if early is None and backend == "local":
                pass_authkey(work.path)
            factory = backends.lookup(backend)
            namespace = _backend_options(factory, backend, backend_arguments, work)
            quieting = ["--mw-quiet"] if quiet else []
            offer = _offer(namespace, shapes) if backend == "local" else []
            self.options = _master_options([*options, *quieting, *offer], work.resource_file, backend, initializing,
                                           member_id)  # fmt: skip
            logs.configure(self.options.log_level)  # else MWPY_LOG_LEVEL: an executor user passes no options
            audit = Audit(str(work.path / AUDIT_FILE), packets=self.options.audit_packets)
            undo.callback(audit.close)
            program = _spawn_program(backend, work.path)
            secret = secrets.token_bytes(32) if early is None else early.secret
            listener = None if early is None else early.listener
            self._master = Master(self.options, audit=audit, secret=secret, program=program, listener=listener)
            slaves = factory.create(str(work.resource_file), namespace)
            if early is not None:  # before the overseer's first look: it finds them running
                _adopt(slaves, early, work.resource_file)
            self._pool = SlavePool(work, slaves, max_workers, name=f"executor {member_id}", at_once=True)
            undo.pop_all()
        #: What the engine's thread and the futures share (never this core: see the class's docstring).
        self.service = _Service(self._master, self._pool, audit, member_id)
        if backend == "local":  # they connect within a second; a batch system's may never all start
            self.service.intake.expect_slaves(max_workers)
        self._limit = self.service.intake.max_frame
        self._store = _LargeArguments(self.service.intake.store)
        #: Functions pickled for slaves (calls.call_function), with their labels.
        self._references: dict[Callable[..., Any], tuple[bytes | None, str]] = {}
        #: Large functions pickled by value, by their content: their shared handles.
        self._large_functions: dict[bytes, codec.Shared] = {}
        log.info(
            "executor %s: master on %s:%d, up to %d %s slaves, work folder %s",
            member_id, self._master.host, self._master.port, max_workers, backend, work.path,
        )  # fmt: skip

    # ------------------------------------------------------------------ submitting

    def _policy_of(self, fn: Callable[..., Any], priority: int | None = None) -> Policy:
        """The policy a submitted function runs under: a task algorithm's own (``@mwpy.task(retries=...)``),
        with the executor's ``resources=`` when it asks for none, and ``priority`` (``ex.with_priority(N)``)."""
        policy = fn.policy if isinstance(fn, TaskAlgorithm) else DEFAULT_POLICY
        if priority is not None:
            policy = attrs.evolve(policy, priority=priority)
        if self._resources is None or policy.resources is not None:
            return policy
        return attrs.evolve(policy, resources=self._resources)

    def share(self, obj: Any) -> codec.Shared:
        """:meth:`mwpy.Executor.share` (``Master.share``)."""
        return cast(codec.Shared, self._master.share(obj))  # the handle, which the user's type says is obj

    def file_counters(self) -> dict[str, Any]:
        """:meth:`mwpy.Executor.file_counters` (``Master.file_counters``)."""
        return self._master.file_counters()

    def submit(
        self, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], priority: int | None = None
    ) -> Future[R]:
        """:meth:`mwpy.Executor.submit`: the arguments are pickled here, in the caller's thread, unless they hold
        futures (which refuse to pickle): then once those are done (:meth:`_submit_after`)."""
        try:
            name, payload, label = self._encode(fn, args, kwargs)
        except Exception:
            inputs = dataflow.futures_in(args, kwargs)
            if not inputs:
                raise
            return self._submit_after(fn, (args, kwargs), inputs, self._policy_of(fn, priority))
        future: Future[R] = Future(self.service)
        future._label = label
        self.service.hand_over(_Call(future, name, payload, self._policy_of(fn, priority), label))
        return future

    def _submit_after(
        self,
        fn: Callable[..., R],
        call: tuple[tuple[Any, ...], dict[str, Any]],
        inputs: list[tuple[str, concurrent.futures.Future[Any]]],
        policy: Policy,
    ) -> Future[R]:
        """A call with this executor's futures among its arguments: its future now, its task queued once they are
        done, with their values in their places (pickled in the thread the last settles in, the engine's).

        What the callbacks hold is the service and the call's pickler, never this core (see the class).
        """
        for where, given in inputs:
            if not isinstance(given, Future):
                kind = f"{type(given).__module__}.{type(given).__qualname__}"
                raise UsageError(f"{where} is a {kind} not made by this mwpy.Executor: pass its result() instead")
            if given._service is not self.service:
                whose = "an executor that was shut down" if given._service.closing else "another mwpy.Executor"
                raise UsageError(f"{where} is a future of {whose}: only this executor's futures can be arguments")
        args, kwargs = call
        name, label, one = self._encoder(fn)
        service = self.service
        future: Future[R] = Future(service)
        future._label, future._pending_inputs = label, True
        service.adopt(future)

        def ready() -> None:
            if future.done():  # cancelled meanwhile (and said so by cancel())
                return
            try:
                payload = one(dataflow.with_values(args), {key: dataflow.with_values(v) for key, v in kwargs.items()})
            except Exception as exc:
                future._end(None, exc)
                return
            future._pending_inputs = False
            service.hand_over(_Call(future, name, payload, policy, label), adopted=True)

        def cancelled() -> None:
            future.cancel()

        dataflow.Inputs(inputs, lambda given: cast(Future[Any], given)._label, ready=ready,
                        failed=lambda exc: future._end(None, exc), cancelled=cancelled).watch()  # fmt: skip
        return future

    def _stream(
        self,
        fn: Callable[..., R],
        calls: Iterator[tuple[Any, ...]],
        kwargs: dict[str, Any],
        *,
        window_bytes: int,
        end: float | None,
        policy: Policy,
    ) -> Generator[R, None, None]:
        """``map``'s values: its calls submitted now, as many as ``window_bytes`` of pickled arguments allow."""
        stream: MapStream[R] = MapStream(self._encoder, fn, policy, self.service, calls=calls, kwargs=kwargs,
                                         window_bytes=window_bytes)  # fmt: skip
        stream.fill()
        return stream.values(end)

    def map(
        self,
        fn: Callable[..., R],
        iterables: tuple[Iterable[Any], ...],
        *,
        timeout: float | None,
        chunksize: int,
        window_bytes: int | None,
        kwargs: dict[str, Any],
        priority: int | None = None,
    ) -> Iterator[R]:
        """:meth:`mwpy.Executor.map` (``window_bytes`` None: WINDOW_BYTES)."""
        window_bytes = WINDOW_BYTES if window_bytes is None else window_bytes
        if chunksize < 1:
            raise ValueError("chunksize must be at least 1")
        if window_bytes < 1:
            raise ValueError("window_bytes must be at least 1")
        # What every call gets, once per map: a large one is shared (crosses to each slave once), and the
        # function keeps its own policy (a partial of it would run under the default one).
        shared = self.service.intake.share_large(kwargs) if kwargs else {}
        end = None if timeout is None else time.monotonic() + timeout
        if dataflow.any_future_among(iterables):
            calls_ = zip(*iterables, strict=False)
            return dataflow.in_order([self.submit(fn, call, kwargs, priority) for call in calls_], end)
        policy = self._policy_of(
            fn, priority
        )  # a chunk runs under it too, as mw.map's chunks do: retries, timeout, resources
        if chunksize == 1:
            return self._stream(fn, zip(*iterables, strict=False), shared, window_bytes=window_bytes, end=end,
                                policy=policy)  # fmt: skip
        travelling = functools.partial(_unwrap(fn), **shared) if shared else _unwrap(fn)
        chunks = ((travelling, chunk) for chunk in chunked(zip(*iterables, strict=False), chunksize))
        stream = self._stream(calls.call_chunk, chunks, {}, window_bytes=window_bytes, end=end, policy=policy)
        return itertools.chain.from_iterable(stream)

    # ------------------------------------------------------------------ functions

    def _encode(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, bytes, str]:
        """The task name, pickled arguments and label (the user's function's name) for ``fn(*args, **kwargs)``.

        Checked here: an argument that cannot be pickled raises pickle's own error now.
        """
        name, label, one = self._encoder(fn)
        return name, one(args, kwargs), label

    def _encoder(self, fn: Callable[..., Any]) -> tuple[str, str, OneCall]:
        """The task name and label for calls of ``fn``, and what pickles one call's arguments: ``map`` pickles
        many calls of one function, and what they share (its reference, its label) is looked up once.

        The pickler holds no reference to this executor (a map left unread must not keep it alive).
        """
        limit, store = self._limit, self._store
        if type(fn) is types.FunctionType or isinstance(fn, TaskAlgorithm):
            # The common case: pickled by reference once (calls.call_function); a task algorithm by its name
            # and module, so a slave imports the module if its script did not (TaskAlgorithm.__reduce__).
            check = fn.check_arguments if isinstance(fn, TaskAlgorithm) else None
            known, label = self._references.get(fn) or self._reference(fn)
            # By value: pickled now, so that a redefined helper or a changed global is seen.
            reference = self._by_value(fn.fn if isinstance(fn, TaskAlgorithm) else fn) if known is None else known
            encode = calls.call_function.encode  # with caller=: (reference, args, kwargs) is not checked

            def one(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
                if check is not None:
                    check(args, kwargs)
                return encode((reference, args, kwargs), {}, limit, store, caller=label)

            return calls.call_function.name, label, one
        if not callable(fn):
            raise TypeError(f"mwpy.Executor.submit() needs a function, not {type(fn).__name__}")
        label, travelling, encode_call = _label(fn), _unwrap(fn), calls.call.encode

        def one_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
            return encode_call((travelling, args, kwargs), {}, limit, store, caller=label)

        return calls.call.name, label, one_call

    def _reference(self, fn: Callable[..., Any]) -> tuple[bytes | None, str]:
        """``fn`` pickled by reference and its label, kept for its next calls; None in place of the bytes if
        slaves cannot import it (a notebook's function, a lambda, a closure; a task algorithm's function too):
        that one is pickled by value at each submit (:meth:`_by_value`)."""
        inner = fn.fn if isinstance(fn, TaskAlgorithm) else fn
        known = (None if codec.by_value(inner) else codec.function_reference(fn)), _label(fn)
        if len(self._references) >= codec.FUNCTIONS_KEPT:
            self._references.clear()
        self._references[fn] = known
        return known

    def _by_value(self, fn: Callable[..., Any]) -> bytes | codec.Shared:
        """``fn`` pickled by value as it is now (its code, defaults and the globals it uses), as it travels.

        The slave unpickles each distinct pickle once (it keeps them by content). One of at least
        :data:`~mwpy.wire.codec.SHARE_ABOVE` bytes (a closure over a large array) is shared, once per
        content: while it is unchanged its calls carry only the handle.
        """
        pickled = codec.function_reference(fn)
        if len(pickled) < codec.SHARE_ABOVE:
            return pickled
        handle = self._large_functions.get(pickled)
        if handle is None:
            if len(self._large_functions) >= LARGE_FUNCTIONS_KEPT:
                self._large_functions.clear()
            handle = self._large_functions[pickled] = self.share(pickled)
        return handle


class _Service:
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
        #: Notified when the engine's thread takes the queue: a map's caller waits on it to keep pace.
        self._taken = threading.Condition(self._lock)
        self._incoming: list[_Call | MapBatch] = []  # guarded by _lock: the engine's thread takes it all at once
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
            raise _broken_executor(self._broken)
        if self._closing:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def adopt(self, future: Future[Any]) -> None:
        """A dependent call's future, counted now (shutdown waits for it) and queued once its inputs are done."""
        with self._lock:
            self._check_open()
            self._waiting.add(future)

    def hand_over(self, submission: _Call | MapBatch, *, adopted: bool = False) -> None:
        """Queue ``submission`` (a call, or a batch of a map's) for the engine's thread; wake it if its queue
        was empty. An ``adopted`` call (:meth:`adopt`) was taken before any shutdown: it is queued still."""
        with self._lock:
            if adopted:
                if self._broken is not None:  # its future was ended with the rest
                    return
            else:
                self._check_open()
            if isinstance(submission, _Call):
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
        intake = self.intake
        safe_files.sweep_dead_runs()  # what a killed run left (kill -9 removes nothing), here, off the caller's path
        try:
            with self._master, contextlib.ExitStack() as leaving:
                leaving.callback(self._stop_slaves_if_interrupted)  # a slave in a hung task would not hear the master
                leaving.callback(self._pool.stop_overseeing)  # before the master, leaving, tells its slaves to go
                while True:
                    self._take_submissions()
                    self._pull_back()
                    self._wake_callers()
                    with self._lock:
                        if self._closing and self._idle():
                            break
                    intake.step(TICK)
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
            future._end(None, _broken_executor(exc))
        for stream in streams:
            stream.break_with(_broken_executor(exc))


class _LargeArguments:
    """The file service as calls' arguments see it (:class:`mwpy.wire.codec.Store`): from the second call whose
    arguments are too large for a frame (each crosses again, to every slave that runs one), one warning says to
    share what the calls are given, as dask warns of a large object in a task graph."""

    def __init__(self, store: codec.Store) -> None:
        self._store = store
        self._spilled = 0

    def spill(self, payload: bytes) -> bytes:
        self._spilled += 1
        if self._spilled == 2:
            warnings.warn(
                f"mwpy: a call's arguments take {len(payload) / 1e6:.0f} MB pickled, sent with the call again "
                "each time: share an object many calls are given once (handle = ex.share(obj)) and pass the "
                "handle in its place",
                stacklevel=_caller_level(),
            )
        return self._store.spill(payload)

    def publish_file(self, path: str) -> tuple[codec.Shared, int]:
        return self._store.publish_file(path)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside mwpy: a warning names the user's line."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _broken_executor(cause: BaseException) -> concurrent.futures.BrokenExecutor:
    """What a broken executor's futures and ``submit()`` raise: the reason in its text and as its cause."""
    broken = concurrent.futures.BrokenExecutor(f"the mwpy executor stopped: {cause}")
    broken.__cause__ = cause
    return broken


def _label(fn: Callable[..., Any]) -> str:
    """The name messages give a call of ``fn``: its task name, or its qualified name (a partial's function's)."""
    if isinstance(fn, TaskAlgorithm):
        return fn.name
    if isinstance(fn, functools.partial):
        return _label(fn.func)
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _shapes(given: Shape | Sequence[Shape] | None) -> list[Resources]:
    """``slave_resources=`` as a list of shapes: one record or dict, or a list of them."""
    if given is None:
        return []
    many = given if isinstance(given, Sequence) and not isinstance(given, str) else [given]
    return [shape for one in many if (shape := Resources.of(one)) is not None]


def _offer(namespace: argparse.Namespace, shapes: list[Resources]) -> list[str]:
    """The local slaves' shapes (``slave_resources=``, else the back end's ``--slave-resources``, else the
    machine's), set for the back end and told to the master as the ``--mw-slave-resources`` on offer."""
    namespace.slave_resources = shapes or namespace.slave_resources
    offered = [own_shape(shape) for shape in namespace.slave_resources] or [own_shape()]
    return [argument for shape in offered for argument in ("--mw-slave-resources", str(shape))]


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as it can travel inside another call (a chunk, a partial, an initializer): a function slaves cannot
    import as its pickled bytes (:class:`_ByReference`); a task algorithm pickles by reference by itself."""
    if isinstance(fn, functools.partial):
        return functools.partial(_unwrap(fn.func), *fn.args, **fn.keywords)
    inner = fn.fn if isinstance(fn, TaskAlgorithm) else fn
    if codec.by_value(inner):
        return _ByReference(codec.function_reference(inner))
    return fn


@attrs.frozen
class _ByReference:
    """Calls a function slaves cannot import, sent as :func:`mwpy.wire.codec.function_reference`'s bytes."""

    reference: bytes

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return calls.functions.resolve(self.reference)(*args, **kwargs)


def _backend_options(
    factory: backends.BackendFactory, backend: str, arguments: Sequence[str], work: WorkFolder
) -> argparse.Namespace:
    """The back end's own options (``mwpy overseer``'s), from ``backend_arguments``; the work folder is ours."""
    parser = argparse.ArgumentParser(
        prog=f"mwpy.Executor(backend={backend!r})", add_help=False, conflict_handler="resolve"
    )
    parser.add_argument("--workdir", default=str(work.path))
    factory.add_arguments(parser)
    try:
        namespace = parser.parse_args(list(arguments))
    except SystemExit:
        raise ConfigurationError(f"backend_arguments {list(arguments)!r} are not valid") from None
    namespace.workdir = str(work.path)
    return namespace


def _master_options(
    extra: Sequence[str], resource: Path, backend: str, initializer: Path | None, member_id: str
) -> Options:
    """The master's settings: the user's ``--mw-*`` options, then what an executor needs.

    Its slaves' arguments end with what ``mwpy/_spawn.py`` reads: the script,
    the folder and the initializer's file (``-`` for none).
    """
    parsed, rest = parse(["--mw-master", "--mw-resource-file", str(resource), *extra])
    if rest:
        raise ConfigurationError(f"options: not --mw-* options: {rest}")
    script, folder = main_script(), (search_path() if backend == "local" else os.getcwd())
    init = "-" if initializer is None else str(initializer)
    shipped: tuple[str, ...] = ()
    if backend != "local":
        # A batch system's slaves run in a sandbox elsewhere: ship the files, name them as they land there.
        shipped = tuple(path for path in (script, init) if path != "-")
        script, init = (path if path == "-" else os.path.basename(path) for path in (script, init))
        folder = "." if script != "-" else folder
    return attrs.evolve(
        parsed,
        master_host=parsed.master_host or (LOCAL_HOST if backend == "local" else None),
        resource_file=str(resource),
        resource_file_update_interval=UPDATE_INTERVAL,
        member_id=member_id,
        slave_executable=parsed.slave_executable or sys.executable,
        slave_files=(*parsed.slave_files, *shipped),
        slave_arguments=(*_frame_limits(parsed), *parsed.slave_arguments, script, folder, init),
    )


def _pickled_initializer(initializer: Callable[..., object], initargs: tuple[Any, ...]) -> bytes:
    """``initializer`` and ``initargs`` pickled for the slaves, before anything is made (by value if slaves
    cannot import it): arguments that do not pickle fail the constructor with pickle's own error."""
    return codec.encode_initializer(_unwrap(initializer), initargs)


def _frame_limits(options: Options) -> tuple[str, ...]:
    """The slaves' frame limits matching the master's, when ``options`` changed them: what the master may
    send, a slave must accept (and the other way round)."""
    limits: tuple[str, ...] = ()
    defaults = attrs.fields(Options)
    if options.max_write_buffer_size != defaults.max_write_buffer_size.default:
        limits += ("--mw-max-read-buffer-size", str(options.max_write_buffer_size))
    if options.max_read_buffer_size != defaults.max_read_buffer_size.default:
        limits += ("--mw-max-write-buffer-size", str(options.max_read_buffer_size))
    return limits


def _spawn_program(backend: str, workdir: Path) -> str:
    """The program slaves run: ``_spawn.py`` itself locally; for a batch system, a copy in the work folder.

    A batch system ships the program from the submit side, where the resource
    file already is (the work folder must be readable there, and by the job's
    owner); mwpy's installed files need not be (a schedd in a container or a
    chroot, an install in another user's home).
    """
    if backend == "local":
        return SPAWN_PROGRAM
    copy = workdir / SPAWN_COPY
    shutil.copyfile(SPAWN_PROGRAM, copy)
    return str(copy)


def _adopt(backend: backends.Backend, early: EarlySlaves, resource_file: Path) -> None:
    """The local back end takes the early slaves as its first jobs, and restarts one that fails as it was started
    (told the master's address and secret on its command line: the master's are the same for its whole run)."""
    assert isinstance(backend, LocalBackend), backend  # early slaves are a plain local executor's
    launch = backends.Launch(early.member_id, str(resource_file), early.command[0], early.command[1:], files=[])
    backend.adopt(launch, early.processes)

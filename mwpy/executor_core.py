"""What an :class:`mwpy.Executor` runs: its master, its slaves' pool, and the calls handed to them.

Apart from the public face (mwpy/executor.py) so that importing ``mwpy.Executor`` loads next to nothing: a
plain local executor starts its slaves first (mwpy/executor_early.py) and imports this module, and the mwpy
engine under it, while they start, instead of before. How an executor is built, and why, is said at the top
of mwpy/executor.py.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import os
import sys
import time
import types
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs

from mwpy import backends, calls, dataflow, executor_setup, lineage, safe_files
from mwpy.errors import ConfigurationError, UsageError
from mwpy.executor_early import (
    WORK_PREFIX,
    EarlySlaves,
    pass_authkey,
)
from mwpy.executor_map import MapStream, OneCall
from mwpy.executor_service import Call, Future, Service, log
from mwpy.executor_setup import Shape
from mwpy.master import Master
from mwpy.names import AUDIT_FILE, INITIALIZER_FILE
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.pool.slave_pool import SlavePool, WorkFolder
from mwpy.resources import Resources
from mwpy.streams import WINDOW_BYTES, chunked
from mwpy.task import TaskAlgorithm
from mwpy.task_records import DEFAULT_POLICY, Policy
from mwpy.wire import codec, importable

__all__ = ["ExecutorCore", "Future"]

R = TypeVar("R")

#: What a future among a call's arguments is (a foreign one too, refused with a clear message).
_FUTURE = concurrent.futures.Future
#: Seconds at most before the overseer first looks at early slaves, if no first result came before (they are
#: running: it has nothing to start, and its look would compete with the greeting and the first task; one that
#: failed is restarted then).
FIRST_LOOK_AFTER = 1.0
#: Distinct large functions sent by value whose handles are kept (each was shared once).
LARGE_FUNCTIONS_KEPT = 64


class ExecutorCore:
    """An executor's working part (:class:`mwpy.Executor`'s arguments, checked already): the master, in the
    engine's thread of its :class:`Service`, the slaves' pool, and the pickling of calls.

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
        shapes = executor_setup.shapes(slave_resources)
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
            namespace = executor_setup.backend_options(factory, backend, backend_arguments, work)
            quieting = ["--mw-quiet"] if quiet else []
            offer = executor_setup.offer(namespace, shapes) if backend == "local" else []
            self.options = executor_setup.master_options(
                [*options, *quieting, *offer], work.resource_file, backend, initializing, member_id
            )
            logs.configure(self.options.log_level)  # else MWPY_LOG_LEVEL: an executor user passes no options
            audit = Audit(str(work.path / AUDIT_FILE), packets=self.options.audit_packets)
            undo.callback(audit.close)
            program = executor_setup.spawn_program(backend, work.path)
            secret = os.urandom(32) if early is None else early.secret  # what secrets.token_bytes(32) reads
            listener = None if early is None else early.listener
            self._master = Master(self.options, audit=audit, secret=secret, program=program, listener=listener,
                                  durable=not work.own)  # fmt: skip
            slaves = factory.create(str(work.resource_file), namespace)
            if early is not None:  # before the overseer's first look: it finds them running
                executor_setup.adopt(slaves, early, work.resource_file)
            # What a killed run left (kill -9 removes nothing) is swept by the overseer's thread, off the caller's
            # path and the first result's.
            self._pool = SlavePool(work, slaves, max_workers, name=f"executor {member_id}", at_once=True,
                                   first_look_after=0.0 if early is None else FIRST_LOOK_AFTER,
                                   before_first_look=safe_files.sweep_dead_runs)  # fmt: skip
            undo.pop_all()
        #: What the engine's thread and the futures share (never this core: see the class's docstring).
        self.service = Service(self._master, self._pool, audit, member_id)
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
        futures (which refuse to pickle): then once those are done (:meth:`_submit_after`).

        A future given as an argument itself (the common case) is seen before pickling: a failed pickle (three
        attempts, cloudpickle's the last) cost a dependent call more than all the rest of its submit.
        """
        if _given_a_future(args, kwargs):
            return self._submit_after(fn, args, kwargs, dataflow.futures_in(args, kwargs), priority)
        try:
            name, payload, label = self._encode(fn, args, kwargs)
        except Exception:
            inputs = dataflow.futures_in(args, kwargs)
            if not inputs:
                raise
            return self._submit_after(fn, args, kwargs, inputs, priority)
        future: Future[R] = Future(self.service)
        future._label = label
        self.service.hand_over(Call(future, name, payload, self._policy_of(fn, priority), label))
        return future

    def _submit_after(
        self,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        inputs: list[tuple[str, concurrent.futures.Future[Any]]],
        priority: int | None,
    ) -> Future[R]:
        """A call with this executor's futures among its arguments: its future now, its task queued once they are
        done, with their values in their places (pickled in the thread the last settles in, the engine's).
        Inputs done with their values already: pickled and queued now, as any call (no callbacks to wait on).

        What the callbacks hold is the service and the call's pickler, never this core (see the class).
        """
        for where, given in inputs:
            if not isinstance(given, Future):
                kind = f"{type(given).__module__}.{type(given).__qualname__}"
                raise UsageError(f"{where} is a {kind} not made by this mwpy.Executor: pass its result() instead")
            if given._service is not self.service:
                whose = "an executor that was shut down" if given._service.closing else "another mwpy.Executor"
                raise UsageError(f"{where} is a future of {whose}: only this executor's futures can be arguments")
        name, label, one = self._encoder(fn)
        service = self.service
        future: Future[R] = Future(service)
        future._label = label
        policy = self._policy_of(fn, priority)
        ready = _Dependent(service, future, name=name, label=label, policy=policy, one=one, args=args, kwargs=kwargs,
                           inputs=inputs)  # fmt: skip
        for _, given in inputs:
            if not cast(Future[Any], given).succeeded():
                break
        else:
            ready(adopted=False)
            return future
        future._pending_inputs = True
        service.adopt(future)

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
        known = (None if importable.by_value(inner) else codec.function_reference(fn)), _label(fn)
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


class _Dependent:
    """Queues a dependent call once its inputs are done (its ``ready``, and how it is sent again if a held input
    is lost): its inputs' values put in place and pickled, handed over as any call.

    An object, not a closure: a call whose inputs are done already makes one and calls it at once, and a
    closure's cells were a third of that path's allocations (the collector's work grows with them).
    """

    __slots__ = ("_args", "_future", "_inputs", "_kwargs", "_label", "_name", "_one", "_policy", "_service")

    def __init__(
        self,
        service: Service,
        future: Future[Any],
        *,
        name: str,
        label: str,
        policy: Policy,
        one: OneCall,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        inputs: list[tuple[str, concurrent.futures.Future[Any]]],
    ) -> None:
        self._service, self._future, self._name, self._label, self._policy = service, future, name, label, policy
        self._one, self._args, self._kwargs, self._inputs = one, args, kwargs, inputs

    def __call__(self, adopted: bool = True) -> None:
        """Queue the call; ``adopted``: its future was counted when it began to wait (:meth:`Service.adopt`)."""
        future = self._future
        if future.done():  # cancelled meanwhile (and said so by cancel())
            return
        kwargs, value = self._kwargs, Future.as_argument
        try:
            payload = self._one(dataflow.with_values(self._args, value),
                                dataflow.with_values(kwargs, value) if kwargs else kwargs)  # fmt: skip
        except Exception as exc:
            future._end(None, exc)
            return
        future._pending_inputs = False
        prefer, held = lineage.held_among(cast(Future[Any], given) for _, given in self._inputs)
        if held:  # what the event log reports once it ran, and how it is sent again if one is lost
            future._held_inputs, future._again = held, self
        call = Call(future, self._name, payload, self._policy, self._label, prefer)
        self._service.hand_over(call, adopted=adopted)


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


def _given_a_future(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a future is among the arguments themselves (not inside a container): a type check each."""
    for arg in args:
        if isinstance(arg, _FUTURE):
            return True
    if kwargs:
        for arg in kwargs.values():
            if isinstance(arg, _FUTURE):
                return True
    return False


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside mwpy: a warning names the user's line."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _label(fn: Callable[..., Any]) -> str:
    """The name messages give a call of ``fn``: its task name, or its qualified name (a partial's function's)."""
    if isinstance(fn, TaskAlgorithm):
        return fn.name
    if isinstance(fn, functools.partial):
        return _label(fn.func)
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as it can travel inside another call (a chunk, a partial, an initializer): a function slaves cannot
    import as its pickled bytes (:class:`_ByReference`); a task algorithm pickles by reference by itself."""
    if isinstance(fn, functools.partial):
        return functools.partial(_unwrap(fn.func), *fn.args, **fn.keywords)
    inner = fn.fn if isinstance(fn, TaskAlgorithm) else fn
    if importable.by_value(inner):
        return _ByReference(codec.function_reference(inner))
    return fn


@attrs.frozen
class _ByReference:
    """Calls a function slaves cannot import, sent as :func:`mwpy.wire.codec.function_reference`'s bytes."""

    reference: bytes

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return calls.functions.resolve(self.reference)(*args, **kwargs)


def _pickled_initializer(initializer: Callable[..., object], initargs: tuple[Any, ...]) -> bytes:
    """``initializer`` and ``initargs`` pickled for the slaves, before anything is made (by value if slaves
    cannot import it): arguments that do not pickle fail the constructor with pickle's own error."""
    return codec.encode_initializer(_unwrap(initializer), initargs)

"""``mwpy.Executor``: mwpy behind the ``concurrent.futures.Executor`` interface.

For people who know ``ProcessPoolExecutor``: no ``@mwpy.master``, no
``mwpy.run()``, no ``--mw-*`` options. A plain script guarded by
``if __name__ == "__main__":`` creates an executor, submits module-level
functions (decorated with ``@mwpy.task`` or not) and gets
:class:`concurrent.futures.Future` objects back, which work with
``concurrent.futures.wait`` and ``as_completed``.

How it is built, and why:

* The same engine as the master algorithm API: a :class:`~mwpy.master.Master`
  created in the calling process (so a port already taken fails in the
  constructor) and entered, in a ``with`` block, by one background thread
  that owns it. Users of ``concurrent.futures`` call ``future.result()`` from
  any thread, so the engine cannot be driven by whoever waits; it runs on its
  own and submitters hand it work through a thread-safe queue and a wake-up
  socket (the master's intake, mwpy/intake.py) that cuts its ``select`` short.
* Arguments are checked and pickled in ``submit()``, in the caller's thread:
  an argument that cannot travel raises there, as everywhere in mwpy.
* With ``backend="condor"`` the script is shipped with the slave job and
  named by its base name; the slave's Python is ``sys.executable`` unless
  ``options=["--mw-slave-executable", ...]`` or ``["--mw-slave-bundle"]`` say
  otherwise; tests/test_condor_executor.py runs it on the test pool.
* Slaves are started the way ``mwpy local`` (or the overseer) starts them,
  by the same :class:`~mwpy.pool.slave_pool.SlavePool`: the master publishes a
  resource file in a private work folder and an overseer with a back end
  (``local`` processes by default, ``condor`` through htcondor2) runs in a
  thread and keeps the slave jobs matched to it, at most ``max_workers``. The slaves run
  ``mwpy/_spawn.py``, which loads the user's script as ``__mp_main__`` like
  ``multiprocessing``'s spawn start method, so functions of a script's
  ``__main__`` work; functions of a REPL's or notebook's ``__main__`` cannot
  (there is no file to load) and are refused at ``submit()`` with the fix.
* A future is its task's listener (mwpy/core/scheduler.py): *running* once
  its task is the first in flight on its slave; ``cancel()`` succeeds before
  that — a task still queued here is dropped unsent, one waiting in a slave's
  window is pulled back.
* A task that raises is a result (its future raises its exception), run again
  only when ``@mwpy.task(retries=N)`` asks. A slave that vanishes still has its
  tasks run elsewhere.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import functools
import itertools
import os
import secrets
import shutil
import sys
import threading
import time
import types
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import attrs

from mwpy import backends, calls, safe_text
from mwpy.errors import ConfigurationError, SlavesFailError
from mwpy.master import Master
from mwpy.names import AUDIT_FILE, SPAWN_COPY
from mwpy.net.engine import TICK
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.options import Options, parse
from mwpy.pool.slave_pool import SlavePool, WorkFolder
from mwpy.streams import chunked
from mwpy.task import DEFAULT_POLICY, LightFuture, Policy, Result, TaskAlgorithm, registry, unrunnable_error
from mwpy.wire import codec

__all__ = ["Executor"]

P = ParamSpec("P")
R = TypeVar("R")

#: The program slaves run: loads the user's script as ``__mp_main__``, then serves as a slave.
SPAWN_PROGRAM = str(Path(__file__).with_name("_spawn.py"))
#: Resource-file refresh interval: the overseer learns of new work at most this late (writes are debounced).
UPDATE_INTERVAL = 1.0
#: Submissions ``Executor.map`` hands the engine's thread at once (one lock and at most one wake-up each).
SUBMIT_BATCH = 1024

_numbers = itertools.count()
log = safe_text.logger(__name__)


class _Future(LightFuture[R]):
    """A future of an executor: it settles from its task's result and tells the executor once it is done.

    A :class:`~mwpy.task.LightFuture`, so a future nobody waits on costs no
    Condition; the executor's bookkeeping is called directly instead of
    through ``add_done_callback`` (which would make one for every future).
    """

    def __init__(self, executor: Executor) -> None:  # no super().__init__(): LightFuture's does nothing
        self._executor = executor
        #: The master's id of its task, once the engine's thread has queued it (for pulling it back on cancel).
        self._task_id: int | None = None

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._executor._one_done(self)
        return True

    # The scheduler's Listener (mwpy/core/scheduler.py), called in the engine's thread.

    def may_start(self) -> bool:
        """The task may leave for a slave unless this future was cancelled."""
        return not self.cancelled()

    def began(self) -> None:
        """The task is first in flight on its slave: this future is running (no longer cancellable)."""
        if not self.running():
            self._mark_running()

    def unrunnable(self) -> bool:
        self._end(None, unrunnable_error(self._task_id or 0))
        return False

    def settle(self, result: Result) -> bool:
        """The task's result settles this future (unless it was cancelled before it started); never mw.results()."""
        if not self.done():  # cancelled before it started (a task dropped for a full frame, say)
            self._settle_with(result)
            self._executor._one_done(self)
        return False

    def _end(self, value: Any, exception: BaseException | None) -> None:
        if not self.done():
            self._finish(value, exception)
            self._executor._one_done(self)


#: What ``submit()`` hands the engine's thread: (future, task name, pickled arguments, policy).
_Submission = tuple[_Future[Any], str, bytes, Policy]


class Executor(concurrent.futures.Executor):
    """Run functions on mwpy slaves; a ``concurrent.futures.Executor``.

    ``max_workers``: at most this many slaves (default: ``os.cpu_count()``).
    ``backend``: ``"local"`` (slave processes on this machine) or ``"condor"``
    (slave jobs through htcondor2), or any name ``mwpy.backends.lookup``
    knows; ``backend_arguments`` are that back end's ``mwpy overseer``
    options (e.g. ``["--submit-file", "slaves.sub"]``). ``options``: extra
    ``--mw-*`` options for the master (e.g. ``["--mw-slave-window", "8"]``).
    ``workdir``: where the resource file, audit and slave sandboxes go
    (default: a temporary folder, removed at shutdown).
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        backend: str = "local",
        backend_arguments: Sequence[str] = (),
        options: Sequence[str] = (),
        workdir: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if max_workers < 1:
            raise ConfigurationError("max_workers must be at least 1")
        self._max_workers = max_workers
        # Slaves load the script as __mp_main__: what they pickle from it (an exception class, say) names that.
        if "__main__" in sys.modules:
            sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
        work = WorkFolder.make(workdir, prefix="mwpy-executor-")
        self._options = _master_options(options, work.resource_file, backend)
        logs.configure(self._options.log_level)  # else MWPY_LOG_LEVEL: an executor user passes no options
        self._audit = Audit(str(work.path / AUDIT_FILE), packets=self._options.audit_packets)
        factory = backends.lookup(backend)
        namespace = _backend_options(factory, backend, backend_arguments, work)
        program = _spawn_program(backend, work.path)
        self._master = Master(self._options, audit=self._audit, secret=secrets.token_bytes(32), program=program)
        #: The master's internal surface (Master._SHARED_WITH): queueing tasks, running passes, waking it.
        self._intake = self._master._intake
        self._intake.count_submitted_as_total()  # futures are made eagerly: what was submitted is the total
        self._pool = SlavePool(work, factory.create(str(work.resource_file), namespace), max_workers,
                               name=f"executor {self._options.member_id}")  # fmt: skip
        self._lock = threading.Lock()
        self._references: dict[types.FunctionType, bytes] = {}  # functions pickled for slaves (_call_function)
        self._incoming: list[_Submission] = []  # guarded by _lock: the engine's thread takes it all at once
        self._cancelled: list[int] = []  # tasks of cancelled futures, which may sit in a slave's window
        self._waiting: set[_Future[Any]] = set()  # futures not yet done (for shutdown: how many, which to cancel)
        self._closing = False
        self._broken: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="mwpy-executor", daemon=True)
        self._thread.start()
        log.info(
            "executor %s: master on %s:%d, up to %d %s slaves, work folder %s",
            self._options.member_id, self._master.host, self._master.port, max_workers, backend, work.path,
        )  # fmt: skip
        atexit.register(self.shutdown)

    # ------------------------------------------------------------------ submitting

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Run ``fn(*args, **kwargs)`` on a slave; the arguments are pickled here, now."""
        name, payload = self._encode(fn, args, kwargs)
        future: _Future[R] = _Future(self)
        self._hand_over([(future, name, payload, _policy_of(fn))])
        return future

    def _hand_over(self, submissions: list[_Submission]) -> None:
        """Queue ``submissions`` for the engine's thread; wake it if its queue was empty."""
        with self._lock:
            if self._broken is not None:
                raise concurrent.futures.BrokenExecutor(f"the mwpy executor stopped: {self._broken}")
            if self._closing:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._waiting.update(submission[0] for submission in submissions)
            # The engine's thread takes the whole list under this lock before it waits: only the first
            # submission after that must wake it (a system call per submit was a fifth of its cost).
            wake = not self._incoming
            self._incoming += submissions
        if wake:
            self._intake.wake()

    def _submit_each(self, fn: Callable[..., R], calls: Iterator[tuple[Any, ...]]) -> list[_Future[R]]:
        """``map``'s submissions: a future per call, handed over ``SUBMIT_BATCH`` at a time (one lock, one wake)."""
        policy = _policy_of(fn)
        futures: list[_Future[R]] = []
        batch: list[_Submission] = []
        for args in calls:
            name, payload = self._encode(fn, args, {})
            future: _Future[R] = _Future(self)
            futures.append(future)
            batch.append((future, name, payload, policy))
            if len(batch) == SUBMIT_BATCH:
                self._hand_over(batch)
                batch = []
        if batch:
            self._hand_over(batch)
        return futures

    def map(
        self,
        fn: Callable[..., R],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        **kwargs: Any,
    ) -> Iterator[R]:
        """Like ``ProcessPoolExecutor.map``: values in input order; ``chunksize`` arguments per task.

        ``kwargs`` go to every call (as with dask's ``client.map``). Closing the
        iterator early (``break``, an exception) cancels every task not started.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be at least 1")
        if kwargs:
            fn = functools.partial(_unwrap(fn), **kwargs)
        if chunksize == 1:
            end = None if timeout is None else time.monotonic() + timeout
            return _in_order(self._submit_each(fn, zip(*iterables, strict=False)), end)
        chunks = chunked(zip(*iterables, strict=False), chunksize)
        results = super().map(calls.call_chunk, itertools.repeat(_unwrap(fn)), chunks, timeout=timeout)
        return itertools.chain.from_iterable(results)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; ``cancel_futures`` cancels what has not started; ``wait`` waits for the rest.

        Once every future is done the master tells its slaves to shut down and
        the work folder (our own) is removed.
        """
        with self._lock:
            self._closing = True
            doomed = list(self._waiting) if cancel_futures else []
        for future in doomed:
            future.cancel()
        with contextlib.suppress(OSError):  # the engine may be closed already
            self._intake.wake()
        if wait:
            self._thread.join()
            atexit.unregister(self.shutdown)

    # ------------------------------------------------------------------ the engine's thread

    def _one_done(self, future: _Future[Any]) -> None:
        """``future`` is done (settled, cancelled or broken); once per future, whoever calls first."""
        with self._lock:
            if future not in self._waiting:
                return
            self._waiting.discard(future)
            last = self._closing and not self._waiting
            task_id = future._task_id
            pull_back = False
            if task_id is not None and future.cancelled():
                pull_back = True
                self._cancelled.append(task_id)  # the engine's thread asks its slave to give it back
        if last or pull_back:
            self._intake.wake()

    def _serve(self) -> None:
        """Own the master: feed it submissions, run passes, finish when shut down and idle."""
        intake = self._intake
        try:
            with self._master:
                while True:
                    self._take_submissions()
                    self._pull_back()
                    with self._lock:
                        if self._closing and not self._waiting and not self._incoming:
                            break
                    intake.step(TICK)
                    problem = self._pool.setup_problem(intake.tasks_done)
                    if problem is not None:  # slaves that cannot start (the script fails on them) restart for ever
                        raise SlavesFailError(problem)
        except BaseException as exc:
            log.error("executor %s stopped: %r", self._options.member_id, exc)
            self._break(exc)
        finally:
            self._pool.stop()
            self._audit.close()
            self._pool.work.remove()

    def _pull_back(self) -> None:
        """Cancelled futures: ask their slaves to give back tasks waiting in their windows (engine thread)."""
        with self._lock:
            ids, self._cancelled = self._cancelled, []
        if ids:
            self._intake.cancel(ids)

    def _take_submissions(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
        enqueue = self._intake.enqueue
        for future, name, payload, policy in incoming:
            if future.cancelled():
                continue  # cancelled before the engine saw it
            future._task_id = enqueue(name, payload, policy, future)
            # cancelled from now on: its listener drops it unsent, or _one_done pulls it back from a slave

    def _break(self, exc: BaseException) -> None:
        with self._lock:
            self._broken = exc
            doomed = list(self._waiting)
        for future in doomed:
            future._end(None, concurrent.futures.BrokenExecutor(f"the mwpy executor stopped: {exc}"))

    # ------------------------------------------------------------------ functions

    def _encode(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, bytes]:
        """The task name and pickled arguments for ``fn(*args, **kwargs)``, checked here."""
        limit = self._intake.max_frame
        if type(fn) is types.FunctionType:  # the common case: pickled by reference once (calls.call_function)
            reference = self._references.get(fn) or self._reference(fn)
            return calls.call_function.name, calls.call_function.encode((reference, args, kwargs), {}, limit)
        if isinstance(fn, TaskAlgorithm):
            _check_travels(fn.fn)
            return fn.name, fn.encode(args, kwargs, limit)
        if isinstance(fn, functools.partial):
            _check_travels(fn.func)
            return calls.call.name, calls.call.encode((fn, args, kwargs), {}, limit)
        if not callable(fn):
            raise TypeError(f"mwpy.Executor.submit() needs a function, not {type(fn).__name__}")
        _check_travels(fn)
        return calls.call.name, calls.call.encode((fn, args, kwargs), {}, limit)

    def _reference(self, fn: types.FunctionType) -> bytes:
        """``fn`` pickled (by reference), kept for its next calls; refused with the fix if slaves cannot find it."""
        _check_travels(fn)
        reference = codec.function_reference(fn)
        if len(self._references) >= codec.FUNCTIONS_KEPT:
            self._references.clear()
        self._references[fn] = reference
        return reference


def _policy_of(fn: Callable[..., Any]) -> Policy:
    """The policy a submitted function runs under: a task algorithm's own (``@mwpy.task(retries=...)``)."""
    return fn.policy if isinstance(fn, TaskAlgorithm) else DEFAULT_POLICY


def _in_order(futures: list[_Future[R]], end: float | None) -> Generator[R, None, None]:
    """``Executor.map``'s values, in input order, by ``end`` (monotonic) if given; closing it cancels the rest.

    What ``concurrent.futures.Executor.map`` returns, over futures made by :meth:`Executor._submit_each`.
    """
    futures.reverse()
    try:
        while futures:
            future = futures.pop()
            try:
                value = future.result(None if end is None else end - time.monotonic())
            finally:
                future.cancel()  # a no-op once done; after a timeout, this one goes too
            yield value
    finally:
        for future in futures:
            future.cancel()


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The plain function inside a task algorithm (it pickles by reference; the wrapper does not)."""
    if isinstance(fn, TaskAlgorithm):
        _check_travels(fn.fn)
        return _ByName(fn.name)  # a picklable stand-in: the slave finds the function by its task name
    _check_travels(fn)
    return fn


@attrs.frozen
class _ByName:
    """Calls the task algorithm registered under ``name`` (pickles as its name)."""

    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return registry.require(self.name).fn(*args, **kwargs)


def _check_travels(fn: Callable[..., Any]) -> None:
    """Refuse, with the fix, a function that slaves could never find."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module == "__main__" and getattr(sys.modules.get("__main__"), "__file__", None) is None:
        raise TypeError(
            f"{qualname}() is defined in an interactive session (a REPL or a notebook) and slaves cannot "
            "import it; put it in a module (a .py file) and import it from there"
        )
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(
            f"{qualname} is not defined at the top level of a module, so slaves cannot find it; "
            "define it with def at module level (as ProcessPoolExecutor requires)"
        )


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


def _master_options(extra: Sequence[str], resource: Path, backend: str) -> Options:
    """The master's settings: the user's ``--mw-*`` options, then what an executor needs."""
    parsed, rest = parse(["--mw-master", "--mw-resource-file", str(resource), *extra])
    if rest:
        raise ConfigurationError(f"options: not --mw-* options: {rest}")
    script, folder = _script(), os.getcwd()
    shipped: tuple[str, ...] = ()
    if backend != "local" and script != "-":
        # A batch system's slaves run in a sandbox elsewhere: ship the script, name it as it lands there.
        script, folder, shipped = os.path.basename(script), ".", (script,)
    return attrs.evolve(
        parsed,
        master_host=parsed.master_host or ("127.0.0.1" if backend == "local" else None),
        resource_file=str(resource),
        resource_file_update_interval=UPDATE_INTERVAL,
        member_id=f"executor-{os.getpid()}-{next(_numbers)}",
        slave_executable=parsed.slave_executable or sys.executable,
        slave_files=(*parsed.slave_files, *shipped),
        slave_arguments=(*parsed.slave_arguments, script, folder),
    )


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


def _script() -> str:
    """The file slaves load as ``__mp_main__``: this process's ``__main__`` script, or ``-`` for none."""
    main = sys.modules.get("__main__")
    path: str | None = getattr(main, "__file__", None)
    if path is None or not os.path.isfile(path):
        return "-"
    return os.path.abspath(path)

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
  ``__main__`` travel by reference; functions of a REPL's or notebook's
  ``__main__`` (there is no file to load), lambdas and closures travel by
  value with cloudpickle (mwpy/wire/codec.py), master to slave only.
* A future is its task's listener (mwpy/core/entry.py): *running* once
  its task is the first in flight on its slave; ``cancel()`` succeeds before
  that — a task still queued here is dropped unsent, one waiting in a slave's
  window is pulled back.
* Importing ``mwpy.Executor`` loads next to nothing: the master, the pool and
  the pickling of calls are :mod:`mwpy.executor_core`'s, imported by the
  constructor. A plain local executor (no ``options``, ``backend_arguments``,
  ``workdir``, ``slave_resources`` or ``initializer``) starts its slaves before
  that import (:class:`~mwpy.executor_early.EarlySlaves`), so their start overlaps it: told where
  the master will listen and its secret on their command line, they need no
  resource file, and the local back end adopts them as its first jobs.
* A task that raises is a result (its future raises its exception), run again
  only when ``@mwpy.task(retries=N)`` asks. A slave that vanishes still has its
  tasks run elsewhere.
"""

from __future__ import annotations

import concurrent.futures
import gc
import itertools
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, TypeVarTuple, cast, overload

from mwpy.errors import ConfigurationError
from mwpy.executor_early import EarlySlaves
from mwpy.names import SLAVE_LOADING_MARK

if TYPE_CHECKING:  # loaded by the constructor (see the top of this file)
    from typing import TypedDict, Unpack

    from mwpy.executor_core import ExecutorCore, Future
    from mwpy.executor_setup import Shape

    class _Settings(TypedDict, total=False):
        """The constructor's keyword-only arguments, for its overloads."""

        backend: str
        backend_arguments: Sequence[str]
        options: Sequence[str]
        workdir: str | os.PathLike[str] | None
        quiet: bool
        resources: Shape | None
        slave_resources: Shape | Sequence[Shape] | None


__all__ = ["Executor"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_numbers = itertools.count()

#: Ctrl-C seen in this process while an executor watched (a program may catch the KeyboardInterrupt), and
#: how many executors watch.
_ctrl_c = 0
_watching = 0


def _count_ctrl_c(signum: int, frame: object) -> None:
    """Python's own SIGINT handler (raise KeyboardInterrupt), counting: leaving a ``with`` block after a Ctrl-C
    the program caught stops the executor as an uncaught one does, instead of waiting for a hung task."""
    global _ctrl_c
    _ctrl_c += 1
    signal.default_int_handler(signum, frame)  # type: ignore[arg-type]


def _watch_ctrl_c(start: bool) -> None:
    """Count Ctrl-C while an executor lives; give Python's handler back after the last (asyncio.run installs
    its own only where Python's is in place). Only the main thread may set handlers; a program's own is kept."""
    global _watching
    if threading.current_thread() is not threading.main_thread():
        return
    _watching += 1 if start else -1
    handler = signal.getsignal(signal.SIGINT)
    if start and handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, _count_ctrl_c)
    elif not start and _watching <= 0 and handler is _count_ctrl_c:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _engine() -> type[ExecutorCore]:
    """Import the engine (while the early slaves start), without collecting garbage meanwhile: its thousands of
    new objects are none, and the collections they set off cost a tenth of the import."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from mwpy.executor_core import ExecutorCore  # noqa: PLC0415 (see the top of this file)
    finally:
        if collecting:
            gc.enable()
    return ExecutorCore


class Executor(concurrent.futures.Executor):
    """Run functions on mwpy slaves; a ``concurrent.futures.Executor``.

    ``max_workers``: at most this many slaves (default: ``os.cpu_count()``).
    ``initializer(*initargs)`` runs once in each slave before its first task,
    as in ``ProcessPoolExecutor`` (for state kept between tasks: a model, a
    database connection); if it raises, the slave exits and the executor
    breaks: its futures and ``submit()`` raise ``BrokenExecutor``, whose
    ``__cause__`` names the initializer's error.
    ``backend``: ``"local"`` (slave processes on this machine) or ``"condor"``
    (slave jobs through htcondor2), or any name ``mwpy.backends.lookup``
    knows; ``backend_arguments`` are that back end's ``mwpy overseer``
    options (e.g. ``["--submit-file", "slaves.sub"]``). ``options``: extra
    ``--mw-*`` options for the master (e.g. ``["--mw-slave-window", "8"]``).
    ``workdir``: where the resource file, audit and slave sandboxes go
    (default: a temporary folder, removed at shutdown). ``resources``
    (:class:`~mwpy.resources.Resources` or a dict of its keys): what every task
    needs of its slave unless its ``@mwpy.task(resources=...)`` says otherwise.
    ``slave_resources``: the local slaves' shapes (one, or a list the slaves
    are dealt among; default: each offers this machine's cpus and memory); a
    task none of them satisfies fails at once with
    :class:`~mwpy.errors.NoMatchingSlaveError`. What a task prints
    shows on this process's stdout and stderr when its result comes, as
    under ProcessPoolExecutor; ``quiet=True`` (``--mw-quiet``) keeps it to
    the futures' ``stdout``/``stderr``.

    An executor dropped without ``shutdown()`` shuts down (without waiting)
    once it is collected, as the standard executors do: its engine thread and
    futures hold its core's service, never the executor itself.
    """

    # initargs checked against the initializer, as typeshed types ProcessPoolExecutor; the rest as below.
    @overload
    def __init__(
        self,
        max_workers: int | None = None,
        initializer: Callable[[], object] | None = None,
        initargs: tuple[()] = (),
        **settings: Unpack[_Settings],
    ) -> None: ...
    @overload
    def __init__(
        self,
        max_workers: int | None = None,
        *,
        initializer: Callable[[*Ts], object],
        initargs: tuple[*Ts],
        **settings: Unpack[_Settings],
    ) -> None: ...
    @overload
    def __init__(
        self,
        max_workers: int | None,
        initializer: Callable[[*Ts], object],
        initargs: tuple[*Ts],
        **settings: Unpack[_Settings],
    ) -> None: ...
    def __init__(
        self,
        max_workers: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        backend: str = "local",
        backend_arguments: Sequence[str] = (),
        options: Sequence[str] = (),
        workdir: str | os.PathLike[str] | None = None,
        quiet: bool = False,
        resources: Shape | None = None,
        slave_resources: Shape | Sequence[Shape] | None = None,
    ) -> None:
        if getattr(sys.modules.get("__main__"), SLAVE_LOADING_MARK, False):  # set by mwpy/_spawn.py
            # multiprocessing's spawn refuses the same way: else every slave starts slaves, without end.
            raise ConfigurationError(
                "mwpy.Executor() was called while a slave loaded the script: "
                'guard its work with `if __name__ == "__main__":`'
            )
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if max_workers <= 0:
            raise ConfigurationError("max_workers must be greater than 0")  # the standard executors' words
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        member_id = f"executor-{os.getpid()}-{next(_numbers)}"
        # Without these arguments (each changes the slaves' command line or folder) the slaves need nothing the
        # engine works out: they can start now, while it loads.
        plain = not (options or backend_arguments or workdir is not None or slave_resources or initializer)
        early = EarlySlaves(max_workers, member_id) if backend == "local" and plain else None
        try:
            self._core = _engine()(
                max_workers, initializer, tuple(initargs), backend=backend, backend_arguments=backend_arguments,
                options=options, workdir=workdir, quiet=quiet, resources=resources, slave_resources=slave_resources,
                member_id=member_id, early=early,
            )  # fmt: skip
        except BaseException:
            if early is not None:
                early.abandon()
            raise
        self._ctrl_c_before = _ctrl_c
        self._watching = threading.current_thread() is threading.main_thread()
        if self._watching:
            _watch_ctrl_c(True)
        # Collected without shutdown(): shut down without waiting (at exit, the service's own hook waits).
        weakref.finalize(self, self._core.service.shutdown, False).atexit = False

    def share(self, obj: T) -> T:
        """Send ``obj`` to each slave once; pass the handle returned in place of it (``Master.share``: typed
        as ``obj``, which it stands for in a task's arguments)."""
        return cast(T, self._core.share(obj))

    def file_counters(self) -> dict[str, Any]:
        """What the file service of shared objects sent (``Master.file_counters``)."""
        return self._core.file_counters()

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Run ``fn(*args, **kwargs)`` on a slave; the arguments are pickled here, now."""
        return self._core.submit(fn, args, kwargs)

    def with_priority(self, priority: int) -> Prioritized:
        """This executor's ``submit`` and ``map`` at ``priority``: ``ex.with_priority(10).submit(fn, x)``.

        Calls of a higher priority leave the queue first (first in, first out within one; the default is 0,
        or the ``@mwpy.task(priority=N)`` of the function); what slaves hold already runs first. A light view,
        not a keyword of ``submit``, which passes every keyword to the function.
        """
        from mwpy.task import check_priority  # noqa: PLC0415 (loaded with the engine)

        return Prioritized(self._core, check_priority(priority))

    def map(
        self,
        fn: Callable[..., R],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        window_bytes: int | None = None,
        **kwargs: Any,
    ) -> Iterator[R]:
        """Like ``ProcessPoolExecutor.map``: values in input order; ``chunksize`` arguments per task.

        ``kwargs`` go to every call (as with dask's ``client.map``). Closing the
        iterator early (``break``, an exception) cancels every task not started.
        Every input is submitted at once, as the standard executors do, until the
        calls (chunks) not yet returned hold ``window_bytes`` of pickled arguments
        (None: 256 MiB, mwpy.streams.WINDOW_BYTES); the rest are taken as values are returned,
        up to that bound again each time they are down to half of it.
        """
        return self._core.map(
            fn, iterables, timeout=timeout, chunksize=chunksize, window_bytes=window_bytes, kwargs=kwargs
        )

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """Leave the ``with`` block: wait for the futures, as the standard executors do; after Ctrl-C, don't.

        A ``KeyboardInterrupt`` fails every future not done yet with ``BrokenExecutor`` (as a
        ProcessPoolExecutor whose workers Ctrl-C killed is broken), so the block ends at once and the
        slaves are stopped; the interrupt goes on. So does a Ctrl-C the block caught: a hung task would
        otherwise keep it waiting for ever.
        """
        if isinstance(exc, KeyboardInterrupt) or _ctrl_c != self._ctrl_c_before:
            self._core.service.interrupt()
        self.shutdown(wait=True)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; ``cancel_futures`` cancels what has not started; ``wait`` waits for the rest.

        Once every future is done the master tells its slaves to shut down and
        the work folder (our own) is removed.
        """
        self._core.service.shutdown(wait, cancel_futures=cancel_futures)
        if self._watching and threading.current_thread() is threading.main_thread():
            self._watching = False
            _watch_ctrl_c(False)


class Prioritized:
    """:meth:`Executor.with_priority`'s view: ``submit`` and ``map`` as the executor's, at one priority."""

    def __init__(self, core: ExecutorCore, priority: int) -> None:
        self._core = core
        self.priority = priority

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """:meth:`Executor.submit` at this priority."""
        return self._core.submit(fn, args, kwargs, self.priority)

    def map(self, fn: Callable[..., R], *iterables: Iterable[Any], **options: Any) -> Iterator[R]:
        """:meth:`Executor.map` at this priority: ``timeout``, ``chunksize`` and ``window_bytes`` as there, the
        other keywords to every call."""
        settings = {name: options.pop(name) for name in ("timeout", "chunksize", "window_bytes") if name in options}
        return self._core.map(
            fn,
            iterables,
            timeout=settings.get("timeout"),
            chunksize=settings.get("chunksize", 1),
            window_bytes=settings.get("window_bytes"),
            kwargs=options,
            priority=self.priority,
        )

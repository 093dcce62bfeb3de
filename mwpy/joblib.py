"""``import mwpy.joblib`` registers the joblib backend ``"mwpy"``: ``joblib.Parallel`` (and so scikit-learn's
``n_jobs=``) on mwpy slaves.

    import joblib
    import mwpy.joblib

    with joblib.parallel_config(backend="mwpy", n_jobs=4):
        values = joblib.Parallel()(joblib.delayed(f)(x) for x in xs)

How it is built, and why (beside joblib's own backends in ``joblib/_parallel_backends.py``, and the dask and
Ray ones, which register themselves the same way):

* One :class:`mwpy.Executor` per backend instance, made by the first ``Parallel`` call and kept for the next
  ones: ``parallel_config`` makes one instance for its block, so the calls of a block (a ``GridSearchCV``
  makes several) share their slaves, as loky's calls share its reusable executor. When the block ends its
  instance is dropped, and with it the executor, which shuts down as a collected executor does (its slaves
  leave, its work folder goes). ``terminate()``, called after each ``Parallel`` call, lets go of that
  ``Parallel`` so that no reference cycle of ours keeps the instance, and its slaves, alive until a garbage
  collection; after a failed call the exception's traceback makes one (joblib's frames), and that
  collection ends them.
* ``n_jobs`` is the executor's ``max_workers``; ``-1`` is every cpu (``os.cpu_count()``), ``-2`` all but one,
  as for loky; ``n_jobs=1`` runs in the caller, as joblib's process backends fall back to its
  ``SequentialBackend``. Without ``n_jobs`` it is ``-1`` (``default_n_jobs``, as dask's backend):
  choosing ``"mwpy"`` asks for slaves, and scikit-learn's ``n_jobs=None`` then uses them.
* A batch is one task: joblib's ``BatchedCalls``, a callable object, travels pickled with its call
  (mwpy/calls.py ``call``; what plain pickle refuses, a lambda or a closure, by value with cloudpickle).
  A script's functions travel by reference (slaves load the script, mwpy/_spawn.py); those of a
  ``__main__`` without a file (a notebook, ``python -c``) only by value, so such a batch is cloudpickled
  whole, as loky pickles every batch. The batch size is joblib's automatic one (``AutoBatchingMixin``:
  batches of 0.2 to 2 s, measured by the completion callback), or ``Parallel``'s ``batch_size``.
* Results come through ``supports_retrieve_callback``: each future's done callback (run on the executor's
  engine thread, as loky runs it on its manager thread) gives joblib the future, whose ``result()`` is the
  value or raises the task's own exception, the slave's traceback as its ``__cause__``. So
  ``return_as="generator"`` and ``"generator_unordered"`` work, and ``Parallel(timeout=)``.
* ``abort_everything`` (an error in one batch) cancels every batch not yet started; batches already
  running finish on their slaves and are ignored (loky kills its workers and starts others instead; an
  mwpy slave is not killed for that, and may be a Condor job that took minutes to start).
* Keyword arguments of ``parallel_config(backend="mwpy", ...)`` are :class:`mwpy.Executor`'s (checked at
  once): ``backend_arguments``, ``options``, ``workdir``, ``quiet``, ``resources``, ``initializer``...,
  except its ``backend``, a name ``parallel_config`` takes for itself: it is ``slaves=`` here
  (``slaves="condor"``).
"""

from __future__ import annotations

import inspect
import os
import pickle
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

try:
    import joblib
    from joblib._parallel_backends import AutoBatchingMixin, FallbackToBackend, ParallelBackendBase, SequentialBackend
except ImportError as missing:  # one line that says what to install, not joblib's module path
    raise ImportError(f"mwpy.joblib needs joblib: pip install 'mwpy[joblib]' ({missing})") from missing

from mwpy.errors import ConfigurationError
from mwpy.executor import Executor
from mwpy.wire.protocol import PICKLE_PROTOCOL

__all__ = ["NAME", "MwpyBackend"]

#: The backend's name for ``joblib.parallel_config(backend=...)`` and ``Parallel(backend=...)``.
NAME = "mwpy"
#: Executor arguments the backend sets itself: ``n_jobs`` is ``max_workers``, ``slaves`` is ``backend``.
_SET_HERE = frozenset({"max_workers", "backend"})


class MwpyBackend(AutoBatchingMixin, ParallelBackendBase):  # type: ignore[misc]  # joblib has no types
    """joblib's parallel backend ``"mwpy"``: batches of ``Parallel`` calls as tasks of one :class:`mwpy.Executor`.

    ``slaves``: the executor's ``backend`` (``"local"`` or ``"condor"``); ``executor_options``: its other
    keyword arguments (``backend_arguments``, ``options``, ``workdir``...), given to
    ``joblib.parallel_config(backend="mwpy", ...)``. ``nesting_level`` and ``inner_max_num_threads`` are
    joblib's own (the latter is refused, as by every backend but loky).
    """

    supports_retrieve_callback = True
    default_n_jobs = -1

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        *,
        slaves: str = "local",
        **executor_options: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        taken = sorted(_SET_HERE & executor_options.keys())
        if taken:
            raise ConfigurationError(
                f"the joblib backend {NAME!r} sets {', '.join(taken)} itself: give n_jobs= and slaves= instead"
            )
        inspect.signature(Executor).bind(backend=slaves, **executor_options)  # a wrong name fails here: TypeError
        self.slaves = slaves
        self.executor_options = executor_options
        self.parallel: Any = None
        self._executor: Executor | None = None
        self._workers = 0
        #: The futures of this backend's batches not done yet: what ``abort_everything`` cancels.
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """The slaves ``n_jobs`` asks for: negative counts back from every cpu (``-1``: all), as loky's."""
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")  # joblib's own words
        if n_jobs < 0:
            return max((os.cpu_count() or 1) + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs: int | None = 1, parallel: Any = None, **_parallel_kwargs: Any) -> int:
        """Before a ``Parallel`` call: the executor of ``n_jobs`` slaves, made now or kept from the last call.

        ``Parallel``'s own keyword arguments (``max_nbytes``, ``mmap_mode``, ``temp_folder``...) concern
        joblib's memory mapping on one host; slaves get their arguments pickled instead.
        """
        workers = self.effective_n_jobs(n_jobs)
        if workers == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        if self._executor is not None and workers != self._workers:
            self._executor.shutdown(wait=False)  # another size: its tasks finish, then its slaves leave
            self._executor = None
        if self._executor is None:
            self._executor = Executor(max_workers=workers, backend=self.slaves, **self.executor_options)
            self._workers = workers
        self.parallel = parallel
        return workers

    def submit(self, func: Callable[[], list[Any]], callback: Callable[[Any], None] | None = None) -> Future[Any]:
        """Run one batch (joblib's ``BatchedCalls``) as a task; ``callback`` gets its future once it is done."""
        if self._executor is None:
            raise RuntimeError(f"the joblib backend {NAME!r} was not configured by a Parallel call")
        call, arguments = _travelling(func)
        future = self._executor.submit(call, *arguments)
        pending, lock = self._pending, self._lock

        def forget(done: Future[Any]) -> None:  # not a bound method: the engine's futures hold no path to us
            with lock:
                pending.discard(done)

        with lock:
            pending.add(future)
        future.add_done_callback(forget)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def retrieve_result_callback(self, out: Future[Any]) -> Any:
        """The batch's values, or its first call's exception raised as itself (joblib then aborts the rest)."""
        return out.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """An error in one batch: cancel every batch not started (running ones finish, ignored); the executor
        stays for the block's next calls whatever ``ensure_ready`` says."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()

    def terminate(self) -> None:
        """After a ``Parallel`` call: forget it and the batch timings (loky's too), keep the executor."""
        self.parallel = None
        self.reset_batch_stats()


def _travelling(batch: Callable[[], list[Any]]) -> tuple[Callable[..., list[Any]], tuple[Any, ...]]:
    """The call the executor sends for ``batch``: the batch itself, or :func:`_unpickled` of it cloudpickled
    whole when ``__main__`` has no file (a notebook, ``python -c``), whose functions plain pickle would name
    by reference and no slave could find (mwpy/wire/codec.py ``by_value`` decides the same for a function
    the executor is given)."""
    if getattr(sys.modules.get("__main__"), "__file__", None) is not None:
        return batch, ()
    import cloudpickle  # noqa: PLC0415 (40 ms to import: only for an interactive session)

    return _unpickled, (cloudpickle.dumps(batch, PICKLE_PROTOCOL),)


def _unpickled(blob: bytes) -> list[Any]:
    """Run a cloudpickled batch (on a slave): ``pickle.loads`` reads cloudpickle's output."""
    batch: Callable[[], list[Any]] = pickle.loads(blob)
    return batch()


joblib.register_parallel_backend(NAME, MwpyBackend)

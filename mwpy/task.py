"""Task algorithms, task policies, and the Task / Result records.

A task algorithm is an ordinary function decorated with :func:`task`. The
master submits tasks for it (``hello.submit("x")``); a slave running the same
program finds the function by its name and calls it. Arguments are pickled at
submit time, so an argument that cannot travel fails at the call site, not
minutes later on a slave.

Two pieces of process state live here, both explicit objects:

* :data:`registry`, the task algorithms by name: a slave finds the function a
  task names there. It fills as ``@mwpy.task`` decorators run at import time,
  so master and slave (the same program) agree on it; tests use
  :meth:`Registry.snapshot`/:meth:`Registry.restore` (or :meth:`Registry.clear`).
* the *current master*, a :class:`contextvars.ContextVar`: what ``submit()``
  and the target numbers talk to. ``with Master(...) as mw:`` sets it and
  restores the previous one on exit; nothing else needs to.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import importlib
import inspect
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

import attrs

from mwpy import safe_text
from mwpy.errors import (
    ConfigurationError,
    MwpyError,
    NoMatchingSlaveError,
    NotInMasterError,
    RemoteTraceback,
    UnrunnableTaskError,
)
from mwpy.resources import Resources
from mwpy.wire import codec
from mwpy.wire.protocol import fits

if TYPE_CHECKING:
    from mwpy.intake import Intake
    from mwpy.master import Master

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_current: contextvars.ContextVar[Master | None] = contextvars.ContextVar("mwpy_current_master", default=None)


@attrs.frozen
class Policy:
    """How and where one task runs (CL-MW's task policy).

    ``sid``: run only on this ordered slave (``None``: any slave).
    ``tag``: any picklable value, handed back unchanged with the result.
    ``retry``: when the slave running the task vanishes, queue it again
    (``False``: hand it back as unrunnable).
    ``do_it_anyway``: an ordered task whose slave vanished moves to the
    unordered pool instead of becoming unrunnable.
    ``key``: a stable name for the task; with a journal, a task whose key
    already has a journaled result is answered from the journal.
    ``retries``: how many more times a task that *raised* runs (on other
    slaves where possible) before its failure is handed over; ``None``: the
    master's ``--mw-task-attempts`` (default: none), or none at all when
    ``retry=False``. ``retry_on``: retry only exceptions of these types.
    ``allowed_failures``: how many slaves may die while running the task
    (a segfault, ``os._exit``, a kill for memory) and it still runs again;
    the next death fails it with :class:`~mwpy.errors.KilledSlaveError`
    (dask's ``allowed-failures``); ``None``: the master's
    ``--mw-allowed-failures`` (default 3).
    ``resources``: what a slave must offer to run the task (``None``: any slave).
    """

    sid: str | None = None
    tag: Any = None
    retry: bool = True
    do_it_anyway: bool = False
    key: str | None = None
    retries: int | None = None
    retry_on: tuple[type[BaseException], ...] | None = None
    #: Seconds a run may take before it fails with TaskTimeoutError (None: the master's --mw-task-timeout).
    timeout: float | None = None
    allowed_failures: int | None = None
    resources: Resources | None = None

    def attempts(self, default: int) -> int:
        """Runs a task that keeps raising gets in all, given the master's ``--mw-task-attempts``."""
        if self.retries is not None:
            return 1 + self.retries
        return default if self.retry else 1


DEFAULT_POLICY = Policy()


@attrs.frozen(eq=False)
class Task:
    """A task as the master algorithm sees it: what to run, under which policy.

    Unrunnable tasks are handed back to the master algorithm as these records
    (``mw.unrunnable_tasks()``); ``args``/``kwargs`` decode the stored
    arguments on demand. The master's bookkeeping of a task's runs is not
    here: it is the scheduler's own (:class:`mwpy.core.scheduler.Entry`).
    """

    task_id: int
    algorithm: str
    payload: bytes = attrs.field(repr=False)
    policy: Policy

    @property
    def sid(self) -> str | None:
        return self.policy.sid

    @property
    def tag(self) -> Any:
        return self.policy.tag

    @property
    def args(self) -> tuple[Any, ...]:
        return codec.decode_arguments(self.payload)[0]

    @property
    def kwargs(self) -> dict[str, Any]:
        return codec.decode_arguments(self.payload)[1]


@attrs.frozen
class TaskError:
    """Why a task produced no value: the exception as text, so it always travels.

    ``pickled`` is the exception itself, pickled on the slave when it could
    be: :meth:`exception` rebuilds it for futures, ``mw.map`` and
    ``Executor.map``, which raise it as itself.
    """

    type: str
    message: str
    traceback: str
    pickled: bytes | None = attrs.field(default=None, repr=False)


@attrs.frozen
class Result:
    """One computed task: its value, or the error it raised on the slave."""

    task_id: int
    algorithm: str
    slave_id: str
    tag: Any
    compute_time: float
    value: Any = None
    error: TaskError | None = None
    #: True when the value came from the result journal instead of a run.
    journaled: bool = False
    #: What the task printed on the slave (each stream capped at 64 KiB characters; "" when nothing).
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)
#: Held while a LightFuture's condition is made, and while its settler checks that none exists yet.
_MAKING = threading.Lock()


class _MadeOnFirstUse:
    """A ``Future`` attribute made when first read (then it sits in the instance and this is bypassed)."""

    def __init__(self, make: Callable[[], object]) -> None:
        self._make = make
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return instance.__dict__.setdefault(self._name, self._make())


class _ConditionOnFirstUse:
    """``LightFuture._condition``: made under ``_MAKING``, which also sets ``_shared`` (what the settler reads)."""

    def __get__(self, instance: LightFuture[Any] | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        with _MAKING:
            condition = instance.__dict__.setdefault("_condition", threading.Condition())
            instance._shared = True
        return condition


class LightFuture(concurrent.futures.Future[R]):
    """A ``concurrent.futures.Future`` that makes its ``threading.Condition`` only when someone needs it.

    ``Future()`` builds a Condition, an RLock and two lists: about 0.8 µs and
    1.6 KB, and three lock round trips more to start and settle it. A master
    that streams 10^5 tasks and keeps none of their futures paid that per
    task. Here the condition and the lists are made on first use (a
    ``result()`` or ``exception()`` that must wait, ``wait()``,
    ``as_completed()``, ``add_done_callback()``, ``cancel()``); until then
    the thread that starts and settles the future changes its state under a
    module lock, which also guards making the condition, so no waiter can
    miss the news. From then on the standard methods run unchanged.
    """

    _condition = _ConditionOnFirstUse()
    #: Whether a condition exists (set under _MAKING): a class attribute until then, so no instance dict is made.
    _shared = False
    _waiters = _MadeOnFirstUse(list)
    _done_callbacks = _MadeOnFirstUse(list)

    # Until set on the instance, these class values stand in (Future.__init__, not called, would set them).
    _state = PENDING
    _result: Any = None
    _exception: BaseException | None = None
    #: What the task printed on its slave (as ``Result.stdout``/``.stderr``), once it is done.
    stdout = ""
    stderr = ""

    def __init__(self) -> None:  # not Future.__init__: that is the cost this class avoids
        pass

    # One read of one attribute needs no lock (Future takes its condition for these).
    def done(self) -> bool:
        return self._state == FINISHED or self._state in _CANCELLED

    def cancelled(self) -> bool:
        return self._state in _CANCELLED

    def running(self) -> bool:
        return self._state == RUNNING

    def result(self, timeout: float | None = None) -> R:
        if self._state == FINISHED and self._exception is None:
            return self._result  # type: ignore[no-any-return]
        return super().result(timeout)

    def cancel(self) -> bool:
        if self._state in (RUNNING, FINISHED):
            return False  # neither state ever becomes cancelled: no lock needed to say so
        return super().cancel()

    def _mark_running(self) -> bool:
        """``set_running_or_notify_cancel`` for a future that may still have no condition; True when running."""
        with _MAKING:
            if not self._shared and self._state == PENDING:
                self._state = RUNNING
                return True
        return self.running() or self.set_running_or_notify_cancel()

    #: The exceptions of tasks this future raises as themselves (others as a TaskRaisedError): no SystemExit,
    #: which would end the master's program from ``result()``.
    RAISED_AS_ITSELF: tuple[type[BaseException], ...] = (Exception,)

    def _settle_with(self, result: Result) -> None:
        """The task's value, or its exception as itself (built only while the future is not done yet)."""
        if result.stdout or result.stderr:
            self.stdout, self.stderr = result.stdout, result.stderr
        if result.error is None:
            self._finish(result.value, None)
        elif not self.done():
            self._finish(None, task_exception(result, self.RAISED_AS_ITSELF))

    def _finish(self, value: Any, exception: BaseException | None) -> None:
        """``set_result``/``set_exception`` unless the future is done already (a cancelled one stays so)."""
        with _MAKING:
            if not self._shared:  # nobody waits or listens: no one to tell
                if self._state != FINISHED and self._state not in _CANCELLED:
                    self._result, self._exception, self._state = value, exception, FINISHED
                return
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            if exception is None:
                self.set_result(value)
            else:
                self.set_exception(exception)


class TaskFuture(LightFuture[R]):
    """What ``submit()`` returns in a master algorithm: a ``concurrent.futures.Future`` with the task's id.

    ``result()`` and ``exception()`` called in the master's thread drive the
    master loop until the task is answered (nobody else would), so a master
    algorithm can simply write ``hello.submit(x).result()``. From another
    thread they wait like any future. ``cancel()`` succeeds until the task
    leaves for a slave; a cancelled task never reaches ``mw.results()``.
    Every other result still appears in ``mw.results()`` as well: the loop
    API is unchanged, and the future is a second view of the same result.
    """

    def __init__(self, task_id: int, intake: Intake) -> None:  # no super().__init__(): LightFuture's does nothing
        self.task_id = task_id
        self._intake = intake  # its master's: how to drive the loop while waiting, how to pull the task back

    def __repr__(self) -> str:
        return f"<TaskFuture task {self.task_id} {super().__repr__()[1:-1].split(' ', 2)[-1]}>"

    def result(self, timeout: float | None = None) -> R:
        """The task's value, raising its exception as itself (the slave's traceback is the ``__cause__``)."""
        if self._state != FINISHED:
            self._intake.wait_for(self, timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The task's exception as itself, or None; waits like :meth:`result`."""
        self._intake.wait_for(self, timeout)
        return super().exception(timeout)

    def cancel(self) -> bool:
        """Cancel the task if it has not started: queued here, or waiting in a slave's window (pulled back).

        Call it from the master's thread (the engine is not thread-safe).
        """
        if not super().cancel():
            return False
        self._intake.cancel([self.task_id])
        return True

    # The scheduler's Listener (mwpy/core/scheduler.py): the master tells the future what becomes of its task.

    def may_start(self) -> bool:
        """A cancelled future's task is dropped unsent."""
        return self._state not in _CANCELLED

    def began(self) -> None:
        """The task is first in flight on its slave: running, so no longer cancellable.

        No lock: only the master's thread changes this future's state before it
        is done (``cancel()`` is called there too), and going from pending to
        running wakes no waiter.
        """
        if self._state == PENDING:
            self._state = RUNNING
        elif self._state != RUNNING:
            self.set_running_or_notify_cancel()

    def unrunnable(self, reason: str | None = None) -> bool:
        self._finish(None, unrunnable_error(self.task_id, reason))
        return True

    def settle(self, result: Result) -> bool:
        """The result settles the future and goes to ``mw.results()`` too, unless the future was cancelled."""
        if self._state in _CANCELLED:
            return False  # no result of a cancelled task reaches the user
        if result.error is None and not (result.stdout or result.stderr):
            self._finish(result.value, None)  # the hot path, without _settle_with's call
        else:
            self._settle_with(result)
        return True


class TaskFailedError(MwpyError):
    """Raised by the convenience API when a task raised on its slave."""

    def __init__(self, result: Result) -> None:
        assert result.error is not None
        self.result = result
        error = result.error  # the slave's words, shown safe (mwpy/safe_text.py); the Result keeps them as they are
        one_line, lines = safe_text.one_line, safe_text.terminal
        super().__init__(
            f"task '{one_line(result.algorithm)}' failed on {one_line(result.slave_id)}: "
            f"{one_line(error.type)}: {lines(error.message)}\n{lines(error.traceback)}"
        )


class TaskRaisedError(TaskFailedError):
    """A task raised an exception the master cannot rebuild (its class does not unpickle here).

    ``type_name`` names the exception's type as the slave saw it; the
    message and the slave's traceback are in the text, as for
    :class:`TaskFailedError`.
    """

    def __init__(self, result: Result) -> None:
        super().__init__(result)
        assert result.error is not None
        self.type_name = result.error.type


def task_exception(result: Result, as_itself: tuple[type[BaseException], ...] = (Exception,)) -> BaseException:
    """The exception to raise for a failed ``result``: the task's own when it unpickles and is one of
    ``as_itself``, else a TaskFailedError.

    The slave's traceback is attached as ``__cause__`` (a
    :class:`~mwpy.errors.RemoteTraceback`, as ``concurrent.futures`` attaches
    its ``_RemoteTraceback``), so an uncaught one prints both.
    """
    error = result.error
    assert error is not None
    exc = None if error.pickled is None else codec.decode_exception(error.pickled)
    if not isinstance(exc, as_itself):
        failed = TaskRaisedError(result) if error.pickled is not None or error.traceback else TaskFailedError(result)
        _add_output_notes(failed, result)
        return failed
    exc.__cause__ = RemoteTraceback(safe_text.terminal(error.traceback), result)  # printed: shown safe
    _add_output_notes(exc, result)
    return exc


def unrunnable_error(task_id: int, reason: str | None = None) -> UnrunnableTaskError:
    """What the future of a task raises whose slave vanished and whose policy forbids running it again, or
    (``reason``) that no slave on offer can run."""
    if reason is not None:
        return NoMatchingSlaveError(reason)  # it names the task
    return UnrunnableTaskError(f"task {task_id}: its slave vanished and its policy forbids running it again")


def _add_output_notes(exc: BaseException, result: Result) -> None:
    """What the task printed goes with its exception (PEP 678 notes: shown under the traceback)."""
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            shown = safe_text.terminal(text.rstrip())  # printed under the traceback; the Result has it as written
            exc.add_note(f"[task {result.task_id} {name} on {safe_text.one_line(result.slave_id)}]\n{shown}")


def use_master(master: Master | None) -> contextvars.Token[Master | None]:
    """Make ``master`` the one ``submit`` and target numbers talk to; ``reset_master(token)`` undoes it.

    ``Master.__enter__``/``__exit__`` call these; code that cannot use ``with`` may too.
    """
    return _current.set(master)


def reset_master(token: contextvars.Token[Master | None]) -> None:
    """Restore the current master that was in place before ``use_master`` returned ``token``."""
    _current.reset(token)


def current_master() -> Master | None:
    """The master tasks are submitted to here, if any."""
    return _current.get()


def share(obj: T) -> T:
    """``mwpy.share(obj)``: :meth:`Master.share` of the current master, for code inside a master algorithm."""
    return _current_master("mwpy.share()").share(obj)


def _current_master(what: str) -> Master:
    master = _current.get()
    if master is None:
        raise NotInMasterError(f"{what} can only be called while the master algorithm runs")
    return master


class TaskAlgorithm(Generic[P, R]):
    """A function that slaves run; made by :func:`task`.

    Calling it runs the function here, as if undecorated. ``submit`` queues a
    task on the running master; ``with_policy`` gives a submitter bound to one
    policy; the target-number members let a master stream tasks with bounded
    memory.
    """

    def __init__(self, fn: Callable[P, R], name: str, policy: Policy = DEFAULT_POLICY) -> None:
        self.fn = fn
        self.name = name
        #: The policy ``submit()`` uses, and the defaults ``with_policy()`` starts from.
        self.policy = policy
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._signature, self._positional = _arity(fn)

    def check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Fail at the call site when the arguments do not fit the function's signature."""
        if not kwargs and self._positional is not None:
            low, high = self._positional
            if low <= len(args) <= high:
                return  # the common case, without the cost of Signature.bind
        if self._signature is not None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.name}.submit(): {exc}") from None

    def encode(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        max_frame: int,
        store: codec.Store | None = None,
        *,
        caller: str | None = None,
    ) -> bytes:
        """Check and pickle a call's arguments at the call site: a wrong or unsendable argument fails here.

        With ``store`` (the master's file service) a ``mwpy.File`` among them
        is published there and arguments above :data:`~mwpy.wire.codec.SPILL_ABOVE`
        bytes go there; else arguments a frame of ``max_frame`` bytes
        (``--mw-max-write-buffer-size``) cannot carry fail here. ``caller``: an
        Executor's call (this is one of mwpy's own call tasks) of the user's
        function so named: messages name it, and an argument that does not
        pickle raises pickle's own error; the signature is not checked, as the
        executor makes the call's arguments itself (function, arguments,
        keyword arguments), and the check was a fifth of a no-op call's pickling.
        """
        if caller is None:
            self.check_arguments(args, kwargs)
        name = self.name if caller is None else caller
        if store is None:
            payload = codec.encode_arguments(name, args, kwargs, as_itself=caller is not None)
        else:
            payload = codec.encode_with(store, name, args, kwargs, as_itself=caller is not None)
        if not fits(len(payload), max_frame):
            raise ConfigurationError(
                f"the arguments of task {name!r} take {len(payload)} bytes, more than a frame "
                f"of --mw-max-write-buffer-size {max_frame} bytes can carry"
            )
        return payload

    def __repr__(self) -> str:
        return f"<task algorithm {self.name!r}>"

    def __reduce__(self) -> tuple[Callable[[str, str], TaskAlgorithm[Any, Any]], tuple[str, str]]:
        """Pickled by reference, as pickle treats a function: its name and the module that defines it."""
        return registered, (self.name, self.fn.__module__)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> TaskFuture[R]:
        """Queue one task with the default policy; returns its future (``.task_id`` is its id)."""
        return _current_master(f"{self.name}.submit()")._intake.submit_future(self, self.policy, args, kwargs)

    def with_policy(
        self,
        *,
        sid: str | None = None,
        tag: Any = None,
        retry: bool = True,
        do_it_anyway: bool = False,
        key: str | None = None,
        retries: int | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        timeout: float | None = None,
        allowed_failures: int | None = None,
        resources: Resources | Mapping[str, Any] | str | None = None,
    ) -> Submitter[P, R]:
        """A submitter that queues tasks of this algorithm under one fixed policy.

        ``retries``/``retry_on``/``timeout``/``allowed_failures``/``resources`` left out keep what
        ``@mwpy.task(...)`` declared.
        """
        base = self.policy
        policy = Policy(
            sid=sid,
            tag=tag,
            retry=retry,
            do_it_anyway=do_it_anyway,
            key=key,
            retries=base.retries if retries is None else _check_retries(retries),
            retry_on=base.retry_on if retry_on is None else _check_retry_on(retry_on),
            timeout=base.timeout if timeout is None else _check_timeout(timeout),
            allowed_failures=_allowed(base.allowed_failures if allowed_failures is None else allowed_failures),
            resources=base.resources if resources is None else Resources.of(resources),
        )
        return Submitter(self, policy)

    @property
    def target_number(self) -> int:
        """How many pending tasks of this algorithm the master wants to keep (advisory)."""
        return _current_master("target_number").target_number_for(self.name)

    @target_number.setter
    def target_number(self, value: int) -> None:
        _current_master("target_number").set_target_number_for(self.name, value)

    def pending_tasks(self) -> int:
        """Tasks of this algorithm known to the master and not yet answered."""
        return _current_master("pending_tasks()").pending_tasks_for(self.name)

    def upto_target_number(self) -> int:
        """How many tasks to create now to reach the target number (never negative)."""
        return max(0, self.target_number - self.pending_tasks())


def _arity(fn: Callable[..., Any]) -> tuple[inspect.Signature | None, tuple[float, float] | None]:
    """The signature, and (fewest, most) positional arguments when those alone decide a call."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None, None
    low = 0
    high: float = 0
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_POSITIONAL:
            high = math.inf
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            high += 1
            low += parameter.default is parameter.empty
        elif parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            return signature, None  # a required keyword: positional counts cannot decide
    return signature, (low, high)


@attrs.frozen
class Submitter(Generic[P, R]):
    """Submits tasks of one algorithm under a fixed policy (CL-MW's with-task-policy)."""

    algorithm: TaskAlgorithm[P, R]
    policy: Policy

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> TaskFuture[R]:
        """Queue one task under this policy; returns its future (``.task_id`` is its id)."""
        name = self.algorithm.name
        return _current_master(f"{name}.submit()")._intake.submit_future(self.algorithm, self.policy, args, kwargs)

    __call__ = submit


def _check_retries(retries: int) -> int:
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigurationError(f"retries must be a non-negative int, not {retries!r}")
    return retries


def _allowed(allowed_failures: int | None) -> int | None:
    """``allowed_failures`` checked: None (the master's default) or a non-negative int."""
    if allowed_failures is None:
        return None
    if not isinstance(allowed_failures, int) or isinstance(allowed_failures, bool) or allowed_failures < 0:
        raise ConfigurationError(f"allowed_failures must be a non-negative int, not {allowed_failures!r}")
    return allowed_failures


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise ConfigurationError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _check_retry_on(retry_on: object) -> tuple[type[BaseException], ...]:
    kinds = (retry_on,) if isinstance(retry_on, type) else retry_on
    if not isinstance(kinds, tuple) or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        raise ConfigurationError(f"retry_on must be a tuple of exception classes, not {retry_on!r}")
    return kinds


@overload
def task(fn: Callable[P, R], /) -> TaskAlgorithm[P, R]: ...
@overload
def task(
    *,
    name: str | None = None,
    retries: int | None = None,
    retry_on: tuple[type[BaseException], ...] | None = None,
    timeout: float | None = None,
    allowed_failures: int | None = None,
    resources: Resources | Mapping[str, Any] | str | None = None,
) -> Callable[[Callable[P, R]], TaskAlgorithm[P, R]]: ...


def task(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    retries: int | None = None,
    retry_on: tuple[type[BaseException], ...] | None = None,
    timeout: float | None = None,
    allowed_failures: int | None = None,
    resources: Resources | Mapping[str, Any] | str | None = None,
) -> TaskAlgorithm[P, R] | Callable[[Callable[P, R]], TaskAlgorithm[P, R]]:
    """Declare a task algorithm: ``@mwpy.task`` or ``@mwpy.task(name="...", retries=2, retry_on=(OSError,))``.

    Slaves look algorithms up by name, so each name must be unique in the
    program; the default name is the function's qualified name. A task that
    raises is a result unless ``retries`` asks for more runs (only for
    ``retry_on`` exceptions, when given); ``timeout`` seconds bound each run
    (past it the run fails with :class:`~mwpy.errors.TaskTimeoutError`); a task that kills more than
    ``allowed_failures`` slaves running it fails with :class:`~mwpy.errors.KilledSlaveError`
    (default: the master's ``--mw-allowed-failures``, 3); ``resources`` (a :class:`~mwpy.resources.Resources`
    or a dict of its keys) sends its tasks only to slaves that offer as much. The function must be defined at
    module level, where slaves can find it: a nested function or a lambda is
    refused here rather than failing on the slave.
    """
    policy = Policy(
        retries=None if retries is None else _check_retries(retries),
        retry_on=None if retry_on is None else _check_retry_on(retry_on),
        timeout=None if timeout is None else _check_timeout(timeout),
        allowed_failures=_allowed(allowed_failures),
        resources=Resources.of(resources),
    )

    def register(f: Callable[P, R]) -> TaskAlgorithm[P, R]:
        qualname = getattr(f, "__qualname__", "")
        if name is None and ("<locals>" in qualname or "<lambda>" in qualname):
            raise ConfigurationError(
                f"@mwpy.task on {qualname}: slaves find task algorithms by name when they import the "
                "program, so a nested function or a lambda cannot be one; define it with def at module "
                "level (or give it a name= and define it at import time)"
            )
        algorithm = TaskAlgorithm(f, name or f.__qualname__, policy)
        registry.add(algorithm)
        return algorithm

    return register if fn is None else register(fn)


def registered(name: str, module: str) -> TaskAlgorithm[Any, Any]:
    """The task algorithm ``name``, importing ``module`` first if this process has not registered it yet.

    How a task algorithm unpickles (``TaskAlgorithm.__reduce__``): a slave
    whose program imports the task's module only under ``if __name__ ==
    "__main__":`` (which a slave does not run) finds it all the same, as
    pickle finds a function by importing its module.
    """
    if name not in registry:
        importlib.import_module(module)
    return registry.require(name)


class Registry:
    """The task algorithms of this process, by name (what ``@mwpy.task`` fills and slaves look up).

    One per process (:data:`registry`) because a slave must find, by name, a
    function the program defined at import time. Resettable for tests.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, TaskAlgorithm[Any, Any]] = {}

    def add(self, algorithm: TaskAlgorithm[Any, Any]) -> None:
        """Register ``algorithm``; a second, different definition under the same name is an error."""
        known = self._by_name.get(algorithm.name)
        if known is None:
            self._by_name[algorithm.name] = algorithm
        elif known.fn is not algorithm.fn and not _same_source(known.fn, algorithm.fn):
            raise MwpyError(f"task algorithm {algorithm.name!r} is defined twice; give one a name=")

    def get(self, name: str) -> TaskAlgorithm[Any, Any] | None:
        """The algorithm called ``name``, if any."""
        return self._by_name.get(name)

    def require(self, name: str) -> TaskAlgorithm[Any, Any]:
        """The algorithm called ``name``; LookupError, naming it, on a slave whose program has none."""
        algorithm = self._by_name.get(name)
        if algorithm is None:
            raise LookupError(f"this program has no task algorithm named {name!r}")
        return algorithm

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def snapshot(self) -> dict[str, TaskAlgorithm[Any, Any]]:
        """A copy of the registrations, for :meth:`restore`."""
        return dict(self._by_name)

    def restore(self, snapshot: dict[str, TaskAlgorithm[Any, Any]]) -> None:
        """Put back what :meth:`snapshot` saw (forgetting what was registered since)."""
        self._by_name = dict(snapshot)

    def clear(self) -> None:
        """Forget every registration."""
        self._by_name.clear()


#: The task algorithms of this process.
registry = Registry()


def _same_source(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """The same definition seen twice: a program imported both as ``__main__`` and by its name."""
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (
        code_a is not None
        and code_b is not None
        and (code_a.co_filename, code_a.co_firstlineno) == (code_b.co_filename, code_b.co_firstlineno)
    )


def lookup(name: str) -> TaskAlgorithm[Any, Any] | None:
    """The registered task algorithm called ``name``, if any (``registry.get``)."""
    return registry.get(name)

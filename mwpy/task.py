"""Task algorithms: the ``@mwpy.task`` decorator, the registry of task algorithms, the current master.

A task algorithm is an ordinary function decorated with :func:`task`. The
master submits tasks for it (``hello.submit("x")``); a slave running the same
program finds the function by its name and calls it. Arguments are pickled at
submit time, so an argument that cannot travel fails at the call site, not
minutes later on a slave. The records a task is made of live in
mwpy/task_records.py, its future in mwpy/futures.py (made by the master).

Two pieces of process state live here, both explicit objects:

* :data:`registry`, the task algorithms by name: a slave finds the function a
  task names there. It fills as ``@mwpy.task`` decorators run at import time,
  so master and slave (the same program) agree on it; tests use
  :meth:`Registry.snapshot`/:meth:`Registry.restore` (or :meth:`Registry.clear`).
* the *current master*, a :class:`contextvars.ContextVar`: what ``submit()``
  and the target numbers talk to. ``with Master(...) as mw:`` sets it and
  restores the previous one on exit; nothing else needs to. It is typed as
  :class:`Submissions`, what this module asks of it, so that nothing here
  imports the master: a slave loads this module and never the master's parts.
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

import attrs

from mwpy.errors import ConfigurationError, MwpyError, NotInMasterError
from mwpy.resources import Resources
from mwpy.task_records import DEFAULT_POLICY, Policy
from mwpy.wire import codec
from mwpy.wire.protocol import fits

if TYPE_CHECKING:
    from mwpy.futures import TaskFuture

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Submissions(Protocol):
    """What ``submit()`` and the target numbers ask of the current master (:class:`mwpy.master.Master`)."""

    def _submit(
        self, algorithm: TaskAlgorithm[Any, Any], policy: Policy, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskFuture[Any]: ...

    def share(self, obj: T) -> T: ...

    def target_number_for(self, algorithm: str) -> int: ...

    def set_target_number_for(self, algorithm: str, value: int) -> None: ...

    def pending_tasks_for(self, algorithm: str) -> int: ...


_current: contextvars.ContextVar[Submissions | None] = contextvars.ContextVar("mwpy_current_master", default=None)


def use_master(master: Submissions | None) -> contextvars.Token[Submissions | None]:
    """Make ``master`` the one ``submit`` and target numbers talk to; ``reset_master(token)`` undoes it.

    ``Master.__enter__``/``__exit__`` call these; code that cannot use ``with`` may too.
    """
    return _current.set(master)


def reset_master(token: contextvars.Token[Submissions | None]) -> None:
    """Restore the current master that was in place before ``use_master`` returned ``token``."""
    _current.reset(token)


def current_master() -> Submissions | None:
    """The master tasks are submitted to here, if any."""
    return _current.get()


def share(obj: T) -> T:
    """``mwpy.share(obj)``: :meth:`Master.share` of the current master, for code inside a master algorithm."""
    return _current_master("mwpy.share()").share(obj)


def _current_master(what: str) -> Submissions:
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
        return _current_master(f"{self.name}.submit()")._submit(self, self.policy, args, kwargs)

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
        priority: int | None = None,
    ) -> Submitter[P, R]:
        """A submitter that queues tasks of this algorithm under one fixed policy.

        ``retries``/``retry_on``/``timeout``/``allowed_failures``/``resources``/``priority`` left out keep
        what ``@mwpy.task(...)`` declared. ``priority``: higher first, first in first out within one.
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
            priority=base.priority if priority is None else check_priority(priority),
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
        return _current_master(f"{name}.submit()")._submit(self.algorithm, self.policy, args, kwargs)

    __call__ = submit


def check_priority(priority: int) -> int:
    """A task's priority: an int (a bool or a float is refused: 0.5 would silently be a new priority)."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ConfigurationError(f"priority must be an int, not {priority!r}")
    return priority


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
    priority: int = 0,
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
    priority: int = 0,
) -> TaskAlgorithm[P, R] | Callable[[Callable[P, R]], TaskAlgorithm[P, R]]:
    """Declare a task algorithm: ``@mwpy.task`` or ``@mwpy.task(name="...", retries=2, retry_on=(OSError,))``.

    Slaves look algorithms up by name, so each name must be unique in the
    program; the default name is the function's qualified name. A task that
    raises is a result unless ``retries`` asks for more runs (only for
    ``retry_on`` exceptions, when given); ``timeout`` seconds bound each run
    (past it the run fails with :class:`~mwpy.errors.TaskTimeoutError`); a task that kills more than
    ``allowed_failures`` slaves running it fails with :class:`~mwpy.errors.KilledSlaveError`
    (default: the master's ``--mw-allowed-failures``, 3); ``resources`` (a :class:`~mwpy.resources.Resources`
    or a dict of its keys) sends its tasks only to slaves that offer as much; tasks of a higher ``priority``
    leave the queue first (default 0; first in, first out within one). The function must be defined at
    module level, where slaves can find it: a nested function or a lambda is
    refused here rather than failing on the slave.
    """
    policy = Policy(
        retries=None if retries is None else _check_retries(retries),
        retry_on=None if retry_on is None else _check_retry_on(retry_on),
        timeout=None if timeout is None else _check_timeout(timeout),
        allowed_failures=_allowed(allowed_failures),
        resources=Resources.of(resources),
        priority=check_priority(priority),
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

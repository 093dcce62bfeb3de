"""The futures a master hands out: ``submit()``'s :class:`TaskFuture` and the :class:`LightFuture` under
it (an Executor's futures too).

A future is its task's listener (mwpy/core/entry.py's ``Listener``) and waits through its master's
intake (mwpy/intake.py), so this module sits above the intake: the intake queues a task with whatever
listener it is given and knows no future. The master makes them (``Master._submit``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeVar, cast

from mwpy import dataflow, lineage
from mwpy.core.entry import Entry
from mwpy.data.service import ValueNotFetchedError
from mwpy.errors import UsageError
from mwpy.held_tasks import Holding
from mwpy.task_records import Policy, Result, task_exception, unrunnable_error
from mwpy.wire import codec

if TYPE_CHECKING:
    from mwpy.intake import Intake

R = TypeVar("R")


class TaskAlgorithm(Protocol):
    """What :func:`submit_task` uses of ``mwpy.task.TaskAlgorithm`` (which imports this module)."""

    @property
    def name(self) -> str: ...

    def check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...

    def encode(self, args: tuple[Any, ...], kwargs: dict[str, Any], max_frame: int, store: Any = None) -> bytes: ...


_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)
#: The failure of a task whose slave could not fetch an input that another slave holds.
LOST: Final = ValueNotFetchedError.__qualname__
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

    def __reduce__(self) -> Any:
        """A future never travels: pickling one fails, and the call that holds it waits for its value instead
        (mwpy/dataflow.py)."""
        raise TypeError("an mwpy future cannot be pickled: pass it as an argument of submit() to pass its value")

    # One read of one attribute needs no lock (Future takes its condition for these).
    def done(self) -> bool:
        return self._state == FINISHED or self._state in _CANCELLED

    def cancelled(self) -> bool:
        return self._state in _CANCELLED

    def running(self) -> bool:
        return self._state == RUNNING

    def succeeded(self) -> bool:
        """Done with a value (neither cancelled nor failed): ``exception()`` would make a condition to say so."""
        return self._state == FINISHED and self._exception is None

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

    #: What a future whose value stays on its slave shares with mwpy/held_tasks.py and mwpy/lineage.py (as an
    #: Executor's future does): the slave that holds it, its call (to make it again), a dependent's held inputs.
    _SHARED_WITH: ClassVar = {
        "_holder": ("mwpy.held_tasks", "mwpy.lineage"),
        "_call": ("mwpy.held_tasks", "mwpy.lineage"),
        "_result": ("mwpy.lineage",),
        "_label": ("mwpy.lineage",),
        "_end": ("mwpy.lineage",),
        "_held_inputs": ("mwpy.lineage",),
        "_again": ("mwpy.lineage",),
        "_recoveries": ("mwpy.lineage",),
    }
    #: Its task's name (set by ``submit()``), for the message of a dependent task whose input this future failed.
    label = ""
    #: Set only for a task whose value is to stay on its slave (mwpy/held_tasks.py), as it leaves: that slave
    #: (``master`` once relayed there), and its call, to make its value again if that slave loses it.
    _holder = ""
    _call: tuple[str, bytes, Policy] | None = None
    #: A dependent task's inputs whose values stay on their slaves, and how to queue it again (while it has
    #: some), and how often it was queued again because one could not be fetched (mwpy/lineage.py).
    _held_inputs: tuple[TaskFuture[Any], ...] = ()
    _again: Callable[[], None] | None = None
    _recoveries = 0

    def __init__(self, task_id: int, intake: Intake) -> None:  # no super().__init__(): LightFuture's does nothing
        self.task_id = task_id
        self._intake = intake  # its master's: how to drive the loop while waiting, how to pull the task back

    def __repr__(self) -> str:
        return f"<TaskFuture task {self.task_id} {super().__repr__()[1:-1].split(' ', 2)[-1]}>"

    def result(self, timeout: float | None = None) -> R:
        """The task's value, raising its exception as itself (the slave's traceback is the ``__cause__``); one
        its slave holds (another task's input) is fetched from there now, once (mwpy/held_tasks.py)."""
        if self._state == FINISHED and self._exception is None:  # the hot path, without super()'s call
            value: Any = self._result
        else:
            if self._state != FINISHED:
                self._intake.wait_for(self, self.task_id, timeout)
            value = super().result(timeout)
        if type(value) is codec.Held:
            return _holding(self._intake).fetch(self)  # type: ignore[no-any-return]
        return value  # type: ignore[no-any-return]

    @property
    def _label(self) -> str:
        return self.label

    def as_argument(self) -> Any:
        """Its value as a dependent task's argument (it is done): a held value's handle, so the value stays on
        its slave and the dependent's slave takes it from there (mwpy/data/holding.py)."""
        value: Any = LightFuture.result(self)
        return value.handle if type(value) is codec.Held else value

    def holder(self) -> tuple[int, str] | None:
        """(size, slave) of a held value, for running a dependent task where it is; None if not held."""
        value = self._result
        return (value.handle.size, self._holder) if type(value) is codec.Held else None

    def leaves_holding(self, entry: Entry, sid: str) -> None:
        """Its task leaves for ``sid``, told to keep its value there if large (Outcomes.held_in)."""
        self._holder, self._call = sid, (entry.algorithm, entry.payload, entry.policy)

    def _end(self, value: Any, exception: BaseException | None) -> None:
        self._finish(value, exception)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The task's exception as itself, or None; waits like :meth:`result`."""
        self._intake.wait_for(self, self.task_id, timeout)
        return super().exception(timeout)

    def cancel(self) -> bool:
        """Cancel the task if it has not started: queued here, or waiting in a slave's window (pulled back).

        Call it from the master's thread (the engine is not thread-safe).
        """
        if not super().cancel():
            return False
        self._intake.cancel([self.task_id])
        return True

    # The scheduler's Listener (mwpy/core/entry.py): the master tells the future what becomes of its task.

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


def submit_task(intake: Intake, algorithm: TaskAlgorithm, policy: Policy, args: Any, kwargs: Any) -> TaskFuture[Any]:
    """``submit()`` in a master algorithm: the arguments checked and pickled now, then a task whose future
    settles; with futures of this master among them (which refuse to pickle), once those are done."""
    try:
        payload = algorithm.encode(args, kwargs, intake.max_frame, intake.store)
    except Exception:
        inputs = dataflow.futures_in(args, kwargs)
        if not inputs:
            raise
        return _submit_after(intake, algorithm, policy, call=(args, kwargs), inputs=inputs)
    future: TaskFuture[Any] = intake.submit(algorithm.name, payload, policy, TaskFuture)
    future.label = algorithm.name
    return future


def _submit_after(
    intake: Intake,
    algorithm: TaskAlgorithm,
    policy: Policy,
    *,
    call: tuple[tuple[Any, ...], dict[str, Any]],
    inputs: list[tuple[str, concurrent.futures.Future[Any]]],
) -> TaskFuture[Any]:
    """A task taking this master's futures: its future (and id) now, the task queued when they are done, with
    their values in their places. It counts as submitted once queued; one whose input failed or was cancelled
    never runs, so its future alone tells (no result of it reaches ``mw.results()``)."""
    args, kwargs = call
    algorithm.check_arguments(args, kwargs)  # a wrong call fails here, not once its inputs are done
    _refuse_foreign(intake, inputs)
    future: DependentFuture[Any] = DependentFuture(intake.new_id(), intake)
    future.label = algorithm.name
    value = TaskFuture.as_argument

    def ready() -> None:
        if future.done():  # cancelled meanwhile
            return
        try:
            values = (
                dataflow.with_values(args, value),
                {key: dataflow.with_values(v, value) for key, v in kwargs.items()},
            )
            payload = algorithm.encode(*values, intake.max_frame, intake.store)
        except Exception as exc:
            future._finish(None, exc)
            return
        entry = Entry(future.task_id, algorithm.name, payload, policy, future, tag=policy.tag, key=policy.key)
        entry.prefer, held = lineage.held_among(cast(TaskFuture[Any], given) for _, given in inputs)
        if held:  # what the event log reports once it ran, and how it is queued again if one is lost
            future._held_inputs, future._again = held, ready
        intake.enqueue(entry)

    def cancelled() -> None:
        if future.cancel():
            future.set_running_or_notify_cancel()

    def label_of(given: concurrent.futures.Future[Any]) -> str:
        return given.label if isinstance(given, TaskFuture) else ""

    dataflow.Inputs(
        inputs, label_of, ready=ready, failed=lambda exc: future._finish(None, exc), cancelled=cancelled
    ).watch()
    return future


def _refuse_foreign(intake: Intake, inputs: list[tuple[str, concurrent.futures.Future[Any]]]) -> None:
    """Refuse futures that are not this master's; then each input's value may stay on its slave (held_tasks.py)."""
    for where, given in inputs:
        if not isinstance(given, TaskFuture) or given._intake is not intake:
            raise UsageError(f"{where} is not a future of this master's submit(): pass its result() instead")
    holding = _holding(intake)
    for _, given in inputs:
        holding.watch(cast(TaskFuture[Any], given))


class DependentFuture(TaskFuture[R]):
    """A task's future that took futures as arguments: if its slave could not fetch an input another slave holds,
    it does not settle but is queued again once that input is relayed or made again (mwpy/lineage.py), and the
    event log says which way each held input reached it. Its own class: other tasks pay nothing for this."""

    def settle(self, result: Result) -> bool:
        if self._held_inputs and self._state not in _CANCELLED:
            recovery = _holding(self._intake).lineage
            error = result.error
            if error is not None and error.type == LOST and recovery.recover(self):
                return False  # its input is relayed or made again, then it is queued again
            if error is None:
                recovery.used(self, result.slave_id)
            self._held_inputs, self._again = (), None  # _again holds this future: no cycle left behind
        return super().settle(result)


class OwnFuture(TaskFuture[Any]):
    """The future of mwpy's own task (a relay, a producer made again): it never reaches ``mw.results()``."""

    def settle(self, result: Result) -> bool:
        super().settle(result)
        return False


def _holding(intake: Intake) -> Holding:
    """The master's books of values that stay on their slaves (mwpy/held_tasks.py)."""
    return intake.holding(OwnFuture)

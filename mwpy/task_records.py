"""The task records the master's bookkeeping and the user share: a task's policy, the ``Task`` a master
algorithm is handed back, a ``Result``, and the exceptions a failed result raises.

They sit below ``core/`` (the scheduler files tasks under their policy, the outcomes make results), below
the decorator (mwpy/task.py) and the futures (mwpy/futures.py), so that bookkeeping needs neither.
"""

from __future__ import annotations

from typing import Any

import attrs

from mwpy import safe_text
from mwpy.errors import MwpyError, NoMatchingSlaveError, RemoteTraceback, UnrunnableTaskError
from mwpy.resources import Resources
from mwpy.wire import codec


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
    ``priority``: tasks of a higher priority leave the shared queue first; first in, first out within one.
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
    priority: int = 0

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
    here: it is the scheduler's own (:class:`mwpy.core.entry.Entry`).
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

"""Every exception mwpy raises to its users, under one root: :class:`MwpyError`.

One home so that a user can write ``except mwpy.MwpyError`` and a module can
catch exactly the failure it expects from another, never a ``ValueError`` or
``RuntimeError`` that some library below might also raise. The classes that
also derive from a built-in (``ValueError``, ``RuntimeError``) do so because
code written against earlier mwpy, or against ``concurrent.futures`` habits,
catches those; the built-in is a courtesy, the mwpy class is the contract.

::

    MwpyError
    ├── ConfigurationError (ValueError)   a wrong option, setting, file or argument
    │   ├── UsageError                    a wrong --mw-* command-line option (exit 2)
    │   └── SubmitError                   a submit file mwpy jobs cannot run (exit 2)
    ├── ResourceFileError                 a resource file missing, malformed or foreign
    │   └── InvalidResourceFileError      ... and waiting will not help (permanent)
    ├── JournalError                      a journal that is damaged or another program's
    ├── EventLogError                     an event log that is truncated, foreign or unreadable (events.py)
    ├── UnsafeFileError                   a file to read is not a safe regular file (safe_files.py)
    ├── ProtocolError                     a peer broke the wire protocol
    │   └── MembershipError               a peer that is not of this computation
    ├── BackendError (RuntimeError)       a batch system refused or cannot be reached
    │   └── CondorError                   HTCondor refused or cannot be reached   [in mwpy.backends.htcondor]
    ├── NotInMasterError (RuntimeError)   the master API used outside a running master
    ├── ComputationFinishedError (RuntimeError)  a task submitted after finish()
    ├── TaskTimeoutError (TimeoutError)   a task ran past its timeout (what its future raises)
    ├── SlavesFailError                   slaves keep failing before any task had a result
    ├── UnrunnableTaskError               a future's task became unrunnable (its policy forbade a retry)
    │   └── NoMatchingSlaveError          ... no slave on offer has the resources it needs
    ├── KilledSlaveError                  a task killed too many slaves running it (dask's KilledWorker)
    ├── SharedObjectError                 a shared object (mw.share) cannot be had here, or its file is bad
    ├── FileServiceError                  an input fetch or output upload failed   [in mwpy.data.service]
    ├── OutputRefused                     an output a slave sent lands nowhere safe [in mwpy.data.landing]
    ├── JobSetupError                     a submit-file job could not start on its slave [in mwpy.jobs.runner]
    └── TaskFailedError                   a task raised (or could not run)   [in mwpy.task_records]
        └── TaskRaisedError               ... an exception the master cannot rebuild (names its type)

    RemoteTraceback (Exception, not an MwpyError)  the ``__cause__`` of a task's exception re-raised
                                          on the master: the slave's traceback, and the Result

Exit statuses stay as docs/exit-codes.md says; where an error ends a process,
the module that owns the process maps it to its status.
"""

from __future__ import annotations


class MwpyError(Exception):
    """Root of every error mwpy raises."""


class ConfigurationError(MwpyError, ValueError):
    """A setting mwpy was given cannot be used: an option, a secret or TLS file, an argument."""


class UsageError(ConfigurationError):
    """A ``--mw-*`` command-line option is wrong; the program exits 2 with one line."""


class SubmitError(ConfigurationError):
    """``mwpy jobs`` cannot run the submit description: a refused command, a bad value, a missing input file."""


class ResourceFileError(MwpyError):
    """A resource file cannot be used: missing, unreadable, malformed, stale or of another version."""


class JournalError(MwpyError):
    """A journal file cannot be used: damaged, or written by another program."""


class EventLogError(MwpyError):
    """An event log (``--mw-events``) cannot be read or written: truncated, foreign, garbage, not a regular file.

    The message is one line, ``"FILE:LINE: problem"`` when the problem is on a
    line (``FILE: problem`` otherwise); ``path`` and ``line`` (or None) say
    the same to programs.
    """

    def __init__(self, path: str, problem: str, line: int | None = None) -> None:
        super().__init__(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.line = line


class ProtocolError(MwpyError):
    """The peer broke the wire protocol; the connection must be dropped."""


class MembershipError(ProtocolError):
    """The peer is not a member of this computation (wrong secret, member id or certificate)."""


class BackendError(MwpyError, RuntimeError):
    """A batch system could not be reached, or refused what the overseer asked of it."""


class NotInMasterError(MwpyError, RuntimeError):
    """The master API was used where no master is running (e.g. ``task.submit()`` on a slave)."""


class ComputationFinishedError(MwpyError, RuntimeError):
    """A task was submitted after the computation finished."""


class TaskTimeoutError(MwpyError, TimeoutError):
    """A task ran past its timeout (``@mwpy.task(timeout=...)``, ``with_policy(timeout=...)``, ``--mw-task-timeout``).

    The slave interrupts the task with it; if the task does not yield, the
    slave exits (status 8) and the master fails the task with it all the same.
    It derives from the built-in ``TimeoutError`` so ``except TimeoutError:`` catches it.
    """


class SlavesFailError(MwpyError):
    """Slaves keep failing before any task had a result (their set-up fails): the computation gives up.

    The message names the count and the last failure (the slave's last error line).
    """


class UnrunnableTaskError(MwpyError):
    """A future's task became unrunnable: its slave vanished and its policy forbade running it again.

    The task is also in ``mw.unrunnable_tasks()``, as CL-MW's loop API has it.
    """


class NoMatchingSlaveError(UnrunnableTaskError):
    """A task needs resources (``resources=``) that no slave shape on offer has: it fails at once, never queued.

    The message names the task, what it needs and the shapes on offer, on one line.
    """


class KilledSlaveError(MwpyError):
    """A task killed more slaves running it than ``allowed_failures`` allows: it fails instead of running again.

    A segfault in a C extension, ``os._exit``, an out-of-memory kill: the
    slave died while it ran the task, so the task would kill every slave it
    went to. The message names the function and how each slave ended;
    ``function`` and ``deaths`` (one line per slave) say the same to programs.
    dask calls it ``KilledWorker``; :data:`mwpy.KilledWorker` is this class.
    """

    def __init__(self, message: str, function: str = "", deaths: tuple[str, ...] = ()) -> None:
        super().__init__(message)  # the message alone in args: the exception unpickles (its dict comes after)
        self.function = function
        self.deaths = deaths


class SharedObjectError(MwpyError):
    """A shared object's handle used where nothing resolves it (outside a slave), or its file is not one."""


class InvalidResourceFileError(ResourceFileError):
    """The resource file is there but unusable as it is: waiting for the master will not fix it.

    Malformed, another format or version, not a regular file, too big, a
    symlink loop, no permission. A plain :class:`ResourceFileError` (file
    missing, a transient I/O error) may clear once the master writes the file,
    so an overseer keeps waiting on that one and stops on this one.
    """


class UnsafeFileError(MwpyError):
    """A file mwpy was asked to read is missing, unreadable or unsafe to trust (see mwpy/safe_files.py).

    The message is ``"PATH: PROBLEM"``, one line. ``permanent`` is False only
    when the problem may clear by itself (the file does not exist yet, a
    transient I/O error); ``errno`` is the OS error number when the problem
    came from the OS, else None. Readers turn it into their own error
    (:class:`ResourceFileError`, :class:`JournalError`, ...).
    """

    def __init__(self, path: str, problem: str, *, permanent: bool = True, errno: int | None = None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.permanent = permanent
        self.errno = errno


class RemoteTraceback(Exception):
    """The slave's traceback, attached as ``__cause__`` of a task's exception raised on the master.

    Not an :class:`MwpyError`: nobody catches it; it is there so that an
    uncaught task exception prints where on the slave it happened (as
    ``concurrent.futures`` does with its ``_RemoteTraceback``). ``result`` is
    the task's :class:`~mwpy.task_records.Result` (slave id, tag, compute time).
    """

    def __init__(self, traceback: str, result: object = None) -> None:
        super().__init__(traceback)
        self.traceback = traceback
        self.result = result

    def __str__(self) -> str:
        return f'\n"""\n{self.traceback.rstrip()}\n"""'

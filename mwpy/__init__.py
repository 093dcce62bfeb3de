"""mwpy: master/worker computations for HTCondor, driven by a resource file.

One program holds task algorithms (``@mwpy.task``), a master algorithm
(``@mwpy.master``) and optionally a slave algorithm (``@mwpy.slave``), and ends
with ``mwpy.run()``; ``--mw-master`` or ``--mw-slave`` picks the role.
"""

from mwpy._version import __version__
from mwpy.core.scheduler import SlaveKind
from mwpy.errors import (
    BackendError,
    ComputationFinishedError,
    ConfigurationError,
    JournalError,
    MembershipError,
    MwpyError,
    NotInMasterError,
    ProtocolError,
    RemoteTraceback,
    ResourceFileError,
    TaskTimeoutError,
    UnrunnableTaskError,
    UsageError,
)
from mwpy.executor import Executor
from mwpy.master import LoopEvents, Master
from mwpy.program import exit_status, main, master, run, slave
from mwpy.slave import Slave, SlaveStatus
from mwpy.task import (
    Policy,
    Result,
    Submitter,
    Task,
    TaskAlgorithm,
    TaskError,
    TaskFailedError,
    TaskFuture,
    TaskRaisedError,
    task,
)
from mwpy.wire.protocol import ExitCode

__all__ = [
    "BackendError",
    "ComputationFinishedError",
    "ConfigurationError",
    "Executor",
    "ExitCode",
    "JournalError",
    "LoopEvents",
    "Master",
    "MembershipError",
    "MwpyError",
    "NotInMasterError",
    "Policy",
    "ProtocolError",
    "RemoteTraceback",
    "ResourceFileError",
    "Result",
    "Slave",
    "SlaveKind",
    "SlaveStatus",
    "Submitter",
    "Task",
    "TaskAlgorithm",
    "TaskError",
    "TaskFailedError",
    "TaskFuture",
    "TaskRaisedError",
    "TaskTimeoutError",
    "UnrunnableTaskError",
    "UsageError",
    "__version__",
    "exit_status",
    "main",
    "master",
    "run",
    "slave",
    "task",
]

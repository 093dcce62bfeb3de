"""mwpy: master/worker computations for HTCondor, driven by a resource file.

One program holds task algorithms (``@mwpy.task``), a master algorithm
(``@mwpy.master``) and optionally a slave algorithm (``@mwpy.slave``), and ends
with ``mwpy.run()``; ``--mw-master`` or ``--mw-slave`` picks the role.

Everything but the exceptions is loaded when first used (PEP 562's module
``__getattr__``): ``import mwpy`` (which every ``import mwpy.x`` runs first)
costs next to nothing, a slave loads the slave's parts only, and ``mwpy
status`` or an overseer neither. The decorators ``task``, ``master`` and
``slave`` share their names with the submodules ``mwpy.task``,
``mwpy.master`` and ``mwpy.slave``; importing one of those would make Python
bind the submodule in their place, so this package keeps its attributes of
those names (see :class:`_Package`): ``@mwpy.master`` works whatever was
imported before (tests/test_lazy_imports.py).
"""

import copyreg
import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from mwpy._version import __version__
from mwpy.errors import (
    BackendError,
    ComputationFinishedError,
    ConfigurationError,
    JournalError,
    KilledSlaveError,
    MembershipError,
    MwpyError,
    NoMatchingSlaveError,
    NotInMasterError,
    ProtocolError,
    RemoteTraceback,
    ResourceFileError,
    SharedObjectError,
    TaskTimeoutError,
    UnrunnableTaskError,
    UsageError,
)

#: dask's name for it: a task that killed the workers running it.
KilledWorker = KilledSlaveError

if TYPE_CHECKING:
    from mwpy.core.groups import SlaveKind
    from mwpy.executor import Executor
    from mwpy.futures import TaskFuture
    from mwpy.master import LoopEvents, Master
    from mwpy.program import exit_status, main, master, run, slave
    from mwpy.resources import Resources
    from mwpy.slave import Slave, SlaveStatus
    from mwpy.task import Submitter, TaskAlgorithm, share, task
    from mwpy.task_records import Policy, Result, Task, TaskError, TaskFailedError, TaskRaisedError
    from mwpy.wire.codec import File, Shared
    from mwpy.wire.protocol import ExitCode

#: Where each public name that is loaded on first use lives.
_HOMES = {
    "Executor": "mwpy.executor",
    "ExitCode": "mwpy.wire.protocol",
    "LoopEvents": "mwpy.master",
    "Master": "mwpy.master",
    "share": "mwpy.task",
    "Shared": "mwpy.wire.codec",
    "File": "mwpy.wire.codec",
    "Resources": "mwpy.resources",
    "Slave": "mwpy.slave",
    "SlaveKind": "mwpy.core.groups",
    "SlaveStatus": "mwpy.slave",
    **dict.fromkeys(("exit_status", "main", "master", "run", "slave"), "mwpy.program"),
    **dict.fromkeys(("Submitter", "TaskAlgorithm", "task"), "mwpy.task"),
    **dict.fromkeys(
        ("Policy", "Result", "Task", "TaskError", "TaskFailedError", "TaskRaisedError"), "mwpy.task_records"
    ),
    "TaskFuture": "mwpy.futures",
}
#: Package attributes that are decorators and also the names of submodules.
_DECORATORS = frozenset({"task", "master", "slave"})


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mwpy' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """The ``mwpy`` package, which keeps its decorators when a submodule of the same name is imported.

    The import system binds a submodule as an attribute of its package
    (``setattr(mwpy, "master", <module mwpy.master>)``) when it first loads
    it; here that is ignored for the three decorator names, so
    ``mwpy.master`` stays the decorator. ``from mwpy.master import Master``
    is unaffected (it reads ``sys.modules``).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _DECORATORS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


def _reduce_package(package: _Package) -> tuple[Any, tuple[str]]:
    """A function sent by value that names ``mwpy`` (cloudpickle) pickles it by name, as any module."""
    return importlib.import_module, (package.__name__,)


copyreg.pickle(_Package, _reduce_package)
sys.modules[__name__].__class__ = _Package

__all__ = [
    "BackendError",
    "ComputationFinishedError",
    "ConfigurationError",
    "Executor",
    "ExitCode",
    "File",
    "JournalError",
    "KilledSlaveError",
    "KilledWorker",
    "LoopEvents",
    "Master",
    "MembershipError",
    "MwpyError",
    "NoMatchingSlaveError",
    "NotInMasterError",
    "Policy",
    "ProtocolError",
    "RemoteTraceback",
    "ResourceFileError",
    "Resources",
    "Result",
    "Shared",
    "SharedObjectError",
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
    "share",
    "slave",
    "task",
]

"""What tests/test_executor_stdlib.py submits: CPython's test helpers, rewritten at module level.

CPython's ``Lib/test/test_concurrent_futures`` defines these in its test
modules; mwpy's slaves import functions by module and name (as
``ProcessPoolExecutor``'s *spawn* workers do), so they live here, in a module
the slaves can import. Where CPython's helpers sleep to keep a task busy,
these wait for a gate file the test creates (``executor_work.wait_for``), so
no outcome depends on how fast the machine is.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from tests.programs.executor_work import wait_for

#: Set on a slave by :func:`init` (CPython's ``INITIALIZER_STATUS``); the master's copy stays as it is.
INITIALIZER_STATUS = "uninitialized"


def mul(x: int, y: int) -> int:
    return x * y


def capture(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def wait_and_raise(gate: str, error: type[Exception] = Exception) -> NoReturn:
    """CPython's ``wait_and_raise(event)``: wait for the gate, then raise (``Exception`` in CPython)."""
    wait_for(gate)
    raise error("this is an exception")


def gated_pid(gate: str) -> int:
    """Wait for the gate, then say which slave ran this (CPython's tasks block on a semaphore)."""
    wait_for(gate)
    return os.getpid()


def sleep_and_print(t: float, msg: str) -> None:
    """CPython's helper of the interpreter-shutdown tests (the script has ended before it prints)."""
    time.sleep(t)
    print(msg)
    sys.stdout.flush()


def init(x: str) -> None:
    global INITIALIZER_STATUS
    INITIALIZER_STATUS = x


def get_init_status() -> str:
    return INITIALIZER_STATUS


def init_fail() -> NoReturn:
    """CPython's ``init_fail`` without its log queue (the slave is another process: nothing to share)."""
    time.sleep(0.1)  # let some futures be scheduled (CPython's delay; nothing depends on its length)
    raise ValueError("error in initializer")


class MyObject:
    def my_method(self) -> None:
        pass


def make_dummy_object(_: object) -> MyObject:
    return MyObject()


def record(folder: str, name: str) -> str:
    """Leave ``folder/name`` behind: the test reads which calls ran (CPython appends to a list it shares)."""
    Path(folder, name).touch()
    return name


def log_n_wait(folder: str, gate: str, ident: str) -> None:
    """CPython's ``log_n_wait``: log start and stop (as files named after ``ident``) around a wait."""
    Path(folder, f"{ident} started").touch()
    try:
        wait_for(gate)
    finally:
        Path(folder, f"{ident} stopped").touch()


def raise_runtime_error() -> NoReturn:
    raise RuntimeError(123)  # some comment


class EventfulGCObj:
    """Creates ``path`` when collected: on a slave, proof that the slave let the task's argument go."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __del__(self) -> None:
        Path(self.path).touch()


def slave_pid(_: object = None) -> int:
    return os.getpid()


# CPython's test_deadlock.py: objects that fail while being pickled or unpickled, and tasks that fail.


def sys_exit() -> NoReturn:
    """Induces a sys exit with exitcode 1."""
    sys.exit(1)


def raise_error(err: type[Exception]) -> NoReturn:
    """CPython's ``_raise_error_ignore_stderr`` without hiding stderr (it would hide the master's stderr too)."""
    raise err()


def return_instance(cls: type[object]) -> object:
    return cls()


class ExitAtPickle:
    """Triggers a process exit at pickling time."""

    def __reduce__(self) -> tuple[Any, ...]:
        sys_exit()


class ExitAtUnpickle:
    """Triggers a process exit at unpickling time."""

    def __reduce__(self) -> tuple[Any, ...]:
        return sys_exit, ()


class ErrorAtPickle:
    """Triggers an error at pickling time."""

    def __reduce__(self) -> tuple[Any, ...]:
        raise pickle.PicklingError("Error in pickle")


class ErrorAtUnpickle:
    """Triggers an error at unpickling time."""

    def __reduce__(self) -> tuple[Any, ...]:
        return raise_error, (pickle.UnpicklingError,)

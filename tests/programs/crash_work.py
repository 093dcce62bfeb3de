"""What tests/test_executor_crashes.py submits: calls and objects that kill the slave at each step of a call.

Slaves import these by name, as ``ProcessPoolExecutor``'s *spawn* workers
do. The cases are those of loky's ``tests/test_reusable_executor.py``
(``TestExecutorDeadLock.crash_cases``) and CPython's
``Lib/test/test_concurrent_futures/test_deadlock.py``, rewritten: a
segfault, libc's ``exit(0)`` (which ends the process without Python's
clean-up, and with status 0) or an error, while the slave unpickles the
arguments, runs the function, pickles the result or frees the arguments.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import pickle
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from tests.programs.executor_work import wait_for


def segfault() -> NoReturn:
    """Read address 0: SIGSEGV (faulthandler off, so the slave dies without printing a traceback)."""
    faulthandler.disable()
    ctypes.string_at(0)
    raise AssertionError("still alive after reading address 0")


def c_exit() -> NoReturn:
    """libc's ``exit(0)``: the process ends with status 0, no exception, nothing sent."""
    ctypes.CDLL(None).exit(0)
    raise AssertionError("still alive after exit(0)")


def freeze(folder: str) -> NoReturn:
    """Mark the slave as started (``started-PID``), then sleep in C holding the GIL: no heartbeat, no exit.

    dask's ``test_worker_ttl_restarts_worker`` (block_evloop): only a kill from outside ends it.
    """
    (Path(folder) / f"started-{os.getpid()}").touch()
    ctypes.PyDLL(None).sleep(1000)  # PyDLL keeps the GIL: the heartbeat thread never runs again
    raise AssertionError("woke up from a 1000 s sleep")


def sys_exit_zero() -> NoReturn:
    sys.exit(0)


def square_unless(x: int, bad: int) -> int:
    """``x * x``, except that the call with ``x == bad`` segfaults."""
    if x == bad:
        segfault()
    return x * x


def nap_and_pid(x: int, seconds: float) -> tuple[int, int]:
    """``x`` and the slave that ran it, after ``seconds`` (calls long enough to be caught running)."""
    time.sleep(seconds)
    return x, os.getpid()


def kill(pid: int) -> int:
    """SIGKILL another process (a slave): a kill from outside, as the kernel or an operator does it."""
    os.kill(pid, signal.SIGKILL)
    return pid


def started_then_gated(folder: str, gate: str) -> int:
    """Leave ``folder/started-PID``, wait for the gate, return this slave's pid."""
    Path(folder, f"started-{os.getpid()}").touch()
    wait_for(gate)
    return os.getpid()


def raise_with(kind: type[Exception], message: str) -> NoReturn:
    raise kind(message)


class CrashAtUnpickle:
    """Segfaults where it is unpickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        return segfault, ()


class CExitAtUnpickle:
    """Calls libc's ``exit(0)`` where it is unpickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        return c_exit, ()


class CrashAtPickle:
    """Segfaults where it is pickled (a task's result, on the slave)."""

    def __reduce__(self) -> tuple[Any, ...]:
        segfault()


class CExitAtPickle:
    """Calls libc's ``exit(0)`` where it is pickled."""

    def __reduce__(self) -> tuple[Any, ...]:
        c_exit()


class ErrorAtUnpickle:
    """Raises ``kind(message)`` where it is unpickled."""

    def __init__(self, kind: type[Exception], message: str) -> None:
        self.kind, self.message = kind, message

    def __reduce__(self) -> tuple[Any, ...]:
        return raise_with, (self.kind, self.message)


class ErrorAtPickle:
    """Raises ``PicklingError`` where it is pickled if ``fail``, else pickles as the number 42."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def __reduce__(self) -> tuple[Any, ...]:
        if self.fail:
            raise pickle.PicklingError("Error in pickle")
        return int, (42,)


class CrashAtGC:
    """Segfaults when collected in any process but the one that made it (so: on a slave, once a call is done)."""

    def __init__(self) -> None:
        self.maker = os.getpid()

    def __del__(self) -> None:
        if os.getpid() != self.maker:
            segfault()


class CExitAtGC(CrashAtGC):
    """Calls libc's ``exit(0)`` when collected in any process but the one that made it."""

    def __del__(self) -> None:
        if os.getpid() != self.maker:
            c_exit()

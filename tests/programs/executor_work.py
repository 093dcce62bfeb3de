"""Module-level functions that tests/test_executor.py runs through ``mwpy.Executor`` (slaves import this module)."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mwpy


def square(x: int) -> int:
    return x * x


def add(x: int, y: int = 0, *, scale: int = 1) -> int:
    return (x + y) * scale


def pid() -> int:
    return os.getpid()


class Odd(ValueError):
    """A user's own exception type: it must come back as itself."""


def fail_on_odd(x: int) -> int:
    if x % 2:
        raise Odd(f"{x} is odd")
    return x


class Unpicklable(Exception):
    """Its lock cannot be pickled, so only its type name, message and traceback reach the master."""

    def __init__(self) -> None:
        super().__init__("carries a lock")
        self.lock = threading.Lock()


def raise_unpicklable() -> None:
    raise Unpicklable


def count_and_fail(path: str) -> None:
    """Append one mark to ``path`` per run, then fail: the marks count the runs."""
    with open(path, "a") as out:
        out.write("x")
    raise RuntimeError("always")


def wait_for(path: str, value: int = 0) -> int:
    """Block until ``path`` exists (a gate a test opens), then return ``value``."""
    while not os.path.exists(path):
        time.sleep(0.02)
    return value


def touch_then_wait(started: str, release: str, value: int = 0) -> int:
    """Say we started (create ``started``), then wait for ``release``."""
    with open(started, "w"):
        pass
    return wait_for(release, value)


def lineage(started: str, release: str) -> tuple[int, int]:
    """This slave's pid and its parent's, once ``release`` exists (``started`` says it runs)."""
    touch_then_wait(started, release)
    return os.getpid(), os.getppid()


@mwpy.task
def cube(x: int) -> int:
    return x**3


@mwpy.task(retries=1)
def fail_first_run(path: str, *, value: int) -> int:
    """Fail the first run counted in ``path`` (one mark per run), then return ``value``: retries of its own."""
    with open(path, "a") as out:
        out.write("x")
    if Path(path).read_text() == "x":
        raise RuntimeError("the first run fails")
    return value


def nested_factory() -> object:
    def inner(x: int) -> int:
        return x

    return inner


def noisy(x: int) -> int:
    """Print on both streams, then fail when ``x`` is negative."""
    print(f"working on {x}")
    print(f"careful with {x}", file=sys.stderr)
    if x < 0:
        raise ValueError(f"negative {x}")
    return x


def chatty(size: int) -> int:
    """Print ``size`` characters: more than a result keeps."""
    print("x" * size, end="")
    return size


def mark(path: str) -> str:
    """Leave a file behind (proof that this task ran); return its path."""
    Path(path).touch()
    return path


class RefusesPickling:
    """An argument whose pickling fails with pickle's own error."""

    def __reduce__(self) -> str:
        raise pickle.PicklingError("this object refuses to be pickled")


def _refuse_unpickling() -> None:
    raise ValueError("this result does not unpickle")


class UnpicklesBadly:
    """Pickles on the slave; unpickling it (on the master) raises."""

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return _refuse_unpickling, ()


def result_that_does_not_unpickle() -> UnpicklesBadly:
    return UnpicklesBadly()


#: Set by the executor's initializer in each slave (``remember``).
STATE = "unset"


def remember(folder: str, value: str) -> None:
    """An initializer: keeps ``value`` for this slave's tasks and leaves a file named by its process id."""
    global STATE
    STATE = value
    Path(folder, str(os.getpid())).touch(exist_ok=False)


def remembered() -> tuple[str, int]:
    return STATE, os.getpid()


def fail_to_initialize(message: str) -> None:
    raise RuntimeError(message)


def put(table: Any, key: int, value: int) -> int:
    """A task writing into a ``multiprocessing.Manager().dict()`` proxy (ProcessPoolExecutor's idiom)."""
    table[key] = value
    return key


def set_event(event: Any) -> bool:
    """CPython's executor tests wait on ``Manager().Event()`` set from a worker (test_concurrent_futures/util.py)."""
    event.set()
    return True

"""Module-level functions that tests/test_joblib_backend.py runs through joblib's backend ``"mwpy"`` (slaves
import this module, as loky's workers would)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from joblib import Parallel, delayed


def square(x: float) -> float:
    return x * x


def f(x: int, y: int = 0, z: int = 0) -> int:
    """joblib/test/test_parallel.py's ``f``."""
    return x**2 + y + z


def pid(_: int) -> int:
    return os.getpid()


def division(x: int, y: int) -> float:
    return x / y


def marked_nap(x: object, marks: str) -> None:
    """Leave a mark, then sleep ``x`` seconds (joblib's ``time.sleep(x)``: a text ``x`` raises TypeError)."""
    Path(marks, f"ran-{os.getpid()}-{time.monotonic_ns()}").touch()
    time.sleep(x)  # type: ignore[arg-type]  # on purpose: "a" raises TypeError


def nested_loop(backend: str) -> list[float]:
    """joblib/test/test_parallel.py's ``nested_loop``: a Parallel call inside a task."""
    values: list[float] = Parallel(n_jobs=2, backend=backend)(delayed(square)(0.01) for _ in range(2))
    return values


def raise_exception(backend: str) -> None:
    raise ValueError("raised in a task")


def generated(raise_at: int) -> Iterator[int]:
    """joblib/test/test_parallel.py's ``my_generator`` (test_error_in_task_iterator)."""
    for i in range(20):
        if i == raise_at:
            raise ValueError("Iterator Raising Error")
        yield i

"""Functions tests/test_shared.py runs on slaves: they look at the shared objects they were given."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def describe(arr: np.ndarray[Any, Any], i: int) -> tuple[int, float, bool, int]:
    """(pid, the array's sum plus ``i``, whether it is read-only, whether its memory is the slave's own copy)."""
    return os.getpid(), float(arr.sum()) + i, not arr.flags.writeable, int(arr.flags.owndata)


def nested(config: dict[str, Any]) -> float:
    """A handle deep inside the arguments resolves too."""
    return float(config["data"][0]["arr"].sum()) + float(len(config["words"]))


def identity(config: Any) -> tuple[int, int]:
    """(pid, the object's id there): one object per slave, reused by every task."""
    return os.getpid(), id(config)


def size_of(data: bytes) -> int:
    return len(data)


def plus_sum(x: int, big: np.ndarray[Any, Any]) -> tuple[int, int]:
    return os.getpid(), int(big.sum()) + x


def read_file(f: Any) -> tuple[str, str, int, str]:
    """(its base name, its text, its permission bits, its path) as the slave sees a mwpy.File argument."""
    with open(f, encoding="utf-8") as source:
        text = source.read()
    return os.path.basename(f), text, os.stat(f).st_mode & 0o777, os.fspath(f)


def spoil(f: Any) -> None:
    """A task that writes to its input file (its own copy: the next task must not see this)."""
    with open(f, "a", encoding="utf-8") as sink:
        sink.write("spoiled\n")


def temporary_folder(_: int) -> str:
    """Where the slave's temporary files (its cache of shared objects among them) go."""
    import tempfile  # noqa: PLC0415

    return tempfile.gettempdir()


def big_array(n: int, seed: int) -> np.ndarray[Any, Any]:
    """A result far above the 64 MiB frame limit (``n`` float64s), the same for the same ``seed``."""
    return np.random.default_rng(seed).random(n)


def echo_bytes(data: bytes) -> bytes:
    """A large argument sent back: both directions through the file service."""
    return data


def make_file(name: str, text: str, mode: int) -> Any:
    """A task that writes a file in its working folder and returns it as a ``mwpy.File``."""
    import mwpy  # noqa: PLC0415

    with open(name, "w", encoding="utf-8") as sink:
        sink.write(text)
    os.chmod(name, mode)
    return {"file": mwpy.File(name), "pid": os.getpid()}


def length_once_open(data: bytes, gate: str) -> int:
    """``len(data)`` once the file ``gate`` exists (a test decides when values start coming back)."""
    import time  # noqa: PLC0415

    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(data)


def cache_counts(script: Any, obj: Any) -> tuple[int, tuple[int, int, int, int]]:
    """(pid, this slave's cache counters: hits, misses, bytes fetched, evictions) once both arguments resolved."""
    from mwpy import program  # noqa: PLC0415 (the slave's own, as mwpy.run() set it up)

    assert os.path.getsize(script) > 0
    assert obj is not None
    return os.getpid(), program.slave_cache().counts()


def same_large_bytes(_: int) -> bytes:
    """The same 20 MiB from every call: one content hash for every result, each above the spill threshold."""
    return b"\x5a" * (20 << 20)


def add_in_place(arr: np.ndarray[Any, Any]) -> None:
    """numpy's own words for writing to a read-only array: "output array is read-only"."""
    np.add(arr, 1, out=arr)

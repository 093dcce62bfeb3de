"""Module-level functions that tests/test_dataflow.py runs with futures as arguments (slaves import this module)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def inc(x: Any) -> int:  # Any: a future stands for its value (the typing of submit() knows no futures)
    return int(x) + 1


def total(values: Any) -> int:
    """The sum of the numbers in nested lists, tuples and dicts' values."""
    if isinstance(values, dict):
        return sum(total(v) for v in values.values())
    if isinstance(values, list | tuple):
        return sum(total(v) for v in values)
    return int(values)


def combine(a: Any, b: Any, *, c: Any = 0, d: Any = None) -> int:
    return int(a) + total(b) + int(c) + total(d or 0)


class Refused(KeyError):
    """A user's own exception type: the dependent of a failed input raises it as itself."""


def refuse(x: int) -> int:
    raise Refused(f"no {x}")


def wait_for(path: str) -> int:
    """Block until ``path`` exists (the test creates it): a slave kept busy, so later tasks stay queued."""
    while not Path(path).exists():
        time.sleep(0.01)
    return 0


def record(path: str, label: str) -> str:
    """Append ``label`` to ``path``: the order the slave ran the calls in."""
    with open(path, "a", encoding="utf-8") as log:
        log.write(label + "\n")
    return label


def large(n: int, pid_file: str = "") -> tuple[int, bytes]:
    """``n`` random bytes and the pid of the slave that made them (written to ``pid_file`` too, if given)."""
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    return os.getpid(), os.urandom(n)


def where(value: Any) -> tuple[int, int, int]:
    """(this slave's pid, the producer's pid, the size of its bytes): where a large input was used."""
    pid, data = value
    return os.getpid(), pid, len(data)


def park(folder: str) -> int:
    """Keep this slave busy: say so with ``folder/PID.parked``, wait for ``folder/PID.go``."""
    Path(folder, f"{os.getpid()}.parked").touch()
    while not Path(folder, f"{os.getpid()}.go").exists():
        time.sleep(0.01)
    return os.getpid()


def refuse_peers(value: Any) -> int:
    """Close this slave's file services, keeping what it holds in its cache: a holder its peers cannot reach
    (an execute point that accepts no inbound connection)."""
    import gc  # noqa: PLC0415 (this test's own trick, nothing else needs it)

    from mwpy.data.server import FileServer  # noqa: PLC0415

    for found in gc.get_objects():
        if isinstance(found, FileServer):
            found.close()
    return os.getpid()

"""Task algorithms for the black-hole tests; the tests run the master in-process (LocalMaster).

Every run of a task leaves a file ``attempt-KEY-PID-RANDOM`` in the folder it
is given, so a test can count where and how often each task ran.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import mwpy

#: A slave started with this variable set fails every ``careful`` task, as on a machine with a full disk.
BROKEN = "TRUST_BLACK_HOLE"


def _attempt(folder: str, key: str) -> None:
    (Path(folder) / f"attempt-{key}-{os.getpid()}-{uuid.uuid4().hex}").touch()


def attempts(folder: Path, key: str) -> list[int]:
    """The process ids of every run of the task named ``key``, one per run."""
    return [int(path.name.split("-")[2]) for path in folder.glob(f"attempt-{key}-*")]


@mwpy.task
def careful(key: str, folder: str) -> str:
    """Works, except on a slave whose environment is broken."""
    _attempt(folder, key)
    if os.environ.get(BROKEN):
        raise OSError(28, "No space left on device (simulated)")
    time.sleep(0.02)
    return key.upper()


@mwpy.task
def doomed(key: str, folder: str) -> str:
    """Fails wherever it runs."""
    _attempt(folder, key)
    raise ValueError(f"{key} cannot be done anywhere")


if __name__ == "__main__":
    mwpy.run()

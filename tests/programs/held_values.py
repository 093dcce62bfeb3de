"""Tasks whose large values stay on their slaves in a master algorithm (tests/test_dataflow_master.py runs a master
in the test process, ``tests.support.LocalMaster``, and these as its slaves' program)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import mwpy


@mwpy.task
def large(n: int, pid_file: str = "") -> tuple[int, bytes]:
    """``n`` random bytes and the pid of the slave that made them (written to ``pid_file`` too, if given)."""
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    return os.getpid(), os.urandom(n)


@mwpy.task
def where(value: Any, *gates: Any) -> tuple[int, int, int]:
    """(this slave's pid, the producer's pid, the size of its bytes): where a large input was used."""
    pid, data = value
    return os.getpid(), pid, len(data)


@mwpy.task
def wait_for(path: str) -> int:
    """Block until ``path`` exists (the test makes it): a gate the dependent task waits for too."""
    while not Path(path).exists():
        time.sleep(0.01)
    return os.getpid()


@mwpy.task
def park(folder: str) -> int:
    """Keep this slave busy: say so with ``folder/PID.parked``, wait for ``folder/PID.go``."""
    Path(folder, f"{os.getpid()}.parked").touch()
    while not Path(folder, f"{os.getpid()}.go").exists():
        time.sleep(0.01)
    return os.getpid()


if __name__ == "__main__":
    raise SystemExit(mwpy.run())

"""A computation that makes its master write every kind of event a master writes by itself.

Master usage (after the ``--mw-*`` options; run it with ``--mw-task-attempts 2``)::

    kinds FOLDER    ten tasks that succeed; one that fails once then succeeds (retried);
                    one that always fails (retried, then an error); one that kills its slave
                    once (requeued); one that kills its slave with retry=False (unrunnable)

FOLDER holds the markers that make "once" mean once across slaves. Prints one
JSON line: how many results were values, errors and unrunnable tasks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import mwpy


def first_time(folder: str, name: str) -> bool:
    """True the first time any slave asks for ``name`` (the marker is created atomically)."""
    try:
        os.close(os.open(Path(folder) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@mwpy.task
def square(i: int) -> int:
    return i * i


@mwpy.task
def fails_once(folder: str) -> str:
    if first_time(folder, "fails-once"):
        raise ValueError("the first try fails")
    return "second try"


@mwpy.task
def always_fails() -> None:
    raise KeyError("always")


@mwpy.task
def kills_its_slave_once(folder: str, name: str) -> str:
    if first_time(folder, name):
        os._exit(9)  # the slave vanishes holding this task
    return "ran again elsewhere"


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    _, folder = argv
    for i in range(10):
        square.submit(i)
    fails_once.submit(folder)
    always_fails.submit()
    kills_its_slave_once.submit(folder, "requeued")
    kills_its_slave_once.with_policy(retry=False).submit(folder, "unrunnable")
    counts = {"values": 0, "errors": 0, "unrunnable": 0}
    while sum(counts.values()) < 14:
        mw.loop()
        for result in mw.results():
            counts["values" if result.ok else "errors"] += 1
        counts["unrunnable"] += len(mw.unrunnable_tasks())
    sys.stdout.write(json.dumps(counts) + "\n")
    return 0


if __name__ == "__main__":
    mwpy.run()

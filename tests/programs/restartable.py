"""Keyed tasks that outlive their master: a test kills the master while they run and starts it again.

Master usage (after the ``--mw-*`` options, with ``--mw-journal``)::

    COUNT FOLDER [UNKEYED [pending]]
                             run ``slow_square(i)`` for i < COUNT with key ``slow-i`` (the first UNKEYED,
                             default 0, without a key); print {"i", "value", "journaled"} per result as it
                             arrives, then {"sum": ...}; with ``pending``, loop while ``mw.pending_tasks()``
                             (the streaming idiom) instead of counting the results

``slow_square(i)`` leaves ``started-I-PID-RANDOM`` in FOLDER as it starts, waits until FOLDER/open (every
task's gate) or FOLDER/open-I (its own) exists, runs a second more and leaves ``run-I-PID-RANDOM``: a test
gates on the first and counts runs by the second.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import mwpy

#: The longest a task waits for the gate to open (a test gone wrong).
GATE_LIMIT = 120.0


@mwpy.task
def slow_square(i: int, folder: str) -> int:
    where = Path(folder)
    (where / f"started-{i}-{os.getpid()}-{uuid.uuid4().hex}").touch()
    deadline = time.monotonic() + GATE_LIMIT
    while not ((where / "open").exists() or (where / f"open-{i}").exists()):
        if time.monotonic() > deadline:
            raise TimeoutError("FOLDER/open never appeared")
        time.sleep(0.02)
    time.sleep(1.0)
    (where / f"run-{i}-{os.getpid()}-{uuid.uuid4().hex}").touch()
    return i * i + 1


def marks(folder: Path, kind: str) -> dict[int, int]:
    """Files ``KIND-I-...`` in ``folder`` by input: tasks started, or runs finished."""
    counts: dict[int, int] = {}
    for path in folder.glob(f"{kind}-*"):
        i = int(path.name.split("-")[1])
        counts[i] = counts.get(i, 0) + 1
    return counts


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count, folder = int(argv[0]), argv[1]
    unkeyed = int(argv[2]) if len(argv) > 2 else 0
    by_pending = argv[3:] == ["pending"]
    for i in range(count):
        slow_square.with_policy(tag=i, key=None if i < unkeyed else f"slow-{i}").submit(i, folder)
    total, left = 0, count
    while mw.pending_tasks() if by_pending else left:
        mw.loop()
        for result in mw.results():
            if not result.ok:
                print(json.dumps({"failed": str(result.error)}), flush=True)
                return 1
            total += result.value
            left -= 1
            print(json.dumps({"i": result.tag, "value": result.value, "journaled": result.journaled}), flush=True)
    print(json.dumps({"sum": total}), flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

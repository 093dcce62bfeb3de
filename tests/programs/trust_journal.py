"""A keyed computation for the journal tests: a restarted master must resume, not start over.

Master usage (after the ``--mw-*`` options)::

    squares N FOLDER   run ``journaled_square(i)`` for i < N through ``mw.as_completed`` with key ``square-i``;
                       print {"i", "value", "journaled"} per result as it arrives, then {"sum": ...}

If FOLDER/gate-from holds N, ``journaled_square(i)`` for i >= N waits until FOLDER/open
exists, so a test decides how far a master gets before it is killed.
Every run of ``journaled_square(i)`` leaves a file ``exec-I-PID-RANDOM`` in FOLDER, so a
test can count executions per task key.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import mwpy

#: The longest a gated task waits for the gate to open (a test gone wrong).
GATE_LIMIT = 120.0


@mwpy.task
def journaled_square(i: int, folder: str) -> int:
    _gate(i, Path(folder))
    (Path(folder) / f"exec-{i}-{os.getpid()}-{uuid.uuid4().hex}").touch()
    time.sleep(0.05)
    return i * i + 1


def _gate(i: int, folder: Path) -> None:
    """If FOLDER/gate-from holds N, inputs from N on wait until FOLDER/open exists (before they count as run)."""
    gate = folder / "gate-from"
    if not gate.exists() or i < int(gate.read_text()):
        return
    deadline = time.monotonic() + GATE_LIMIT
    while not (folder / "open").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("FOLDER/open never appeared")
        time.sleep(0.01)


def executions(folder: Path) -> dict[int, int]:
    """Runs of ``journaled_square`` so far, by input."""
    counts: dict[int, int] = {}
    for path in folder.glob("exec-*"):
        i = int(path.name.split("-")[1])
        counts[i] = counts.get(i, 0) + 1
    return counts


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    _, count, folder = argv
    total = 0
    inputs = range(int(count))
    for result in mw.as_completed(journaled_square, inputs, [folder] * len(inputs), key=lambda i, _: f"square-{i}"):
        if result.error is not None:
            raise RuntimeError(f"journaled_square({result.tag}) failed: {result.error}")
        total += result.value
        line = {"i": result.tag, "value": result.value, "journaled": result.journaled}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    sys.stdout.write(json.dumps({"sum": total}) + "\n")
    return 0


if __name__ == "__main__":
    mwpy.run()

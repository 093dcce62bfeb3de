"""The program of ``python -m benchmarks.restart_loss``: keyed tasks that leave a mark as they start and end.

Master usage (after the ``--mw-*`` options, with ``--mw-journal``): ``COUNT SECONDS FOLDER``: run
``nap(i)`` for i < COUNT, each sleeping SECONDS (a slot's time, not a CPU's), with key ``nap-i``; print
{"sum": ...} at the end. Each run writes ``start-I-PID-RANDOM`` (its start time) in FOLDER as it starts and
``end-I-PID-RANDOM`` as it ends: the driver counts runs and their slot-seconds from them. It is run by path
and imports nothing from ``benchmarks``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import mwpy


@mwpy.task
def nap(i: int, seconds: float, folder: str) -> int:
    mark = f"{i}-{os.getpid()}-{uuid.uuid4().hex}"
    (Path(folder) / f"start-{mark}").write_text(repr(time.time()))
    time.sleep(seconds)
    (Path(folder) / f"end-{mark}").write_text(repr(time.time()))
    return i


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count, seconds, folder = int(argv[0]), float(argv[1]), argv[2]
    total = 0
    keyed = mw.as_completed(nap, range(count), [seconds] * count, [folder] * count, key=lambda i, *_: f"nap-{i}")
    for result in keyed:
        if not result.ok:
            print(json.dumps({"failed": str(result.error)}), flush=True)
            return 1
        total += result.value
    print(json.dumps({"sum": total}), flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

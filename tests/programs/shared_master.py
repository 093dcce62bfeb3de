"""A master algorithm that shares an array with ``mwpy.share`` and maps a task over it (tests/test_shared.py).

Master usage: ``shared_master.py COUNT``: prints one JSON line with the values, the slaves that ran tasks,
the handle's size and the file service's counters.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

import mwpy


@mwpy.task
def scaled_sum(factor: int, arr: np.ndarray[Any, Any]) -> tuple[int, float]:
    return os.getpid(), float(arr.sum()) * factor


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count = int(argv[0])
    handle: Any = mwpy.share(np.arange(500_000, dtype=np.int64))  # the module-level form: the current master's
    answers = list(mw.map(scaled_sum, range(count), arr=handle))
    report = {
        "values": [value for _, value in answers],
        "slaves": len({pid for pid, _ in answers}),
        "size": handle.size,
        "digest": handle.digest,
        "counters": mw.file_counters(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    mwpy.run()

"""Large arguments through ``mw.map`` (tests/test_shared.py, issue 22 item 2).

Master usage: ``big_arguments.py MODE``:

* ``window``: ``mw.as_completed`` over 300 distinct 1 MiB arguments, from a generator that counts what it
  gave; prints how many inputs had been taken when the first result came back;
* ``window BYTES``: the same through ``mw.map(..., window_bytes=BYTES)``;
* ``kwargs``: ``mw.map`` over 40 inputs with a 4 MB array as a keyword argument; prints a JSON line with the
  values, the slaves that ran tasks and the file service's counters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

import mwpy

MIB = 1 << 20


@mwpy.task
def length(data: bytes) -> int:
    return len(data)


@mwpy.task
def offset_sum(x: int, big: np.ndarray[Any, Any]) -> tuple[int, int]:
    return os.getpid(), int(big.sum()) + x


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    if argv[0] == "window":
        taken = 0

        def inputs() -> Iterator[bytes]:
            nonlocal taken
            for i in range(300):
                taken += 1
                yield i.to_bytes(4, "big") * (MIB // 4)

        if len(argv) > 1:
            values = mw.map(length, inputs(), window_bytes=int(argv[1]))
            first_value = next(values)
            print(f"taken {taken} first {first_value}")
            values.close()
            return 0
        stream = mw.as_completed(length, inputs())
        first = next(stream)
        print(f"taken {taken} first {first.value}")
        stream.close()
    else:
        big = np.arange(500_000, dtype=np.int64)
        answers = list(mw.map(offset_sum, range(40), big=big))
        report = {
            "values": [value for _, value in answers],
            "slaves": len({pid for pid, _ in answers}),
            "counters": mw.file_counters(),
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    mwpy.run()

"""How the master announces the total of its computation (``tasks_total`` in the resource file).

Master usage: ``totals.py MODE ...``:

* ``map RELEASE COUNT``: ``mw.map`` over ``range(COUNT)`` with a window of 5, each task waiting for RELEASE;
* ``generator COUNT``: ``mw.map`` over a generator (no total can be known);
* ``declare TOTAL COUNT``: ``mw.tasks_total = TOTAL`` (after trying -1, which must be refused), then COUNT tasks;
* ``half RELEASE COUNT``: ``mw.map`` over ``range(COUNT)``, the second half of the tasks waiting for RELEASE;
* ``break COUNT``: ``mw.as_completed`` over ``range(COUNT)`` with a window of 5, left after 3 results.
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def square(release: str, value: int) -> int:
    while release and not os.path.exists(release):
        time.sleep(0.05)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    mode = argv[0]
    if mode == "map":
        release, count = argv[1], int(argv[2])
        values = list(mw.map(square, [release] * count, range(count), window=5))
        print(f"sum {sum(values)}")
    elif mode == "half":
        release, count = argv[1], int(argv[2])
        gates = ["" if i < count // 2 else release for i in range(count)]
        print(f"sum {sum(mw.map(square, gates, range(count)))}")
    elif mode == "generator":
        count = int(argv[1])
        print(f"sum {sum(mw.map(square, ('' for _ in range(count)), iter(range(count))))}")
    elif mode == "declare":
        try:
            mw.tasks_total = -1
        except mwpy.ConfigurationError as exc:
            print(f"refused: {exc}")
        mw.tasks_total = int(argv[1])
        print(f"sum {sum(mw.map(square, ('' for _ in range(int(argv[2]))), iter(range(int(argv[2])))))}")
    elif mode == "break":
        count = int(argv[1])
        for got, _ in enumerate(mw.as_completed(square, [""] * count, range(count), window=5), 1):
            if got == 3:
                break
        print("left early")
    else:
        print(f"unknown mode {mode!r}")
        return 2
    return 0


if __name__ == "__main__":
    mwpy.run()

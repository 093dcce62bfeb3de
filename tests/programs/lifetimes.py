"""Tasks for the slave-lifetime tests (tests/test_lifetime.py): many short naps, each noting where it ran.

Master usage: ``lifetimes.py FOLDER COUNT``: COUNT tasks of 0.2-0.4 s; each
appends its slave's pid to ``FOLDER/ran-N`` when it starts and when it ends,
so a test can tell that every task ran once, to its end. Prints the values in
input order and how many results came back.
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def nap(folder: str, value: int) -> int:
    mark = os.path.join(folder, f"ran-{value}")
    with open(mark, "a", encoding="utf-8") as out:
        out.write(f"start {os.getpid()}\n")
    time.sleep(0.2 + 0.2 * (value % 3) / 2)
    with open(mark, "a", encoding="utf-8") as out:
        out.write(f"end {os.getpid()}\n")
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    folder, count = argv[0], int(argv[1])
    naps = {value: nap.submit(folder, value) for value in range(count)}
    squares = [naps[value].result() for value in sorted(naps)]
    ids = sorted(result.task_id for result in mw.results())  # every result the master took, once each
    print(f"squares {squares}\nresults {len(ids)} {ids}")
    return 0


if __name__ == "__main__":
    mwpy.run()

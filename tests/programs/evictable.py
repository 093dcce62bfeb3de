"""Tasks for the graceful-eviction tests (tests/test_eviction.py, tests/test_condor_eviction.py).

``quick`` returns at once; ``gated`` writes ``started-N`` in its folder, then
waits for the release file, so a test knows which task a slave runs and can
keep the others queued in its window.

Master usage (Condor test): ``evictable.py FOLDER COUNT``: COUNT gated tasks
released by ``FOLDER/release``; prints the squares in input order and how
many results came back.
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def quick(value: int) -> int:
    return value * value


@mwpy.task
def gated(folder: str, value: int) -> int:
    with open(os.path.join(folder, f"started-{value}"), "w", encoding="utf-8") as marker:
        marker.write(str(os.getpid()))
    while not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.05)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    folder, count = argv[0], int(argv[1])
    futures = [gated.submit(folder, value) for value in range(count)]
    values = [future.result() for future in futures]
    results = mw.results()
    print(f"squares {values}")
    print(f"results {len(results)} {sorted(result.task_id for result in results)}")
    return 0


if __name__ == "__main__":
    mwpy.run()

"""COUNT tasks that each wait for the release file, then return a square.

Master usage: ``gated.py RELEASE COUNT`` (Condor tests: tests/test_condor_overseer.py). Task ``i`` (from 0)
is also released alone by a file ``RELEASE.i`` (tests/test_explain.py releases them one by one).
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def gated(release: str, value: int) -> int:
    while not (os.path.exists(release) or os.path.exists(f"{release}.{value}")):
        time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, count = argv[0], int(argv[1])
    values = list(mw.map(gated, [release] * count, range(count)))
    print(f"squares {values}")
    return 0


if __name__ == "__main__":
    mwpy.run()

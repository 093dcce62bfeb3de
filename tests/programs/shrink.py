"""Want many slaves, give two of them a held task, then (when SHRINK exists) want no more.

Master usage: ``shrink.py RELEASE SHRINK SLAVES`` (tests/test_condor_overseer.py).
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def gated(release: str, value: int) -> int:
    while not os.path.exists(release):
        time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, shrink, slaves = argv[0], argv[1], int(argv[2])
    mw.allocate_slaves(slaves)
    gated.submit(release, 2)
    gated.submit(release, 3)
    while not os.path.exists(shrink):
        mw.loop(timeout=0.2)
    mw.deallocate_slaves(slaves)
    print("shrinking", flush=True)
    values: list[int] = []
    while len(values) < 2:
        mw.loop()
        values += [result.value for result in mw.results()]
    print(f"values {sorted(values)}")
    return 0


if __name__ == "__main__":
    mwpy.run()

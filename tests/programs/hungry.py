"""One task that needs more memory than a small slave job asks for (tests/test_condor_memory.py).

Master usage: ``hungry.py MB RELEASE``: the task fills MB megabytes and keeps
them until the file RELEASE exists (so the pool's periodic hold sees them for as
long as the test needs), then returns MB; the master prints ``grew MB``.
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def grow(megabytes: int, release: str) -> int:
    block = b"x" * (megabytes << 20)  # written, so resident
    while not os.path.exists(release):
        time.sleep(0.1)
    return len(block) >> 20


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    print(f"grew {grow.submit(int(argv[0]), argv[1]).result()}")
    return 0


if __name__ == "__main__":
    mwpy.run()

"""One task that needs more memory than a small slave job asks for (tests/test_condor_memory.py).

Master usage: ``hungry.py MB SECONDS``: the task fills MB megabytes, keeps them
for SECONDS (long enough for the pool's periodic hold to see it), and
returns MB; the master prints ``grew MB``.
"""

from __future__ import annotations

import time

import mwpy


@mwpy.task
def grow(megabytes: int, seconds: float) -> int:
    block = b"x" * (megabytes << 20)  # written, so resident
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
    return len(block) >> 20


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    megabytes, seconds = int(argv[0]), float(argv[1])
    print(f"grew {grow.submit(megabytes, seconds).result()}")
    return 0


if __name__ == "__main__":
    mwpy.run()

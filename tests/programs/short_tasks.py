"""N tasks that each sleep SECONDS: work whose size the master measures (its demand model, mwpy/core/demand.py).

Master usage (after the ``--mw-*`` options)::

    N SECONDS   run ``nap(SECONDS)`` N times through ``mw.map``; print ``done N``
"""

from __future__ import annotations

import time

import mwpy


@mwpy.task
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count, seconds = int(argv[0]), float(argv[1])
    print(f"done {len(list(mw.map(nap, [seconds] * count)))}", flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

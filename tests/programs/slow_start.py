"""A master that submits its tasks, then takes its time before it first runs the loop.

Master usage: ``slow_start.py GATE COUNT`` — submit COUNT tasks, wait (without
running the loop) until the file GATE exists, then collect the results. It
stands for a restarted master replaying a long journal: its resource file
must not present the demand as stated before the loop runs.
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def triple(x: int) -> int:
    return 3 * x


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    gate, count = argv[0], int(argv[1])
    for x in range(count):
        triple.submit(x)
    while not os.path.exists(gate):
        time.sleep(0.05)  # busy elsewhere: no loop pass yet
    done = 0
    while done < count:
        mw.loop()
        done += len(mw.results())
    return 0


if __name__ == "__main__":
    mwpy.run()

"""Keyed tasks (journaled); the second half waits for the release file. Prints how many came from the journal.

Master usage: ``journaled.py RELEASE COUNT``, with ``--mw-journal`` (tests/test_condor_submit_files.py).
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def gated_square(release: str, gate: int, value: int) -> int:
    if value >= gate:
        while not os.path.exists(release):
            time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, count = argv[0], int(argv[1])
    gate = count // 2
    total = journaled = 0
    results = mw.as_completed(
        gated_square, [release] * count, [gate] * count, range(count), key=lambda r, g, value: f"square-{value}"
    )
    for result in results:
        if not result.ok:
            print(f"failed: {result.error}")
            return 1
        total += result.value
        journaled += result.journaled
    print(f"sum {total}, journaled {journaled} of {count}")
    return 0


if __name__ == "__main__":
    mwpy.run()

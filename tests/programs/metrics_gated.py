"""Five tasks, then a master that stays up until a gate file exists (for scraping its metrics while it runs).

Master usage (after the ``--mw-*`` options): ``GATE`` — the file whose creation lets the master finish.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mwpy


@mwpy.task
def double(i: int) -> int:
    return 2 * i


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    gate = Path(argv[0])
    values = sorted(mw.map(double, range(5)))
    while not gate.exists():
        mw.loop(timeout=0.1)  # keep serving (and the metrics endpoint up) until the test has looked
    sys.stdout.write(f"{values}\n")
    return 0


if __name__ == "__main__":
    mwpy.run()

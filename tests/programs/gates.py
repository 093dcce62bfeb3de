"""COUNT tasks; task i (from 0) waits until the file GATES/i exists, then returns i.

Master usage: ``gates.py GATES COUNT`` (tests/test_explain.py opens the gates one by one).
"""

from __future__ import annotations

import os
import time

import mwpy


@mwpy.task
def gate(gates: str, value: int) -> int:
    while not os.path.exists(os.path.join(gates, str(value))):
        time.sleep(0.05)
    return value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    gates, count = argv[0], int(argv[1])
    values = list(mw.map(gate, [gates] * count, range(count)))
    print(f"values {values}")
    return 0


if __name__ == "__main__":
    mwpy.run()

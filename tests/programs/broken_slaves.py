"""A program whose slaves cannot start: importing it with ``--mw-slave`` raises ImportError, as a node without
numpy would. Its master maps ``echo`` over 0..2 and never gets an answer (tests/test_local.py).
"""

from __future__ import annotations

import sys

import mwpy


@mwpy.task
def echo(x: int) -> int:
    return x


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    print(list(mw.map(echo, range(3))))
    return 0


if "--mw-slave" in sys.argv:
    raise ImportError("no module named numpy on this node")
if __name__ == "__main__":
    mwpy.run()

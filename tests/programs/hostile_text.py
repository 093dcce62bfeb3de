"""A program whose task writes terminal escapes everywhere it can (tests/test_hostile_text.py).

Its task prints ``PAYLOAD`` to stdout and stderr and raises an exception whose class name and message carry
it too: a clipboard write (OSC 52), a window title, a clear screen, a forged line over the previous one and a
C1 control. The master prints a line before and after, handles the failure, and (with the argument
``raise``) lets a second failure escape the master algorithm, as a program that does not catch it would.
With ``MWPY_TEST_SLAVE_FAILS=1`` in the environment, every slave fails at set-up with the payload as its
last words instead (what ``mwpy local`` reports of a failing slave).
"""

from __future__ import annotations

import os
import sys

import mwpy

#: What a hostile task writes: each piece drives a terminal that prints it raw.
PAYLOAD = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[1A\x1b[2Kall tasks succeeded\x9b2J"

#: An exception class whose very name drives the terminal (and which the master cannot rebuild by name).
EvilError = type("Evil\x1b]0;pwned\x07Error", (Exception,), {})


@mwpy.task
def hostile(x: int) -> int:
    print(PAYLOAD)
    print(PAYLOAD, file=sys.stderr)
    raise EvilError(PAYLOAD)


@mwpy.slave
def slave(worker: mwpy.Slave, argv: list[str]) -> int:
    if os.environ.get("MWPY_TEST_SLAVE_FAILS"):
        raise EvilError(PAYLOAD)
    return int(worker.loop_until_shutdown())


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    print("BEFORE-THE-FAILURE", flush=True)
    error = hostile.submit(1).exception()
    print(f"handled: {type(error).__name__}", flush=True)
    if argv == ["raise"]:
        hostile.submit(2).result()
    print("AFTER-THE-FAILURE", flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

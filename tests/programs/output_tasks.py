"""Tasks that print (tests/test_task_output.py); as a program, one task prints and succeeds, one prints and fails
(the master catches it and goes on)."""

from __future__ import annotations

import sys

import mwpy


@mwpy.task
def noisy_task(x: int) -> int:
    print(f"working on {x}")
    print(f"careful with {x}", file=sys.stderr)
    if x < 0:
        raise ValueError(f"negative {x}")
    return x


@mwpy.task
def chatty_task(size: int) -> int:
    print("x" * size, end="")
    return size


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    error = noisy_task.submit(-5).exception()  # the program handles the failure and says nothing about it
    return 0 if isinstance(error, ValueError) and noisy_task.submit(4).result() == 4 else 1


if __name__ == "__main__":
    mwpy.run()

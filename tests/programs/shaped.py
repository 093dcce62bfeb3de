"""Tasks of two needs and one no slave can meet: each answers with the shape of the slave that ran it.

Master usage (tests/test_shapes.py): ``mwpy local shaped.py --slaves 2 --slave-resources memory=1GB
--slave-resources memory=16GB``; prints ``big SHAPE`` and ``small SHAPE`` per task, then the unmeetable
task's error. The Executor tests import the functions.
"""

from __future__ import annotations

from pathlib import Path

import mwpy


def offered() -> str:
    """This slave's ``--mw-slave-resources``, from its own command line (what the local back end gave it)."""
    args = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    return args[args.index(b"--mw-slave-resources") + 1].decode() if b"--mw-slave-resources" in args else "-"


@mwpy.task(resources={"memory": "8GB"})
def big(_: int) -> str:
    return offered()


@mwpy.task
def small(_: int) -> str:
    return offered()


@mwpy.task(resources=mwpy.Resources(memory="64GB", cpus=2))
def huge() -> str:
    return offered()


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    bigs = [big.submit(i) for i in range(6)]
    smalls = [small.submit(i) for i in range(6)]
    unmeetable = huge.submit()
    for future in bigs:
        print(f"big {future.result()}")
    for future in smalls:
        print(f"small {future.result()}")
    error = unmeetable.exception()
    print(f"huge {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    mwpy.run()

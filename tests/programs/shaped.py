"""Tasks of two needs and one no slave can meet: each answers with the shape of the slave that ran it.

Master usage (tests/test_shapes.py): ``mwpy local shaped.py --slaves 2 --slave-resources memory=1GB
--slave-resources memory=16GB``; prints ``big WHERE`` and ``small WHERE`` per task (WHERE: the slave's
Condor job, else its ``--mw-slave-resources``), then the unmeetable task's error. ``shaped.py MB`` (on
Condor): the big tasks need MB of memory, and there is no unmeetable one (a Condor master is offered no
shapes, so it would wait for a slave that can run it). The Executor tests import the functions.
"""

from __future__ import annotations

import time
from pathlib import Path

import mwpy
from mwpy.job_ad import own_job_id


def given() -> str:
    """This slave's ``--mw-slave-resources`` from its command line (what the local back end gave it), or "-"."""
    args = Path("/proc/self/cmdline").read_bytes().split(b"\0")
    return args[args.index(b"--mw-slave-resources") + 1].decode() if b"--mw-slave-resources" in args else "-"


def offered() -> str:
    """This slave's Condor job id, else its ``--mw-slave-resources`` (:func:`given`)."""
    return own_job_id() or given()


@mwpy.task(resources={"memory": "8GB"})
def big(_: int) -> str:
    return offered()


def wait_for(release: str) -> str:
    """Runs until the file ``release`` exists (the test looks at the demand meanwhile)."""
    while not Path(release).exists():
        time.sleep(0.05)
    return offered()


@mwpy.task(resources={"memory": "8GB"})
def waits(release: str) -> str:
    """A big task that runs until ``release`` exists."""
    return wait_for(release)


@mwpy.task(resources={"requirements": "TARGET.Memory >= 8192"})
def waits_for_memory(release: str) -> str:
    """Runs until ``release`` exists on a slot with 8 GB, asked in requirements (tests/test_shapes.py writes
    the same need another way too)."""
    return wait_for(release)


@mwpy.task
def small(_: int) -> str:
    return offered()


@mwpy.task(resources=mwpy.Resources(memory="64GB", cpus=2))
def huge() -> str:
    return offered()


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    submitter = big.with_policy(resources={"memory": int(argv[0])}) if argv else big
    bigs = [submitter.submit(i) for i in range(6)]
    smalls = [small.submit(i) for i in range(6)]
    unmeetable = None if argv else huge.submit()
    for future in bigs:
        print(f"big {future.result()}")
    for future in smalls:
        print(f"small {future.result()}")
    if unmeetable is not None:
        error = unmeetable.exception()
        print(f"huge {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    mwpy.run()

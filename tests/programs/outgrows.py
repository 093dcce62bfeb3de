"""A master whose ``grow`` tasks outgrow small slaves and kill them while ``hold`` keeps the big slave busy.

Master usage (tests/test_memory_learning.py): ``mwpy local outgrows.py --slaves 3 --slave-resources memory=100
--slave-resources memory=1024 -- FOLDER``; prints ``NAME WHERE`` per task (WHERE: the shape of the slave that
ran it, or the task's error), hold first.

``grow NAME`` on a slave that offers less than ``ENOUGH`` MB says it runs (the file ``NAME.started`` in its
folder), fills ``FILL`` MB once ``NAME.fill`` exists and says so (``NAME.grown``), then dies by SIGKILL once
``NAME.die`` exists, as a slave killed for its memory does; on a bigger slave it answers with the shape it ran
on (its ``--mw-slave-resources``). ``hold`` needs a big slave and runs until ``release`` exists.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import mwpy
from mwpy.errors import MwpyError
from tests.programs.shaped import given

#: MB a small slave offers, MB grow fills there, and the least a slave must offer for grow to stay in it.
SMALL = 100
FILL = 100
ENOUGH = 512


def _offers() -> int:
    """MB of memory this slave offers (its ``--mw-slave-resources``)."""
    found = re.search(r"memory=(\d+)", given())
    return int(found.group(1)) if found else 0


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


@mwpy.task(allowed_failures=1)
def grow(name: str, folder: str) -> str:
    """Runs out of memory on a small slave (once allowed: a second death fails it), fits on a big one."""
    if _offers() >= ENOUGH:
        return given()
    Path(folder, f"{name}.started").touch()
    _wait_for(Path(folder, f"{name}.fill"))
    filled = b"\x01" * (FILL << 20)  # written, so resident
    Path(folder, f"{name}.grown").touch()
    _wait_for(Path(folder, f"{name}.die"))
    os.kill(os.getpid(), signal.SIGKILL)
    return str(len(filled))  # never reached


@mwpy.task(resources={"memory": ENOUGH})
def hold(folder: str) -> str:
    _wait_for(Path(folder, "release"))
    return given()


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    folder = argv[0]
    futures = {"hold": hold.submit(folder), **{name: grow.submit(name, folder) for name in ("first", "second")}}
    for name, future in futures.items():
        try:
            print(f"{name} {future.result()}", flush=True)
        except MwpyError as error:
            print(f"{name} {type(error).__name__}", flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

"""Tasks whose large values stay on their slaves in a master algorithm (tests/test_dataflow_master.py runs a master
in the test process, ``tests.support.LocalMaster``, and these as its slaves' program): the Executor tests'
functions (tests/programs/dataflow_work.py) as task algorithms."""

from __future__ import annotations

import os
from typing import Any

import mwpy
from tests.programs import dataflow_work as work

large = mwpy.task(work.large)
park = mwpy.task(work.park)
refuse_peers = mwpy.task(work.refuse_peers)
wait_for = mwpy.task(work.wait_for)


@mwpy.task
def where(value: Any, *gates: Any) -> tuple[int, int, int]:
    """(this slave's pid, the producer's pid, the size of its bytes): where a large input was used; ``gates``:
    other inputs it waits for."""
    pid, data = value
    return os.getpid(), pid, len(data)


if __name__ == "__main__":
    raise SystemExit(mwpy.run())

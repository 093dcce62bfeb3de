"""A large value made on node 1's slave and used on node 2's, on the two-node pool (tests/test_condor_nodes.py).

The producer asks for ``MwpyNode == 1`` and its dependent for ``MwpyNode == 2`` (``@mwpy.task(resources=...)``):
the overseer thread submits a slave job of each need, and the dependent cannot run on the holder, so node 2's
slave fetches the value, from the holder's file service if it can reach it. Prints the result and the master's
file counters as JSON; the event log is ``WORKDIR/events.jsonl``.

Command line: ``dataflow_condor.py WORKDIR SLAVE_PYTHON MASTER_ADDRESS``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import mwpy
from mwpy.job_ad import read_ad
from mwpy.names import MACHINE_AD_VARIABLE

#: More than a result frame carries (16 MiB pickled): the value stays on the slave that made it.
LARGE = 40 << 20


def node() -> int:
    """The ``MwpyNode`` of this slave's slot, from the machine ad the starter wrote."""
    return int(read_ad(MACHINE_AD_VARIABLE).get("mwpynode", 0))


@mwpy.task(resources={"requirements": "MwpyNode == 1"})
def on_node1() -> int:
    return node()


@mwpy.task(resources={"requirements": "MwpyNode == 2"})
def on_node2() -> int:
    return node()


@mwpy.task(resources={"requirements": "MwpyNode == 1"})
def large(n: int) -> tuple[int, bytes]:
    """``n`` random bytes, and the node that made them."""
    return node(), os.urandom(n)


@mwpy.task(resources={"requirements": "MwpyNode == 2"})
def where(value: Any) -> tuple[int, int, int]:
    """(this slave's node, the producer's node, the size of its bytes)."""
    made_on, data = value
    return node(), made_on, len(data)


if __name__ == "__main__":
    workdir, python, address = sys.argv[1:4]
    options = ["--mw-slave-executable", python, "--mw-master-host", address]
    options += ["--mw-events", str(Path(workdir, "events.jsonl"))]
    with mwpy.Executor(max_workers=2, backend="condor", workdir=workdir, options=options) as executor:
        # Both slave jobs up before the value is made: one of each need.
        first, second = executor.submit(on_node1), executor.submit(on_node2)
        print("nodes", first.result(timeout=240), second.result(timeout=240), flush=True)
        made = executor.submit(large, LARGE)
        print("used", json.dumps(executor.submit(where, made).result(timeout=240)), flush=True)
        print("counters", json.dumps(executor.file_counters(), default=str), flush=True)
    print("shut down", flush=True)

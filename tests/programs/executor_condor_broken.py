"""Slaves that cannot start on the condor back end (tests/test_condor_executor.py).

On the slaves (where this script is loaded as ``__mp_main__``) the import of a
library fails, as on a node that lacks it; each slave job exits non-zero and
Condor requeues it. The executor must count those failed runs from the slave
jobs' user log and break, not wait while Condor restarts them for ever.

Command line: ``executor_condor_broken.py WORKDIR SLAVE_PYTHON MASTER_ADDRESS``.
"""

from __future__ import annotations

import concurrent.futures
import sys

import mwpy

if __name__ != "__main__":  # on the slaves: as a node without numpy would
    raise ImportError("no module named numpy on this node")


def one() -> int:
    return 1


if __name__ == "__main__":
    workdir, python, address = sys.argv[1:4]
    options = ["--mw-slave-executable", python, "--mw-master-host", address]
    with mwpy.Executor(max_workers=2, backend="condor", workdir=workdir, options=options) as executor:
        try:
            executor.submit(one).result(timeout=400)
        except concurrent.futures.BrokenExecutor as exc:
            print("broken:", exc, flush=True)
    print("shut down", flush=True)

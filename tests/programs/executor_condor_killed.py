"""A task that kills its Condor slave (tests/test_condor_executor.py, issue 21 item 1 on the condor back end).

``doom`` kills its own slave process with SIGKILL, as the kernel's
out-of-memory killer or a crashing C extension would; with
``--mw-allowed-failures 0`` its first death fails it. The script prints the
error's class and message (which must say how the slave ended, read from the
slave jobs' user log) and the other tasks' results, which must all arrive.

Command line: ``executor_condor_killed.py WORKDIR SLAVE_PYTHON MASTER_ADDRESS``.
"""

from __future__ import annotations

import os
import signal
import sys

import mwpy


def doom() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    workdir, python, address = sys.argv[1:4]
    options = ["--mw-slave-executable", python, "--mw-master-host", address, "--mw-allowed-failures", "0"]
    with mwpy.Executor(max_workers=2, backend="condor", workdir=workdir, options=options) as executor:
        doomed = executor.submit(doom)
        squares = executor.map(square, range(10), timeout=180)
        error = doomed.exception(timeout=180)
        print("error", type(error).__name__, error, flush=True)
        print("squares", list(squares), flush=True)
    print("shut down", flush=True)

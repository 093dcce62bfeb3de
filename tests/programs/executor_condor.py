"""A plain ``concurrent.futures`` script on the condor back end (tests/test_condor_executor.py).

No ``@mwpy.master``, no ``mwpy.run()``: an ``mwpy.Executor(backend="condor")``
submits, maps and gets an exception back; the test reads the computation's
member id from the resource file in WORKDIR to ask the schedd for its jobs.

Command line: ``executor_condor.py WORKDIR SLAVE_PYTHON MASTER_ADDRESS [PORT_RANGE]``; with ``PORT_RANGE``
(``LOW-HIGH``) the master and its file service listen inside it (``--mw-master-port-range``, issue 24 item 4),
and a shared object makes the slaves use the file service.
"""

from __future__ import annotations

import sys

import mwpy


class Odd(ValueError):
    """A task's own exception class: the master must raise it as itself."""


def square(x: int) -> int:
    return x * x


def refuse_odd(x: int) -> int:
    if x % 2:
        raise Odd(f"{x} is odd")
    return x


if __name__ == "__main__":
    workdir, python, address = sys.argv[1:4]
    options = ["--mw-slave-executable", python, "--mw-master-host", address]
    if len(sys.argv) > 4:
        options += ["--mw-master-port-range", sys.argv[4]]
    with mwpy.Executor(max_workers=2, backend="condor", workdir=workdir, options=options) as executor:
        print("submit", executor.submit(square, 12).result(timeout=90), flush=True)
        print("map", list(executor.map(square, range(20), timeout=90)), flush=True)
        if len(sys.argv) > 4:  # through the file service
            shared = executor.share(b"x" * 100_000)
            print("shared", *executor.map(len, [shared], timeout=90), flush=True)
        try:
            executor.submit(refuse_odd, 3).result(timeout=90)
        except Odd as exc:
            print("raised", type(exc).__name__, exc, flush=True)
    print("shut down", flush=True)

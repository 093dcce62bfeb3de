"""A 50 MB object shared with ``ex.share`` on the condor back end (tests/test_condor_executor.py, issue 22).

400 short tasks on up to 8 slave jobs name one shared 50 MB object; the
script prints one JSON line: how many slaves ran tasks, the object's file
size and the file service's counters (what the master sent). Then a task
returns 30 MB and a ``mwpy.File`` it wrote in its sandbox: both come back
through the file service (``large_result``, ``returned_file``).

Command line: ``shared_condor.py WORKDIR SLAVE_PYTHON MASTER_ADDRESS``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

import mwpy

SIZE = 50_000_000


def large(seed: int) -> bytes:
    return bytes([seed]) * 30_000_000


def made_here(text: str) -> mwpy.File:
    with open("made-on-the-slave.txt", "w", encoding="utf-8") as out:
        out.write(text)
    return mwpy.File("made-on-the-slave.txt")


def probe(blob: bytes, i: int) -> tuple[str, int]:
    time.sleep(0.1)  # long enough for every slave job to start and take tasks
    return f"{socket.gethostname()}:{os.getpid()}", len(blob) + i


if __name__ == "__main__":
    workdir, python, address = sys.argv[1:4]
    options = ["--mw-slave-executable", python, "--mw-master-host", address]
    with mwpy.Executor(max_workers=8, backend="condor", workdir=workdir, options=options) as executor:
        handle: Any = executor.share(os.urandom(SIZE))
        answers = list(executor.map(probe, [handle] * 400, range(400), timeout=600))
        report = {
            "right": [length for _, length in answers] == [SIZE + i for i in range(400)],
            "slaves": len({slave for slave, _ in answers}),
            "size": handle.size,
            "digest": handle.digest,
            "counters": executor.file_counters(),
        }
        report["large_result"] = executor.submit(large, 7).result(timeout=300) == bytes([7]) * 30_000_000
        returned = executor.submit(made_here, "from a Condor job\n").result(timeout=300)
        with open(returned, encoding="utf-8") as copy:
            report["returned_file"] = copy.read() == "from a Condor job\n"
    print(json.dumps(report), flush=True)

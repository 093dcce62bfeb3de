"""How local slaves ended, told by the back end that saw them exit to the master that saw them vanish.

A master sees a slave that dies as a connection that ends; only the process
that started it (the local back end) learns its exit status. When a task
kills its slaves (mwpy/core/outcomes.py fails it past its allowed failures),
its error says how each ended: the back end appends a line ``HOST PID
STATUS`` for every slave that exits non-zero to a file in the work folder,
beside the resource file, and the master reads it by the (host, pid) the
slave's Hello gave. A batch system whose slaves run elsewhere writes nothing
there, and the error says "connection lost while running it".
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from mwpy.names import SLAVE_EXITS

#: The most of the file read (a line per failed slave: far more than a computation makes).
MAX_READ = 1 << 20


def record(folder: Path, pid: int, status: int) -> None:
    """Note that the slave process ``pid`` of this host ended with ``status`` (Popen's: -N for signal N)."""
    fd = os.open(folder / SLAVE_EXITS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"{socket.gethostname()} {pid} {status}\n".encode())  # one write: lines stay whole
    finally:
        os.close(fd)


def describe(status: int) -> str:
    """A status as a user reads it: the signal's name, or the exit status."""
    if status >= 0:
        return f"exited with status {status} without a result"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    if -status == signal.SIGKILL:
        return f"killed by {name} (as the kernel does to a process out of memory)"
    return f"killed by {name}"


class Exits:
    """The master's reader of the file in ``folder``: how a slave (host, pid) ended, or None if not told yet."""

    def __init__(self, folder: Path | None) -> None:
        self._path = None if folder is None else folder / SLAVE_EXITS

    def __call__(self, host: str, pid: int) -> str | None:
        if self._path is None:
            return None
        try:
            with self._path.open("rb") as file:
                text = file.read(MAX_READ).decode("utf-8", "replace")
        except OSError:
            return None
        found = None
        for line in text.splitlines():
            fields = line.split(" ")
            if len(fields) == 3 and fields[0] == host and fields[1] == str(pid) and fields[2].lstrip("-").isdigit():
                found = describe(int(fields[2]))  # the last line wins: a pid may be reused
        return found

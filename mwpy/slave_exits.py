"""How local slaves ended, told by the back end that saw them exit to the master that saw them vanish.

A master sees a slave that dies as a connection that ends; only the process
that started it (the local back end) learns its exit status. When a task
kills its slaves (mwpy/core/outcomes.py fails it past its allowed failures),
its error says how each ended: the back end appends a line ``HOST PID
STATUS`` for every slave that exits (0 too: a task's ``os._exit(0)`` ends
its slave without a result) to a file in the work folder, beside the
resource file, and the master reads it by the (host, pid) the slave's Hello
gave. A Condor slave is found in its jobs' user log instead
(``slaves.log``, which the overseer's jobs write beside the resource file): the
first termination, eviction, hold or removal of its job (CLUSTER.PROC, also
from its Hello) logged since its connection ended. Elsewhere nothing is
written, and the error says "connection lost while running it".
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Protocol

from mwpy.names import SLAVE_EXITS, SLAVES_LOG

#: The most of the file read (a line per failed slave: far more than a computation makes).
MAX_READ = 1 << 20
#: The most of a Condor user log read, from its end (its latest events).
MAX_LOG_READ = 8 << 20
#: An event's header in HTCondor's user log: ``NNN (CLUSTER.PROC.SUBPROC) YYYY-MM-DD HH:MM:SS text``.
_HEADER = re.compile(r"(\d{3}) \((\d+)\.(\d+)\.\d+\) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ")
_SIGNAL = re.compile(r"Abnormal termination \(signal (\d+)\)")
_STATUS = re.compile(r"Normal termination \(return value (\d+)\)")
#: Events that end a run: evicted (004, "terminated and was requeued" for a non-zero exit), terminated, aborted, held.
_ENDS = frozenset({4, 5, 9, 12})
#: Seconds an event may be logged before the master saw the connection end (the log has whole seconds).
_SLACK = 2.0


class Departed(Protocol):
    """What is known of a slave that died: mwpy.core.scheduler.Death."""

    @property
    def host(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def job(self) -> str | None: ...
    @property
    def at(self) -> float: ...


def record(folder: Path, pid: int, status: int) -> None:
    """Note that the slave process ``pid`` of this host ended with ``status`` (Popen's: -N for signal N)."""
    try:
        fd = os.open(folder / SLAVE_EXITS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except FileNotFoundError:
        return  # the work folder is gone: the computation ended, and no one will ask
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
    """The master's reader of the files in ``folder``: how a dead slave ended, or None if not told yet."""

    def __init__(self, folder: Path | None) -> None:
        self._folder = folder

    @classmethod
    def beside(cls, resource_file: str | None) -> Exits:
        """The reader of the work folder a local back end shares with the master: the resource file's."""
        return cls(None if resource_file is None else Path(resource_file).resolve().parent)

    def __call__(self, slave: Departed) -> str | None:
        if self._folder is None:
            return None
        if slave.job is not None:
            return _condor_end(_tail(self._folder / SLAVES_LOG, MAX_LOG_READ), slave.job, slave.at)
        found = None
        for line in _tail(self._folder / SLAVE_EXITS, MAX_READ).splitlines():
            fields = line.split(" ")
            if fields[:2] == [slave.host, str(slave.pid)] and len(fields) == 3 and fields[2].lstrip("-").isdigit():
                found = describe(int(fields[2]))  # the last line wins: a pid may be reused
        return found


def _tail(path: Path, most: int) -> str:
    """The last ``most`` bytes of a file as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - most))
            return file.read(most).decode("utf-8", "replace")
    except OSError:
        return ""


def _condor_end(log: str, job: str, since: float) -> str | None:
    """How Condor says job ``job`` (CLUSTER.PROC) ended, from its first run-ending event after ``since``."""
    cluster, _, process = job.partition(".")
    for event in log.split("\n...\n"):
        header = _HEADER.search(event)
        if header is None or (header[2], header[3]) != (cluster.zfill(3), process.zfill(3)):
            continue
        code = int(header[1])
        if code not in _ENDS or time.mktime(time.strptime(header[4], "%Y-%m-%d %H:%M:%S")) < since - _SLACK:
            continue
        body = event[header.end() :].splitlines()[1:]
        reason = " ".join(body[0].split()) if body else ""
        if found := _SIGNAL.search(event):
            return f"{describe(-int(found[1]))} (Condor's log)"
        if found := _STATUS.search(event):
            return f"{describe(int(found[1]))} (Condor's log)"
        return f"{'held' if code == 12 else 'removed' if code == 9 else 'evicted'} by Condor: {reason}"
    return None

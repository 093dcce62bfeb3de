"""How local slaves ended, and which ones are stuck: what the master and the local back end tell each other.

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

The other way, the master names the slaves it dropped as silent (past
``--mw-client-timeout``): a slave frozen in C code holding the GIL never
exits by itself, so the local back end would keep it running and start no
replacement. The master appends ``HOST PID`` to another file beside the
resource file, and the local back end, which polls it, kills its slave of
that pid (dask's nanny restarts a worker its scheduler dropped as silent
alike). A file, not a call: under ``mwpy local`` the master is another
process; under ``mwpy.Executor`` the same channel serves. Condor slaves are
not named: their jobs are Condor's (and the overseer's) to end.
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Protocol

from mwpy.names import SLAVE_DROPS, SLAVE_EXITS, SLAVES_LOG

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
#: Events that say a run has ended though they do not end it: executing (001: a new run) and reconnect failed
#: (024: the schedd gave up on the run's starter after its job lease; the job runs again).
_RERUN = frozenset({1, 24})
#: What ends each event in a user log.
_EVENT_END = b"\n...\n"
#: Seconds an event may be logged before the master saw the connection end (the log has whole seconds).
_SLACK = 2.0


class Departed(Protocol):
    """What is known of a slave that died: mwpy.core.entry.Death."""

    @property
    def host(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def job(self) -> str | None: ...
    @property
    def at(self) -> float: ...


def work_folder(resource_file: str | None) -> Path | None:
    """The folder the master shares with a local back end: the resource file's (None: no resource file)."""
    return None if resource_file is None else Path(resource_file).resolve().parent


def record(folder: Path, pid: int, status: int) -> None:
    """Note that the slave process ``pid`` of this host ended with ``status`` (Popen's: -N for signal N)."""
    _append(folder / SLAVE_EXITS, f"{socket.gethostname()} {pid} {status}\n")


def dropped(folder: Path | None, host: str, pid: int) -> None:
    """Note that the master dropped the silent slave ``pid`` of ``host``: its local back end, if any, kills it."""
    if folder is not None:
        _append(folder / SLAVE_DROPS, f"{host} {pid}\n")


def stuck(folder: Path | None, slave: Departed) -> bool:
    """Name a slave dropped as silent to its local back end, which kills it (a Condor job is Condor's to end);
    whether it is surely stuck, its silence a death: on this machine, where no network can have been lost."""
    if slave.job is None:
        dropped(folder, slave.host, slave.pid)
    return slave.host == socket.gethostname()


def gone(host: str, pid: int) -> bool:
    """Whether the slave process ``pid`` on ``host`` has surely ended: only this machine's can be looked at (one
    elsewhere, or a pid taken again since, counts as alive)."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: the pid was taken again
        return False
    return False


def _append(path: Path, line: str) -> None:
    """Append one line, created readable by its owner only, in one write (lines stay whole)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except FileNotFoundError:
        return  # the work folder is gone: the computation ended, and no one will ask
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Drops:
    """The local back end's reader of :func:`dropped`'s lines: the pids of this host dropped since it last read."""

    def __init__(self) -> None:
        #: Bytes of each folder's file already read (whole lines only).
        self._read: dict[Path, int] = {}

    def new(self, folder: Path) -> list[int]:
        """Pids of this host's slaves the master of ``folder`` dropped since the last call.

        The first call only notes where the file ends: lines already there are an earlier run's (a reused
        ``--workdir``), whose pids may be this run's slaves' now. It comes before any of this run's slaves
        can have been dropped: the back end polls from its first slave's start, a drop takes a client timeout.
        """
        if folder not in self._read:
            self._read[folder] = _size(folder / SLAVE_DROPS)
            return []
        start = self._read[folder]
        try:
            with (folder / SLAVE_DROPS).open("rb") as file:
                file.seek(start)
                data = file.read(MAX_READ)
        except OSError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self._read[folder] = start + len(whole)
        host = socket.gethostname()
        pids = []
        for line in whole.decode("utf-8", "replace").splitlines():
            fields = line.split(" ")
            if len(fields) == 2 and fields[0] == host and fields[1].isdigit():
                pids.append(int(fields[1]))
        return pids


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
        #: What :meth:`ended` read of the slaves' user log: bytes, and by job its latest run ended and begun.
        self._read = 0
        self._latest: dict[str, tuple[float, float]] = {}

    @classmethod
    def beside(cls, resource_file: str | None) -> Exits:
        """The reader of the work folder a local back end shares with the master: the resource file's."""
        return cls(work_folder(resource_file))

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

    def ended(self, host: str, pid: int, job: str, since: float) -> bool:
        """Whether a slave of a previous master (``job``: its Condor job or "") has surely ended since it was
        given a task at ``since``: its process is gone from this machine, or its job's user log has ended that
        run or begun another since (a restarted master waits for it no more: mwpy/core/adoption.py). The log
        has whole seconds: an execution logged in the second of ``since`` is that run's own, and an end logged
        in it counts as that run's end. The order of the events does not tell more: "end, then execution" in
        that second is an earlier run's end and the run given the task, or that run's end and the next run,
        and the log reads the same. Taking it as an end costs a task run again at worst; taking it as an
        earlier run's would have the master wait for a result nobody computes until the lease ends."""
        if gone(host, pid):
            return True
        if not job or self._folder is None:
            return False
        ended, began = self._latest_runs(self._folder / SLAVES_LOG).get(job, (-math.inf, -math.inf))
        return ended >= int(since) or began > int(since)

    def _latest_runs(self, path: Path) -> dict[str, tuple[float, float]]:
        """By job (CLUSTER.PROC): when its user log last ended a run of it, and last began one or failed to
        reconnect to one; only the whole events logged since the last look are read (the log grows all the
        time: the slaves' state changes are logged too)."""
        try:
            with path.open("rb") as file:
                end = file.seek(0, os.SEEK_END)
                start = max(self._read if self._read <= end else 0, end - MAX_LOG_READ)  # smaller: a new log
                file.seek(start)
                data = file.read(end - start)
        except OSError:
            return self._latest
        whole = data[: data.rfind(_EVENT_END) + len(_EVENT_END)] if _EVENT_END in data else b""
        self._read = start + len(whole)
        for event in whole.decode("utf-8", "replace").split(_EVENT_END.decode()):
            header = _HEADER.search(event)
            if header is None or int(header[1]) not in _ENDS | _RERUN:
                continue
            job, at = f"{int(header[2])}.{int(header[3])}", _logged_at(header)
            ended, began = self._latest.get(job, (-math.inf, -math.inf))
            self._latest[job] = (max(ended, at), began) if int(header[1]) in _ENDS else (ended, max(began, at))
        return self._latest


def _logged_at(header: re.Match[str]) -> float:
    """When (Unix time) the event of a user log's event header was logged."""
    return time.mktime(time.strptime(header[4], "%Y-%m-%d %H:%M:%S"))


def _size(path: Path) -> int:
    """A file's size in bytes, 0 when it does not exist (yet)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


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
        if code not in _ENDS or _logged_at(header) < since - _SLACK:
            continue
        body = event[header.end() :].splitlines()[1:]
        reason = " ".join(body[0].split()) if body else ""
        if found := _SIGNAL.search(event):
            return f"{describe(-int(found[1]))} (Condor's log)"
        if found := _STATUS.search(event):
            return f"{describe(int(found[1]))} (Condor's log)"
        return f"{'held' if code == 12 else 'removed' if code == 9 else 'evicted'} by Condor: {reason}"
    return None

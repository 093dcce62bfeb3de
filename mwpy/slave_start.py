"""How a local slave process starts: in its sandbox, with ``TMPDIR`` there, its output in two files there.

The one home of it for the local back end (mwpy/backends/local.py), which starts and restarts local slave jobs,
and for :class:`mwpy.Executor`, which starts its first local slaves before mwpy's engine is even imported
(mwpy/executor.py) and hands them to the back end. So it imports nothing heavy: mwpy's names, and the standard
library's ``subprocess`` only to start a process (a fork server, which imports this module, never does).

An Executor's first slaves come from one :class:`ForkServer`: a process that imports the slave's code once and
forks them, instead of each importing it (docs/design.md, "Local slaves").
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from mwpy.names import SLAVE_STDERR, SLAVE_STDOUT

if TYPE_CHECKING:
    import subprocess

#: Seconds at most of one wait for a fork server's report (callers wait again until theirs has come).
REPORT_LOOK = 0.5
#: The option that makes mwpy/_spawn.py a fork server: ``FORK_SERVER REPORT_FD COUNT FOLDER`` before the slave's.
FORK_SERVER = "--mw-fork-server"


class SlaveProcess(Protocol):
    """What the local back end does with a slave's process: a :class:`subprocess.Popen`, or a :class:`ForkedSlave`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def job_id(number: int) -> str:
    """The id of the local back end's ``number``-th slave job (its sandbox folder's name too)."""
    return f"local.{number}"


def start_process(command: Sequence[str], sandbox: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
    """Start ``command`` in ``sandbox``; its stdout and stderr are appended to the sandbox's slave.out and slave.err.

    Its temporary files go to the sandbox too (Condor's starter points ``TMPDIR`` there): a slave's caches go
    with its sandbox even when it is killed before it can remove them.
    """
    import subprocess  # noqa: PLC0415 (see the top of this file)

    folder = os.fspath(sandbox)
    with open(os.path.join(folder, SLAVE_STDOUT), "ab") as out, open(os.path.join(folder, SLAVE_STDERR), "ab") as err:
        return subprocess.Popen(
            list(command),
            cwd=folder,
            env={**os.environ, "TMPDIR": folder},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )


def enter_sandbox(sandbox: str) -> None:
    """In a slave forked by a fork server: what :func:`start_process` gives a slave it starts (cwd, ``TMPDIR``,
    output appended to the sandbox's two files)."""
    os.chdir(sandbox)
    os.environ["TMPDIR"] = sandbox
    for fd, name in ((1, SLAVE_STDOUT), (2, SLAVE_STDERR)):
        target = os.open(os.path.join(sandbox, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.dup2(target, fd)
        os.close(target)


class ForkServer:
    """``count`` slaves forked by one process once it has imported the slave's code (a forked slave costs ~2 ms
    of CPU, one that starts Python and imports mwpy ~85), seen from the process that started it.

    The server is this process's child, the slaves its children: it reports each slave's pid once forked and
    its exit status once reaped, on a pipe (a line ``PID`` then ``PID STATUS``), and exits when none is left.
    So each :class:`ForkedSlave` is known by pid, signalled and killed directly, and its exit seen as a child's
    would be. A server that dies takes its slaves with it (each ends once its parent is gone; those already
    reported are killed here), and they count as killed, to be started again as any slave that died.
    ``command``: the interpreter, mwpy/_spawn.py and the slave's arguments; slave ``i`` runs in
    ``FOLDER/local.i`` (:func:`job_id`), the server itself in the first one (its errors are that job's).
    """

    def __init__(self, command: Sequence[str], folder: str, count: int) -> None:
        import subprocess  # noqa: PLC0415 (see the top of this file)

        self._reports, write = os.pipe()
        server = [*command[:2], FORK_SERVER, str(write), str(count), folder, *command[2:]]
        try:
            with open(os.path.join(folder, job_id(0), SLAVE_STDERR), "ab") as err:
                self.process = subprocess.Popen(
                    server, cwd=folder, stdin=subprocess.DEVNULL, stdout=err, stderr=err, pass_fds=(write,)
                )
        except BaseException:
            os.close(self._reports)
            raise
        finally:
            os.close(write)
        os.set_blocking(self._reports, False)
        self._lock = threading.Lock()
        self._buffer = b""
        self._ended = False
        self.pids: list[int] = []
        self.statuses: dict[int, int] = {}
        self.slaves = [ForkedSlave(self, number) for number in range(count)]

    def read(self, timeout: float | None) -> None:
        """Take in what the server reported, waiting for a report ``timeout`` seconds at most (None: until one).

        The wait holds no lock (the overseer's thread polls while the caller's waits for a slave to stop), and
        lasts ``REPORT_LOOK`` at most: the pipe closed by another thread meanwhile, its number may be reused."""
        if timeout != 0 and not self._ended:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: the server is gone
                select.select([self._reports], [], [], REPORT_LOOK if timeout is None else min(timeout, REPORT_LOOK))
        with self._lock:
            if self._ended:
                return
            try:
                data = os.read(self._reports, 4096)
            except BlockingIOError:
                return
            if not data:
                self._end()
                return
            *lines, self._buffer = (self._buffer + data).split(b"\n")
            for line in lines:
                pid, *status = (int(field) for field in line.split())
                if status:
                    self.statuses[pid] = status[0]
                else:
                    self.pids.append(pid)
            if len(self.statuses) == len(self.slaves):  # all reaped: the server exits now
                self.process.wait()

    @property
    def ended(self) -> bool:
        return self._ended

    def _end(self) -> None:
        """The server is gone: reap it; its slaves whose end it did not report are killed (an orphan ends itself
        once it sees its parent gone, but not at once)."""
        self._ended = True
        os.close(self._reports)
        self.process.wait()
        for pid in self.pids:
            if pid not in self.statuses:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self.statuses[pid] = -signal.SIGKILL

    def stop(self) -> None:
        """Kill the server and its slaves (an executor that could not be made)."""
        if self.process.poll() is None:
            self.process.kill()
        while not self._ended:
            self.read(None)


class ForkedSlave:
    """The ``number``-th slave of a :class:`ForkServer`, used as a :class:`subprocess.Popen` is."""

    def __init__(self, server: ForkServer, number: int) -> None:
        self._server = server
        self._number = number

    @property
    def pid(self) -> int:
        """Its pid, once the server has forked it (the server's, if the server died before)."""
        server = self._server
        while self._number >= len(server.pids) and not server.ended:
            server.read(None)
        return server.pids[self._number] if self._number < len(server.pids) else server.process.pid

    def poll(self) -> int | None:
        """Its exit status (Popen's: -N for signal N), or None while it runs; never forked: the server's status."""
        server = self._server
        server.read(0)
        if self._number < len(server.pids):
            return server.statuses.get(server.pids[self._number])
        if server.ended:
            return server.process.returncode or 1
        return None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (status := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                import subprocess  # noqa: PLC0415 (see the top of this file)

                raise subprocess.TimeoutExpired(
                    f"slave {self._number} of fork server {self._server.process.pid}", timeout or 0.0
                )
            self._server.read(left)
        return status

    def send_signal(self, sig: int) -> None:
        """Signal it unless it has ended; one that ends meanwhile (reaped by the server, its end not yet read) is
        no error, as for Popen (bpo-40550): the local back end's close signals slaves that are leaving."""
        pid = self.pid
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

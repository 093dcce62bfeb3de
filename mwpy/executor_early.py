"""A plain local executor's slaves, started before the engine is imported, and what the executor's two halves
(mwpy/executor.py, mwpy/executor_core.py) both name: the program slaves run, the work folder's prefix, the host.

Its own module so that the engine's half needs nothing from the light public one (which loads it lazily):
only the standard library and mwpy's bottom layers are imported here.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys

from mwpy import slave_start
from mwpy.names import AUTHKEY_FILE, MASTER_BACKLOG, SLAVE_SECRET_FILE

#: The program slaves run: loads the user's script as ``__mp_main__``, then serves as a slave.
SPAWN_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_spawn.py")
#: The name of an executor's own work folder (a temporary one).
WORK_PREFIX = "mwpy-executor-"
#: Where a local executor's master listens, and its slaves connect.
LOCAL_HOST = "127.0.0.1"


class EarlySlaves:
    """A plain local executor's slaves, started first thing: each starts Python and imports mwpy while this
    process imports the engine (:mod:`mwpy.executor_core`), instead of after it (docs/performance.md,
    scenario 7); from two on, one process imports mwpy and forks them all (:class:`~mwpy.slave_start.ForkServer`).

    Each is started as the local back end starts a slave (mwpy/slave_start.py), in the sandbox of that back
    end's job of the same number, and told on its command line where the master listens, its member id and
    the file holding its secret, so it needs no resource file. The master takes the listening socket, whose
    backlog holds their connections until it accepts; the local back end takes the processes. Only the
    standard library is used here: the point is to come before mwpy's imports.
    """

    def __init__(self, count: int, member_id: str) -> None:
        self.member_id = member_id
        from mwpy import safe_files  # noqa: PLC0415 (the engine imports it anyway: not on `import mwpy`'s path)

        self.folder = safe_files.run_folder(WORK_PREFIX)
        self.processes: list[slave_start.SlaveProcess] = []
        self.forks: slave_start.ForkServer | None = None
        self.listener: socket.socket | None = None
        try:
            self.listener = socket.create_server((LOCAL_HOST, 0), backlog=MASTER_BACKLOG)
            #: What --mw-secret-file holds: hex text (os.urandom is what secrets.token_bytes reads).
            self.secret = os.urandom(32).hex().encode()
            secret_file = os.path.join(self.folder, SLAVE_SECRET_FILE)
            with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(self.secret + b"\n")
            pass_authkey(self.folder)
            port = str(self.listener.getsockname()[1])
            #: The slaves' command line: ``mwpy/_spawn.py``'s, as the resource file would give it.
            self.command = [
                sys.executable, SPAWN_PROGRAM, "--mw-slave", "--mw-master-host", LOCAL_HOST, "--mw-master-port", port,
                "--mw-member-id", member_id, "--mw-secret-file", secret_file, main_script(), search_path(), "-",
            ]  # fmt: skip
            sandboxes = [os.path.join(self.folder, slave_start.job_id(number)) for number in range(count)]
            for sandbox in sandboxes:
                os.mkdir(sandbox)
            if count > 1 and hasattr(os, "fork"):  # one child imports mwpy and forks them all (mwpy/slave_start.py)
                self.forks = slave_start.ForkServer(self.command, self.folder, count)
                self.processes.extend(self.forks.slaves)
            else:
                self.processes.extend(slave_start.start_process(self.command, sandbox) for sandbox in sandboxes)
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        """The executor could not be made: stop the slaves, close the socket, remove the folder."""
        if self.forks is not None:
            self.forks.stop()
        for process in self.processes:
            process.kill()
            process.wait()
        if self.listener is not None:
            self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def pass_authkey(folder: str | os.PathLike[str]) -> None:
    """Give local slaves this process's ``multiprocessing`` authkey (a file only its user reads), as spawn gives
    it to its children: a ``multiprocessing.Manager()``'s proxies then work in tasks. Only if the program has
    imported multiprocessing (28 ms to import: an Executor that needs none does not pay for it)."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None:
        return
    key = bytes(multiprocessing.current_process().authkey)
    with open(os.open(os.path.join(folder, AUTHKEY_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
        out.write(key)


def search_path() -> str:
    """The folders local slaves put on ``sys.path``: the working folder, then this process's ``sys.path`` (as
    ``multiprocessing``'s spawn gives its children), so that what the caller imports, a slave imports; a slave
    that starts an Executor of its own passes its caller's on."""
    folders = [os.getcwd(), *(entry or os.getcwd() for entry in sys.path)]
    return os.pathsep.join(dict.fromkeys(folders))


def main_script() -> str:
    """The file slaves load as ``__mp_main__``: this process's ``__main__`` script, or ``-`` for none."""
    main = sys.modules.get("__main__")
    path: str | None = getattr(main, "__file__", None)
    if path is None or not os.path.isfile(path):
        return "-"
    return os.path.abspath(path)

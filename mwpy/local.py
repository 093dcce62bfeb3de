"""``mwpy local``: the embedded default — a master and N local slaves on this machine.

It starts the program as master (on loopback, with a resource file in a work
folder) and runs the same overseer that drives Condor, with the local back
end, capped at N slaves. Real processes, real sockets, the same resource-file
contract. It exits with the master's status. On a terminal it shows a live
progress line (tasks done, rate, slaves connected) below the program's output;
piped, it adds nothing to the output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TextIO

from mwpy import resource_file
from mwpy.backends.local import LocalBackend
from mwpy.errors import ResourceFileError
from mwpy.overseer import Limits, Overseer

#: Resource-file update interval used locally, so progress and counts stay fresh.
LOCAL_UPDATE_INTERVAL = 1.0
#: Seconds slaves get to leave on their own after the master has finished.
SLAVE_EXIT_GRACE = 5.0


class _Console:
    """Serialises the program's output lines with a redrawn progress line on a terminal."""

    def __init__(self, out: TextIO, progress: bool) -> None:
        self._out = out
        self._progress = progress
        self._status = ""
        self._lock = threading.Lock()

    def line(self, data: bytes, stream: TextIO) -> None:
        with self._lock:
            if self._progress and self._status:
                self._out.write("\r\x1b[K")
                self._out.flush()
            stream.buffer.write(data)
            stream.flush()
            self._redraw()

    def status(self, text: str) -> None:
        with self._lock:
            self._status = text
            self._redraw()

    def done(self) -> None:
        with self._lock:
            if self._progress and self._status:
                self._out.write("\r\x1b[K" + self._status + "\n")
                self._out.flush()
            self._status = ""

    def _redraw(self) -> None:
        if self._progress and self._status:
            self._out.write("\r\x1b[K" + self._status)
            self._out.flush()


def _pump(source: IO[bytes], console: _Console, stream: TextIO) -> None:
    for data in iter(source.readline, b""):
        # Our own reader may be gone (``mwpy local ... | head``): keep draining, or the master blocks on a full pipe.
        with contextlib.suppress(BrokenPipeError):
            console.line(data, stream)
    source.close()


def run_local(
    program: str,
    slaves: int,
    args: list[str],
    *,
    workdir: str | None = None,
    progress: bool | None = None,
    python: str | None = None,
) -> int:
    """Run ``program`` as master with ``slaves`` local slaves; return the master's exit status."""
    if not Path(program).is_file():
        print(f"mwpy local: error: {program}: no such program file", file=sys.stderr)
        return 2
    if slaves < 1:
        print("mwpy local: error: --slaves: expected a positive integer", file=sys.stderr)
        return 2
    own_workdir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="mwpy-local-") if workdir is None else workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rf = work / "resource.json"
    rf.unlink(missing_ok=True)
    interpreter = python or sys.executable
    show = sys.stderr.isatty() if progress is None else progress
    console = _Console(sys.stderr, show)
    master = subprocess.Popen(
        [
            interpreter,
            os.path.abspath(program),
            "--mw-master",
            "--mw-master-host",
            "127.0.0.1",
            "--mw-resource-file",
            str(rf),
            "--mw-resource-file-update-interval",
            str(LOCAL_UPDATE_INTERVAL),
            "--mw-member-id",
            f"local-{os.getpid()}",
            "--mw-audit-file",
            str(work / "master.audit"),
            "--mw-slave-executable",
            interpreter,
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert master.stdout is not None
    assert master.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(master.stdout, console, sys.stdout), daemon=True),
        threading.Thread(target=_pump, args=(master.stderr, console, sys.stderr), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    backend = LocalBackend(work)
    # No grace at the end: local slaves have no output to bring back, and one still trying to reach the
    # finished master would only make `mwpy local` wait.
    overseer = Overseer(rf, backend, Limits(max_jobs=slaves, max_idle=slaves, batch=slaves), finish_grace=0.0)
    stop = threading.Event()
    watcher = threading.Thread(target=overseer.run, args=(stop,), kwargs={"interval": 0.5}, daemon=True)
    watcher.start()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        _watch(master, rf, slaves=slaves, console=console, show=show, backend=backend)
    except (KeyboardInterrupt, _Terminated):
        if master.poll() is None:  # Ctrl-C reached the master too; a SIGTERM reached only us
            master.terminate()
        master.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.set()
        watcher.join()
        _let_slaves_leave(backend)
        backend.close()
        for pump in pumps:
            pump.join()
        console.done()
        if own_workdir and master.returncode == 0:
            shutil.rmtree(work, ignore_errors=True)
        elif master.returncode != 0:
            print(f"mwpy local: master exited with status {master.returncode}; logs in {work}", file=sys.stderr)
    # A master killed by a signal reports -N; a shell reports 128 + N, and so does mwpy local.
    return master.returncode if master.returncode >= 0 else 128 - master.returncode


class _Terminated(Exception):
    """``mwpy local`` got SIGTERM: stop the master and the slaves, then exit."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _watch(
    master: subprocess.Popen[bytes], rf: Path, *, slaves: int, console: _Console, show: bool, backend: LocalBackend
) -> None:
    """Wait for the master, drawing the progress line and saying when a slave fails."""
    started = time.monotonic()
    seen = 0
    failed: set[str] = set()
    while master.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            master.wait(0.5)
        if show:
            console.status(_progress_text(rf, slaves, time.monotonic() - started))
        exits, seen = backend.exits[seen:], seen + len(backend.exits[seen:])
        for job_id, status in exits:
            if status != 0 and job_id not in failed and master.poll() is None:
                failed.add(job_id)  # once per slave: a slave that keeps failing would flood the terminal
                console.line(_failure_text(backend, job_id, status).encode(), sys.stderr)


def _failure_text(backend: LocalBackend, job_id: str, status: int) -> str:
    """One line: which slave failed, how, the last line it wrote to stderr, where its logs are."""
    errors = backend.sandbox(job_id) / "slave.err"
    try:
        last = errors.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
    except OSError:
        last = []
    said = f": {last[0]}" if last else ""
    return f"mwpy local: slave {job_id} exited with status {status}{said} (started again; see {errors})\n"


def _progress_text(rf: Path, slaves: int, elapsed: float) -> str:
    try:
        record = resource_file.read(rf)
    except ResourceFileError:
        return f"[mwpy] starting master... {elapsed:.0f} s"
    connected = sum(record.slaves_connected.values())
    rate = record.tasks_done / elapsed if elapsed > 0 else 0.0
    return (
        f"[mwpy] {record.tasks_done} tasks done ({rate:,.0f}/s) · {record.tasks_running} running · "
        f"{record.tasks_pending} queued · slaves {connected}/{slaves} · {elapsed:.0f} s"
    )


def _let_slaves_leave(backend: LocalBackend) -> None:
    """Slaves told to shut down exit 0 by themselves; give them a moment before stopping them."""
    deadline = time.monotonic() + SLAVE_EXIT_GRACE
    while backend.jobs() and time.monotonic() < deadline:
        time.sleep(0.05)

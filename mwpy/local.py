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

import attrs

from mwpy import resource_file
from mwpy.backends.local import LocalBackend
from mwpy.errors import ResourceFileError
from mwpy.failing_slaves import SetupFailures
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

    @property
    def progress(self) -> bool:
        """Whether a progress line is shown (a terminal, or --progress)."""
        return self._progress

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
    problem = _usage_problem(program, slaves)
    if problem is not None:
        print(f"mwpy local: error: {problem}", file=sys.stderr)
        return 2
    show = sys.stderr.isatty() if progress is None else progress
    console = _Console(sys.stderr, show)
    run = _LocalRun(
        program, slaves, args, work=_Workdir.make(workdir), console=console, interpreter=python or sys.executable
    )
    return run.wait()


def _usage_problem(program: str, slaves: int) -> str | None:
    """What is wrong with the command line, in one line, or None."""
    if not Path(program).is_file():
        return f"{program}: no such program file"
    if slaves < 1:
        return "--slaves: expected a positive integer"
    return None


@attrs.frozen
class _Workdir:
    """The folder of the resource file, the master's audit and the slave sandboxes."""

    path: Path
    #: Made by mwpy local (no --workdir): removed after a successful run, kept for a post-mortem otherwise.
    own: bool

    @classmethod
    def make(cls, workdir: str | None) -> _Workdir:
        path = Path(tempfile.mkdtemp(prefix="mwpy-local-") if workdir is None else workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        (path / "resource.json").unlink(missing_ok=True)  # a previous run's file would look like a live master
        return cls(path, own=workdir is None)

    @property
    def resource_file(self) -> Path:
        return self.path / "resource.json"

    def clean_up(self, status: int) -> None:
        """Remove our own folder after success; after a failure, say where the logs are."""
        if self.own and status == 0:
            shutil.rmtree(self.path, ignore_errors=True)
        elif status != 0:
            print(f"mwpy local: master exited with status {status}; logs in {self.path}", file=sys.stderr)


def _master_command(interpreter: str, program: str, work: _Workdir, args: list[str]) -> list[str]:
    """The master's command line: loopback only, a resource file rewritten every second, slaves like us."""
    return [
        interpreter,
        os.path.abspath(program),
        "--mw-master",
        "--mw-master-host",
        "127.0.0.1",
        "--mw-resource-file",
        str(work.resource_file),
        "--mw-resource-file-update-interval",
        str(LOCAL_UPDATE_INTERVAL),
        "--mw-member-id",
        f"local-{os.getpid()}",
        "--mw-audit-file",
        str(work.path / "master.audit"),
        "--mw-slave-executable",
        interpreter,
        *_default_events(work, args),
        *args,
    ]


def _default_events(work: _Workdir, args: list[str]) -> list[str]:
    """An event log in the work folder (for ``mwpy report``, and the goodput summary), unless the user names one."""
    if any(arg == "--mw-events" or arg.startswith("--mw-events=") for arg in args):
        return []
    return ["--mw-events", str(work.path / "events.jsonl")]


class _LocalRun:
    """One ``mwpy local`` run: the master process, its output pumps, and the overseer with local slaves."""

    def __init__(
        self, program: str, slaves: int, args: list[str], *, work: _Workdir, console: _Console, interpreter: str
    ) -> None:
        self.slaves = slaves
        self.work = work
        self.console = console
        self.master = subprocess.Popen(
            _master_command(interpreter, program, work, args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.master.stdout is not None
        assert self.master.stderr is not None
        self.pumps = [
            threading.Thread(target=_pump, args=(self.master.stdout, console, sys.stdout), daemon=True),
            threading.Thread(target=_pump, args=(self.master.stderr, console, sys.stderr), daemon=True),
        ]
        for pump in self.pumps:
            pump.start()
        self.backend = LocalBackend(work.path)
        # No grace at the end: local slaves have no output to bring back, and one still trying to reach the
        # finished master would only make `mwpy local` wait.
        limits = Limits(max_jobs=slaves, max_idle=slaves, batch=slaves)
        overseer = Overseer(work.resource_file, self.backend, limits, finish_grace=0.0)
        self.stop = threading.Event()
        self.gave_up = False  # slaves kept failing at set-up: the master was stopped
        self.watcher = threading.Thread(target=overseer.run, args=(self.stop,), kwargs={"interval": 0.5}, daemon=True)
        self.watcher.start()

    def wait(self) -> int:
        """Wait for the master (or Ctrl-C, or SIGTERM), clean up, and return its status as a shell reports it."""
        previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
        interrupted = False
        try:
            self._watch()
        except (KeyboardInterrupt, _Terminated) as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            if self.master.poll() is None:  # Ctrl-C reached the master too; a SIGTERM reached only us
                self.master.terminate()
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while it stops
                self.master.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
            published = self.work.resource_file.exists()  # a master that ran wrote it, and leaves it finished
            self._clean_up(quiet=interrupted)
        if interrupted:  # whatever the master made of its own SIGINT: one line, and the shell's 130
            print(f"mwpy local: interrupted (logs in {self.work.path})", file=sys.stderr)
            return 130
        if self.gave_up:
            return 1
        # A master killed by a signal reports -N; a shell reports 128 + N, and so does mwpy local.
        status = self.master.returncode
        if status == 0 and not published:
            print(
                "mwpy local: error: the program exited without starting a master (did you call mwpy.run() "
                'under if __name__ == "__main__"? a script using mwpy.Executor runs with plain python)',
                file=sys.stderr,
            )
            return 1
        return status if status >= 0 else 128 - status

    def _watch(self) -> None:
        """Wait for the master, drawing the progress line and saying when a slave fails."""
        started = time.monotonic()
        reported: set[str] = set()
        setup = SetupFailures()
        while self.master.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.master.wait(0.5)
            if self.console.progress:
                self.console.status(_progress_text(self.work.resource_file, self.slaves, time.monotonic() - started))
            self._report_failures(reported)
            self._give_up_on_failing_slaves(setup)

    def _give_up_on_failing_slaves(self, setup: SetupFailures) -> None:
        """Slaves that fail before any result (a slave algorithm raising at set-up) would restart for ever."""
        setup.look(self.backend.jobs())
        try:
            done = resource_file.read(self.work.resource_file).tasks_done
        except ResourceFileError:
            done = 0
        problem = setup.problem(done)
        if problem is not None and self.master.poll() is None:
            self.console.line(f"mwpy local: error: {problem}; stopping\n".encode(), sys.stderr)
            self.master.terminate()
            self.gave_up = True

    def _report_failures(self, reported: set[str]) -> None:
        """One line per slave whose run failed, once per slave: one that keeps failing would flood the terminal."""
        for job in self.backend.jobs():
            if job.reason is not None and job.job_id not in reported and self.master.poll() is None:
                reported.add(job.job_id)
                errors = self.backend.sandbox(job.job_id) / "slave.err"
                text = f"mwpy local: slave {job.job_id} {job.reason} (started again; see {errors})\n"
                self.console.line(text.encode(), sys.stderr)

    def _clean_up(self, *, quiet: bool = False) -> None:
        """Stop the overseer and the slaves, drain the master's output, remove or point at the folder."""
        self.stop.set()
        self.watcher.join()
        _let_slaves_leave(self.backend)
        self.backend.close()
        for pump in self.pumps:
            pump.join()
        self.console.done()
        if not quiet:
            self.work.clean_up(self.master.returncode)


class _Terminated(Exception):
    """``mwpy local`` got SIGTERM: stop the master and the slaves, then exit."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


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

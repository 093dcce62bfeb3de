"""``mwpy local``: the embedded default — a master and N local slaves on this machine.

It starts the program as master (on loopback, with a resource file in a work
folder) and runs the same overseer that drives Condor, with the local back
end, capped at N slaves. Real processes, real sockets, the same resource-file
contract. It exits with the master's status. The master does not outlive
this process: on Linux it gets SIGTERM when its launcher dies, even by
``kill -9`` (``PR_SET_PDEATHSIG``), for with the launcher gone no slave would
ever start again and the master would wait for ever. On a terminal it shows the live
status view of ``mwpy status --watch`` (mwpy/observe/statusview.py) below the
program's output; piped, it adds nothing to the output (``--progress`` makes
it print the view's plain lines there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TextIO

import attrs
from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.segment import Segment

from mwpy import resource_file, safe_text
from mwpy.backends.local import LocalBackend
from mwpy.errors import ResourceFileError
from mwpy.names import AUDIT_FILE, EVENTS_FILE, SLAVE_STDERR
from mwpy.observe.goodput import duration
from mwpy.observe.statusview import Follower
from mwpy.parent_death import ends_with_this_process
from mwpy.pool.slave_pool import SlavePool, WorkFolder
from mwpy.resources import Resources, own_shape

#: Resource-file update interval used locally, so progress and counts stay fresh.
LOCAL_UPDATE_INTERVAL = 1.0
#: Seconds slaves get to leave on their own after the master has finished.
SLAVE_EXIT_GRACE = 5.0


#: Output held back at most while waiting for the end of its line (a program printing without newlines).
MAX_PENDING = 1 << 20


class _Display:
    """The program's output and, when shown, the status view below it (the one ``mwpy status --watch`` draws).

    On a terminal the view is rich's live display: output lines are printed
    through its console, above the view, which is redrawn below them. Without
    a terminal (``--progress`` in a pipe) the view's plain line is printed
    whenever it changed. Without a view the output passes through untouched.
    """

    def __init__(self, follower: Follower | None, console: Console) -> None:
        self._follower = follower
        self._console = console
        self._live: Live | None = None
        #: Streams whose lines go through the live console: those on the terminal the view is drawn on.
        self._through_view: set[TextIO] = set()
        self._lock = threading.Lock()
        self._last_line = ""
        self._started = time.monotonic()

    def output(self, data: bytes, stream: TextIO) -> None:
        """Whole lines the program wrote on ``stream`` (its stdout or stderr)."""
        if self._live is not None and stream in self._through_view:
            text = data.decode("utf-8", "replace")
            self._console.print(_Verbatim(text if text.endswith("\n") else text + "\n"), soft_wrap=True, end="")
            return
        with self._lock:
            stream.buffer.write(data)
            stream.flush()

    def refresh(self) -> None:
        """Sample the computation and show it."""
        follower = self._follower
        if follower is None:
            return
        follower.sample()
        follower.title = f"mwpy local · {duration(time.monotonic() - self._started)}"
        console = self._console
        if console.is_terminal and not console.is_dumb_terminal:
            if self._live is None:
                self._through_view = {s for s in (sys.stdout, sys.stderr) if s.isatty()}
                self._live = Live(follower.view(), console=console, auto_refresh=False, transient=False)
                self._live.start(refresh=True)
            else:
                self._live.update(follower.view(), refresh=True)
            return
        line = follower.line()
        if line != self._last_line:
            self._last_line = line
            with self._lock:
                print(line, file=console.file, flush=True)

    def interrupted(self) -> None:
        """Ctrl-C stopped the run: the last view says so (not "finished", and no ETA)."""
        if self._follower is not None:
            self._follower.extra.interrupted = True

    def close(self) -> None:
        """Show the last state and leave the view on the screen, above whatever is printed next."""
        self.refresh()
        if self._live is not None:
            self._live.stop()
            self._live = None


@attrs.frozen
class _Verbatim:
    """The program's output as rich prints it above the live view: exactly as written, escape codes included.

    One segment, no parsing, no wrapping (with ``soft_wrap``): the terminal
    does what it would have done, and a burst of lines costs rich almost
    nothing beyond the view's redraw.
    """

    text: str

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Segment(self.text)


def _pump(source: IO[bytes], display: _Display, stream: TextIO) -> None:
    """Pass the master's output on in whole lines, as many at once as have arrived (one redraw for a burst)."""
    fd = source.fileno()
    pending = b""
    while chunk := os.read(fd, 65536):
        pending += chunk
        end = pending.rfind(b"\n") + 1 if len(pending) <= MAX_PENDING else len(pending)
        if end:
            # Our reader may be gone (``mwpy local ... | head``): keep draining, or the master blocks on a full pipe.
            with contextlib.suppress(BrokenPipeError):
                display.output(pending[:end], stream)
            pending = pending[end:]
    if pending:
        with contextlib.suppress(BrokenPipeError):
            display.output(pending, stream)
    source.close()


def run_local(
    program: str,
    slaves: int,
    args: list[str],
    *,
    workdir: str | None = None,
    progress: bool | None = None,
    total: int | None = None,
    python: str | None = None,
    explains: Callable[[int], bool] | None = None,
    shapes: Sequence[Resources] = (),
) -> int:
    """Run ``program`` as master with ``slaves`` local slaves; return the master's exit status.

    ``shapes``: what the slaves offer to tasks' ``resources=`` (dealt among them; none: the machine's).

    ``explains(status)`` true: the program has said itself why it exits with that status (``mwpy jobs``:
    some jobs failed), so mwpy local adds no line and removes its own folder as after a success.
    """
    problem = _usage_problem(program, slaves)
    if problem is not None:
        print(f"mwpy local: error: {problem}", file=sys.stderr)
        return 2
    work = WorkFolder.make(workdir, prefix="mwpy-local-")
    show = sys.stderr.isatty() if progress is None else progress
    follower = None
    if show:
        events = _named_events(args) or work.path / EVENTS_FILE
        follower = Follower(
            work.resource_file, total=total, events=events, condor=False, slave_limit=slaves, title="mwpy local"
        )
    display = _Display(follower, Console(file=sys.stderr))
    interpreter = python or sys.executable
    run = _LocalRun(
        program, slaves, args, work=work, display=display, interpreter=interpreter, explains=explains, shapes=shapes
    )
    return run.wait()


def _usage_problem(program: str, slaves: int) -> str | None:
    """What is wrong with the command line, in one line, or None."""
    if not Path(program).is_file():
        return f"{program}: no such program file"
    if slaves < 1:
        return "--slaves: expected a positive integer"
    return None


def _clean_up(work: WorkFolder, status: int, *, explained: bool = False) -> None:
    """Remove our own folder after success; after a failure the program did not explain, say where the logs are."""
    if status == 0 or explained:
        work.remove()
    else:
        print(f"mwpy local: master exited with status {status}; logs in {work.path}", file=sys.stderr)


def _master_command(
    interpreter: str, program: str, slaves: int, work: WorkFolder, args: list[str], *, shapes: Sequence[Resources]
) -> list[str]:
    """The master's command line: loopback only, a resource file rewritten every second, slaves like us, no
    more of them than ``--slaves``, and their shapes on offer."""
    offered = [own_shape(shape) for shape in shapes] or [own_shape()]  # what each slave will say it offers
    offer = [argument for shape in offered for argument in ("--mw-slave-resources", str(shape))]
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
        str(work.path / AUDIT_FILE),
        "--mw-slave-executable",
        interpreter,
        "--mw-max-slaves",
        str(slaves),
        *offer,
        *_default_events(work, args),
        *args,
    ]


def _default_events(work: WorkFolder, args: list[str]) -> list[str]:
    """An event log in the work folder (for ``mwpy report``, and the goodput summary), unless the user names one."""
    if _named_events(args) is not None:
        return []
    return ["--mw-events", str(work.path / EVENTS_FILE)]


def _named_events(args: list[str]) -> str | None:
    """The event log the program's own ``--mw-events`` names (the last one counts, as for any option), or None."""
    named = None
    for index, arg in enumerate(args):
        if arg == "--mw-events" and index + 1 < len(args):
            named = args[index + 1]
        elif arg.startswith("--mw-events="):
            named = arg.removeprefix("--mw-events=")
    return named


class _LocalRun:
    """One ``mwpy local`` run: the master process, its output pumps, and the overseer with local slaves."""

    def __init__(
        self,
        program: str,
        slaves: int,
        args: list[str],
        *,
        work: WorkFolder,
        display: _Display,
        interpreter: str,
        explains: Callable[[int], bool] | None = None,
        shapes: Sequence[Resources] = (),
    ) -> None:
        self.slaves = slaves
        self.work = work
        self.display = display
        self.master = subprocess.Popen(
            _master_command(interpreter, program, slaves, work, args, shapes=shapes),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=ends_with_this_process(signal.SIGTERM),  # noqa: PLW1509 (one system call, before exec)
        )
        assert self.master.stdout is not None
        assert self.master.stderr is not None
        self.pumps = [
            threading.Thread(target=_pump, args=(self.master.stdout, display, sys.stdout), daemon=True),
            threading.Thread(target=_pump, args=(self.master.stderr, display, sys.stderr), daemon=True),
        ]
        for pump in self.pumps:
            pump.start()
        self.backend = LocalBackend(work.path, shapes=shapes)
        self.pool = SlavePool(work, self.backend, slaves, name=f"mwpy local {program}")
        self.gave_up = False  # slaves kept failing at set-up: the master was stopped
        self.explains = explains  # see run_local

    def wait(self) -> int:
        """Wait for the master (or Ctrl-C, or SIGTERM), clean up, and return its status as a shell reports it."""
        previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
        interrupted = False
        try:
            self._watch()
        except (KeyboardInterrupt, _Terminated) as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            if interrupted:
                self.display.interrupted()
            if self.master.poll() is None:  # Ctrl-C reached the master too; a SIGTERM reached only us
                self.master.terminate()
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while it stops
                self.master.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
            published = self.work.resource_file.exists()  # a master that ran wrote it, and leaves it finished
            self._clean_up(quiet=interrupted)
        if interrupted:  # whatever the master made of its own SIGINT: one line, and the shell's 130
            self.work.remove()  # a folder of our own goes (Ctrl-C is no failure to look into); --workdir stays
            kept = "" if self.work.own else f" (logs in {self.work.path})"
            print(f"mwpy local: interrupted{kept}", file=sys.stderr)
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
        """Wait for the master, showing the status view and saying when a slave fails."""
        reported: set[str] = set()
        while self.master.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.master.wait(0.5)
            self.display.refresh()
            self._report_failures(reported)
            self._give_up_on_failing_slaves()

    def _give_up_on_failing_slaves(self) -> None:
        """Slaves that fail before any result (a slave algorithm raising at set-up) would restart for ever."""
        try:
            record = resource_file.read(self.work.resource_file)
            done, greeted = record.tasks_done, record.slaves_greeted
        except ResourceFileError:
            done = greeted = 0
        problem = self.pool.setup_problem(done, slaves_connected=greeted)
        if problem is not None and self.master.poll() is None:
            self.display.output(f"mwpy local: error: {problem}; stopping\n".encode(), sys.stderr)
            self.master.terminate()
            self.gave_up = True

    def _report_failures(self, reported: set[str]) -> None:
        """One line per slave whose run failed, once per slave: one that keeps failing would flood the terminal."""
        for job in self.backend.jobs():
            if job.reason is not None and job.job_id not in reported and self.master.poll() is None:
                reported.add(job.job_id)
                errors = self.backend.sandbox(job.job_id) / SLAVE_STDERR
                why = safe_text.one_line(job.reason)  # the slave's last error line: its words, not mwpy's
                text = f"mwpy local: slave {job.job_id} {why} (started again; see {errors})\n"
                self.display.output(text.encode(), sys.stderr)

    def _clean_up(self, *, quiet: bool = False) -> None:
        """Stop the overseer and the slaves, drain the master's output, remove or point at the folder."""
        self.pool.stop(grace=SLAVE_EXIT_GRACE)  # slaves told to shut down exit 0 by themselves
        for pump in self.pumps:
            pump.join()
        self.display.close()
        if not quiet:
            status = self.master.returncode
            _clean_up(self.work, status, explained=self.explains is not None and self.explains(status))


class _Terminated(Exception):
    """``mwpy local`` got SIGTERM: stop the master and the slaves, then exit."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated

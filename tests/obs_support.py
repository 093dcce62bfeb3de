"""For the observability tests: synthetic event logs with times known in advance, headless Chromium, and a
real pseudo-terminal read through a terminal emulator (pyte)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterable
from pathlib import Path

import pyte
import pytest

from mwpy.observe import events as ev

#: Every kind of event once, valid, in an order a master could write them.
ONE_OF_EACH: list[ev.Event] = [
    ev.MasterStart(t=1000.0, run=1, pid=42, host="submit.example", version="0.1", member_id="m1", total=10),
    ev.ResourceFileWritten(
        t=1000.1,
        slaves_needed=2,
        slaves_connected={"ordered": 0, "intermingle": 0, "unordered": 0},
        tasks_done=0,
        tasks_pending=10,
        tasks_running=0,
    ),
    ev.CondorJobs(t=1000.2, idle=2, running=0, held=0),
    ev.SlaveConnected(t=1001.0, slave="slave-1", host="node1", address="10.0.0.1:5000", group="unordered", job="7.0"),
    ev.TasksDispatched(t=1001.1, slave="slave-1", n=3),
    ev.TasksFinished(
        t=1002.0, slave="slave-1", algorithm="hello", outcome="ok", run_us=[400000, 500000], wait_us=[10, 20]
    ),
    ev.TaskFailed(
        t=1002.5,
        task=3,
        slave="slave-1",
        algorithm="hello",
        error="ZeroDivisionError",
        message="division by zero",
        traceback='Traceback (most recent call last):\n  File "x.py", line 1\nZeroDivisionError: division by zero\n',
        retried=True,
        output="some <b>output</b>\n",
    ),
    ev.TasksFinished(t=1002.5, slave="slave-1", algorithm="hello", outcome="retried", run_us=[100000], wait_us=[5]),
    ev.SlaveCache(t=1002.8, slave="slave-1", hits=19, misses=1, bytes_fetched=16_000_512, evictions=0),
    ev.ValueMoved(t=1002.9, task="make", bytes=50_331_681, holder="slave-1", slave="slave-2", way="peer"),
    ev.TasksRequeued(t=1003.0, slave="slave-1", n=1),
    ev.TasksAdopted(t=1003.0, slave="slave-1", n=1),
    ev.TasksUnrunnable(t=1003.0, n=1, reason="its ordered slave vanished", slave="slave-1"),
    ev.TasksCancelled(t=1003.5, n=2, reason="map() abandoned"),
    ev.SlaveDisconnected(t=1003.0, slave="slave-1", cause="eof", reason="EOF", in_flight=2),
    ev.MasterStop(t=1004.0, run=1, status=0, tasks_done=2),
]


def write_log(path: Path, records: Iterable[ev.Event]) -> Path:
    """Write ``records`` as an event log exactly as the writer encodes them."""
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(ev.encode(record))
    return path


def finished(t: float, slave: str, outcome: str, *runs: float) -> ev.TasksFinished:
    """A tasks-finished line for run times given in seconds (no queue wait)."""
    return ev.TasksFinished(
        t=t,
        slave=slave,
        algorithm="work",
        outcome=outcome,
        run_us=[round(r * 1e6) for r in runs],
        wait_us=[0] * len(runs),
    )


def known_run() -> list[ev.Event]:
    """A run whose accounting is known by hand (see tests/test_goodput.py for the arithmetic)."""
    return [
        ev.MasterStart(t=1000.0, run=1, pid=1, host="h", version="0", member_id="m"),
        ev.SlaveConnected(t=1000.0, slave="slave-1", host="a", address="a:1", group="unordered"),
        ev.SlaveConnected(t=1000.0, slave="slave-2", host="b", address="b:1", group="unordered"),
        finished(1005.0, "slave-2", "ok", 2.0),
        finished(1010.0, "slave-1", "ok", 4.0, 4.0),
        ev.SlaveConnected(t=1010.0, slave="slave-3", host="c", address="c:1", group="unordered"),
        finished(1014.0, "slave-3", "error", 3.0),
        ev.SlaveDisconnected(t=1015.0, slave="slave-2", cause="timeout", reason="silent for 10 s", in_flight=1),
        finished(1020.0, "slave-1", "ok", 5.0),
        finished(1020.0, "slave-1", "retried", 1.0),
        ev.SlaveDisconnected(t=1020.0, slave="slave-3", cause="eof", reason="EOF", in_flight=2),
        ev.SlaveDisconnected(t=1030.0, slave="slave-1", cause="shutdown", reason="finished", in_flight=0),
        ev.MasterStop(t=1030.0, run=1, status=0, tasks_done=4),
    ]


#: Where Debian puts Chromium; tests that need it skip without it unless CI demands it.
CHROMIUM = Path("/usr/bin/chromium")
BROWSER_REQUIRED_ENV = "MWPY_BROWSER_REQUIRED"
SIMULATOR = Path(__file__).resolve().parent.parent / "tools" / "simulate_events.py"


def chromium_or_skip() -> Path:
    """Chromium's path; skips the test (with the reason) when it is absent and MWPY_BROWSER_REQUIRED is unset."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get(BROWSER_REQUIRED_ENV):
        raise AssertionError(f"{CHROMIUM} is missing and {BROWSER_REQUIRED_ENV} is set (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; set {BROWSER_REQUIRED_ENV}=1 to make this fail)")


def headless(browser: Path, profile: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium as root can, quietly, with console messages on stderr."""
    return subprocess.run(
        [
            str(browser),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def console_errors(stderr: str) -> list[str]:
    """Chromium's log lines that report a page's JavaScript errors or failed loads."""
    return [
        line
        for line in stderr.splitlines()
        if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower()) or "Failed to load resource" in line
    ]


#: The emulated terminal's size.
COLUMNS, LINES = 100, 30


class Terminal:
    """A child process on a real pseudo-terminal, its output fed to a VT100 emulator (pyte)."""

    def __init__(
        self, argv: list[str], *, deadline: float = 30.0, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        #: Seconds :meth:`wait_for` and :meth:`wait_exit` wait at most.
        self.deadline = deadline
        self.screen = pyte.Screen(COLUMNS, LINES)
        self.stream = pyte.ByteStream(self.screen)
        #: Every byte the child wrote, as the terminal received it (for escape sequences the screen hides).
        self.raw = bytearray()
        environment = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": str(LINES)}
        environment.pop("NO_COLOR", None)
        environment.update(env or {})
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal, so Ctrl-C reaches it as a keystroke would
            if cwd is not None:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, environment)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
        self.status: int | None = None

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def pump(self, wait: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if ready:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                data = b""
            self._feed(data)

    def wait_for(self, *texts: str) -> str:
        deadline = time.monotonic() + self.deadline
        while not all(t in self.text() for t in texts):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {texts!r} on the screen:\n{self.text()}")
            self.pump(0.1)
        return self.text()

    def wait_exit(self) -> int:
        deadline = time.monotonic() + self.deadline
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the view did not exit; screen:\n{self.text()}")
            self.pump(0.05)
        with contextlib.suppress(OSError):
            while True:  # what it wrote last
                ready, _, _ = select.select([self.fd], [], [], 0)
                if not ready:
                    break
                data = os.read(self.fd, 65536)
                if not data:
                    break
                self._feed(data)
        return self.status

    def _feed(self, data: bytes) -> None:
        self.raw += data
        self.stream.feed(data)

    def close(self) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)

"""Helpers for tests that run real masters and slaves as processes.

Waiting is always on a condition with a deadline, never a bare sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs

from mwpy import resource_file
from mwpy.resource_file import ResourceFile, ResourceFileError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROGRAMS = Path(__file__).resolve().parent / "programs"
PYTHON = sys.executable

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def mwpy_command(*args: str) -> list[str]:
    """The ``mwpy`` command, run with this interpreter."""
    return [PYTHON, "-m", "mwpy", *args]


def run_local(program: Path, *args: str, slaves: int = 2, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``mwpy local PROGRAM --slaves N -- ARGS``, as a user types it."""
    command = mwpy_command("local", str(program), "--slaves", str(slaves), "--no-progress")
    if args:
        command += ["--", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@attrs.define
class Computation:
    """A master process started by a test, and the slaves the test starts for it."""

    program: Path
    workdir: Path
    master: subprocess.Popen[str]
    slaves: list[subprocess.Popen[str]] = attrs.Factory(list)

    @property
    def resource_path(self) -> Path:
        return self.workdir / "resource.json"

    def resource(self) -> ResourceFile:
        return resource_file.read(self.resource_path)

    def start_slave(self, *args: str) -> subprocess.Popen[str]:
        """A slave reading the resource file (extra ``args`` come after it)."""
        process = subprocess.Popen(
            [PYTHON, str(self.program), "--mw-slave", "--mw-resource-file", str(self.resource_path), *args],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.slaves.append(process)
        return process

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """Wait for the master to exit; returns (status, stdout, stderr)."""
        out, err = self.master.communicate(timeout=timeout)
        return self.master.returncode, out, err

    def stop(self) -> None:
        """Kill whatever is still running (test clean-up)."""
        for process in [self.master, *self.slaves]:
            if process.poll() is None:
                process.kill()
            process.communicate()


def start_master(program: Path, workdir: Path, *args: str, timeout: float = 30) -> Computation:
    """Start ``program`` as master on loopback and wait until its resource file exists."""
    rf = workdir / "resource.json"
    master = subprocess.Popen(
        [
            PYTHON,
            str(program),
            "--mw-master",
            "--mw-master-host",
            "127.0.0.1",
            "--mw-resource-file",
            str(rf),
            *args,
        ],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    computation = Computation(program, workdir, master)

    def ready() -> bool:
        if master.poll() is not None:
            raise AssertionError(f"master exited early with {master.returncode}: {master.communicate()}")
        try:
            resource_file.read(rf)
        except ResourceFileError:
            return False
        return True

    wait_until(ready, timeout, "the master's resource file")
    return computation

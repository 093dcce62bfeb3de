"""A local master does not outlive the command that launched it (issue 24 item 5, for ``mwpy jobs``/``mwpy local``).

The launcher runs the master as a child and the local overseer and slaves
itself: killed with SIGKILL, it can clean nothing up, and its master would
wait for ever for slaves that no one starts again (three such masters were
found 36 minutes later). On Linux the master gets SIGTERM when its launcher
dies (``PR_SET_PDEATHSIG``), and a job gets SIGKILL when its slave dies, as
Condor's starter would kill it. Real processes throughout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import resource_file
from mwpy.errors import ResourceFileError
from mwpy.resource_file import ResourceFile
from tests.support import mwpy_command, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one has reaped yet has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def below(folder: Path) -> list[int]:
    """The processes whose working folder is ``folder`` or inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
    return found


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``; afterwards no process is left working in it (the jobs' own sessions included)."""
    try:
        yield tmp_path
    finally:
        for pid in below(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def record(path: Path) -> ResourceFile | None:
    try:
        return resource_file.read(path)
    except ResourceFileError:
        return None


def test_a_mwpy_jobs_master_leaves_when_its_launcher_is_killed(folder: Path) -> None:
    (folder / "jobs.sub").write_text("executable = /bin/sleep\narguments = 300\nqueue 3\n")
    work = folder / "run"
    launcher = subprocess.Popen(
        mwpy_command("jobs", "jobs.sub", "--slaves", "1", "--workdir", str(work), "--no-progress"),
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (r := record(work / "resource.json")) is not None and r.tasks_running == 1,
            60,
            "the master to hand a job to its slave",
            interval=0.1,
        )
        master = resource_file.read(work / "resource.json").master_pid
        assert alive(master)
    finally:
        launcher.kill()  # SIGKILL: the launcher cleans nothing up
        launcher.wait()
    wait_until(lambda: not alive(master), 30, "the master to leave with its launcher", interval=0.1)
    # Its slave, its master lost while the job ran, leaves by os._exit: the job (in its own session) goes too.
    wait_until(lambda: not jobs_running(folder), 30, "the job to end with its slave", interval=0.1)


def jobs_running(folder: Path) -> list[int]:
    """The ``sleep 300`` job processes still alive below ``folder``."""
    running = []
    for pid in below(folder):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"/bin/sleep", b"300"] and alive(pid):
                running.append(pid)
    return running

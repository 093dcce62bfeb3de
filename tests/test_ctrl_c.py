"""Ctrl-C and ``kill -9`` of a program using ``mwpy.Executor`` while a task hangs: nothing of the run outlives it.

The program runs as a terminal runs it: its own process group, to which
Ctrl-C sends SIGINT (slaves are in it too, as a ProcessPoolExecutor's workers
are). CPython's test_concurrent_futures has the shape (test_shutdown.py: an
interrupt while ``shutdown`` waits); what is checked is what a user sees
after: the program ended, no slave process left, no ``mwpy-*`` folder left in
the temporary folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support import wait_until

DEADLINE = 60

PROGRAM = """\
import sys
import time
from pathlib import Path

import mwpy


def hang(marker):
    Path(marker).touch()
    time.sleep(3600)


if __name__ == "__main__":
    with mwpy.Executor(max_workers=1) as ex:
        ex.share(b"x" * 100)  # the shared objects' folder exists too
        future = ex.submit(hang, sys.argv[1])
        if sys.argv[2] == "catch":
            try:
                future.result()
            except KeyboardInterrupt:
                print("caught", flush=True)
    print("left", flush=True)
"""


def leftovers(tmp: Path) -> list[str]:
    return sorted(name for name in os.listdir(tmp) if name.startswith("mwpy-"))


def alive(processes: list[psutil.Process]) -> list[int]:
    living = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                living.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return living


def start(tmp_path: Path, how: str) -> tuple[subprocess.Popen[str], list[psutil.Process], Path]:
    """The program with its task hanging on its slave; its slaves."""
    script, marker, tmp = tmp_path / "job.py", tmp_path / "running", tmp_path / "tmp"
    script.write_text(PROGRAM)
    tmp.mkdir()
    program = subprocess.Popen(
        [sys.executable, str(script), str(marker), how],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    wait_until(marker.exists, DEADLINE, "the task to start")
    return program, psutil.Process(program.pid).children(recursive=True), tmp


@pytest.mark.parametrize("how", ["catch", "wait"])
def test_leaving_the_block_after_ctrl_c_stops_the_slaves_and_removes_the_folders(tmp_path: Path, how: str) -> None:
    """``catch``: the program catches the KeyboardInterrupt and leaves the block normally (it waited for ever);
    ``wait``: Ctrl-C while the block's end waits for the hung task (it left a slave and the folders)."""
    program, slaves, tmp = start(tmp_path, how)
    assert slaves
    os.killpg(program.pid, signal.SIGINT)
    try:
        out, err = program.communicate(timeout=DEADLINE)
    finally:  # a program still waiting fails the test, and does not outlive it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(program.pid, signal.SIGKILL)
    if how == "catch":
        assert (program.returncode, out) == (0, "caught\nleft\n"), err
    else:
        assert program.returncode == -signal.SIGINT
        assert "KeyboardInterrupt" in err
    assert not alive(slaves)
    assert leftovers(tmp) == []


def test_after_kill_9_the_slaves_end_and_the_next_run_removes_the_folders(tmp_path: Path) -> None:
    program, slaves, tmp = start(tmp_path, "wait")
    program.kill()
    program.communicate(timeout=DEADLINE)
    wait_until(lambda: not alive(slaves), DEADLINE, "the slaves of a killed program to end")
    assert leftovers(tmp)  # nothing could remove them
    again = subprocess.run(
        [sys.executable, "-c", "import mwpy\nwith mwpy.Executor(max_workers=1) as ex: ex.submit(abs, -1).result()"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert again.returncode == 0, again.stderr
    assert leftovers(tmp) == []

"""A ``mwpy jobs`` job does not outlive its slave, however the slave ends (mwpy.parent_death.DeathWatch).

The slave starts its jobs with nothing before their exec (a ``preexec_fn`` would make every start a fork of the
whole slave) and tells a watcher beside it which job runs; these tests kill a real owner process the ways a slave
can die and look at the real children it left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

from tests.support import wait_until

#: An owner as the slave is: a DeathWatch, children in their own sessions started by vfork, the last one guarded.
OWNER = textwrap.dedent(
    """
    import subprocess, sys, time
    from mwpy.parent_death import DeathWatch

    watch = DeathWatch()
    released = subprocess.Popen(["sleep", "300"], start_new_session=True)
    watch.guard(released.pid)
    watch.release()
    guarded = subprocess.Popen(["sleep", "300"], start_new_session=True)
    watch.guard(guarded.pid)
    print(released.pid, guarded.pid, flush=True)
    time.sleep(300)
    """
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no one has reaped yet has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture
def owner() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """The owner, in its own session, and the pids of its released and its guarded child."""
    process = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    children: list[int] = []
    try:
        assert process.stdout is not None
        children = [int(pid) for pid in process.stdout.readline().split()]
        assert len(children) == 2, "the owner did not start its children"
        yield process, children[0], children[1]
    finally:
        process.kill()
        process.wait()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()


def _kill_group(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # the owner's whole process group, as a terminal or a batch system


def _interrupt_group(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the owner ends by KeyboardInterrupt


@pytest.mark.parametrize("end", [_kill, _kill_group, _interrupt_group], ids=["SIGKILL", "group SIGKILL", "Ctrl-C"])
def test_the_guarded_child_dies_with_its_owner_and_a_released_one_is_left_alone(
    owner: tuple[subprocess.Popen[str], int, int], end: Callable[[subprocess.Popen[str]], None]
) -> None:
    process, released, guarded = owner
    assert alive(guarded)
    end(process)
    process.wait(timeout=30)
    wait_until(lambda: not alive(guarded), 30, "the guarded child to die with its owner", interval=0.05)
    assert alive(released), "a child released (its job waited for) must not be killed"

"""Issue 24 item 5 without a pool: a slave never outlives its master by more than a bounded time.

The pool side (the overseer removing every slave job once the master job
left the queue; slaves.sub's slaves leaving by themselves) is in
tests/test_condor_pilots.py. Real processes and sockets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwpy import ExitCode
from mwpy.net.chirp import delayed_updates_allowed
from tests.support import PROGRAMS, start_master, wait_until

GATED = PROGRAMS / "gated.py"


def test_a_slave_whose_master_dies_during_a_long_task_leaves_without_waiting_for_the_task(tmp_path: Path) -> None:
    """The task waits for a release file that never comes: only the lost connection can end the slave."""
    release = tmp_path / "release"
    computation = start_master(GATED, tmp_path, "--mw-client-timeout", "4", str(release), "1")
    try:
        slave = computation.start_slave()
        wait_until(lambda: computation.resource().tasks_running == 1, 60, "the task to run on the slave")
        computation.master.kill()
        computation.master.wait()
        assert slave.wait(60) == ExitCode.MASTER_LOST
        assert slave.stderr is not None
        (line,) = slave.stderr.read().strip().splitlines()
        assert "the connection to the master ended without a shutdown while a task ran" in line, line
        assert line.endswith("[exit status 4 MASTER_LOST: Condor keeps the job queued]"), line
    finally:
        computation.stop()


@pytest.mark.parametrize(
    ("prefix", "delayed"),
    [("Chirp*", False), ("", False), ("Chirp*, Mwpy*", True), ("Chirp* mwpy*", True), ("*", True), ("MwpyS*", False)],
)
def test_delayed_chirp_updates_only_where_the_pool_lets_every_mwpy_attribute_through(
    prefix: str, delayed: bool
) -> None:
    """HTCondor's CHIRP_DELAYED_UPDATE_PREFIX (default Chirp*) drops delayed updates of other names without a
    word; the slave then sends immediate ones (docs/condor.md, "What each slave does")."""
    assert delayed_updates_allowed(prefix) is delayed

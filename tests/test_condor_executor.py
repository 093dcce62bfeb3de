"""``mwpy.Executor(backend="condor")`` on the real pool: a plain script, no ``@mwpy.master``.

The script runs on the submit host as the pool's user (as a user would: the
resource file it writes is theirs, and so are the slave jobs the overseer
thread submits through htcondor2), from its work folder in the pool's share.
The slaves run in the pool with the pool's Python. After the ``with`` block
the schedd must hold no job of the computation.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy import resource_file
from tests.condor_support import RESOURCE, Pool, history, job_events, query, starts
from tests.support import PROGRAMS, ROOT

pytestmark = pytest.mark.condor


def as_pool_user(pool: Pool, workdir: Path) -> dict[str, str]:
    """The environment of a submit-host user of the pool: their own copy of the pool's IDTOKEN."""
    tokens = workdir / "tokens.d"
    tokens.mkdir(mode=0o700)
    token = Path(pool.facts["token_dir"]) / pool.facts["user"]
    shutil.copy(token, tokens / token.name)
    (tokens / token.name).chmod(0o600)
    pool.give(tokens)
    return {
        **pool.env(),
        "_condor_SEC_TOKEN_DIRECTORY": str(tokens),
        "_condor_SEC_TOKEN_SYSTEM_DIRECTORY": str(tokens),
        "_condor_LOG": str(workdir),
        "HOME": str(workdir),
    }


def user_python() -> list[str]:
    """A Python the pool's user may run, with this project and its dependencies importable.

    The test's own interpreter may live where only root can read (a pyenv under /root); the system's
    Python of the same version then runs with this interpreter's site-packages on its path.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.is_file():
        pytest.skip(f"no {system} for the pool's user to run the script with")
    return [str(system)]


@contextlib.contextmanager
def traversable(*paths: Path) -> Iterator[None]:
    """Let other users pass through the folders leading to ``paths`` while the pool's user runs this checkout.

    A fresh clone may sit in a folder only its owner can enter (``mktemp -d`` makes it 0700); the
    search permission (no listing) is added only where it lacks, and taken back afterwards.
    """
    added: dict[Path, int] = {}
    for path in paths:
        for folder in [path, *path.parents]:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if folder not in added and not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                added[folder] = mode
    try:
        yield
    finally:
        for folder, mode in added.items():
            folder.chmod(mode)


def run_script(
    pool: Pool, workdir: Path, name: str, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Copy ``tests/programs/NAME`` into the work folder and run it there as the pool's user."""
    shutil.copy(PROGRAMS / name, workdir / name)
    pool.give(workdir / name)
    env = as_pool_user(pool, workdir)
    site = Path(sysconfig.get_paths()["purelib"])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)])
    with traversable(ROOT, site):
        return subprocess.run(
            [*user_python(), name, *args],
            cwd=workdir,
            env=env,
            user=pool.facts["uid"],
            group=pool.facts["gid"],
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def run_executor_script(
    pool: Pool, workdir: Path, name: str, *extra: str, timeout: float = 240
) -> tuple[list[str], str]:
    """Run ``tests/programs/NAME WORKDIR SLAVE_PYTHON MASTER_ADDRESS EXTRA...`` as the pool's user; it must exit 0.

    Returns its stdout lines and a report of its exit status and output for the assertions' messages.
    """
    address = pool.facts["address"]
    done = run_script(pool, workdir, name, str(workdir), pool.job_python, address, *extra, timeout=timeout)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    return done.stdout.splitlines(), report


def test_a_plain_script_submits_maps_and_gets_an_exception_back_and_shutdown_leaves_no_job(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    lines, report = run_executor_script(condor_pool, condor_workdir, "executor_condor.py")
    assert "submit 144" in lines, report
    assert f"map {[x * x for x in range(20)]}" in lines, report
    assert "raised Odd 3 is odd" in lines, report
    assert lines[-1] == "shut down", report
    record = resource_file.read(condor_workdir / RESOURCE)
    assert record.finished
    member = record.member_id  # the computation's, which its slave jobs carry
    constraint = f'MwpyMemberId == "{member}"'
    assert query(constraint) == [], "slave jobs of the computation are left in the queue"
    left = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in history(constraint, ["ClusterId", "ProcId"])}
    ran = set(starts(job_events(condor_workdir)))
    assert ran, "no slave job of the computation ever ran"
    assert ran <= left, (ran, left)  # each slave job that ran has left the queue, into the history
    assert os.stat(condor_workdir / RESOURCE).st_uid == condor_pool.facts["uid"]


def test_a_master_inside_a_port_range_serves_its_condor_slaves(condor_pool: Pool, condor_workdir: Path) -> None:
    """Issue 24 item 4 on the pool: ``--mw-master-port-range``; the slaves reach the master and its file service."""
    low = free_port_block(condor_pool.facts["address"], 20)
    lines, report = run_executor_script(condor_pool, condor_workdir, "executor_condor.py", f"{low}-{low + 19}")
    assert f"map {[x * x for x in range(20)]}" in lines, report
    assert "shared 100000" in lines, report
    assert low <= resource_file.read(condor_workdir / RESOURCE).master_port <= low + 19, report


def free_port_block(host: str, size: int) -> int:
    """The first of ``size`` consecutive ports of ``host`` nobody listens on, below the ephemeral range."""
    for low in range(20_000, 30_000, size):
        with contextlib.ExitStack() as held:
            try:
                for port in range(low, low + size):
                    held.enter_context(socket.create_server((host, port)))
            except OSError:
                continue
        return low
    raise AssertionError(f"no {size} free consecutive ports on {host}")


def test_a_shared_object_crosses_once_per_slave_job_not_once_per_task(condor_pool: Pool, condor_workdir: Path) -> None:
    """Issue 22: a 50 MB object, up to 8 slave jobs, 400 tasks: the master sends it once per slave job."""
    lines, report = run_executor_script(condor_pool, condor_workdir, "shared_condor.py", timeout=900)
    outcome = json.loads(lines[-1])
    assert outcome["right"], report
    assert 1 <= outcome["slaves"] <= 8, report
    assert outcome["counters"]["fetches"] == {outcome["digest"]: outcome["slaves"]}, report
    assert outcome["counters"]["bytes_sent"] == outcome["slaves"] * outcome["size"], report
    assert outcome["large_result"], report  # 30 MB back through the file service, checked by hash
    assert outcome["returned_file"], report
    print(f"{outcome['slaves']} slave jobs, {outcome['counters']['bytes_sent']} bytes sent")


def test_a_task_that_kills_its_condor_slave_fails_once_saying_how_from_condor_s_log(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Issue 21 item 1 on the condor back end: the error names the Condor job and how it ended (its user log)."""
    lines, report = run_executor_script(condor_pool, condor_workdir, "executor_condor_killed.py")
    error = next((line for line in lines if line.startswith("error ")), "")
    assert error.startswith("error KilledSlaveError doom killed 1 slaves"), report
    assert ", Condor job " in error, report  # the slave was found by its job, not by a local pid
    assert "killed by SIGKILL" in error, report
    assert "(Condor's log)" in error, report  # how it ended came from the slave jobs' user log
    assert f"squares {[x * x for x in range(10)]}" in lines, report
    assert lines[-1] == "shut down", report


def test_slave_jobs_that_cannot_start_break_the_executor_counted_from_their_user_log(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    """Each failed run of a slave job counts, however fast Condor restarts it (read from the jobs' user log)."""
    lines, report = run_executor_script(condor_pool, condor_workdir, "executor_condor_broken.py", timeout=480)
    assert any(
        line.startswith("broken: ") and "slave runs failed before any task had a result" in line for line in lines
    ), report
    assert lines[-1] == "shut down", report
    member = resource_file.read(condor_workdir / RESOURCE).member_id
    assert query(f'MwpyMemberId == "{member}"') == [], "slave jobs of the computation are left in the queue"

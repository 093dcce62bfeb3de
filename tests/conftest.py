"""Session fixtures: the private HTCondor pool the Condor tests run against.

``condor_pool`` always runs ``tools/condor_pool.py up --project <repo>``, so
the jobs use the code under test (``up`` reinstalls the project into the
pool's venv only when its files changed). A pool that was already up is used
and left up; a pool this session started is brought down at the end, so that
CI ends with no mounts left. Where no pool can be started the Condor tests are
skipped with the reason, unless ``MWPY_CONDOR_REQUIRED=1`` (CI) makes that an
error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.condor_support import POOL_TOOL, Pool, clean_stale_sessions, remove_computation_jobs
from tests.support import ROOT, reap_spawned


def pytest_configure(config: pytest.Config) -> None:
    """Children get SIGINT's default disposition, as when the suite is started from a terminal.

    A suite started in the background by a non-interactive shell (``nohup make
    test &``, some CI runners) inherits SIGINT ignored, and exec passes an
    ignore on: the Ctrl-C tests' programs would then never see their Ctrl-C. A
    handler, unlike an ignore, is reset to the default by exec.
    """
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """Kill whatever a test spawned (tests.support.spawn) and left running, even when it failed."""
    yield
    reap_spawned()


#: Seconds `up` may take: building the root from nothing is about a minute, a pip install more.
UP_TIMEOUT = 900
#: Set to 1 to keep every Condor test's work folder (they are kept anyway when a test fails).
KEEP_ENV = "MWPY_KEEP_CONDOR_WORKDIRS"


def _pool_required() -> bool:
    return os.environ.get("MWPY_CONDOR_REQUIRED") == "1"


def _unavailable(reason: str) -> None:
    """Skip, or fail when the pool is required (CI)."""
    if _pool_required():
        pytest.fail(f"HTCondor pool required (MWPY_CONDOR_REQUIRED=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"no HTCondor pool: {reason}")


def _pool_tool(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(POOL_TOOL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _why_not_buildable() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"tools/condor_pool.py needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "tools/condor_pool.py must run as root (it mounts and chroots); run the tests as root"
    if not POOL_TOOL.is_file():
        return f"{POOL_TOOL} is missing"
    return None


@pytest.fixture(scope="session")
def condor_pool() -> Iterator[Pool]:
    """The running pool, with the current project installed in it."""
    why = _why_not_buildable()
    if why is not None:
        _unavailable(why)
    was_up = _pool_tool("status", timeout=60).returncode == 0
    up = _pool_tool("up", "--project", str(ROOT), "--json", timeout=UP_TIMEOUT)
    if up.returncode != 0:
        lines = (up.stderr or up.stdout).strip().splitlines()
        if not was_up:
            _pool_tool("down", timeout=120)  # leave no half-made mounts behind
        _unavailable(f"`tools/condor_pool.py up` failed: {lines[-1] if lines else f'exit status {up.returncode}'}")
    facts = json.loads(up.stdout)
    pool = Pool(facts)
    import htcondor2  # noqa: PLC0415 (only the Condor tests need the bindings)

    try:
        with pytest.MonkeyPatch.context() as patch:
            # Host programs (this process, `mwpy overseer`, `mwpy status`) talk to the pool with its client config.
            patch.setenv("CONDOR_CONFIG", facts["condor_config"])
            htcondor2.reload_config()
            clean_stale_sessions(pool)
            yield pool
    finally:
        htcondor2.reload_config()  # CONDOR_CONFIG is back as it was
        if not was_up:
            down = _pool_tool("down", timeout=120)
            assert down.returncode == 0, f"tools/condor_pool.py down failed: {down.stderr}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the test item, so fixtures can tell a failed test."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def condor_workdir(condor_pool: Pool, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh work folder inside the pool's share, owned by the pool's user.

    On the way out, every job of the computation it holds is removed; the
    folder is deleted unless the test failed (its path is then printed) or
    ``MWPY_KEEP_CONDOR_WORKDIRS=1``.
    """
    workdir = condor_pool.new_workdir(request.node.name)
    try:
        yield workdir
    finally:
        with contextlib.suppress(Exception):
            remove_computation_jobs(workdir)
        call = getattr(request.node, "report_call", None)
        failed = call is None or call.failed
        if failed or os.environ.get(KEEP_ENV) == "1":
            print(f"\nCondor test work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs at ``tmp_path/disk`` (root only), which fills as a real disk does; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        reap_spawned()  # nothing of the test may hold the disk
        subprocess.run(["umount", str(disk)], check=True, timeout=60)

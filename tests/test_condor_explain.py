"""Issue 24 items 4 and 6 on the real pool: slave jobs that no slot can match say why, and a task says why it waits.

The slave jobs ask (through ``--submit-file``) for an attribute no slot of
the test pool advertises, so they stay idle for ever; ``mwpy status``, run
as a user types it, must say that they are idle and why, and ``mwpy status
--explain`` that the task waits because no slave is connected and the jobs
cannot match. The facts come from the schedd's job ads and the collector's
slot ads, both always there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.condor_support import IDLE, RESOURCE, Pool, job_states, logs, wait_resource
from tests.support import wait_until
from tests.test_condor_overseer import start_overseer, stop, submit_gated_master

pytestmark = pytest.mark.condor

NEVER = "MwpyExplainNoSuchSlot"


def status(pool: Pool, workdir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``mwpy status RESOURCE OPTIONS`` on the host, talking to the test pool."""
    command = [sys.executable, "-m", "mwpy", "status", str(workdir / RESOURCE), *options]
    return subprocess.run(command, capture_output=True, text=True, env=pool.env(), timeout=120, check=False)


def test_idle_slave_jobs_that_cannot_match_say_why_in_status_and_explain(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    never = condor_workdir / "never.sub"
    never.write_text(f"requirements = ({NEVER} =?= True)\n", encoding="utf-8")
    submit_gated_master(condor_pool, condor_workdir)  # 3 tasks, never released
    wait_resource(condor_workdir, lambda r: r.slaves_needed == 3, "the master to want 3 slaves")
    overseer, out = start_overseer(
        condor_pool, condor_workdir, "overseer.out", "--interval", "1", "--submit-file", str(never)
    )
    try:
        wait_until(
            lambda: list(job_states(condor_workdir).values()) == [IDLE] * 3, 60, "3 idle slave jobs", interval=0.5
        )
    finally:
        stop(overseer)  # the jobs stay queued: nothing more is needed of it
    assert "error" not in out.read_text(encoding="utf-8"), out.read_text(encoding="utf-8")

    shown = status(condor_pool, condor_workdir, "--condor")
    assert shown.returncode == 0, shown.stderr
    assert "jobs     3 idle, 0 running, 0 held (Condor slaves)" in shown.stdout, shown.stdout
    idle_lines = [line for line in shown.stdout.splitlines() if " idle for " in line]
    assert len(idle_lines) == 3, shown.stdout
    for line in idle_lines:
        assert "its Requirements match none of the pool's " in line, line
        unmet = line.split("no slot meets ", 1)[1]
        assert NEVER in unmet, line  # the one term no slot meets is named ...
        assert "OpSys" not in unmet, line  # ... not the terms Condor added, which every slot meets

    explained = status(condor_pool, condor_workdir, "--condor", "--explain", "1")
    assert explained.returncode == 0, explained.stderr + logs(condor_workdir)
    lines = explained.stdout.splitlines()
    assert lines[1:3] == ["waiting in the queue: it is next", "no slave is connected; the master wants 3"], lines
    assert lines[3] == "3 slave jobs idle", lines
    assert "its Requirements match none of the pool's " in lines[4], lines

    # --watch: the condor phrase carries the counts' age and why the idle jobs wait (a pipe: plain lines).
    seen = condor_workdir / "watch.out"
    with seen.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "mwpy", "status", str(condor_workdir / RESOURCE), "--watch", "--condor"],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=condor_pool.env(),
        )  # fmt: skip
    try:
        watched = wait_until(
            lambda: next((t for t in seen.read_text(encoding="utf-8").splitlines() if " · idle: " in t), ""),
            60,
            "the watch line with why the jobs are idle",
            interval=0.5,
        )
    finally:
        stop(watch)
    assert re.search(r"condor 3 idle · 0 running · 0 held \(\d+ s old\) · idle: its Requirements match none", watched)

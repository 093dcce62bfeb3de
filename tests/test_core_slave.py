"""The slave process: slave-algorithm loop variants and every way a slave ends (its exit status).

Slave algorithms come from tests/programs/slave_variants.py, which logs each
event (argv, loop statuses, tasks, setup, teardown) to a JSON-lines file that
the test reads afterwards. Exit statuses are those of :class:`mwpy.ExitCode`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mwpy import ExitCode
from tests.programs.workload import block, nap, whoami
from tests.support import (
    PROGRAMS,
    PYTHON,
    Proc,
    audit_lines,
    free_port,
    local_master,
    mwpy_command,
    run_local,
    spawn,
    spawn_master,
    spawn_slave,
    wait_until,
    write_resource_file,
)

VARIANTS = PROGRAMS / "slave_variants.py"
WORKLOAD = PROGRAMS / "workload.py"


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_variant(tmp_path: Path, variant: str, tasks: int = 6, *master_args: str) -> tuple[Proc, Proc, Path]:
    """A master with ``tasks`` note tasks and one slave running ``variant``; both waited for."""
    log = tmp_path / f"{variant}.log"
    master = spawn_master(VARIANTS, tmp_path, *master_args, str(tasks))
    slave = spawn_slave(VARIANTS, tmp_path, variant, str(log))
    assert master.wait() == 0, master.err()
    assert sorted(line["value"]["i"] for line in master.json_lines()) == list(range(tasks))
    slave.wait()
    return master, slave, log


def test_loop_until_shutdown_returns_0_after_an_orderly_shutdown(tmp_path: Path) -> None:
    _, slave, log = run_variant(tmp_path, "until_shutdown")
    assert slave.returncode == 0
    assert events(log)[-1] == {"event": "returned", "code": 0}
    assert sum(e["event"] == "task" for e in events(log)) == 6


def test_loop_reports_cl_mw_s_status_values(tmp_path: Path) -> None:
    _, slave, log = run_variant(tmp_path, "loop", 6, "--mw-slave-result-group", "3")
    assert slave.returncode == 0
    statuses = [e for e in events(log) if e["event"] == "status"]
    assert statuses[-1] == {
        "event": "status",
        "master_disconnected": False,
        "explicit_shutdown": True,
        "results_done": 6,
        "tasks_pending": 0,
        "results_pending": 0,
        "result_group": 3,  # as the master told it
        "exit_code": 0,
    }
    assert all(not s["explicit_shutdown"] for s in statuses[:-1])
    done = [s["results_done"] for s in statuses]
    assert done == sorted(done)


def test_loop_once_runs_at_most_one_task_per_call(tmp_path: Path) -> None:
    _, slave, log = run_variant(tmp_path, "loop_once")
    assert slave.returncode == 0
    done = [e["results_done"] for e in events(log) if e["event"] == "status"]
    assert done[-1] == 6
    steps = [after - before for before, after in zip([0, *done], done, strict=False)]
    assert max(steps) == 1
    assert min(steps) >= 0


def test_slave_algorithm_sets_up_before_the_first_task_and_tears_down_after_the_last(tmp_path: Path) -> None:
    master, slave, log = run_variant(tmp_path, "setup_teardown", 5)
    assert slave.returncode == 0
    kinds = [e["event"] for e in events(log)]
    assert kinds[:2] == ["argv", "setup"]
    assert kinds[-1] == "teardown"
    assert kinds.count("task") == 5
    ran = "".join("T" if k == "task" else "b" if k == "between" else "" for k in kinds)
    assert "TT" not in ran  # the slave algorithm got control back between any two tasks
    database = events(log)[1]["file"]
    assert not (tmp_path / database).exists()  # torn down
    assert {line["value"]["database"] for line in master.json_lines()} == {"fetched at setup"}


def test_slave_algorithm_returning_a_non_status_exits_255(tmp_path: Path) -> None:
    _, slave, _ = run_variant(tmp_path, "return_none")
    assert slave.returncode == 255


def test_slave_algorithm_calling_sys_exit_exits_with_that_status_and_no_traceback(tmp_path: Path) -> None:
    _, slave, _ = run_variant(tmp_path, "sys_exit")
    assert slave.returncode == 3
    assert "Traceback" not in slave.err()


def test_loop_reports_a_vanished_master_and_the_slave_exits_master_lost(tmp_path: Path) -> None:
    log = tmp_path / "loop.log"
    audit = tmp_path / "master.audit"
    master = spawn_master(WORKLOAD, tmp_path, "--mw-audit-file", str(audit), "serve", "60")
    # "serve" submits no tasks, so a slave of another program may join it: only the member id must match
    slave = spawn(
        [PYTHON, str(VARIANTS), "--mw-slave", "--mw-resource-file", "resource.json", "loop", str(log)],
        tmp_path,
        "slave",
    )
    wait_until(lambda: "connecting [" in audit.read_text(), 30, "the slave to connect")
    master.kill()
    assert slave.wait() == ExitCode.MASTER_LOST
    last = [e for e in events(log) if e["event"] == "status"][-1]
    assert last["master_disconnected"] is True
    assert last["explicit_shutdown"] is False
    assert last["exit_code"] == ExitCode.MASTER_LOST


# ---------------------------------------------------------------------- exit statuses without a master


def slave_of(tmp_path: Path, *args: str) -> Proc:
    return spawn([PYTHON, str(WORKLOAD), "--mw-slave", *args], tmp_path, "slave")


def test_a_long_stale_resource_file_with_no_master_leaves_the_queue_quickly(tmp_path: Path) -> None:
    # "Quickly" is asserted by order, not by a wall clock: a slave with a fresh file against the same
    # dead port, started first, must still be retrying when the stale-file slave has given up.
    port = free_port()
    rf = tmp_path / "resource.json"
    fresh_rf = tmp_path / "fresh.json"
    write_resource_file(rf, timestamp=time.time() - 3600, update_interval=60.0, master_port=port)
    write_resource_file(fresh_rf, master_port=port)
    fresh = slave_of(tmp_path, "--mw-resource-file", str(fresh_rf))
    slave = slave_of(tmp_path, "--mw-resource-file", str(rf))
    assert slave.wait() == ExitCode.OK
    assert fresh.alive(), "no patient retrying on a file stale past --mw-abandon-after"
    fresh.kill()
    err = slave.err()
    assert "gone for good" in err
    assert "stale" in err
    assert "Traceback" not in err


def test_finished_resource_file_exits_0_without_connecting(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    write_resource_file(rf, computation_status="finished")
    slave = slave_of(tmp_path, "--mw-resource-file", str(rf))
    assert slave.wait() == 0
    assert "finished" in slave.out()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such resource file"),
        ("{not json", "not JSON"),
        ('{"format": "something-else"}', "not an mwpy resource file"),
        ('{"format": "mwpy-resource-file", "version": 1, "master_port": "x"}', "resource.json"),
    ],
)
def test_bad_resource_file_exits_bad_resource_file(tmp_path: Path, content: str | None, problem: str) -> None:
    rf = tmp_path / "resource.json"
    if content is not None:
        rf.write_text(content)
    # a missing file is waited for (--mw-connect-timeout): one second, then the same one-line exit
    slave = slave_of(tmp_path, "--mw-resource-file", str(rf), "--mw-connect-timeout", "1")
    assert slave.wait() == ExitCode.BAD_RESOURCE_FILE
    err = slave.err().strip()
    assert len(err.splitlines()) == 1
    assert problem in err
    assert "Traceback" not in err


def test_missing_resource_file_is_only_a_warning_when_host_and_port_are_given(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    master = spawn(
        [
            PYTHON,
            str(WORKLOAD),
            "--mw-master",
            "--mw-master-host",
            "127.0.0.1",
            "--mw-secret-file",
            str(secret),
            "--mw-audit-file",
            str(tmp_path / "master.audit"),
            "run",
            "4",
        ],
        tmp_path,
        "master",
    )
    ready = wait_until(
        lambda: (
            [line for line in (tmp_path / "master.audit").read_text().splitlines() if "MASTER READY" in line]
            if (tmp_path / "master.audit").exists()
            else []
        ),
        30,
        "the master to be ready",
    )
    port = ready[0].rsplit(":", 1)[1]
    slave = slave_of(
        tmp_path,
        "--mw-resource-file",
        str(tmp_path / "missing.json"),
        "--mw-master-host",
        "127.0.0.1",
        "--mw-master-port",
        port,
        "--mw-secret-file",
        str(secret),
    )
    assert master.wait() == 0
    assert slave.wait() == 0
    assert sorted(line["value"] for line in master.json_lines()) == [0, 1, 4, 9]
    assert any(line.startswith("WARNING") and "missing.json" in line for line in audit_lines(slave.out()))


def test_a_slave_started_before_its_master_waits_for_the_resource_file(tmp_path: Path) -> None:
    """Started by hand before the master has written the file: it waits (--mw-connect-timeout), then works."""
    slave = spawn_slave(WORKLOAD, tmp_path, "--mw-connect-timeout", "120", resource=tmp_path / "resource.json")
    with local_master(WORKLOAD, tmp_path) as lm:
        assert whoami.submit().result(timeout=120) == slave.pid
        lm.finish()
    assert slave.wait() == 0


def test_a_result_is_not_held_behind_the_next_task_once_its_task_ran_longer_than_the_hold(tmp_path: Path) -> None:
    """Results share packets only while tasks run short: a longer one's result goes out before the next task ends.

    The second task waits for a file the test writes only once the first
    result has arrived; a slave that held the first result would never see it.
    """
    with local_master(WORKLOAD, tmp_path, "--mw-slave-window", "2") as lm:
        lm.start_slave()
        first = nap.submit(0.05, "first")
        second = block.submit(str(tmp_path), "second")
        assert lm.result_of(first.task_id).value == "first"
        assert not second.done()
        (tmp_path / "release-second").touch()
        assert lm.result_of(second.task_id).value == lm.slaves[0].pid
        lm.finish()


def test_mwpy_run_s_initializer_sets_up_each_slave_before_its_first_task() -> None:
    """Issue 21 item 3, the master API: ``mwpy.run(initializer=, initargs=)`` runs once in every slave."""
    done = run_local(PROGRAMS / "initialized.py", "40", slaves=2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "state model-v1"  # never None: no task ran before the initializer


def test_a_failing_initializer_is_a_set_up_failure_named_by_its_error() -> None:
    """The slave prints the traceback and exits 255; ``mwpy local`` stops after a few such runs, naming it."""
    env = {**os.environ, "MWPY_TEST_INIT_FAIL": "1"}
    command = mwpy_command("local", str(PROGRAMS / "initialized.py"), "--slaves", "1", "--no-progress", "--", "3")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: cannot load model-v1" in done.stderr

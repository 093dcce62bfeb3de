"""mwpy across two Condor nodes, a remote schedd, and held slaves in ``mwpy status``, on the real pool.

``tools/condor_pool.py up --nodes 2`` adds a second execute node in its own
network namespace (10.251.7.2, ``node2.mwpy.pool``, startd and schedd); the
submit node's daemons then listen on 10.251.7.1. Until now every daemon and
job shared loopback, so nothing showed that a slave on another machine can
reach its master: here the master listens on the submit node's non-loopback
address (``--mw-master-host``) and the slaves run on node 2 only, also across a
master killed and started again by Condor.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mwpy.backends import JobState
from mwpy.backends.htcondor import CondorBackend
from mwpy.observe import events as ev
from mwpy.overseer import Limits, Overseer, Verdict
from mwpy.resources import Resources
from tests.condor_support import (
    COMPLETED,
    HELD,
    POOL_TOOL,
    RESOURCE,
    Pool,
    computation,
    in_order,
    job_life,
    job_states,
    logs,
    member_id,
    query,
    restart_master_midway,
    retried,
    setup_workdir,
    status_json,
    submit_master,
    wait_events,
    wait_master_done,
    wait_resource,
)
from tests.support import wait_until
from tests.test_condor_executor import run_executor_script

pytestmark = pytest.mark.condor

#: Seconds `up --nodes 2` may take on a built root (a pip install of a changed project included).
UP_TIMEOUT = 600


@pytest.fixture(scope="module")
def two_nodes(condor_pool: Pool) -> Iterator[Pool]:
    """The pool with its second node; brought up here when the session's pool has one node."""
    import htcondor2  # noqa: PLC0415 (conftest configured it)

    if int(condor_pool.facts.get("nodes") or 1) >= 2:
        yield condor_pool
        return
    up = subprocess.run(
        [sys.executable, str(POOL_TOOL), "up", "--base", condor_pool.facts["base"], "--nodes", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT,
        check=False,
    )
    assert up.returncode == 0, f"condor_pool up --nodes 2 failed: {up.stderr}"
    htcondor2.reload_config()  # the client config now names 10.251.7.1 instead of loopback
    yield Pool(json.loads(up.stdout))


def node2(pool: Pool) -> dict[str, Any]:
    facts: dict[str, Any] = pool.facts["node2"]
    return facts


def slave_history(workdir: Path, schedd: Any = None) -> list[Any]:
    """History ads of the computation's slave jobs (from ``schedd``, else the local one)."""
    import htcondor2  # noqa: PLC0415

    projection = ["ClusterId", "ProcId", "JobStatus", "ExitCode", "LastRemoteHost", "MachineAttrMwpyNode0"]
    return retried(
        lambda: list((schedd or htcondor2.Schedd()).history(computation(workdir, "slave"), projection=projection))
    )


def test_slaves_on_the_second_node_reach_a_master_listening_on_the_submit_node_s_address(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    address = two_nodes.facts["address"]
    other = node2(two_nodes)
    setup_workdir(two_nodes, condor_workdir)
    master = submit_master(
        two_nodes,
        condor_workdir,
        f"master_options=--mw-master-host {address}",
        "program_args=--seed 7 --max-trial-sets 12 --trials-per-set 20000 --target 3",
    )
    two_nodes.condor_submit(
        condor_workdir,
        "submit/slaves.sub",
        "slaves=2",
        "requirements = (MwpyNode =?= 2)",
        "job_machine_attrs = MwpyNode",
    )
    out = wait_master_done(condor_workdir, master)
    assert "from 240000 points" in out, logs(condor_workdir)
    wait_until(lambda: not job_states(condor_workdir), 60, "the slave jobs to leave the queue", interval=0.5)
    ads = wait_until(
        lambda: found if len(found := slave_history(condor_workdir)) >= 2 else [],
        30,
        "both slave jobs in the history",
        interval=0.5,
    )
    for ad in ads:
        assert (ad["JobStatus"], ad["ExitCode"]) == (COMPLETED, 0), ad
        assert str(ad["LastRemoteHost"]).endswith(f"@{other['hostname']}"), ad  # ran on node 2, nowhere else
        assert ad["MachineAttrMwpyNode0"] == 2, ad
    audit = next(condor_workdir.glob("master.*.audit")).read_text(encoding="utf-8")
    assert f"MASTER READY {address}:" in audit
    assert re.search(rf"NEW-CLIENT -> .*{re.escape(other['address'])}", audit), audit  # the slave's own address


def test_the_overseer_and_mwpy_status_use_a_remote_schedd_named_through_the_collector(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    import htcondor2  # noqa: PLC0415

    schedd_name = node2(two_nodes)["schedd"]
    collector = two_nodes.facts["collector"]
    remote_options = ["--schedd", schedd_name, "--collector", collector]
    setup_workdir(two_nodes, condor_workdir)
    master = submit_master(
        two_nodes,
        condor_workdir,
        f"master_options=--mw-master-host {two_nodes.facts['address']}",
        f"slave_python={two_nodes.job_python}",
        "program_args=--seed 3 --max-trial-sets 8 --trials-per-set 20000 --target 2",
    )
    backend = CondorBackend(member_id(condor_workdir), schedd=schedd_name, collector=collector)
    overseer = Overseer(condor_workdir / RESOURCE, backend, Limits(max_jobs=2, max_idle=2, batch=2))
    wait_resource(condor_workdir, lambda record: record.slaves_needed >= 2, "the master to ask for slaves")
    decision = overseer.reconcile()
    assert decision.submitted == 2, decision
    assert job_states(condor_workdir) == {}  # not in the local schedd: in node 2's

    report = status_json(condor_workdir, two_nodes.env(), *remote_options)
    assert report["slave_jobs"]["total"] == 2, report
    assert {job["state"] for job in report["slave_job_list"]} <= {"idle", "running"}

    wait_until(
        lambda: overseer.reconcile().verdict is Verdict.FINISHED and not backend.jobs(),
        120,
        "the computation to finish and its remote slave jobs to leave",
        interval=1.0,
    )
    assert "from 160000 points" in wait_master_done(condor_workdir, master), logs(condor_workdir)
    remote = htcondor2.Schedd(htcondor2.Collector(collector).locate(htcondor2.DaemonType.Schedd, schedd_name))
    assert len(slave_history(condor_workdir, remote)) >= 2

    wrong = subprocess.run(
        [sys.executable, "-m", "mwpy", "status", str(condor_workdir / RESOURCE), "--condor", "--schedd", "nosuch"],
        capture_output=True,
        text=True,
        env=two_nodes.env(),
        timeout=60,
        check=False,
    )
    assert wrong.returncode == 1
    assert "cannot find the schedd nosuch" in wrong.stdout + wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_mwpy_status_shows_a_slave_held_because_its_program_file_is_missing_with_the_hold_reason(
    condor_pool: Pool, condor_workdir: Path
) -> None:
    setup_workdir(condor_pool, condor_workdir)
    submit_master(condor_pool, condor_workdir)
    condor_pool.condor_submit(condor_workdir, "submit/slaves.sub", "slaves=1", "program=examples/gone.py")
    wait_until(lambda: list(job_states(condor_workdir).values()) == [HELD], 60, "the slave job held", interval=0.5)

    def status(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mwpy", "status", str(condor_workdir / RESOURCE), *extra],
            capture_output=True,
            text=True,
            env=condor_pool.env(),
            timeout=60,
            check=False,
        )

    shown = status("--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["slave_jobs"] == {"idle": 0, "running": 0, "held": 1, "total": 1}  # unchanged keys
    [job] = report["slave_job_list"]
    assert job["state"] == JobState.HELD.value
    assert "gone.py" in job["reason"], job
    assert job["state_seconds"] is not None
    assert job["state_seconds"] >= 0
    text = status().stdout
    assert re.search(rf"{re.escape(job['job_id'])} held for \d+ s: .*gone\.py", text), text


def test_a_master_address_the_execute_node_cannot_reach_gives_a_clear_slave_error_and_a_requeued_job(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """The master listens on (and advertises) loopback only: from node 2 nothing answers there.

    What a site sees when the master's address or port is blocked from its execute nodes: no hang,
    but a slave that says it cannot reach the master, exits 3, and is queued again (on_exit_remove).
    """
    setup_workdir(two_nodes, condor_workdir)
    submit_master(two_nodes, condor_workdir, "master_options=--mw-master-host 127.0.0.1")
    cluster = two_nodes.condor_submit(
        condor_workdir, "submit/slaves.sub", "slaves=1", "requirements = (MwpyNode =?= 2)"
    )
    # Exit status 3 is UNREACHABLE (docs/exit-codes.md); Condor keeps the job and starts it again.
    failed_and_again = ["started", "requeued exit 3", "started"]
    wait_events(
        condor_workdir,
        lambda events: in_order(job_life(events, f"{cluster}.0"), failed_and_again),
        "the slave to fail, be requeued and start again",
        timeout=120,
    )
    err = next(condor_workdir.glob("slave.*.err")).read_text(encoding="utf-8", errors="replace")
    assert "127.0.0.1" in err, err
    audit = next(condor_workdir.glob("master.*.audit")).read_text(encoding="utf-8")
    assert "NEW-CLIENT" not in audit  # nobody got through


def test_a_master_killed_with_sigkill_is_started_again_and_slaves_on_another_node_hand_their_tasks_over(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """The SIGKILL restart of tests/test_condor_submit_files.py with the slaves on node 2, another machine:
    the master listens on the submit node's address, Condor starts it again (on a new port), and the slaves,
    whose resource file is a copy on node 2, fetch the new one over Chirp, reconnect across the network and
    hand over the tasks they ran: every task runs once, no slave job runs twice, the computation ends once."""
    ads = restart_master_midway(
        two_nodes,
        condor_workdir,
        lambda master_pid: os.kill(master_pid, signal.SIGKILL),
        master_options=f"--mw-master-host {two_nodes.facts['address']}",
        slave_macros=["requirements = (MwpyNode =?= 2)"],
    )
    for ad in ads.values():
        assert str(ad["LastRemoteHost"]).endswith(f"@{node2(two_nodes)['hostname']}"), ad  # ran on node 2 only
    # The audit file keeps every master run's lines: the restarted master's (after its MASTER READY) show the
    # slaves connecting again from node 2's own address.
    audit = next(condor_workdir.glob("master.*.audit")).read_text(encoding="utf-8")
    restarted = audit.split("MASTER READY ")[-1]
    assert audit.count("MASTER READY ") == 2, audit
    assert len(re.findall(rf"NEW-CLIENT -> .*{re.escape(node2(two_nodes)['address'])}", restarted)) >= 2, audit


#: MB the big tasks of two_needs.py need: more than node 1 has, less than node 2 (tools/condor_pool.py:
#: NODE1_MEMORY, NODE2_MEMORY; a partitionable slot carves a job's slot from its node's memory).
BIG_MB = 8192


def submit_two_needs(pool: Pool, workdir: Path, gate: Path) -> int:
    """tests/programs/two_needs.py's master, listening on the submit node's address; its cluster id."""
    setup_workdir(pool, workdir, ["two_needs.py"])
    return submit_master(
        pool,
        workdir,
        "program=two_needs.py",
        f"program_args={gate} {BIG_MB}",
        f"master_options=--mw-master-host {pool.facts['address']}",
        f"slave_python={pool.job_python}",
    )


def test_the_overseer_keeps_a_slave_job_shape_per_need_and_each_task_runs_on_a_slave_of_its_shape(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """Issue 24, item 7: tasks of two needs (memory only node 2 has; ``MwpyNode == 1``) under master and
    overseer. No slave of either shape is connected when the tasks are submitted: the master waits for the
    overseer's jobs instead of refusing. Asserted from the results, the schedd's ads and ``condor_q -af``."""
    import htcondor2  # noqa: PLC0415

    slots = retried(
        lambda: htcondor2.Collector().query(htcondor2.AdType.Startd, projection=["MwpyNode", "TotalMemory"])
    )
    node_memory = {int(ad["MwpyNode"]): int(ad["TotalMemory"]) for ad in slots if "MwpyNode" in ad}
    assert node_memory[1] < BIG_MB <= node_memory[2], f"{node_memory}: a pool brought up before MEMORY was per node"
    gate = condor_workdir / "gate"
    master = submit_two_needs(two_nodes, condor_workdir, gate)
    backend = CondorBackend(member_id(condor_workdir))
    overseer = Overseer(condor_workdir / RESOURCE, backend, Limits(max_jobs=6, max_idle=6, batch=6))
    stop = threading.Event()
    verdict: list[Verdict] = []
    watcher = threading.Thread(target=lambda: verdict.append(overseer.run(stop, interval=1.0)), daemon=True)
    watcher.start()
    try:
        # While it runs: each slave publishes its state over Chirp; all six tasks answered, the slaves that
        # ran them wait for the gate, connected and idle (a slave that came late may not have published yet).
        def tasks_done() -> list[tuple[str, int]]:
            shown = two_nodes.inside(
                condor_workdir, "condor_q", "-constraint", computation(condor_workdir, "slave"),
                "-af", "MwpyState", "MwpyTasksDone",
            )  # fmt: skip
            pairs = [line.split() for line in shown.stdout.splitlines()]
            rows = [(pair[0], int(pair[1])) for pair in pairs if len(pair) == 2 and pair[1].isdigit() and int(pair[1])]
            return rows if sum(count for _, count in rows) == 6 and {state for state, _ in rows} == {"idle"} else []

        wait_until(tasks_done, 240, "condor_q -af to show six tasks done by idle slaves", interval=1.0)
        ads = query(computation(condor_workdir, "slave"), ["ClusterId", "ProcId", "MwpyShape", "RequestMemory",
                                                           "Requirements"])  # fmt: skip
        gate.touch()
        out = wait_master_done(condor_workdir, master)
        wait_until(lambda: not watcher.is_alive(), 120, "the overseer to see the computation's jobs gone")
    finally:
        stop.set()
        watcher.join(30)
    assert verdict == [Verdict.FINISHED]
    shapes = {f"{ad['ClusterId']}.{ad['ProcId']}": ad for ad in ads}
    big, node1 = str(Resources(memory=BIG_MB)), str(Resources(requirements="MwpyNode == 1"))
    ran = [line.split() for line in out.splitlines() if line.startswith(("big ", "node1 "))]
    assert len(ran) == 6, logs(condor_workdir)
    for kind, job, node, memory in ran:
        ad = shapes[job]  # the job that ran the task was the overseer's, of the task's shape
        if kind == "big":
            assert (ad["MwpyShape"], ad["RequestMemory"], node) == (big, BIG_MB, "2"), (ad, node)
            assert int(memory) >= BIG_MB
        else:
            assert (ad["MwpyShape"], node) == (node1, "1"), (ad, node)
            assert "MwpyNode == 1" in str(ad["Requirements"]), ad


def test_slaves_no_overseer_made_serve_the_tasks_their_slot_s_machine_ad_satisfies(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """Issue 24: a task's requirements are evaluated against the slave's slot (its machine ad), not compared
    with the slave's own as text. Two slaves.sub clusters, neither made for a need (no ``MwpyShape``): one on
    node 1, one on node 2 asking for the memory the big tasks need. The ``MwpyNode == 1`` tasks run on the
    node-1 slave (before, they waited for ever: no slave offered that text), the big ones on node 2."""
    gate = condor_workdir / "gate"
    gate.touch()  # the master returns once its six tasks are answered
    master = submit_two_needs(two_nodes, condor_workdir, gate)
    node1 = two_nodes.condor_submit(
        condor_workdir, "submit/slaves.sub", "program=two_needs.py", "slaves=1", "requirements = (MwpyNode =?= 1)",
        f"slave_python={two_nodes.job_python}",
    )  # fmt: skip
    big = two_nodes.condor_submit(
        condor_workdir, "submit/slaves.sub", "program=two_needs.py", "slaves=1", f"slave_memory={BIG_MB}",
        "requirements = (MwpyNode =?= 2)", f"slave_python={two_nodes.job_python}",
    )  # fmt: skip
    out = wait_master_done(condor_workdir, master)
    lines = [line.split() for line in out.splitlines() if line.startswith(("big ", "node1 "))]
    ran = sorted((kind, job.split(".")[0], node) for kind, job, node, _ in lines)
    assert ran == [("big", str(big), "2")] * 3 + [("node1", str(node1), "1")] * 3, logs(condor_workdir)


def test_a_large_value_made_on_node_1_reaches_its_dependent_on_node_2_from_the_holder_not_the_master(
    two_nodes: Pool, condor_workdir: Path
) -> None:
    """Issue 33 item 2 on the pool: an Executor's call on node 1's slave makes a 40 MB value, which stays there;
    its dependent must run on node 2 (its requirements), whose slave fetches the value from the holder's file
    service, at the address the holder reaches its master from (the submit node's, not loopback): the event log
    says ``peer``, and not a byte goes through the master."""
    lines, report = run_executor_script(two_nodes, condor_workdir, "dataflow_condor.py", timeout=480)
    assert "nodes 1 2" in lines, report
    [used] = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("used ")]
    assert used == [2, 1, 40 << 20], report  # ran on node 2, made on node 1, every byte there
    events = ev.read_events(condor_workdir / "events.jsonl")
    addresses = {e.slave: e.address.rpartition(":")[0] for e in events if isinstance(e, ev.SlaveConnected)}
    moves = [
        (e.way, addresses.get(e.holder, e.holder), addresses.get(e.slave, e.slave))
        for e in events
        if isinstance(e, ev.ValueMoved)
    ]
    assert moves == [("peer", two_nodes.facts["address"], node2(two_nodes)["address"])], (moves, report)
    [counters] = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("counters ")]
    assert (counters["bytes_sent"], counters["bytes_received"], counters["held_bytes"]) == (0, 0, 0), report

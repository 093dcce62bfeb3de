"""A master restart loses no work in flight (reliability.md "A master restart"): slaves outlive their master.

HTCondor's starter keeps running its job while the schedd restarts and
reconnects within the job lease; mwpy's slaves do the same for their master.
A master with ``--mw-journal`` runs 8 keyed tasks on 4 slaves started by hand
(tests/programs/restartable.py); it is killed with SIGKILL while 4 run, and the
same command is run again. Every run leaves a file, so the test counts runs
instead of trusting the master's word.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mwpy import ExitCode, resource_file
from mwpy.errors import ProtocolError
from mwpy.observe.events import TasksAdopted, iter_events
from mwpy.wire import protocol
from mwpy.wire.protocol import Handover
from mwpy.wire.session import MASTER_RECEIVES, SLAVE_SENDS, MasterState, SlaveState
from tests.programs.restartable import marks
from tests.support import PROGRAMS, Proc, mwpy_command, run_program, spawn_master, spawn_slave, wait_until
from tests.test_journal import printed

RESTARTABLE = PROGRAMS / "restartable.py"
COUNT = 8
SLAVES = 4
DEADLINE = 60.0


def run_master(workdir: Path, runs: Path, count: int = COUNT, *more: str) -> Proc:
    return spawn_master(
        RESTARTABLE, workdir, "--mw-journal", str(workdir / "journal.sqlite"), "--mw-slave-window", "1",
        "--mw-audit-file", str(workdir / "master.audit"), "--mw-events", str(workdir / "events.jsonl"), str(count),
        str(runs), *more,
    )  # fmt: skip


def killed_with_tasks_running(workdir: Path, runs: Path) -> tuple[list[Proc], list[int]]:
    """A first master with 4 slaves, SIGKILLed while 4 keyed tasks run: the slaves, and the tasks' inputs."""
    first = run_master(workdir, runs)
    slaves = [spawn_slave(RESTARTABLE, workdir) for _ in range(SLAVES)]
    wait_until(lambda: sum(marks(runs, "started").values()) >= SLAVES, DEADLINE, "4 tasks running")
    first.kill()
    return slaves, sorted(marks(runs, "started"))


def test_a_master_killed_with_tasks_running_is_restarted_and_adopts_them(tmp_path: Path) -> None:
    """Guards: slaves outlive a master killed with SIGKILL, finish their tasks and hand the results over to the
    restarted master, which delivers them without running them again; 8 runs in all, the slaves end with 0.

    Before, the slaves exited 4 when the connection ended (their running tasks lost), and the restarted master
    ran those 4 tasks again: 12 runs.
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    slaves, _ = killed_with_tasks_running(tmp_path, runs)  # SIGKILL: no goodbye, no journal close
    assert all(slave.alive() for slave in slaves)

    second = run_master(tmp_path, runs)
    restarted = time.monotonic()
    awaited = resource_file.read(tmp_path / "resource.json").awaited_handovers
    assert awaited >= SLAVES
    status = subprocess.run(mwpy_command("status", str(tmp_path / "resource.json"), "--no-condor"),
                            capture_output=True, text=True, check=False, timeout=DEADLINE)  # fmt: skip
    assert f"master restarting: {awaited} keyed tasks wait for the slaves of the previous master" in status.stdout, (
        status.stdout + status.stderr
    )
    status = subprocess.run(mwpy_command("status", str(tmp_path / "resource.json"), "--no-condor", "--json"),
                            capture_output=True, text=True, check=False, timeout=DEADLINE)  # fmt: skip
    assert json.loads(status.stdout)["awaited_handovers"] == awaited, status.stdout + status.stderr
    (runs / "open").touch()  # the running tasks end now, their master gone
    assert second.wait(DEADLINE) == 0, second.err()
    took = time.monotonic() - restarted
    statuses = [slave.wait(DEADLINE) for slave in slaves]
    lines = printed(second)
    assert sorted(line["i"] for line in lines) == list(range(COUNT))
    assert all(line["value"] == line["i"] ** 2 + 1 for line in lines)
    assert json.loads(second.out().splitlines()[-1]) == {"sum": sum(i * i + 1 for i in range(COUNT))}
    assert marks(runs, "run") == dict.fromkeys(range(COUNT), 1), "a task ran twice, or never"
    assert statuses == [ExitCode.OK] * SLAVES, [slave.err() for slave in slaves]
    adopted = [event for event in iter_events(tmp_path / "events.jsonl") if isinstance(event, TasksAdopted)]
    assert sum(event.n for event in adopted) == SLAVES  # the 4 that ran when the master was killed
    assert (tmp_path / "master.audit").read_text().count("ADOPTED 'slow-") == SLAVES
    assert resource_file.read(tmp_path / "resource.json").tasks_done == COUNT  # the adopted results counted too
    print(f"restart to last result: {took:.1f} s; runs in all: {sum(marks(runs, 'run').values())}")


def test_a_slave_that_dies_during_the_lease_has_its_tasks_run_again_and_the_others_adopted(tmp_path: Path) -> None:
    """Guards: the restarted master waits for the slaves of its predecessor, not for one that ended: its task
    (running when it died) runs again, once; the other slaves' tasks are adopted; every result once."""
    runs = tmp_path / "runs"
    runs.mkdir()
    slaves, _ = killed_with_tasks_running(tmp_path, runs)
    victim = slaves.pop()
    (lost,) = [int(path.name.split("-")[1]) for path in runs.glob(f"started-*-{victim.pid}-*")]
    victim.kill()  # dies during the lease, its task unfinished
    victim.wait(DEADLINE)
    second = run_master(tmp_path, runs)
    (runs / "open").touch()
    assert second.wait(DEADLINE) == 0, second.err()
    assert [slave.wait(DEADLINE) for slave in slaves] == [ExitCode.OK] * (SLAVES - 1)
    assert sorted(line["i"] for line in printed(second)) == list(range(COUNT))
    assert marks(runs, "run") == dict.fromkeys(range(COUNT), 1), "a task ran twice, or never"
    assert marks(runs, "started")[lost] == 2  # the victim's task: started twice, finished once


def test_a_slave_whose_master_is_gone_for_good_exits_4_after_its_lease(tmp_path: Path) -> None:
    """Guards: the lease ends; a slave does not wait forever for a master that never comes back."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "open").touch()
    first = run_master(tmp_path, runs)
    slave = spawn_slave(RESTARTABLE, tmp_path, "--mw-master-lease", "2")
    wait_until(lambda: sum(marks(runs, "run").values()) >= 1, DEADLINE, "a task run")
    first.kill()
    assert slave.wait(DEADLINE) == ExitCode.MASTER_LOST
    assert "no master came back within the lease (--mw-master-lease; " in slave.err()


def test_a_second_master_for_a_computation_whose_master_runs_refuses_in_one_line(tmp_path: Path) -> None:
    """Guards: two masters started by mistake for one member id: the second would take the first one's slaves
    and journal; it says so in one line and exits 1, and the first goes on."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "open").touch()
    first = run_master(tmp_path, runs)
    second = run_program(
        RESTARTABLE, tmp_path, "--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file",
        str(tmp_path / "resource.json"), "--mw-journal", str(tmp_path / "journal.sqlite"), str(COUNT), str(runs),
    )  # fmt: skip
    assert second.returncode == 1
    (line,) = second.stderr.splitlines()
    assert "a master of member id 'default-member-id' is running at 127.0.0.1:" in line
    assert first.alive()
    slave = spawn_slave(RESTARTABLE, tmp_path)
    assert first.wait(DEADLINE) == 0
    assert slave.wait(DEADLINE) == 0


def test_the_session_tables_let_a_slave_hand_over_only_once_connected() -> None:
    """Guards: Handover is legal from a slave with an id (READY) and nowhere before; a master that is closing
    takes it and drops it; a malformed one is a protocol error."""
    assert SLAVE_SENDS[(SlaveState.READY, Handover.kind)] is SlaveState.READY
    assert MASTER_RECEIVES[(MasterState.READY, Handover.kind)] is MasterState.READY
    assert MASTER_RECEIVES[(MasterState.CLOSING, Handover.kind)] is MasterState.CLOSING
    assert (MasterState.GREETING, Handover.kind) not in MASTER_RECEIVES
    assert (SlaveState.GREETING, Handover.kind) not in SLAVE_SENDS
    protocol.check_handover(Handover([("slow-1", "slow_square", (3, True, b"x", 1.0))]))
    bad: list[Any] = [[("slow-1", "slow_square", (3, True, b"x", -1.0))], [("slow-1", (3, True, b"x", 1.0))], {}]
    for held in bad:
        with pytest.raises(ProtocolError):
            protocol.check_handover(Handover(held))


@pytest.mark.parametrize("told_by", ["its-job-connects-again", "its-job-log"])
def test_a_restarted_master_does_not_wait_for_a_slave_known_to_have_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, told_by: str
) -> None:
    """Guards: the restarted master runs again at once a task whose slave is known to have ended, however
    long the lease: a pool restart killed the slave (frozen here with SIGSTOP: alive, silent, and, as on
    another machine, its pid tells nothing), and either its Condor job (its job ad's ClusterId.ProcId) connects
    again as a new process without the task, or the job's user log beside the resource file says the job was
    removed. Every task runs once to its end and the computation finishes.

    Before, the master waited for that slave's hand-over for the whole lease (40 min by default): on the test
    pool, after a pool restart, it never ran the task (awaited_handovers 1).
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    job_ad = tmp_path / "job.ad"
    job_ad.write_text("ClusterId = 7\nProcId = 0\n")  # the slave's job, as Condor's starter writes it
    first = run_master(tmp_path, runs)
    with monkeypatch.context() as env:
        env.setenv("_CONDOR_JOB_AD", str(job_ad))
        frozen = spawn_slave(RESTARTABLE, tmp_path)
    wait_until(lambda: sum(marks(runs, "started").values()) >= 1, DEADLINE, "a task running")
    first.kill()
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        second = run_master(tmp_path, runs)
        assert resource_file.read(tmp_path / "resource.json").awaited_handovers == 1
        if told_by == "its-job-connects-again":
            monkeypatch.setenv("_CONDOR_JOB_AD", str(job_ad))
        else:  # HTCondor's user log format (HTCondor manual, "Job Log Events"; as the overseer's jobs write it)
            (tmp_path / "slaves.log").write_text(
                f"009 (007.000.000) {time.strftime('%Y-%m-%d %H:%M:%S')} Job was aborted.\n"
                "\tvia condor_rm (by user mwpy)\n...\n"
            )
        again = spawn_slave(RESTARTABLE, tmp_path)
        (runs / "open").touch()
        assert second.wait(DEADLINE) == 0, second.err()
        assert again.wait(DEADLINE) == 0, again.err()
    finally:
        frozen.kill()
    assert sorted(line["i"] for line in printed(second)) == list(range(COUNT))
    assert marks(runs, "run") == dict.fromkeys(range(COUNT), 1), "a task ran twice, or never"
    assert "a slave of the previous master, has ended" in second.err()


def test_a_master_killed_again_while_the_slaves_hand_over_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """Guards: the restarted master dies too (SIGKILL) after one slave handed its result over and took a task
    of its own, while the other slaves still run their predecessor's tasks; a third master delivers every
    result once (the one the second adopted from the journal), every task runs once, the slaves end with 0."""
    runs = tmp_path / "runs"
    runs.mkdir()
    slaves, running = killed_with_tasks_running(tmp_path, runs)
    second = run_master(tmp_path, runs)
    handed = running[0]
    (runs / f"open-{handed}").touch()  # one slave finishes, comes back and hands its result over; 3 still run
    wait_until(lambda: [line["i"] for line in printed(second)] == [handed], DEADLINE, "the first hand-over adopted")
    wait_until(lambda: sum(marks(runs, "started").values()) > SLAVES, DEADLINE, "the second master's own task")
    second.kill()
    assert all(slave.alive() for slave in slaves)

    third = run_master(tmp_path, runs)
    (runs / "open").touch()
    assert third.wait(DEADLINE) == 0, third.err()
    statuses = [slave.wait(DEADLINE) for slave in slaves]
    lines = printed(third)
    assert sorted(line["i"] for line in lines) == list(range(COUNT))
    assert all(line["value"] == line["i"] ** 2 + 1 for line in lines)
    assert [line["i"] for line in lines if line["journaled"]] == [handed]  # the second master's adoption
    assert json.loads(third.out().splitlines()[-1]) == {"sum": sum(i * i + 1 for i in range(COUNT))}
    assert marks(runs, "run") == dict.fromkeys(range(COUNT), 1), "a task ran twice, or never"
    assert statuses == [ExitCode.OK] * SLAVES, [slave.err() for slave in slaves]


def test_a_result_held_for_a_key_the_restarted_master_no_longer_submits_is_dropped_with_a_line(
    tmp_path: Path,
) -> None:
    """Guards: the restarted master's program asks for fewer tasks (2 of 8); the results slaves kept for the
    keys it no longer submits are dropped with a line naming each, never delivered nor counted, the master
    does not wait for them, and the slaves end with 0."""
    runs = tmp_path / "runs"
    runs.mkdir()
    slaves, running = killed_with_tasks_running(tmp_path, runs)
    fewer = 2
    orphans = [i for i in running if i >= fewer]
    assert orphans, running
    second = run_master(tmp_path, runs, fewer)
    for i in orphans:  # their slaves come back first: nothing asks for what they hand over
        (runs / f"open-{i}").touch()
    audit = tmp_path / "master.audit"
    wait_until(lambda: audit.read_text().count(" -> HANDOVER ") == len(orphans), DEADLINE, "the orphans handed over")
    (runs / "open").touch()
    assert second.wait(DEADLINE) == 0, second.err()
    statuses = [slave.wait(DEADLINE) for slave in slaves]
    lines = printed(second)
    assert sorted(line["i"] for line in lines) == list(range(fewer))
    assert json.loads(second.out().splitlines()[-1]) == {"sum": sum(i * i + 1 for i in range(fewer))}
    assert statuses == [ExitCode.OK] * SLAVES, [slave.err() for slave in slaves]
    text = audit.read_text()
    for i in orphans:
        assert text.count(f"HELD RESULT DROPPED 'slow-{i}' from ") == 1, text
        assert f"ADOPTED 'slow-{i}'" not in text
    (dropped,) = [line for line in second.err().splitlines() if line.startswith("dropped ")]
    assert all(f"'slow-{i}'" in dropped for i in orphans), dropped
    adopted = [event for event in iter_events(tmp_path / "events.jsonl") if isinstance(event, TasksAdopted)]
    assert sum(event.n for event in adopted) == len([i for i in running if i < fewer])


def test_a_restarted_master_counts_the_tasks_it_waits_for_as_pending(tmp_path: Path) -> None:
    """Guards: a master algorithm that loops while ``mw.pending_tasks()`` (the streaming idiom) gets the results
    of the tasks its predecessor's slaves still run: those tasks count as pending while the master waits for
    their slaves, and the computation ends with every result once, none run twice.

    Before, tasks held back for a slave of the previous master were in no count: a restarted master whose keys
    were all out on slaves saw nothing pending, printed a sum of 0 and finished, dropping the slaves' results.
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    slaves, running = killed_with_tasks_running(tmp_path, runs)
    assert running == list(range(SLAVES)), running  # first in, first out: the first 4 went out
    second = run_master(tmp_path, runs, SLAVES, "0", "pending")  # only the keys the slaves run now
    (runs / "open").touch()
    assert second.wait(DEADLINE) == 0, second.err()
    assert [slave.wait(DEADLINE) for slave in slaves] == [ExitCode.OK] * SLAVES, [slave.err() for slave in slaves]
    assert sorted(line["i"] for line in printed(second)) == running
    assert json.loads(second.out().splitlines()[-1]) == {"sum": sum(i * i + 1 for i in running)}
    assert marks(runs, "run") == dict.fromkeys(running, 1), "a task ran twice, or never"


def test_unkeyed_tasks_running_at_a_master_restart_run_again_and_are_delivered_once(tmp_path: Path) -> None:
    """Guards reliability.md's word on unkeyed tasks at a master restart: nothing remembers them, so slaves
    that were given only unkeyed tasks finish the one they run and exit 4, as without a journal, and the
    restarted master runs those tasks again; every result is delivered once, keyed tasks run once."""
    runs = tmp_path / "runs"
    runs.mkdir()
    first = run_master(tmp_path, runs, COUNT, str(SLAVES))  # the 4 tasks sent first have no key
    slaves = [spawn_slave(RESTARTABLE, tmp_path) for _ in range(SLAVES)]
    wait_until(lambda: sum(marks(runs, "started").values()) >= SLAVES, DEADLINE, "4 tasks running")
    first.kill()
    assert sorted(marks(runs, "started")) == list(range(SLAVES))
    for i in range(SLAVES):
        (runs / f"open-{i}").touch()
    assert [slave.wait(DEADLINE) for slave in slaves] == [ExitCode.MASTER_LOST] * SLAVES
    assert marks(runs, "run") == dict.fromkeys(range(SLAVES), 1)  # run to the end, their results lost

    second = run_master(tmp_path, runs, COUNT, str(SLAVES))
    (runs / "open").touch()
    slaves = [spawn_slave(RESTARTABLE, tmp_path) for _ in range(SLAVES)]
    assert second.wait(DEADLINE) == 0, second.err()
    assert [slave.wait(DEADLINE) for slave in slaves] == [ExitCode.OK] * SLAVES
    lines = printed(second)
    assert sorted(line["i"] for line in lines) == list(range(COUNT))
    assert all(line["value"] == line["i"] ** 2 + 1 and not line["journaled"] for line in lines)
    assert marks(runs, "run") == {i: 2 if i < SLAVES else 1 for i in range(COUNT)}

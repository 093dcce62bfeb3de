"""Churn: slaves are SIGKILLed, restarted, SIGSTOPped past the client timeout and continued, at random.

tests/programs/trust_churn.py runs as a real master streaming short, long,
fragile (``retry=False``), marathon (longer than the client timeout) and
ordered tasks, and prints every task it submits and everything the master
algorithm receives. Meanwhile a seeded random schedule kills and restarts
real slave processes. Afterwards the printout must show reliability.md's
guarantees: every result exactly once and right, lost ``retry=False`` tasks
unrunnable exactly once, ordered tasks following their policy, and no late
result from a slave that was dropped.
"""

from __future__ import annotations

import os
import random
import signal
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mwpy import ExitCode
from tests.programs.trust_churn import expected
from tests.support import PROGRAMS, MasterAudit, Proc, spawn_master, spawn_slave, wait_until

CHURN = PROGRAMS / "trust_churn.py"
SEED = 4_2024
#: Below the marathon tasks' 4 s, so heartbeats must carry them; 3 s leaves a loaded machine ~2 s of slack.
CLIENT_TIMEOUT = 3
SLAVES = 4
#: Accidents at least (more until every planned kind of accident has happened), each after some progress.
CHAOS_STEPS = 40
#: After this many accidents, the planned kinds still missing are forced (each forced step tries again: a fragile
#: kill needs a fragile task running during the step's wait, which a loaded machine may not give every time).
FORCE_AFTER = 60
#: Results the master must print between two accidents: accidents are paced by progress, not a clock.
PROGRESS = 5
DEADLINE = 90.0


class Chaos:
    """Keeps SLAVES slaves running and does random harm to them."""

    def __init__(self, workdir: Path, audit: MasterAudit, rng: random.Random) -> None:
        self.workdir = workdir
        self.audit = audit
        self.rng = rng
        self.running: list[Proc] = []
        self.killed: list[Proc] = []
        self.fragile_kills = 0
        self.fragile_kill_due = False
        self.stopped: Proc | None = None
        self.stopped_sid = ""
        self.continued: list[tuple[Proc, str]] = []  # (slave, its sid) SIGCONTinued after being dropped

    def top_up(self) -> None:
        self.running = [p for p in self.running if p.alive()]
        while len(self.running) < SLAVES:
            self.running.append(spawn_slave(CHURN, self.workdir))

    def kill(self, victim: Proc) -> None:
        victim.kill()
        self.running.remove(victim)
        self.killed.append(victim)

    def tend_fragile(self) -> None:
        """Kill the slave inside the next fragile (retry=False) task if a kill is due; release the others.

        A fragile task runs until its marker is removed, so while the marker
        exists its slave is certainly inside it. Called while waiting for
        progress, so held fragile tasks never starve the computation.
        """
        by_pid = {p.pid: p for p in self.running}
        for marker in (self.workdir / "running").glob("fragile-running-*"):
            victim = by_pid.get(int(marker.name.rsplit("-", 1)[1]))
            if self.fragile_kill_due and victim is not None and victim.alive():
                self.kill(victim)
                self.fragile_kills += 1
                self.fragile_kill_due = False
            marker.unlink(missing_ok=True)

    def stop_one(self) -> None:
        """SIGSTOP a connected slave; it stays stopped until the master has dropped it."""
        connected = [p for p in self.running if f", pid {p.pid}, " in "\n".join(self.audit.lines())]
        if not connected:
            return
        victim = self.rng.choice(connected)
        sid = self.audit.sid_of(victim.pid)
        os.kill(victim.pid, signal.SIGSTOP)
        self.running.remove(victim)
        self.stopped, self.stopped_sid = victim, sid

    def maybe_continue(self) -> bool:
        """SIGCONT the stopped slave once the master dropped it for silence; True once none is stopped."""
        if self.stopped is None:
            return True
        prefix = f"{self.stopped_sid} -> disconnected ("
        if any(line.startswith(prefix) for line in self.audit.lines()):
            os.kill(self.stopped.pid, signal.SIGCONT)
            self.continued.append((self.stopped, self.stopped_sid))
            self.stopped = None
        return self.stopped is None

    def step(self, force: bool) -> None:
        self.maybe_continue()
        self.top_up()
        roll = self.rng.random()
        if force:  # the planned kinds of harm still missing, now
            roll = 0.0 if self.fragile_kills < 2 else (0.75 if not self.continued and not self.stopped else 0.5)
        if roll < 0.3:
            self.fragile_kill_due = True  # done by tend_fragile, when a fragile task runs
        elif roll < 0.7:
            self.kill(self.rng.choice(self.running))
        elif roll < 0.8 and self.stopped is None and len(self.continued) < 2:
            self.stop_one()
        self.top_up()

    def progressed(self, master: Proc, count: int) -> Callable[[], bool]:
        """A predicate: the master printed ``count`` results (tending fragile tasks meanwhile)."""

        def check() -> bool:
            self.tend_fragile()
            return results_printed(master) >= count

        return check

    def planned_harm_done(self) -> bool:
        return not self.missing_harm()

    def missing_harm(self) -> str:
        """The planned kinds of harm not done yet (empty once all are), for the test's message."""
        missing = [f"fragile kills {self.fragile_kills} of 2"] if self.fragile_kills < 2 else []
        if not self.continued:
            missing.append("no stopped slave dropped and continued" + (" (one stopped)" if self.stopped else ""))
        if len(self.killed) < 10:
            missing.append(f"kills {len(self.killed)} of 10")
        return ", ".join(missing)


def results_printed(master: Proc) -> int:
    return master.out().count('"result"')


def test_results_survive_churn_exactly_once(tmp_path: Path) -> None:
    """Guards: requeue on loss (retry=True), unrunnable on loss (retry=False), ordered-task policies,
    heartbeats during long tasks, dropping silent slaves after the client timeout, and accepting a
    result only on the connection holding its task.

    Remove any of these and a task goes missing, comes back twice or in the
    wrong place, a marathon task never finishes, or the stopped slave is
    never dropped.
    """
    audit = MasterAudit(tmp_path / "master.audit")
    master, chaos = _soak_under_chaos(tmp_path, audit)

    lines = master.json_lines()
    assert lines[-1]["end"] is True
    submitted = {line["submitted"]: line for line in lines if "submitted" in line}
    results = [line for line in lines if "result" in line]
    unrunnable = [line for line in lines if "unrunnable" in line]
    unrunnable_ids = [line["unrunnable"] for line in unrunnable]

    _check_exactly_once(submitted, results, unrunnable_ids)
    fragile_lost = _check_lost_tasks(submitted, unrunnable_ids)
    _check_ordered_tasks(submitted, results)
    _check_dropped_slaves(chaos, audit, results)

    for slave in chaos.running:
        assert slave.wait(DEADLINE) == 0, slave.err()
    summary: dict[str, Any] = {
        "churn_short": sum(1 for line in results if line["algorithm"] == "churn_short"),
        "killed": len(chaos.killed),
        "fragile_lost": len(fragile_lost),
    }
    print(summary)


def _soak_under_chaos(tmp_path: Path, audit: MasterAudit) -> tuple[Proc, Chaos]:
    """Run the soak master while Chaos harms its slaves, then stop it; it must end with status 0."""
    (tmp_path / "running").mkdir()
    master = spawn_master(
        CHURN,
        tmp_path,
        "--mw-client-timeout",
        str(CLIENT_TIMEOUT),
        # The chaos kills slaves at random, and a 4 s marathon task may be inside several of them: those deaths
        # are not the task's doing (issue 21's KilledSlaveError is tested in test_killed_slaves.py).
        "--mw-allowed-failures",
        str(CHAOS_STEPS * 10),
        "--mw-audit-file",
        str(audit.path),
        "soak",
        str(tmp_path / "stop"),
        str(tmp_path / "running"),
    )
    chaos = Chaos(tmp_path, audit, random.Random(SEED))
    chaos.top_up()
    steps = 0
    while steps < CHAOS_STEPS or not chaos.planned_harm_done():
        assert master.alive(), master.err()
        assert steps < 3 * FORCE_AFTER, f"the planned accidents did not all happen: {chaos.missing_harm()}"
        chaos.step(force=steps >= FORCE_AFTER)
        steps += 1
        wait_until(chaos.progressed(master, results_printed(master) + PROGRESS), DEADLINE, "progress")
    wait_until(chaos.maybe_continue, DEADLINE, "the stopped slave to be dropped")
    (tmp_path / "stop").touch()

    def ended() -> bool:
        chaos.fragile_kill_due = False
        chaos.tend_fragile()  # the fragile tasks still running finish
        return not master.alive()

    wait_until(ended, DEADLINE, "the master to end")
    assert master.wait() == 0, master.err()
    return master, chaos


def _check_exactly_once(
    submitted: dict[int, dict[str, Any]], results: list[dict[str, Any]], unrunnable_ids: list[int]
) -> None:
    """Exactly once, and nothing lost; every result right."""
    result_ids = [line["result"] for line in results]
    assert len(result_ids) == len(set(result_ids)), "a result reached the master algorithm twice"
    assert len(unrunnable_ids) == len(set(unrunnable_ids)), "a task came back unrunnable twice"
    assert not set(result_ids) & set(unrunnable_ids)
    assert set(result_ids) | set(unrunnable_ids) == set(submitted)
    for line in results:
        task = submitted[line["result"]]
        assert line["error"] is None, line
        if task["algorithm"] != "churn_step":
            assert line["value"] == expected(task["algorithm"], tuple(task["args"])), (task, line)


def _check_lost_tasks(submitted: dict[int, dict[str, Any]], unrunnable_ids: list[int]) -> list[int]:
    """retry=True tasks always come back with a result; lost retry=False ones come back unrunnable.

    Returns the fragile (retry=False) tasks that were lost: there must be some.
    """
    for task_id in unrunnable_ids:
        task = submitted[task_id]
        assert task["algorithm"] in ("churn_fragile", "churn_step"), task
        if task["algorithm"] == "churn_step":
            assert not task["tag"][2], f"an ordered do_it_anyway task became unrunnable: {task}"
    fragile_lost = [t for t in unrunnable_ids if submitted[t]["algorithm"] == "churn_fragile"]
    assert fragile_lost, "no fragile task was lost, though slaves were killed inside them"
    return fragile_lost


def _check_ordered_tasks(submitted: dict[int, dict[str, Any]], results: list[dict[str, Any]]) -> None:
    """Ordered tasks: on their slave, in submission order; do_it_anyway ones may move."""
    ran_on_own_slave: dict[str, list[list[int]]] = defaultdict(list)
    for line in results:
        task = submitted[line["result"]]
        if task["algorithm"] != "churn_step":
            continue
        sid, _, anyway = task["tag"]
        if line["slave_id"] == sid:
            ran_on_own_slave[sid].append(line["value"])
        else:
            assert anyway, f"ordered task {task} ran on {line['slave_id']}"
    assert ran_on_own_slave, "no ordered task ran"
    for sid, values in ran_on_own_slave.items():
        values.sort(key=lambda value: value[2])  # by submission index k
        assert len({pid for pid, _, _ in values}) == 1, sid
        executed = [count for _, count, _ in values]
        assert executed == sorted(executed), f"{sid} ran its ordered tasks out of order: {values}"


def _check_dropped_slaves(chaos: Chaos, audit: MasterAudit, results: list[dict[str, Any]]) -> None:
    """The slave stopped past the client timeout was dropped, and nothing it sent later was taken."""
    for slave, sid in chaos.continued:
        reason = audit.slave_dropped(sid)
        assert reason.startswith(f"silent for {CLIENT_TIMEOUT} s (client timeout)"), reason
        assert slave.wait(DEADLINE) == ExitCode.MASTER_LOST, slave.err()
        received = int(reason.split(" results back")[0].rsplit(" ", 1)[1])
        delivered = sum(1 for line in results if line["slave_id"] == sid)
        assert delivered == received, f"{sid}: {delivered} results delivered, {received} received before the drop"

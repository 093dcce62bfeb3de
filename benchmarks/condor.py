"""Scenario 5: a real HTCondor pool, 1,000 tasks of 50 ms as mwpy tasks vs. 1,000 plain Condor jobs.

It needs the pool that ``tools/condor_pool.py up`` builds (8 slots), root (jobs
are submitted inside the pool's root with ``tools/condor_pool.py exec``, as its
user ``mwpy``) and the ``htcondor2`` bindings on the host (the stopwatch reads
the queue with them). Without any of these the scenario reports
"skipped: <reason>", so the rest of the harness runs everywhere.

Both arms do the same work on the same slots, with the same Python
(``/usr/bin/python3`` inside the pool, the slaves' default ``slave_python``):

* **mwpy**: ``condor_submit submit/master.sub`` (``-a python=<pool job_python>
  -a program=condor_program.py -a program_args=...``), then, once the master has
  written ``resource.json`` and ``mwpy.pyz``, ``condor_submit submit/slaves.sub
  -a slaves=<slots>``, exactly as docs/condor.md tells a user. The master submits
  every task at once, its slaves take them as they connect, and it returns once
  all are answered; each slave is told to shut down and leaves the queue. Wall time: from just before the first
  ``condor_submit`` until the computation has no job left in the queue (master
  and slaves).
* **plain jobs**: one ``condor_submit`` of one cluster (``queue 1000``) whose
  jobs each run ``python3 condor_program.py --plain KIND 0.05``. Wall time: from
  just before ``condor_submit`` until the cluster has no job left in the queue.

The work is measured twice, as a 50 ms ``sleep`` (no CPU: it overlaps over all
the slots, which tests the "work ÷ slots" ideal) and as a 50 ms CPU spin (the
pool advertises 8 slots on a 2-core machine, so 8 spins cannot overlap more than
2 at a time: the ideal is then work ÷ cores). See docs/performance.md.

The queue is read from the host every 0.2 s (every 1 s while more than a few
dozen jobs are queued), so the wall times are good to about 0.2 s.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import REPO, BenchError, Check, Row, Settings, Sizes, tail

#: Where ``tools/condor_pool.py`` keeps its state (overridable like the tool itself).
POOL_BASE = Path(os.environ.get("MWPY_CONDOR_BASE", "/var/cache/mwpy-condor"))
POOL_TOOL = REPO / "tools" / "condor_pool.py"
SUBMIT = REPO / "submit"
PROGRAM = Path(__file__).resolve().with_name("condor_program.py")

TASKS = 1_000
TASK_SECONDS = 0.05
SLOTS = 8
#: The two kinds of 50 ms work, in the order they are measured.
KINDS = ("sleep", "spin")
#: The Python that runs the work inside the pool: slaves.sub's default slave_python.
JOB_PYTHON = "/usr/bin/python3"

#: The longest an arm may take before it is removed and reported as failed.
MWPY_DEADLINE = 600.0
PLAIN_DEADLINE = 1200.0
#: Seconds between two looks at the queue: fine near the end, coarse while many jobs are queued.
POLL_FINE = 0.2
POLL_COARSE = 1.0

NAME = "5 condor"

T = TypeVar("T")


def pool_description() -> tuple[dict[str, Any] | None, str]:
    """The running pool's description (``pool.json``), or ``None`` and why there is none."""
    path = POOL_BASE / "pool.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no HTCondor pool ({path} missing; start one with `tools/condor_pool.py up`)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable {path}: {exc}"
    return data, ""


def pool_down(pool: dict[str, Any]) -> str | None:
    """Why the pool cannot take jobs now (down, or not ours to drive), or ``None`` if it can."""
    if os.geteuid() != 0:
        return "needs root: jobs are submitted inside the pool's root with `tools/condor_pool.py exec`"
    status = subprocess.run(
        [sys.executable, str(POOL_TOOL), "status", "--base", str(pool.get("base", POOL_BASE))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if status.returncode != 0:
        return f"the HTCondor pool in {pool.get('base', POOL_BASE)} is down (`tools/condor_pool.py up` starts it)"
    return None


def backend_missing() -> str | None:
    """Why mwpy cannot be put on Condor from here, or ``None`` if it can."""
    for name in ("master.sub", "slaves.sub"):
        if not (SUBMIT / name).is_file():
            return f"{SUBMIT / name} is missing"
    if importlib.util.find_spec("htcondor2") is None:
        return "the htcondor2 bindings are not installed (pip install htcondor)"
    return None


def scaled_tasks(settings: Settings) -> int:
    """1,000 tasks, scaled like every other count by ``--tasks`` (and ``--quick``)."""
    factor = settings.sizes.throughput_tasks / Sizes().throughput_tasks
    return max(SLOTS, round(TASKS * factor))


def run(settings: Settings) -> tuple[list[Row], list[Check]]:
    """The scenario's rows and checks; skipped rows when the pool or the bindings are missing."""
    pool, why = pool_description()
    if pool is None:
        return _skipped(why)
    missing = backend_missing() or pool_down(pool)
    if missing is not None:
        return _skipped(missing)
    settings.log(f"{NAME}: pool in {pool.get('base')}, {pool.get('cpus')} slots, HTCondor {pool.get('condor_version')}")
    return measure_on_pool(settings, pool)


# ---------------------------------------------------------------------- the measurement


def measure_on_pool(settings: Settings, pool: dict[str, Any]) -> tuple[list[Row], list[Check]]:
    """Both arms for both kinds of work: mwpy sleep, mwpy spin, plain sleep, plain spin.

    Each arm runs once (one round) whatever ``--rounds`` says: the plain jobs take minutes.
    """
    slots = int(pool.get("cpus", SLOTS))
    tasks = scaled_tasks(settings)
    cores = len(os.sched_getaffinity(0))
    try:
        queue = PoolQueue(pool)
        queue.jobs("true")
    except Exception as exc:  # the bindings cannot reach the schedd: say so, as for a missing pool
        return _skipped(f"the schedd does not answer the htcondor2 bindings: {' '.join(str(exc).split())}")
    mwpy_rows = {kind: _arm(settings, queue, "mwpy", kind, tasks=tasks, slots=slots) for kind in KINDS}
    plain_rows = {kind: _arm(settings, queue, "plain", kind, tasks=tasks, slots=slots) for kind in KINDS}
    rows: list[Row] = []
    checks: list[Check] = []
    for kind in KINDS:
        rows += [mwpy_rows[kind], plain_rows[kind]]
        checks += _checks(kind, mwpy_rows[kind], plain_rows[kind], tasks=tasks, slots=slots, cores=cores)
    return rows, checks


def _label(system: str, kind: str, tasks: int, slots: int) -> str:
    work = f"{TASK_SECONDS * 1000:g} ms {kind}"
    if system == "mwpy":
        return f"mwpy master.sub + slaves.sub ({slots} slaves), {work}"
    return f"plain Condor jobs, one cluster of {tasks:,}, {work}"


def _arm(settings: Settings, queue: PoolQueue, system: str, kind: str, *, tasks: int, slots: int) -> Row:
    label = _label(system, kind, tasks, slots)
    settings.log(f"{NAME}: {label}")
    others = len(queue.jobs("true"))
    try:
        figures = (_run_mwpy if system == "mwpy" else _run_plain)(queue, kind, tasks, slots)
    except BenchError as exc:
        print(f"[bench] {NAME} {label} failed: {exc}", file=sys.stderr)
        return Row(NAME, label, skipped=f"failed: {exc}")
    figures["other_jobs_queued_before"] = others
    wall = figures["wall_seconds"]
    if system == "mwpy" and figures["connected_after_seconds"] is None:
        note = f"wall {wall:.1f} s; the last answer came before all {slots} slaves were in"
    elif system == "mwpy":
        note = (
            f"wall {wall:.1f} s: all slaves in at {figures['connected_after_seconds']:.1f} s, "
            f"the {figures['tasks_after_connect']} tasks left took {figures['tasks_after_connect_seconds']:.2f} s, "
            f"queue empty {figures['exit_seconds']:.1f} s after the last answer"
        )
    else:
        note = f"wall {wall:.1f} s: {wall * slots / tasks:.2f} s per job per slot"
    if others:
        note += f"; {others} other jobs were queued at the start: the slots were not all free"
    settings.log(f"{NAME}: {note}")
    return Row(NAME, label, tasks=tasks, seconds=wall, tasks_per_s=tasks / wall, note=note, extra=figures)


def _run_mwpy(queue: PoolQueue, kind: str, tasks: int, slots: int) -> dict[str, Any]:
    """master.sub + slaves.sub for one kind of work; the host's and the master's timestamps."""
    workdir = queue.new_workdir(f"mwpy-{kind}")
    shutil.copytree(SUBMIT, workdir / "submit")
    shutil.copy(PROGRAM, workdir / PROGRAM.name)
    queue.give(workdir)
    report_path = workdir / "report.json"
    resource = workdir / "resource.json"
    member = f"mwpy:{resource}"
    constraint = f'MwpyMemberId == "{member}"'
    program_args = f"--kind {kind} --tasks {tasks} --seconds {TASK_SECONDS} --slaves {slots} --report {report_path}"
    load = os.getloadavg()[0]
    ok = False
    try:
        started = time.time()
        master = queue.submit(
            workdir,
            "submit/master.sub",
            f"python={queue.pool['job_python']}",
            f"program={PROGRAM.name}",
            f"program_args={program_args}",
        )
        master_submitted = time.time()
        # slaves.sub sent before these exist would go on hold for 20 s (docs/condor.md, 3a).
        deadline = time.monotonic() + 120
        look = time.monotonic() + 1
        while not (resource.exists() and (workdir / "mwpy.pyz").exists()):
            if time.monotonic() > look:  # is the master still there? (not at every turn: the schedd is shared)
                look = time.monotonic() + 1
                if time.monotonic() > deadline or not queue.jobs(constraint):
                    raise BenchError(f"no resource file from master job {master}\n{_logs(workdir)}")
            time.sleep(0.02)
        resource_seen = time.time()
        queue.submit(workdir, "submit/slaves.sub", f"program={PROGRAM.name}", f"slaves={slots}")
        slaves_submitted = time.time()
        gone = queue.wait_empty(constraint, MWPY_DEADLINE, roles=("master", "slave"))
        ended = time.time()
        try:
            report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BenchError(f"no report from the master ({exc})\n{_logs(workdir)}") from None
        if report.get("answered") != tasks:
            raise BenchError(f"the master answered {report.get('answered')} of {tasks} tasks\n{_logs(workdir)}")
        ok = True
    finally:
        queue.finish(workdir, constraint, keep=not ok)
    connected = report["all_slaves_connected"]
    return {
        "wall_seconds": ended - started,
        "master_submit_seconds": master_submitted - started,
        "master_algorithm_started_after_seconds": report["master_started"] - started,
        "resource_file_after_seconds": resource_seen - started,
        "slaves_submit_seconds": slaves_submitted - resource_seen,
        "first_slave_after_seconds": _since(report["first_slave_connected"], started),
        "connected_after_seconds": _since(connected, started),
        "answered_before_all_connected": report["answered_before_all_connected"],
        "tasks_after_connect": None if connected is None else tasks - report["answered_before_all_connected"],
        "tasks_after_connect_seconds": _since(report["tasks_done"], connected),
        "last_answer_after_seconds": report["tasks_done"] - started,
        "exit_seconds": ended - report["tasks_done"],
        "master_gone_after_seconds": gone["master"] - started,
        "slaves_gone_after_seconds": gone["slave"] - started,
        "slaves_seen": report["slaves_seen"],
        "tasks_per_slave": report["tasks_per_slave"],
        "load_average_before": load,
    }


def _since(moment: float | None, origin: float | None) -> float | None:
    return None if moment is None or origin is None else moment - origin


def _run_plain(queue: PoolQueue, kind: str, tasks: int, slots: int) -> dict[str, Any]:
    """One cluster of ``tasks`` jobs, each the work of one task; the wall time until the queue is empty."""
    workdir = queue.new_workdir(f"plain-{kind}")
    shutil.copy(PROGRAM, workdir / PROGRAM.name)
    (workdir / "plain.sub").write_text(
        "\n".join(
            [
                "universe = vanilla",
                f"executable = {JOB_PYTHON}",
                "transfer_executable = false",
                f'arguments = "{PROGRAM.name} --plain {kind} {TASK_SECONDS}"',
                "should_transfer_files = YES",
                "when_to_transfer_output = ON_EXIT",
                f"transfer_input_files = {PROGRAM.name}",
                "request_memory = 512",
                "log = plain.log",
                "notification = never",
                f"queue {tasks}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    queue.give(workdir)
    load = os.getloadavg()[0]
    ok = False
    cluster = None
    try:
        started = time.time()
        cluster = queue.submit(workdir, "plain.sub")
        submitted = time.time()
        queue.wait_empty(f"ClusterId == {cluster}", PLAIN_DEADLINE)
        ended = time.time()
        exits = queue.exit_codes(cluster, tasks)
        failed = {code: n for code, n in exits.items() if code != 0}
        if sum(exits.values()) != tasks or failed:
            raise BenchError(f"cluster {cluster}: exit codes {exits} for {tasks} jobs")
        ok = True
    finally:
        queue.finish(workdir, f"ClusterId == {cluster}" if cluster is not None else None, keep=not ok)
    return {
        "wall_seconds": ended - started,
        "submit_seconds": submitted - started,
        "cluster": cluster,
        "seconds_per_job_per_slot": (ended - started) * slots / tasks,
        "load_average_before": load,
    }


def _checks(kind: str, mwpy_row: Row, plain_row: Row, *, tasks: int, slots: int, cores: int) -> list[Check]:
    """Speedup and ideal-time ratios for one kind of work (``None`` figures: not measured)."""
    work = tasks * TASK_SECONDS
    slot_ideal = work / slots
    core_ideal = work / min(slots, cores)
    mwpy_wall = mwpy_row.seconds
    plain_wall = plain_row.seconds
    # After every slave is in: the time the tasks still unanswered then took, against their own ideal.
    after_seconds = mwpy_row.extra.get("tasks_after_connect_seconds")
    after_tasks = mwpy_row.extra.get("tasks_after_connect")
    after_work = None if after_tasks is None else after_tasks * TASK_SECONDS
    prefix = f"5. Condor {TASK_SECONDS * 1000:g} ms {kind}"

    def check(
        target: str, top: float | None, bottom: float | None, bound: float | None, *, at_most: bool, detail: str = ""
    ) -> Check:
        text = "info" if bound is None else f"{'≤' if at_most else '≥'} {bound:g}"
        if top is None or bottom is None or bottom == 0:
            return Check(target, None, text, None, "not measured")
        value = top / bottom
        ok = None if bound is None else (value <= bound if at_most else value >= bound)
        return Check(target, value, text, ok, f"{top:,.2f} s / {bottom:,.2f} s{detail}")

    checks = [check(f"{prefix}: plain jobs ÷ mwpy wall time", plain_wall, mwpy_wall, 10, at_most=False)]
    if kind == "sleep":
        checks += [
            check(f"{prefix}: mwpy ÷ ideal (work ÷ {slots} slots)", mwpy_wall, slot_ideal, 2, at_most=True),
            check(
                f"{prefix}: mwpy once all slaves are in ÷ ideal (work left ÷ {slots} slots)",
                after_seconds,
                None if after_work is None else after_work / slots,
                None,
                at_most=True,
            ),
        ]
    else:
        checks += [
            check(f"{prefix}: mwpy ÷ ideal (work ÷ {min(slots, cores)} cores)", mwpy_wall, core_ideal, 2, at_most=True),
            check(
                f"{prefix}: mwpy ÷ ideal (work ÷ {slots} slots)",
                mwpy_wall,
                slot_ideal,
                None,
                at_most=True,
                detail=f"; {slots} slots share {cores} cores: ≥ {slots / cores:g} by construction"
                if cores < slots
                else "",
            ),
            check(
                f"{prefix}: mwpy once all slaves are in ÷ ideal (work left ÷ {min(slots, cores)} cores)",
                after_seconds,
                None if after_work is None else after_work / min(slots, cores),
                None,
                at_most=True,
            ),
        ]
    return checks


def _skipped(reason: str) -> tuple[list[Row], list[Check]]:
    rows: list[Row] = []
    checks: list[Check] = []
    for kind in KINDS:
        rows += [Row(NAME, _label(system, kind, TASKS, SLOTS), skipped=reason) for system in ("mwpy", "plain")]
        checks += [
            Check(check.target, None, check.bound, None, reason)
            for check in _checks(
                kind, Row(NAME, ""), Row(NAME, ""), tasks=TASKS, slots=SLOTS, cores=len(os.sched_getaffinity(0))
            )
        ]
    return rows, checks


def _logs(workdir: Path) -> str:
    """The master's and the slaves' output, for error messages."""
    parts = []
    for path in sorted(workdir.glob("*.out")) + sorted(workdir.glob("*.err")):
        text = tail(path)
        if text.strip():
            parts.append(f"--- {path.name}\n{text}")
    return "\n".join(parts)


# ---------------------------------------------------------------------- the pool


class PoolQueue:
    """Submits inside the pool's root (as its user) and reads the queue from the host with the bindings."""

    def __init__(self, pool: dict[str, Any]) -> None:
        self.pool = pool
        # The host client config, before the bindings read any (docs/condor-pool.md).
        os.environ["CONDOR_CONFIG"] = pool["condor_config"]
        import htcondor2  # noqa: PLC0415 - only this scenario needs the bindings

        htcondor2.reload_config()
        self._htcondor = htcondor2
        self._numbers = iter(range(1, 1_000_000))

    def new_workdir(self, name: str) -> Path:
        """An empty folder in the pool's share, owned by the pool's user (jobs run as it)."""
        parent = Path(self.pool["share"]) / "bench"
        workdir = parent / f"{os.getpid()}-{next(self._numbers)}-{name}"
        workdir.mkdir(parents=True)
        self.give(parent)
        return workdir

    def give(self, path: Path) -> None:
        for item in [path, *path.rglob("*")]:
            os.chown(item, self.pool["uid"], self.pool["gid"])

    def submit(self, workdir: Path, submit_file: str, *macros: str) -> int:
        """``condor_submit SUBMIT_FILE -a MACRO...`` inside the pool, in ``workdir``; the cluster id."""
        command = ["condor_submit", submit_file]
        for macro in macros:
            command += ["-a", macro]
        prefix = list(self.pool["exec"])
        if prefix and prefix[-1] == "--":
            prefix.pop()
        done = subprocess.run(
            [*prefix, "--cwd", str(workdir), "--", *command], capture_output=True, text=True, timeout=120, check=False
        )
        found = re.search(r"submitted to cluster (\d+)\.", done.stdout)
        if done.returncode != 0 or found is None:
            raise BenchError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        return int(found[1])

    def _retried(self, call: Callable[[], T]) -> T:
        """A call of the bindings, tried again after a failure (stale sessions after a pool restart)."""
        for _ in range(2):
            with contextlib.suppress(self._htcondor.HTCondorException):
                return call()
            time.sleep(0.5)
        return call()

    def jobs(self, constraint: str) -> list[Any]:
        return self._retried(lambda: list(self._htcondor.Schedd().query(constraint, projection=["ProcId"])))

    def wait_empty(
        self, constraint: str, timeout: float, roles: tuple[str, ...] = (), fine: int = 4 * SLOTS
    ) -> dict[str, float]:
        """Wait until no job matches ``constraint``; when the last job of each ``MwpyRole`` in ``roles`` left.

        The queue is read every 0.2 s once at most ``fine`` jobs match, every second before.
        """
        deadline = time.monotonic() + timeout
        gone: dict[str, float] = {}
        projection = ["ProcId", "MwpyRole"]
        while True:
            ads = self._retried(lambda: list(self._htcondor.Schedd().query(constraint, projection=projection)))
            now = time.time()
            for role in roles:
                if role not in gone and not any(ad.get("MwpyRole") == role for ad in ads):
                    gone[role] = now
            if not ads:
                return gone
            if time.monotonic() > deadline:
                raise BenchError(f"{len(ads)} jobs still queued after {timeout:g} s ({constraint})")
            time.sleep(POLL_FINE if len(ads) <= fine else POLL_COARSE)

    def exit_codes(self, cluster: int, expected: int) -> dict[int, int]:
        """How many of the cluster's jobs (from the history) exited with each code."""
        deadline = time.monotonic() + 60
        while True:
            ads = self._retried(
                lambda: list(
                    self._htcondor.Schedd().history(
                        f"ClusterId == {cluster}", projection=["ProcId", "ExitCode"], match=expected
                    )
                )
            )
            if len(ads) >= expected or time.monotonic() > deadline:
                break
            time.sleep(1)
        codes: dict[int, int] = {}
        for ad in ads:
            code = int(ad.get("ExitCode", -1))
            codes[code] = codes.get(code, 0) + 1
        return codes

    def finish(self, workdir: Path, constraint: str | None, *, keep: bool) -> None:
        """Remove what is left of an arm's jobs; delete its folder unless it failed (kept for a post-mortem)."""
        if constraint is not None and keep:
            with contextlib.suppress(Exception):
                self._retried(
                    lambda: self._htcondor.Schedd().act(
                        self._htcondor.JobAction.Remove, constraint, reason="mwpy benchmark clean-up"
                    )
                )
        if keep:
            print(f"[bench] {NAME}: work folder kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

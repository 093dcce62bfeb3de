"""Helpers for the tests that run against the private HTCondor pool (tests/conftest.py starts it).

Work folders live in the pool's share, owned by the pool's user, because
jobs run as that user inside the pool's root and see the share at the same
path. ``condor_submit`` runs inside the root (``tools/condor_pool.py exec``),
as a user types it; this process queries the schedd with the htcondor2
bindings. After a pool ``restart`` the first call of a long-lived client
fails on its stale security sessions (docs/condor-pool.md), so every
query here is retried.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from mwpy import resource_file
from mwpy.errors import ResourceFileError
from mwpy.resource_file import ResourceFile
from tests.programs.restartable import marks
from tests.support import PROGRAMS, ROOT, wait_until

POOL_TOOL = ROOT / "tools" / "condor_pool.py"
SUBMIT = ROOT / "submit"
#: The resource file's name in every work folder (master.sub's default).
RESOURCE = "resource.json"
#: The Condor user log every slave job writes in its work folder (slaves.sub's and the overseer's ``log``).
SLAVES_LOG = "slaves.log"
#: Environment for scheduler-universe jobs that use the pool venv's htcondor bindings: they are
#: newer (PyPI) than the pool's schedd (Debian), whose FS authentication they refuse otherwise.
FS_BINDING = "_condor_SEC_FS_ENFORCE_CHANNEL_BINDING=false"

#: Seconds a computation of the Condor tests may take from submit to the master leaving the queue.
DEADLINE = 120
#: Condor's job states (JobStatus).
IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5

T = TypeVar("T")
_numbers = itertools.count()


@attrs.frozen
class Pool:
    """The facts ``tools/condor_pool.py up --json`` prints, and what tests do with the pool."""

    facts: dict[str, Any]

    @property
    def share(self) -> Path:
        return Path(self.facts["share"])

    @property
    def job_python(self) -> str:
        """A Python inside the pool with this project installed (usable in every universe)."""
        return str(self.facts["job_python"])

    @property
    def cpus(self) -> int:
        return int(self.facts["cpus"])

    @property
    def slots(self) -> int:
        """One-CPU jobs the whole pool runs at once: every node has ``cpus`` of them."""
        return self.cpus * int(self.facts.get("nodes") or 1)

    def env(self) -> dict[str, str]:
        """The environment for host processes that talk to the pool."""
        return {**os.environ, "CONDOR_CONFIG": self.facts["condor_config"], "PYTHONUNBUFFERED": "1"}

    def new_workdir(self, name: str) -> Path:
        """An empty folder in the share, writable by the pool's user."""
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:60]
        workdir = self.share / "tests" / f"{os.getpid()}-{next(_numbers)}-{slug}"
        workdir.mkdir(parents=True)
        self.give(workdir.parent)
        self.give(workdir)
        return workdir

    def give(self, path: Path) -> None:
        """Hand ``path`` (and everything below it) to the pool's user."""
        for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
            os.chown(item, self.facts["uid"], self.facts["gid"])

    def inside(self, cwd: Path, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``command`` inside the pool's root, as the pool's user, in ``cwd``."""
        argv = [sys.executable, str(POOL_TOOL), "exec", "--base", self.facts["base"], "--cwd", str(cwd), "--", *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def condor_submit(self, cwd: Path, submit_file: str, *macros: str) -> int:
        """``condor_submit SUBMIT_FILE -a MACRO ...`` in ``cwd``; the new cluster's id."""
        command = ["condor_submit", submit_file]
        for macro in macros:
            command += ["-a", macro]
        done = self.inside(cwd, *command)
        found = re.search(r"submitted to cluster (\d+)\.", done.stdout)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
        assert found is not None, done.stdout
        return int(found[1])

    def restart(self) -> None:
        """Stop every daemon and job and start the pool again, queue kept: a submit-host reboot."""
        done = subprocess.run(
            [sys.executable, str(POOL_TOOL), "restart", "--base", self.facts["base"]],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"pool restart failed: {done.stderr}"


def _session_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_sessions(pool: Pool, keep_seconds: float = 86400) -> None:
    """Remove the jobs left by test sessions that are gone (killed mid-test, say), and their old folders.

    Work folders are ``share/tests/PID-N-NAME``: a folder whose PID no longer
    runs belongs to a dead session. Its jobs are removed at once; the folder
    itself (kept for a post-mortem) once it is older than ``keep_seconds``.
    """
    tests = pool.share / "tests"
    if not tests.is_dir():
        return
    for folder in tests.iterdir():
        pid = folder.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _session_alive(int(pid)):
            continue
        remove_computation_jobs(folder)
        if time.time() - folder.stat().st_mtime > keep_seconds:
            shutil.rmtree(folder, ignore_errors=True)


def setup_workdir(pool: Pool, workdir: Path, programs: Sequence[str] = ()) -> None:
    """Lay out ``workdir`` like the repository root: ``submit/``, ``examples/``, plus copies of ``programs``.

    ``programs`` are file names in tests/programs/, copied to the top of ``workdir``.
    """
    # As docs/condor.md tells a user to copy it (`cp -r submit examples $demo`): cp -r keeps symbolic links.
    subprocess.run(["cp", "-r", str(SUBMIT), str(workdir / "submit")], check=True)
    shutil.copytree(ROOT / "examples", workdir / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    for name in programs:
        shutil.copy(PROGRAMS / name, workdir / name)
    pool.give(workdir)


def member_id(workdir: Path) -> str:
    """The member id master.sub, slaves.sub and overseer.sub derive for a computation in ``workdir``."""
    return f"mwpy:{workdir / RESOURCE}"


# ---------------------------------------------------------------------- the schedd


def retried(call: Callable[[], T]) -> T:
    """Call the bindings; after a pool restart, try again while the stale sessions are dropped.

    Each daemon (the collector that locates the schedd, then the schedd) refuses
    the first call of a long-lived client after a restart, so one call that
    reaches both may fail twice before it works.
    """
    import htcondor2  # noqa: PLC0415 (conftest configures it before the first Condor test)

    for _ in range(2):
        try:
            return call()
        except htcondor2.HTCondorException:
            pass
    return call()


def query(constraint: str, projection: Sequence[str] = ("ClusterId", "ProcId", "JobStatus")) -> list[Any]:
    """Job ads in the queue."""
    import htcondor2  # noqa: PLC0415

    return retried(lambda: list(htcondor2.Schedd().query(constraint, projection=list(projection))))


def history(constraint: str, projection: Sequence[str]) -> list[Any]:
    """Ads of jobs that have left the queue."""
    import htcondor2  # noqa: PLC0415

    return retried(lambda: list(htcondor2.Schedd().history(constraint, projection=list(projection))))


def computation(workdir: Path, role: str | None = None) -> str:
    """The constraint for the jobs of ``workdir``'s computation (of one role, if given)."""
    import classad2  # noqa: PLC0415

    constraint = f"MwpyMemberId == {classad2.quote(member_id(workdir))}"
    return constraint if role is None else f'{constraint} && MwpyRole == "{role}"'


def job_states(workdir: Path, role: str = "slave") -> dict[str, int]:
    """``{"ClusterId.ProcId": JobStatus}`` of the computation's jobs of ``role`` in the queue."""
    return {f"{ad['ClusterId']}.{ad['ProcId']}": int(ad["JobStatus"]) for ad in query(computation(workdir, role))}


def finished_jobs(workdir: Path, role: str = "slave", *, expected: int | None = None) -> dict[str, Any]:
    """``{"ClusterId.ProcId": ad}`` from the history (waits until ``expected`` jobs are there, if given)."""
    projection = ["ClusterId", "ProcId", "JobStatus", "ExitCode", "ExitBySignal", "LastRemoteHost"]

    def found() -> dict[str, Any]:
        ads = {f"{ad['ClusterId']}.{ad['ProcId']}": ad for ad in history(computation(workdir, role), projection)}
        return ads if expected is None or len(ads) >= expected else {}

    if expected is None:
        return found()
    return wait_until(found, 30, f"{expected} {role} jobs in the history", interval=0.5)


def remove_computation_jobs(workdir: Path) -> None:
    """Remove every job of ``workdir`` still queued (test clean-up): submitted from it or below it, or of a
    computation whose resource file is in it or below it (``mwpy jobs --pool``'s ``FILE.mwpy/``, say)."""
    import htcondor2  # noqa: PLC0415

    ads = query(f"JobStatus != {REMOVED}", ("ClusterId", "ProcId", "Iwd", "MwpyMemberId"))
    ours = [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads if _belongs_to(workdir, ad)]
    if ours:
        retried(lambda: htcondor2.Schedd().act(htcondor2.JobAction.Remove, ours, reason="mwpy test clean-up"))


def _belongs_to(workdir: Path, ad: Any) -> bool:
    """Whether a job ad is one of ``workdir``'s: its initialdir or its computation's resource file is in it."""
    member = str(ad.get("MwpyMemberId") or "")
    return Path(str(ad.get("Iwd") or "/")).is_relative_to(workdir) or (
        member.startswith("mwpy:") and Path(member.removeprefix("mwpy:")).is_relative_to(workdir)
    )


def job_events(workdir: Path, log: str = SLAVES_LOG) -> list[Any]:
    """The events (``htcondor2.JobEvent``) Condor has written so far to the user log ``workdir/log``, in order.

    The user log is what to assert on about a job's life: the shadow writes an
    event as each thing happens (execute, evicted, terminated, ...), whereas job
    ad counters such as NumJobStarts are not always updated (a pool restart
    whose reconnect fails leaves NumJobStarts where it was).
    """
    import htcondor2  # noqa: PLC0415

    path = workdir / log
    if not path.exists():
        return []
    log_reader = htcondor2.JobEventLog(str(path))
    try:
        return list(log_reader.events(stop_after=0))  # what is there now; never waits for more
    finally:
        log_reader.close()


def event_job(event: Any) -> str:
    """The ``"ClusterId.ProcId"`` of the job a user-log event is about."""
    return f"{event.cluster}.{event.proc}"


def starts(events: Sequence[Any]) -> collections.Counter[str]:
    """How many times each job began to run, per ``"ClusterId.ProcId"``: its execute events in ``events``."""
    import htcondor2  # noqa: PLC0415

    return collections.Counter(event_job(e) for e in events if e.type == htcondor2.JobEventType.EXECUTE)


def _outcome(event: Any) -> str:
    """How a run ended, as an evicted or terminated event records it: ``exit N`` or ``signal N``."""
    if event.get("TerminatedNormally"):
        return f"exit {event.get('ReturnValue')}"
    return f"signal {event.get('TerminatedBySignal')}"


def job_life(events: Sequence[Any], job: str) -> list[str]:
    """What happened to ``job`` ("ClusterId.ProcId"), in order, in words a test can compare.

    ``started`` (execute), ``requeued exit N`` (ended, kept by on_exit_remove),
    ``evicted`` (vacated), ``ended exit N`` (left the queue), ``held``,
    ``released``, ``removed``, ``reconnect failed``. File transfers, image
    sizes and the like are left out.
    """
    import htcondor2  # noqa: PLC0415

    kind = htcondor2.JobEventType
    words: dict[Any, Callable[[Any], str]] = {
        kind.EXECUTE: lambda e: "started",
        kind.JOB_EVICTED: lambda e: f"requeued {_outcome(e)}" if e.get("TerminatedAndRequeued") else "evicted",
        kind.JOB_TERMINATED: lambda e: f"ended {_outcome(e)}",
        kind.JOB_HELD: lambda e: "held",
        kind.JOB_RELEASED: lambda e: "released",
        kind.JOB_ABORTED: lambda e: "removed",
        kind.JOB_RECONNECT_FAILED: lambda e: "reconnect failed",
    }
    return [words[e.type](e) for e in events if event_job(e) == job and e.type in words]


def in_order(life: Sequence[str], steps: Sequence[str]) -> bool:
    """Whether ``steps`` happen in ``life`` in this order (other entries may come between them)."""
    rest = iter(life)
    return all(step in rest for step in steps)


def wait_events(workdir: Path, check: Callable[[list[Any]], bool], what: str, timeout: float = 90) -> list[Any]:
    """Wait until the slaves' user log satisfies ``check``; the events read then. Fails with the jobs' logs."""

    def satisfied() -> list[Any]:
        events = job_events(workdir)
        return events if events and check(events) else []

    try:
        return wait_until(satisfied, timeout, what, interval=0.5)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out} in {SLAVES_LOG}\n{logs(workdir)}") from None


def wait_gone(workdir: Path, role: str, timeout: float) -> None:
    """Wait until no job of ``role`` of the computation is left in the queue."""
    wait_until(lambda: not job_states(workdir, role), timeout, f"the {role} jobs to leave the queue", interval=0.5)


# ---------------------------------------------------------------------- the computation


def read_resource(workdir: Path) -> ResourceFile | None:
    try:
        return resource_file.read(workdir / RESOURCE)
    except ResourceFileError:
        return None


def assert_the_master_s_resource_file(workdir: Path) -> None:
    """After the slave jobs left: the resource file is still the one the master wrote last (mode 0600, and
    finished), not a slave's copy that Condor sent back at the job's exit over it (made with the job's umask)."""
    path = workdir / RESOURCE
    assert path.stat().st_mode & 0o777 == 0o600, f"{path} was replaced by another writer than the master"
    record = read_resource(workdir)
    assert record is not None
    assert record.finished, record


def wait_resource(workdir: Path, check: Callable[[ResourceFile], bool], what: str, timeout: float = 60) -> ResourceFile:
    """Wait until the resource file exists and satisfies ``check``; fail with the master's logs."""
    deadline = time.monotonic() + timeout
    while True:
        record = read_resource(workdir)
        if record is not None and check(record):
            return record
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs(workdir)}")
        time.sleep(0.2)


def master_output(workdir: Path, cluster: int) -> str:
    return (workdir / f"master.{cluster}.0.out").read_text(encoding="utf-8", errors="replace")


def status_json(workdir: Path, env: dict[str, str], *options: str) -> dict[str, Any]:
    """What ``mwpy status RESOURCE --json --condor OPTIONS`` prints for the computation in ``workdir``."""
    status = subprocess.run(
        [sys.executable, "-m", "mwpy", "status", str(workdir / RESOURCE), "--json", "--condor", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    report: dict[str, Any] = json.loads(status.stdout)
    return report


def logs(workdir: Path, limit: int = 3000) -> str:
    """The tails of the masters', overseers' and slaves' output files, for failure messages."""
    parts = []
    for path in sorted(workdir.glob("*.out")) + sorted(workdir.glob("*.err")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            parts.append(f"--- {path.name}\n{text[-limit:]}")
    record = read_resource(workdir)
    parts.append(f"--- {RESOURCE}: {record}")
    return "\n".join(parts)


def submit_master(pool: Pool, workdir: Path, *macros: str) -> int:
    """``condor_submit submit/master.sub`` with the pool's python; waits for the master's resource file."""
    cluster = pool.condor_submit(workdir, "submit/master.sub", f"python={pool.job_python}", *macros)
    wait_resource(workdir, lambda record: not record.finished, "the master's resource file")
    return cluster


def wait_master_done(workdir: Path, cluster: int, timeout: float = DEADLINE) -> str:
    """Wait for the master job to leave the queue; its output."""
    wait_until(
        lambda: not job_states(workdir, "master"), timeout, f"master job {cluster} to leave the queue", interval=0.5
    )
    return master_output(workdir, cluster)


def check_slaves_left_cleanly(workdir: Path, count: int) -> dict[str, Any]:
    """Every slave job left the queue by itself: completed, exit status 0. Returns their history ads."""
    wait_gone(workdir, "slave", 60)
    ads = finished_jobs(workdir, expected=count)
    assert len(ads) == count, ads
    for job, ad in ads.items():
        assert (ad["JobStatus"], ad["ExitCode"]) == (COMPLETED, 0), f"slave job {job}: {ad}\n{logs(workdir)}"
    return ads


def restart_master_midway(
    pool: Pool,
    workdir: Path,
    kill: Callable[[int], None],
    *,
    master_options: str = "",
    slave_macros: Sequence[str] = (),
) -> dict[str, Any]:
    """master.sub with a journal and two slaves.sub slaves running tests/programs/restartable.py's keyed tasks;
    ``kill(master_pid)`` while both run a task, Condor starts the master again. Checks that every task ran
    once, no slave job ran twice and the master job ended once; returns the slave jobs' history ads.

    ``master_options`` and ``slave_macros`` place the computation (say, the master on the submit node's
    address and the slaves on another node)."""
    runs = workdir / "runs"
    runs.mkdir()
    setup_workdir(pool, workdir, ["restartable.py"])
    count = 8
    master = submit_master(
        pool, workdir, "program=restartable.py", f"program_args={count} {runs}",
        f"master_options=--mw-journal master.journal --mw-slave-window 1 {master_options}",
    )  # fmt: skip
    slaves = pool.condor_submit(workdir, "submit/slaves.sub", "program=restartable.py", "slaves=2", *slave_macros)
    wait_until(lambda: sum(marks(runs, "started").values()) >= 2, DEADLINE, "both slaves running a task")
    before = read_resource(workdir)
    assert before is not None
    kill(before.master_pid)
    after = wait_resource(workdir, lambda r: r.master_pid != before.master_pid, "the master started again", 120)
    assert after.awaited_handovers == 2  # the two running tasks wait for their slaves, not dispatched again
    (runs / "open").touch()

    out = wait_master_done(workdir, master)
    assert f'{{"sum": {sum(i * i + 1 for i in range(count))}}}' in out, logs(workdir)
    assert marks(runs, "run") == dict.fromkeys(range(count), 1), "a task ran twice, or never"
    assert marks(runs, "started") == dict.fromkeys(range(count), 1), "a task started again"
    ads = check_slaves_left_cleanly(workdir, 2)
    assert_the_master_s_resource_file(workdir)  # the slaves fetched the restarted master's file: not sent back
    assert starts(job_events(workdir)) == {f"{slaves}.0": 1, f"{slaves}.1": 1}, logs(workdir)
    life = job_events(workdir, f"master.{master}.0.log")
    assert [e.type.name for e in life if e.type.name in ("EXECUTE", "JOB_TERMINATED")] == [
        "EXECUTE", "EXECUTE", "JOB_TERMINATED"
    ], life  # fmt: skip
    return ads

"""Slaves as local processes, with the same contract Condor gives them.

Each job gets a sandbox folder holding links to the files the resource file
names and a fresh copy of the resource file itself, copied anew at every
start, exactly like ``transfer_input_files``. A slave that exits non-zero (or
by a signal) stays queued and is started again after a short delay, like
``on_exit_remove = (ExitBySignal == False) && (ExitCode == 0)``; one that
exits 0 leaves the queue. A slave that keeps dying at once (a task that kills
it, a set-up that fails) waits twice as long each time, up to
``MAX_RESTART_DELAY``, so no fork loop forms. A slave its master dropped as
silent (frozen in C code, say, where it neither answers nor exits) is killed
with SIGKILL, so it exits non-zero and starts again like any other
(mwpy/slave_exits.py). So a program that works with ``mwpy local`` has
already shown that its slaves find everything they need.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from mwpy import slave_exits, slave_start
from mwpy.backends import Job, JobState, Launch, exited
from mwpy.errors import BackendError
from mwpy.names import SLAVE_STDERR
from mwpy.resources import Resources, slave_shape

#: Seconds before a slave that exited non-zero is started again.
RESTART_DELAY = 0.5
#: A run shorter than this that fails counts as dying at once: the next restart waits twice as long.
QUICK_RUN = 10.0
#: The longest wait before a slave that keeps dying at once is started again.
MAX_RESTART_DELAY = 30.0
#: Seconds a removed slave gets to exit after SIGTERM before SIGKILL.
STOP_GRACE = 3.0


@attrs.define(eq=False)
class _LocalJob:
    job_id: str
    launch: Launch
    sandbox: Path
    process: slave_start.SlaveProcess | None = None
    #: Monotonic: when the job starts next (while idle), or when its run started (while running).
    start_at: float = 0.0
    #: The exit status of the last run, None before the first one ended.
    last_status: int | None = None
    #: Runs that exited non-zero or by a signal.
    failed_runs: int = 0
    #: Failed runs in a row that each lasted less than QUICK_RUN: the restart delay doubles with each.
    quick_failures: int = 0
    #: When (Unix time) the job last became idle or running, like Condor's EnteredCurrentStatus.
    since: float = attrs.Factory(time.time)
    #: What its slave offers (``--mw-slave-resources``); None: the machine's cpus and memory.
    shape: Resources | None = None

    def view(self) -> Job:
        """The job as the overseer and ``mwpy local`` see it."""
        state = JobState.RUNNING if self.process is not None else JobState.IDLE
        status = self.last_status
        if not status:  # not exited yet, or exited 0 (and about to leave the queue)
            return Job(self.job_id, state, exit_code=status, since=self.since, failed_runs=self.failed_runs)
        how = f"killed by signal {-status}" if status < 0 else exited(status)
        last = last_line(self.sandbox / SLAVE_STDERR)
        reason = f"{how}: {last}" if last else how
        exit_code = status if status > 0 else None
        return Job(
            self.job_id, state, exit_code=exit_code, reason=reason, since=self.since, failed_runs=self.failed_runs
        )


class LocalBackend:
    """Runs slave jobs as child processes of this process, each in its own sandbox folder."""

    name = "local"

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        restart_delay: float = RESTART_DELAY,
        shapes: Sequence[Resources] = (),
    ) -> None:
        self._workdir = Path(workdir)
        self._restart_delay = restart_delay
        #: The slave shapes to start (each new job takes the one fewest jobs have); none: every slave the machine's.
        self._shapes = tuple(shapes)
        self._jobs: dict[str, _LocalJob] = {}
        self._numbers = itertools.count()
        self._drops = slave_exits.Drops()
        # The overseer's thread and ``mwpy local``'s main thread both look at the jobs; one of them
        # must not start a slave the other is starting.
        self._lock = threading.RLock()

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """``mwpy overseer --backend local`` options."""
        parser.add_argument("--workdir", default=".", help="local back end: folder for slave sandboxes (default .)")
        parser.add_argument(
            "--slave-resources",
            action="append",
            type=slave_shape,
            default=[],
            metavar="SHAPE",
            help="local back end: a slave shape such as cpus=2,memory=16GB (repeatable: slaves are dealt among "
            "the shapes); default: every slave offers this machine's cpus and memory",
        )

    @classmethod
    def create(cls, resource_file: str, options: argparse.Namespace) -> LocalBackend:
        """The back end ``mwpy overseer --backend local`` uses."""
        return cls(options.workdir, shapes=options.slave_resources)

    def sandbox(self, job_id: str) -> Path:
        """The folder a job runs in (its slave.out and slave.err are there)."""
        return self._workdir / job_id

    def jobs(self) -> list[Job]:
        with self._lock:
            self.poll()
            return [job.view() for job in self._jobs.values()]

    def submit(self, launch: Launch, count: int) -> None:
        with self._lock:
            now = time.monotonic()
            for _ in range(count):
                job_id = slave_start.job_id(next(self._numbers))
                sandbox = self.sandbox(job_id)
                sandbox.mkdir(parents=True, exist_ok=True)
                self._jobs[job_id] = _LocalJob(job_id, launch, sandbox, start_at=now, shape=self._next_shape())
            self.poll()

    def adopt(self, launch: Launch, processes: Sequence[slave_start.SlaveProcess]) -> None:
        """Take slaves started already as this back end's first jobs, running ``launch`` (as it restarts them).

        ``processes[i]`` runs in the sandbox of :func:`mwpy.slave_start.job_id` ``(i)``: an Executor starts its
        first slaves before this back end exists (mwpy/executor.py). Only a back end with no jobs yet adopts.
        """
        with self._lock:
            if self._jobs:
                raise BackendError("the local back end adopts slaves only before its first job")
            now = time.monotonic()
            for process in processes:
                job_id = slave_start.job_id(next(self._numbers))
                self._jobs[job_id] = _LocalJob(job_id, launch, self.sandbox(job_id), process, start_at=now)

    def _next_shape(self) -> Resources | None:
        """The shape the fewest jobs have (the first such): the configured mix holds as slaves come and go."""
        if not self._shapes:
            return None
        held = collections.Counter(job.shape for job in self._jobs.values())
        return min(self._shapes, key=lambda shape: held[shape])

    def remove(self, job_ids: Sequence[str]) -> None:
        with self._lock:
            doomed = [self._jobs.pop(job_id) for job_id in job_ids if job_id in self._jobs]
        running = [job.process for job in doomed if job.process is not None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def poll(self) -> None:
        """Kill slaves their master dropped as silent, collect exited ones (exit 0 leaves the queue) and start
        those whose turn has come."""
        with self._lock:
            self._kill_dropped()
            now = time.monotonic()
            for job in list(self._jobs.values()):
                if job.process is not None and not self._reap(job, now):
                    continue
                if job.job_id in self._jobs and now >= job.start_at:
                    self._start(job)

    def close(self) -> None:
        self.remove(list(self._jobs))

    def _kill_dropped(self) -> None:
        """SIGKILL each running slave its master dropped as silent: stuck (it neither answers nor exits), it
        would hold its place for ever and no replacement would start. Reaped as any slave that died."""
        resource_files = {job.launch.resource_file for job in self._jobs.values() if job.process is not None}
        dropped = {
            pid for resource_file in resource_files for pid in self._drops.new(Path(resource_file).resolve().parent)
        }
        if not dropped:  # the pids are asked for only then: a forked slave's may not be known yet (slave_start.py)
            return
        running = {job.process.pid: job.process for job in self._jobs.values() if job.process is not None}
        for pid in dropped:
            if pid in running and running[pid].poll() is None:
                running[pid].kill()

    def _reap(self, job: _LocalJob, now: float) -> bool:
        """Whether the job's slave has exited; one that exited 0 leaves the queue, others start again later."""
        assert job.process is not None
        status = job.process.poll()
        if status is None:
            return False
        # The master names how it ended if it died running a task: 0 too (a task's os._exit(0) leaves no result).
        slave_exits.record(Path(job.launch.resource_file).resolve().parent, job.process.pid, status)
        job.process = None
        job.last_status = status
        job.since = time.time()
        if status == 0:
            del self._jobs[job.job_id]
        else:
            job.failed_runs += 1
            job.quick_failures = job.quick_failures + 1 if now - job.start_at < QUICK_RUN else 0
            job.start_at = now + self.restart_delay(job.quick_failures)
        return True

    def restart_delay(self, quick_failures: int) -> float:
        """Seconds before a failed slave starts again: doubled for each failed run in a row that died at once."""
        doublings = min(max(quick_failures - 1, 0), 16)
        return min(MAX_RESTART_DELAY, self._restart_delay * float(1 << doublings))

    def _start(self, job: _LocalJob) -> None:
        """Stage the sandbox as Condor would and start the slave in it (mwpy/slave_start.py)."""
        launch = job.launch
        for file in launch.files:
            link = job.sandbox / Path(file).name
            if not link.exists():
                link.symlink_to(Path(file).resolve())
        _copy_private(Path(launch.resource_file), job.sandbox / Path(launch.resource_file).name)
        job.since = time.time()
        job.start_at = time.monotonic()  # when this run started: a failure soon after it backs off
        shape = [] if job.shape is None else ["--mw-slave-resources", str(job.shape)]
        job.process = slave_start.start_process([launch.executable, *launch.arguments, *shape], job.sandbox)


def last_line(path: Path) -> str:
    """The last non-empty line of a text file ("" when there is none): a failed slave's last words."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _copy_private(source: Path, target: Path) -> None:
    """Copy a file readable by its owner only: the resource file carries the computation's secret."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing copy keeps its mode under O_CREAT
    with os.fdopen(fd, "wb") as out:
        out.write(source.read_bytes())

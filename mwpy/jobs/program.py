"""The mwpy program behind ``mwpy jobs``: a master that turns submit-file jobs into tasks, and their task.

Run by path, like any mwpy program (``python .../mwpy/jobs/program.py
SUBMITFILE --summary S --mw-master ...``): ``mwpy jobs`` hands it to
:func:`mwpy.pool.local.run_local`, ``mwpy jobs --pool`` to Condor's scheduler
universe (:mod:`mwpy.jobs.pool`), and the slaves load it the same way. The
master makes jobs lazily from the item data and keeps at most
``--max-pending`` of them submitted (or fewer: ``max_materialize``,
``max_idle``), so 100,000 queued jobs cost the memory of a few thousand.

Each run of a job is a task keyed by the job's id, its run number and its
content (``--mw-journal`` then lets a restarted master answer finished runs
from the journal instead of running them again; it says so). A file with a
policy command keeps each job's ClassAd (:mod:`mwpy.jobs.policy`): a job that
exits may be held, run again or removed, a held one released, as Condor
would; the user log (``log = FILE``, :mod:`mwpy.jobs.userlog`) gets Condor's
events. A job's summary line is written when it is done for good.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    # Run by path: this file's folder (mwpy/jobs) must not shadow anything, and mwpy must import.
    sys.path[0] = os.path.dirname(os.path.dirname(sys.path[0]))

import argparse
import collections
import errno
import functools
import hashlib
import secrets
import signal
import socket
import stat
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs

from mwpy import program
from mwpy.data.server import FileServer
from mwpy.data.service import HASH_MEMORY
from mwpy.errors import MwpyError, SubmitError
from mwpy.jobs import bindings, outputs, runner
from mwpy.jobs.arguments import parse_arguments
from mwpy.jobs.description import JobSpec, SubmitDescription
from mwpy.jobs.jobad import Placement
from mwpy.jobs.outputs import Destination, JobOutputs, output_upload_name
from mwpy.jobs.policy import FAILED_TO_CREATE_PROCESS, HELD, RUNNING, Decision, Exit, JobLife, Verdict
from mwpy.jobs.summary import Summary, outcome_record, status_path
from mwpy.jobs.userlog import UserLog
from mwpy.master import Master
from mwpy.program import Membership, master, run
from mwpy.task import task
from mwpy.task_records import Result
from mwpy.wire import protocol

#: Exit status for a submit file mwpy cannot run (as for every other usage error).
USAGE = 2
#: Jobs submitted ahead of the results by default: enough for every slave's window, small in memory.
MAX_PENDING = 2000
#: Seconds between evaluations of the periodic expressions (HTCondor's PERIODIC_EXPR_INTERVAL default).
PERIODIC_INTERVAL = 60.0


def membership() -> Membership:
    """The computation's secret, this process's member id and resource file, as mwpy.run() found them."""
    me = program.membership()
    if me is None:
        raise SubmitError("mwpy jobs runs as an mwpy program: mwpy.run() has not started a master or slave here")
    return me


@task(name="mwpy.jobs.run_job")
def run_job(task: runner.JobTask) -> runner.JobOutcome:
    """Run one job on this slave (see :mod:`mwpy.jobs.runner`)."""
    membership()  # refuses outside an mwpy program
    return runner.run(task, program.slave_cache())


# ---------------------------------------------------------------------- the master


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mwpy jobs (master)")
    parser.add_argument("submit_file")
    parser.add_argument("--summary", required=True, help="JSON lines, one per job, and a last line for the run")
    parser.add_argument("--cluster", type=int, default=1)
    parser.add_argument("--base", default=os.getcwd(), help="the folder relative paths start from")
    parser.add_argument("--max-pending", type=int, default=MAX_PENDING)
    parser.add_argument("--max-output-bytes", type=int, default=outputs.MAX_OUTPUT_BYTES)
    parser.add_argument("--max-output-files", type=int, default=outputs.MAX_OUTPUT_FILES)
    parser.add_argument("--periodic-interval", type=float, default=PERIODIC_INTERVAL)
    parser.add_argument(
        "--placement-shapes",
        action="store_true",
        help="each job needs a slave of its placement's shape (on a pool: the overseer makes one per placement)",
    )
    return parser.parse_args(argv)


def job_key(spec: JobSpec, run_number: int = 1) -> str:
    """The journal key: the job's id, which run of it, and all that defines it (a changed job is not answered)."""
    return f"mwpy-jobs:{spec.job_id}:{run_number}:{hashlib.sha256(repr(spec).encode()).hexdigest()[:24]}"


#: Real paths of the submit side's files, remembered (a shared input is looked up once, not once per job).
_real_path = functools.lru_cache(maxsize=HASH_MEMORY)(os.path.realpath)


class _Files:
    """The submit side's files of one job: published by hash, and the real paths outputs may not overwrite."""

    def __init__(self, server: FileServer) -> None:
        self.server = server
        self.inputs: list[tuple[str, str, int]] = []
        self.protected: set[str] = set()

    def add(self, source: str, name: str, mode: int | None = None, *, common: bool = False) -> None:
        """Publish ``source`` as ``name`` in the scratch folder, with its mode (read-only when ``common``).

        A file that cannot be read (gone, unreadable, no regular file) raises :class:`InputError`: the job's
        input transfer fails, as Condor's shadow finds it when it sends the job's files."""
        try:
            info = os.stat(source)
            if stat.S_ISDIR(info.st_mode):
                for folder, dirs, files in os.walk(source):
                    dirs.sort()
                    for file in sorted(files):
                        path = os.path.join(folder, file)
                        if os.path.isfile(path):
                            relative = os.path.relpath(path, source)
                            self.add(path, f"{name}/{relative}" if name else relative, common=common)
                return
            if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would never end being read
                raise OSError(errno.EINVAL, "not a regular file")
            digest, _ = self.server.publish(source)
        except OSError as exc:
            raise InputError(source, exc) from None
        bits = info.st_mode & 0o7777 if mode is None else mode
        self.inputs.append((name, digest, bits & ~0o222 if common else bits))
        self.protected.add(_real_path(source))


class InputError(MwpyError):
    """A job's input cannot be sent: Condor holds the job (its input transfer failed), and the others run."""

    def __init__(self, path: str, error: OSError) -> None:
        self.path, self.errno, self.strerror = path, error.errno or 0, error.strerror or str(error)
        super().__init__(f"reading from file {path}: (errno {self.errno}) {self.strerror}")

    def hold(self, service: tuple[str, int]) -> Decision:
        """The hold Condor's shadow gives such a job (CONDOR_HOLD_CODE::TransferInputError, the errno), in its
        words; ``service`` is where the files come from (Condor's shadow), the slave not chosen yet."""
        host, (address, port) = socket.gethostname(), service
        reason = (
            f"Transfer input files failure at access point {host} while sending files to execution point {host}. "
            f"Details: Error from {host}: Failed to transfer files: SHADOW at {address} failed to send file(s) to "
            f"<{address}:0>: |Error: {self}; STARTER failed to receive file(s) from <{address}:{port}>"
        )
        return Decision(Verdict.HOLD, reason, 13, self.errno)


def prepare(spec: JobSpec, server: FileServer, args: argparse.Namespace) -> runner.JobTask:
    """The task for ``spec``: inputs published by hash, and the file service told where outputs may land."""
    files = _Files(server)
    executable = spec.executable
    if spec.transfer and spec.transfer_executable:
        executable = os.path.basename(spec.executable)
        files.add(spec.executable, executable, runner.EXECUTABLE_MODE)
    stdin = spec.stdin
    if spec.stdin is not None and spec.transfer and spec.transfer_streams[0]:
        files.add(spec.stdin, "_condor_stdin")
        stdin = "_condor_stdin"
    for item in spec.inputs:
        files.add(item.source, item.name, common=item.common)
    if spec.transfer_executable:
        files.protected.add(_real_path(spec.executable))
    token = secrets.token_hex(16)
    renamed = list(spec.output_remaps)
    if spec.stdout is not None and spec.transfer_streams[1]:
        renamed.append((runner.STDOUT_UPLOAD, spec.stdout))
    merged = _merged_streams(spec)
    if spec.stderr is not None and spec.transfer_streams[2] and not merged:
        renamed.append((runner.STDERR_UPLOAD, spec.stderr))
    JobOutputs.of(server).expect(
        token,
        Destination(
            spec.initialdir,
            frozenset(files.protected),
            tuple(renamed),
            max_bytes=args.max_output_bytes,
            max_files=args.max_output_files,
            outputs=None if spec.transfer_outputs is None else tuple(map(output_upload_name, spec.transfer_outputs)),
        ),
    )
    server.expect(token, tuple(digest for _, digest, _ in files.inputs))
    return runner.JobTask(
        job_id=spec.job_id,
        token=token,
        service=(server.host, server.port),
        executable=executable,
        arguments=spec.arguments,
        environment=spec.environment,
        inputs=tuple(files.inputs),
        stdin=stdin,
        stdout=_stream(spec, spec.stdout, 1),
        stderr=None if merged else _stream(spec, spec.stderr, 2),
        transfer_outputs=spec.transfer_outputs,
        transfer=spec.transfer,
        outputs_on_success_only=spec.outputs_on_success_only,
        success_code=spec.success_code,
        initialdir=spec.initialdir,
        kill_signal=_signal(spec.ad.kill_sig),
        stop_signals=(
            _signal(spec.ad.hold_kill_sig or spec.ad.kill_sig),
            _signal(spec.ad.remove_kill_sig or spec.ad.kill_sig),
        ),
        kill_timeout=float(spec.ad.kill_timeout) if spec.ad.kill_timeout is not None else 10.0,
        core_size=spec.core_size,
        check_interval=args.periodic_interval if _checked_while_running(spec) else None,
        cpus=int(spec.ad.placement.cpus) if spec.ad.placement.cpus.isdigit() else 1,
        shared=submit_side() if spec.if_needed else None,
        in_place=(spec.executable, spec.stdin, spec.stdout, spec.stderr) if spec.if_needed else None,
        merged_streams=merged,
    )


@functools.cache
def submit_side() -> tuple[str, str]:
    """This host's FileSystemDomain (HTCondor's FILESYSTEM_DOMAIN, by default its full name) and its name: a slave
    that shares them sees initialdir as it is here."""
    domain = bindings.htcondor().param.get("FILESYSTEM_DOMAIN") or socket.getfqdn()
    return str(domain), socket.gethostname()


def _merged_streams(spec: JobSpec) -> bool:
    """``output`` and ``error`` name the same file: Condor's starter gives the job one stream for both (the
    condor_submit man page), so that neither overwrites the other."""
    return (
        spec.stdout is not None and spec.stdout == spec.stderr and spec.transfer_streams[1] == spec.transfer_streams[2]
    )


def _stream(spec: JobSpec, path: str | None, index: int) -> bool | str | None:
    """What the slave does with stdout/stderr: capture and send back (True), write to a path, or discard (None)."""
    if path is None:
        return None
    if spec.transfer and spec.transfer_streams[index]:
        return True
    return path


def _signal(name: str) -> int:
    """``kill_sig``: a number or a name (``SIGTERM``, ``TERM``), as condor_submit accepts it."""
    name = name.strip().upper()
    if not name:
        return int(signal.SIGTERM)
    if name.isdigit():
        return int(name)
    found = getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if not isinstance(found, signal.Signals):
        raise SubmitError(f"kill_sig = {name}: not a signal")
    return int(found)


def _checked_while_running(spec: JobSpec) -> bool:
    """Whether the slave must report a running job's usage: its policy has something to evaluate meanwhile."""
    ad = spec.ad
    return any(ad.get(name, "false") != "false" for name in ("PeriodicHold", "PeriodicRemove")) or bool(
        ad.get("AllowedJobDuration") or ad.get("AllowedExecuteDuration")
    )


@attrs.frozen
class JobTag:
    """What each job's task carries on the master (its policy's tag): which job and run, and the job's placement.

    The placement is what a job asks of the machine that runs it (requirements, request_*, ...); on a pool
    (``--placement-shapes``) the task also needs it of its slave (``resources=``), so it runs only on a
    slave job of its placement's shape.
    """

    job_id: str
    token: str  # the run's name to the file service
    placement: Placement


@attrs.define
class _Job:
    """A job between its creation and its last summary line: its spec, its ClassAd (policy files) and its runs."""

    spec: JobSpec
    life: JobLife | None
    runs: int = 0
    journaled: bool = False  # its last run was answered from the journal
    started_logged: bool = False  # this run's executing event is in the user log
    stopped: Decision | None = None  # what the policy decided while this run ran (and the log already has)


@master
def main(mw: Master, argv: list[str]) -> int:
    """Run every job of the submit file; exit 0 when all succeeded, 1 when any did not, 2 for a bad file."""
    args = _arguments(argv)
    try:
        description = SubmitDescription(args.submit_file, cluster=args.cluster, base=args.base)
        description.check_inputs()
        me = membership()
    except MwpyError as exc:
        print(f"mwpy jobs: error: {exc}", file=sys.stderr)
        return USAGE
    mw.goodput_summary = False  # the run ends with its own line
    server = _file_service(mw, me)
    status = None if me.resource_file is None else status_path(me.resource_file)
    server.protect(args.submit_file, args.summary, *me.own_files, *([status] if status else []))
    first = next(description.jobs())
    batch = (first.ad.get("JobBatchName") or first.ad.get("JobDescription")).strip('"')  # as condor_q names a batch
    summary = Summary(args.summary, description.total, status, batch)
    started = time.time()
    try:
        _Run(mw, description, server, summary, args).run()
    finally:
        server.close()
        summary.close(started, server.counters.as_dict())
    return 1 if summary.failures else 0


def _file_service(mw: Master, me: Membership) -> FileServer:
    """The file service, listening where the master listens, as safe as it is: TLS when it has TLS, its timeout."""
    tls = None if me.tls_cert is None else protocol.tls_server_context(me.tls_cert, me.tls_key)[0]
    return FileServer(  # in the master's port range too, if it has one
        me.secret, me.member_id, host=mw.host, bind=mw.bind, ports=mw.port_range, tls=tls,
        client_timeout=me.client_timeout,
    )  # fmt: skip


class _Run:
    """One run of the submit file's jobs on the master: what is in flight, waiting, held, and what comes back."""

    def __init__(
        self,
        mw: Master,
        description: SubmitDescription,
        server: FileServer,
        summary: Summary,
        args: argparse.Namespace,
    ) -> None:
        self.mw = mw
        self.server = server
        self.summary = summary
        self.args = args
        self.jobs: Iterator[JobSpec] = description.jobs()
        self.max_materialize, self.max_idle = description.materialize_limits()
        self.exhausted = False
        self.in_flight: dict[str, _Job] = {}  # task token -> job
        self.waiting: collections.deque[_Job] = collections.deque()  # requeued or released: to run again
        self.held: dict[str, _Job] = {}  # job id -> job
        self.logs: dict[str, UserLog] = {}
        self.lock = threading.Lock()  # the file service's threads evaluate running jobs' ads too
        self.next_sweep = time.monotonic() + args.periodic_interval
        self.resumed = False
        JobOutputs.of(server).checks = self._check_running

    def run(self) -> None:
        while True:
            self.summary.waiting_release = len(self.held)
            self._fill()
            if self._over():
                return
            self.mw.loop(timeout=1.0)
            for result in self.mw.results():
                self._arrived(result)
            for lost in self.mw.unrunnable_tasks():
                self.server.forget(lost.tag.token)
                with self.lock:
                    self.in_flight.pop(lost.tag.token, None)
                self.summary.job({"job": lost.tag.job_id, "status": "failed", "why": "unrunnable: its slave was lost"})
            if time.monotonic() >= self.next_sweep:
                self.next_sweep = time.monotonic() + self.args.periodic_interval
                self._sweep(time.time())

    def _over(self) -> bool:
        if not (self.exhausted and not self.in_flight and not self.waiting):
            return False
        now = time.time()
        with self.lock:
            if any(not job.life.held_for_good(now) for job in self.held.values() if job.life is not None):
                return False
        self.summary.waiting_release = 0
        for job in list(self.held.values()):  # held for good: that is how they end
            reason = job.life.hold_reason if job.life is not None else ""
            self.summary.job({"job": job.spec.job_id, "status": "held", "why": reason, "journaled": job.journaled})
        self.held.clear()
        return True

    # ------------------------------------------------------------------ sending jobs

    def _ahead(self) -> int:
        """How many jobs may be in flight: --max-pending, and max_materialize, and max_idle beyond the busy slaves."""
        limit = min(int(self.args.max_pending), self.max_materialize or int(self.args.max_pending))
        if self.max_idle is not None:
            limit = min(limit, len(self.mw.connected_slaves()) + self.max_idle)
        return max(limit, 1)

    def _fill(self) -> None:
        ahead = self._ahead()
        while len(self.in_flight) < ahead:
            job = self.waiting.popleft() if self.waiting else self._new()
            if job is None:
                return
            self._send(job)

    def _new(self) -> _Job | None:
        while not self.exhausted:
            spec = next(self.jobs, None)
            if spec is None:
                self.exhausted = True
                return None
            now = time.time()
            job = _Job(spec, JobLife(spec, now) if spec.ad.policy or spec.expands else None)
            self.summary.placements[spec.ad.placement] += 1
            log = self._log(spec)
            if log is not None:
                log.submitted(spec.cluster, spec.process, now, spec.ad.get("SubmitEventNotes").strip('"'))
            if job.life is not None and job.life.status == HELD:  # submitted on hold
                self._logged(job, Decision(Verdict.HOLD, job.life.hold_reason, int(job.life.ad["HoldReasonCode"])), now)
                self.held[spec.job_id] = job
                self.summary.held_now[spec.job_id] = job.life.hold_reason
                continue
            return job
        return None

    def _send(self, job: _Job) -> None:
        job.runs += 1
        job.started_logged, job.stopped = False, None
        try:
            task = prepare(self._this_run(job), self.server, self.args)
        except InputError as exc:  # that job is held, the others run
            self._held_unstarted(job, exc.hold((self.server.host, self.server.port)), {"job": job.spec.job_id})
            return
        tag = JobTag(job.spec.job_id, task.token, job.spec.ad.placement)
        need = job.spec.ad.placement.need() if self.args.placement_shapes else None
        policy = run_job.with_policy(key=job_key(job.spec, job.runs), tag=tag, resources=need)
        with self.lock:
            self.in_flight[task.token] = job
        policy.submit(task)

    def _this_run(self, job: _Job) -> JobSpec:
        """The job as this run has it: its ``$$([expression])`` evaluated in its ad now (a job that has none is
        sent as it was made)."""
        spec = job.spec
        if not spec.expands or job.life is None:
            return spec
        with self.lock:
            text = job.life.expand(spec.arguments_text) if spec.arguments_text else ""
            environment = tuple((name, job.life.expand(value)) for name, value in spec.environment)
        arguments = parse_arguments(text, f"job {spec.job_id}") if spec.arguments_text else spec.arguments
        return attrs.evolve(spec, arguments=arguments, environment=environment)

    def _log(self, spec: JobSpec) -> UserLog | None:
        if spec.log is None:
            return None
        log = self.logs.get(spec.log)
        if log is None:
            log = self.logs[spec.log] = UserLog(spec.log)
        return log

    # ------------------------------------------------------------------ what comes back

    def _arrived(self, result: Result) -> None:
        job_id, token = result.tag.job_id, result.tag.token
        self.server.forget(token)
        with self.lock:
            job = self.in_flight.pop(token)
        job.journaled = result.journaled
        if result.journaled and not self.resumed:
            self.resumed = True
            print("mwpy jobs: resumed: finished jobs are answered from the journal", file=sys.stderr)
        outcome = result.value if result.error is None else None
        if isinstance(outcome, runner.JobOutcome) and outcome.hold is not None:
            self._not_executed(job, outcome, outcome_record(job_id, result, job.spec.success_code))
            return
        if job.life is None or not isinstance(outcome, runner.JobOutcome):
            self.summary.job(outcome_record(job_id, result, job.spec.success_code))
            self._log_end(job, outcome)
            return
        now = time.time()
        run = Exit(
            outcome.exit_code, outcome.signal, outcome.ended - outcome.started, outcome.user_cpu, outcome.sys_cpu
        )
        self._log_start(job, outcome.started, outcome.host)
        with self.lock:
            life = job.life
            if outcome.stopped is None or job.stopped is None:
                if life.status != RUNNING:  # not known yet when no usage report came in
                    life.start(outcome.started)
                decision = life.exit(run, now)
            else:  # the policy stopped it while it ran: already held or removed, and logged
                decision = job.stopped
        self._decided(
            job,
            decision,
            now,
            run,
            outcome_record(job_id, result, job.spec.success_code),
            logged=job.stopped is not None,
        )

    def _log_start(self, job: _Job, started: float, host: str) -> None:
        """This run's executing event, once (from the first usage report, or from the result)."""
        log = self._log(job.spec)
        if log is not None and not job.started_logged:
            log.executing(job.spec.cluster, job.spec.process, started, host, "")
        job.started_logged = True

    def _not_executed(self, job: _Job, outcome: runner.JobOutcome, record: dict[str, Any]) -> None:
        """The executable could not be executed: Condor holds the job (code 6, the errno), whatever its policy."""
        assert outcome.hold is not None
        self._held_unstarted(job, Decision(Verdict.HOLD, *outcome.hold), record, outcome)

    def _held_unstarted(
        self, job: _Job, decision: Decision, record: dict[str, Any], starter: runner.JobOutcome | None = None
    ) -> None:
        """A job Condor holds before its program runs: its inputs could not be sent, or its starter (``starter``:
        when and where) could not open its streams or execute it. Every hold is in the log, policy or not, with
        Condor's events in its order: the starter's error and the eviction before the hold, and executing first
        only when the starter got as far as the exec itself."""
        now = time.time()
        spec = job.spec
        log = self._log(spec)
        if log is not None:
            if starter is not None and decision.code == FAILED_TO_CREATE_PROCESS:
                log.executing(spec.cluster, spec.process, starter.started, starter.host, "")
            log.not_executed(spec.cluster, spec.process, now, decision)
            log.held(spec.cluster, spec.process, now, decision)
        if job.life is None:  # nothing can release it
            self.summary.job({**record, "status": "held", "why": decision.reason})
            return
        with self.lock:
            if starter is not None:
                job.life.start(starter.started)
            job.life.apply(decision, now)
        self.held[spec.job_id] = job
        self.summary.held_now[spec.job_id] = decision.reason

    def _decided(
        self, job: _Job, decision: Decision, now: float, run: Exit, record: dict[str, Any], *, logged: bool = False
    ) -> None:
        """Act on what the policy decided for a job that exited (or was stopped, and ``logged`` already)."""
        assert job.life is not None
        if decision.verdict == Verdict.COMPLETE:
            self._log_terminated(job, run, now)
            self.summary.job(record)
        elif decision.verdict == Verdict.REQUEUE:
            log = self._log(job.spec)
            if log is not None:
                log.requeued(job.spec.cluster, job.spec.process, now, run, decision)
            self.waiting.append(job)
        else:
            if not logged:
                self._logged(job, decision, now)
            if decision.verdict == Verdict.HOLD:
                self.held[job.spec.job_id] = job
                self.summary.held_now[job.spec.job_id] = decision.reason
            else:
                self.summary.job({**record, "status": "removed", "why": decision.reason})

    def _log_end(self, job: _Job, outcome: object) -> None:
        """The fast path's events: executing and terminated, from the outcome (a journaled one is logged already)."""
        log = self._log(job.spec)
        if log is None or not isinstance(outcome, runner.JobOutcome) or job.journaled:
            return
        run = Exit(
            outcome.exit_code, outcome.signal, outcome.ended - outcome.started, outcome.user_cpu, outcome.sys_cpu
        )
        log.executing(job.spec.cluster, job.spec.process, outcome.started, outcome.host, "")
        log.terminated(job.spec.cluster, job.spec.process, outcome.ended, run, run)

    def _log_terminated(self, job: _Job, run: Exit, now: float) -> None:
        log = self._log(job.spec)
        if log is not None and job.life is not None:
            ad = job.life.ad
            total = Exit(None, None, 0.0, float(ad["CumulativeRemoteUserCpu"]), float(ad["CumulativeRemoteSysCpu"]))
            log.terminated(job.spec.cluster, job.spec.process, now, run, total)

    def _logged(self, job: _Job, decision: Decision, now: float) -> None:
        log = self._log(job.spec)
        if log is None:
            return
        spec = job.spec
        if decision.verdict == Verdict.HOLD:
            log.held(spec.cluster, spec.process, now, decision)
        elif decision.verdict == Verdict.RELEASE:
            log.released(spec.cluster, spec.process, now, decision)
        elif decision.verdict == Verdict.REMOVE:
            log.aborted(spec.cluster, spec.process, now, decision)

    # ------------------------------------------------------------------ the periodic expressions

    def _check_running(self, token: str, usage: dict[str, float]) -> str | None:
        """A slave's report on a running job (file-service thread): "hold"/"remove" when the policy stops it."""
        now = time.time()
        allowed = {name: value for name, value in usage.items() if name in _USAGE}
        with self.lock:
            job = self.in_flight.get(token)
            if job is None or job.life is None:
                return None
            if job.life.status != RUNNING:
                started = now - allowed.get("RemoteWallClockTime", 0.0)
                job.life.start(started)
                self._log_start(job, started, "")
            decision = job.life.periodic(now, allowed)
            if decision.verdict not in (Verdict.HOLD, Verdict.REMOVE):
                return None
            job.stopped = decision
        self._logged(job, decision, now)
        return str(decision.verdict.value)

    def _sweep(self, now: float) -> None:
        """Every --periodic-interval: held jobs may be released or removed, waiting ones held or removed."""
        with self.lock:
            for job in list(self.held.values()):
                assert job.life is not None
                decision = job.life.periodic(now)
                if decision.verdict == Verdict.STAY:
                    continue
                self._logged(job, decision, now)
                del self.held[job.spec.job_id]
                self.summary.held_now.pop(job.spec.job_id, None)
                if decision.verdict == Verdict.RELEASE:
                    self.waiting.append(job)
                else:
                    self.summary.job({"job": job.spec.job_id, "status": "removed", "why": decision.reason})


#: What a slave may report about a running job (the starter's usage attributes); anything else is ignored.
_USAGE = frozenset(
    {"RemoteWallClockTime", "RemoteUserCpu", "RemoteSysCpu", "ResidentSetSize", "MemoryUsage", "ImageSize"}
)


if __name__ == "__main__":
    run()

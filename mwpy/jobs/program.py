"""The mwpy program behind ``mwpy jobs``: a master that turns submit-file jobs into tasks, and their task.

Run by path, like any mwpy program (``python .../mwpy/jobs/program.py
SUBMITFILE --summary S --mw-master ...``): ``mwpy jobs`` hands it to
:func:`mwpy.pool.local.run_local`, ``submit/jobs-master.sub`` to Condor's scheduler
universe, and the slaves load it the same way. The master generates jobs
lazily from the item data and keeps at most ``--max-pending`` of them
submitted, so 100,000 queued jobs cost the memory of a few thousand.

Each job is a task keyed by its id and content (``--mw-journal`` then lets a
restarted master answer finished jobs from the journal instead of running
them again). Its outcome is appended to the summary as it arrives.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    # Run by path: this file's folder (mwpy/jobs) must not shadow anything, and mwpy must import.
    sys.path[0] = os.path.dirname(os.path.dirname(sys.path[0]))

import argparse
import functools
import hashlib
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

from mwpy import program, safe_text
from mwpy.errors import MwpyError
from mwpy.jobs import runner
from mwpy.jobs.description import JobSpec, SubmitDescription, SubmitError
from mwpy.master import Master
from mwpy.net import filestore
from mwpy.net.filestore import output_upload_name
from mwpy.program import Membership, master, run
from mwpy.task import Result, task
from mwpy.wire import protocol

#: Exit status for a submit file mwpy cannot run (as for every other usage error).
USAGE = 2
#: Jobs submitted ahead of the results by default: enough for every slave's window, small in memory.
MAX_PENDING = 2000
#: Failed jobs named on stderr at the end (the summary has them all).
SHOWN_FAILURES = 20
#: Characters of each failed job's reason in that list (the summary has all of it).
SHOWN_WHY = 300


def membership() -> Membership:
    """The computation's secret, this process's member id and resource file, as mwpy.run() found them."""
    me = program.membership()
    if me is None:
        raise SubmitError("mwpy jobs runs as an mwpy program: mwpy.run() has not started a master or slave here")
    return me


@task(name="mwpy.jobs.run_job")
def run_job(task: runner.JobTask) -> runner.JobOutcome:
    """Run one job on this slave (see :mod:`mwpy.jobs.runner`)."""
    me = membership()
    return runner.run(task, me.secret, me.member_id, me.tls_fingerprint)


# ---------------------------------------------------------------------- the master


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mwpy jobs (master)")
    parser.add_argument("submit_file")
    parser.add_argument("--summary", required=True, help="JSON lines, one per job, and a last line for the run")
    parser.add_argument("--cluster", type=int, default=1)
    parser.add_argument("--base", default=os.getcwd(), help="the folder relative paths start from")
    parser.add_argument("--max-pending", type=int, default=MAX_PENDING)
    parser.add_argument("--max-output-bytes", type=int, default=filestore.MAX_OUTPUT_BYTES)
    parser.add_argument("--max-output-files", type=int, default=filestore.MAX_OUTPUT_FILES)
    return parser.parse_args(argv)


def job_key(spec: JobSpec) -> str:
    """The journal key: the job's id and everything that defines it (a changed job is not answered)."""
    return f"mwpy-jobs:{spec.job_id}:{hashlib.sha256(repr(spec).encode()).hexdigest()[:24]}"


#: Real paths of the submit side's files, remembered (a shared input is looked up once, not once per job).
_real_path = functools.lru_cache(maxsize=filestore.HASH_MEMORY)(os.path.realpath)


class _Files:
    """The submit side's files of one job: published by hash, and the real paths outputs may not overwrite."""

    def __init__(self, server: filestore.FileServer) -> None:
        self.server = server
        self.inputs: list[tuple[str, str]] = []
        self.protected: set[str] = set()

    def add(self, source: str, name: str) -> None:
        if os.path.isdir(source):
            for folder, dirs, files in os.walk(source):
                dirs.sort()
                for file in sorted(files):
                    path = os.path.join(folder, file)
                    if os.path.isfile(path):
                        relative = os.path.relpath(path, source)
                        self.add(path, f"{name}/{relative}" if name else relative)
            return
        digest, _ = self.server.publish(source)
        self.inputs.append((name, digest))
        self.protected.add(_real_path(source))


def prepare(spec: JobSpec, server: filestore.FileServer, args: argparse.Namespace) -> runner.JobTask:
    """The task for ``spec``: inputs published by hash, and the file service told where outputs may land."""
    files = _Files(server)
    executable = spec.executable
    executables: frozenset[str] = frozenset()
    if spec.transfer and spec.transfer_executable:
        executable = os.path.basename(spec.executable)
        files.add(spec.executable, executable)
        executables = frozenset({executable})
    stdin = None
    if spec.stdin is not None:
        if spec.transfer:
            files.add(spec.stdin, "_condor_stdin")
            stdin = "_condor_stdin"
        else:
            stdin = spec.stdin
    for item in spec.inputs:
        files.add(item.source, item.name)
    files.protected.add(_real_path(spec.executable))
    token = secrets.token_hex(16)
    streams = []
    if spec.stdout is not None:
        streams.append((runner.STDOUT_UPLOAD, spec.stdout))
    if spec.stderr is not None:
        streams.append((runner.STDERR_UPLOAD, spec.stderr))
    server.expect(
        token,
        filestore.Destination(
            spec.initialdir,
            frozenset(files.protected),
            tuple(streams),
            max_bytes=args.max_output_bytes,
            max_files=args.max_output_files,
            outputs=None if spec.transfer_outputs is None else tuple(map(output_upload_name, spec.transfer_outputs)),
        ),
        tuple(digest for _, digest in files.inputs),
    )
    return runner.JobTask(
        job_id=spec.job_id,
        token=token,
        service=(server.host, server.port),
        executable=executable,
        arguments=spec.arguments,
        environment=spec.environment,
        inputs=tuple(files.inputs),
        executables=executables,
        stdin=stdin,
        stdout=(spec.stdout is not None) if spec.transfer else spec.stdout,
        stderr=(spec.stderr is not None) if spec.transfer else spec.stderr,
        transfer_outputs=spec.transfer_outputs,
        transfer=spec.transfer,
        outputs_on_success_only=spec.outputs_on_success_only,
        initialdir=spec.initialdir,
    )


def status_path(resource: str) -> str:
    """Where the master keeps its job counts for ``mwpy status``: beside the resource file."""
    return resource + ".jobs"


class _Summary:
    """The run summary: one JSON line per job as it ends, a last line for the run, a few lines of text.

    It also keeps the job counts beside the resource file (at most once a
    second, and at the end), where ``mwpy status`` shows them.
    """

    def __init__(self, path: str, total: int, status: str | None) -> None:
        self.out: IO[str] = open(path, "w+")  # noqa: SIM115 (kept open for the run, closed by close())
        self.total = total
        self.status = status
        self.done = 0
        self.failures = 0
        self.failed: list[str] = []  # the first failed jobs in queue order, for the last lines (bounded)
        self._written = 0.0
        self._write_status()

    def job(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        self.done += 1
        if record["status"] != "ok":
            self.failures += 1
            why = safe_text.one_line(record["why"])[:SHOWN_WHY]  # quotes the job (file names it made): shown safe
            self.failed.append(f"{record['job']} ({why})")
            if len(self.failed) > 10 * SHOWN_FAILURES:
                self.failed = sorted(self.failed, key=_process_order)[:SHOWN_FAILURES]
        self._tick()

    def _tick(self) -> None:
        """At most once a second: make sure the summary is still ours, and write the job counts."""
        now = time.monotonic()
        if now - self._written < 1.0:
            return
        self._written = now
        self._keep_own_file()
        self._write_status()

    def _write_status(self) -> None:
        if self.status is None:
            return
        counts = {"total": self.total, "finished": self.done, "failed": self.failures, "summary": self.out.name}
        temporary = f"{self.status}.{os.getpid()}.tmp"
        with open(temporary, "w") as out:
            json.dump(counts, out)
        os.replace(temporary, self.status)

    def _keep_own_file(self) -> None:
        """The file at the summary's path must be the one written here, or its lines would go nowhere.

        Removed or replaced during the run (by a job sharing the folder, say: outputs never replace it), it is
        written out again in full and the run goes on with it, saying so once.
        """
        path = self.out.name
        try:
            ours = os.path.samestat(os.stat(path), os.fstat(self.out.fileno()))
        except OSError:
            ours = False
        if ours:
            return
        print(f"mwpy jobs: note: {path} was removed or replaced during the run; written again in full", file=sys.stderr)
        self.out.flush()
        self.out.seek(0)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".mwpy-summary-")
        os.fchmod(fd, os.fstat(self.out.fileno()).st_mode & 0o777)  # as the summary was made
        with os.fdopen(fd, "w") as copy:
            shutil.copyfileobj(self.out, copy)
        os.replace(temporary, path)
        self.out.close()
        self.out = open(path, "a+")  # noqa: SIM115 (kept open for the run, closed by close())

    def close(self, started: float, counters: dict[str, Any]) -> None:
        self._keep_own_file()
        elapsed = time.time() - started
        run = {"jobs": self.total, "failed": self.failures, "seconds": elapsed, **counters}
        self.out.write(json.dumps({"run": run}) + "\n")
        self.out.close()
        self._write_status()
        print(
            f"mwpy jobs: {self.done} jobs in {elapsed:.1f} s: {self.done - self.failures} ok, "
            f"{self.failures} failed; summary in {self.out.name}"
        )
        if self.failed:
            self.failed.sort(key=_process_order)
            more = self.failures - SHOWN_FAILURES
            shown = ", ".join(self.failed[:SHOWN_FAILURES]) + (f" and {more} more" if more > 0 else "")
            print(f"mwpy jobs: failed: {shown}", file=sys.stderr)


def _process_order(line: str) -> tuple[int, str]:
    """``"1.12 (exit code 3)"`` sorts by its process number, so the list reads in queue order."""
    number = line.split(" ", 1)[0].rpartition(".")[2]
    return (int(number) if number.isdigit() else -1, line)


def outcome_record(job_id: str, result: Result) -> dict[str, Any]:
    """One summary line: how the job ended, its times, and which slave on which host ran it."""
    if result.error is not None:
        error = result.error
        why = f"not started: {error.message}" if error.type == "JobSetupError" else f"{error.type}: {error.message}"
        return {"job": job_id, "status": "failed", "why": why, "slave": result.slave_id}
    outcome = result.value
    if not isinstance(outcome, runner.JobOutcome):
        return {"job": job_id, "status": "failed", "why": "the slave sent no job outcome", "slave": result.slave_id}
    if outcome.signal is not None:
        why = f"killed by signal {outcome.signal}"
    elif outcome.exit_code != 0:
        why = f"exit code {outcome.exit_code}"
    else:
        why = "; ".join(outcome.output_errors) if outcome.output_errors else ""
    return {
        "job": job_id,
        "status": "ok" if outcome.ok else "failed",
        "why": why,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "started": outcome.started,
        "ended": outcome.ended,
        "seconds": round(outcome.ended - outcome.started, 6),
        "slave": result.slave_id,
        "host": outcome.host,
        "pid": outcome.pid,
        "outputs": list(outcome.outputs),
        "output_errors": list(outcome.output_errors),
        "fetched_bytes": outcome.fetched_bytes,
        "journaled": result.journaled,
    }


@master
def main(mw: Master, argv: list[str]) -> int:
    """Run every job of the submit file; exit 0 when all succeeded, 1 when any failed, 2 for a bad file."""
    args = _arguments(argv)
    try:
        description = SubmitDescription(args.submit_file, cluster=args.cluster, base=args.base)
        description.check_inputs()
        me = membership()
    except MwpyError as exc:
        print(f"mwpy jobs: error: {exc}", file=sys.stderr)
        return USAGE
    for note in description.notes():
        print(f"mwpy jobs: note: {note}", file=sys.stderr)
    server = _file_service(mw, me)
    status = None if me.resource_file is None else status_path(me.resource_file)
    server.protect(args.submit_file, args.summary, *me.own_files, *([status] if status else []))
    summary = _Summary(args.summary, description.total, status)
    started = time.time()
    try:
        _run(mw, description, server, summary, args)
    finally:
        server.close()
        summary.close(started, server.counters.as_dict())
    return 1 if summary.failures else 0


def _file_service(mw: Master, me: Membership) -> filestore.FileServer:
    """The file service, listening where the master listens, as safe as it is: TLS when it has TLS, its timeout."""
    tls = None if me.tls_cert is None else protocol.tls_server_context(me.tls_cert, me.tls_key)[0]
    return filestore.FileServer(
        me.secret, me.member_id, host=mw.host, bind=mw.bind, tls=tls, client_timeout=me.client_timeout
    )


def _run(
    mw: Master,
    description: SubmitDescription,
    server: filestore.FileServer,
    summary: _Summary,
    args: argparse.Namespace,
) -> None:
    jobs: Iterator[JobSpec] = description.jobs()
    pending = 0
    exhausted = False
    while True:
        while not exhausted and pending < args.max_pending:
            spec = next(jobs, None)
            if spec is None:
                exhausted = True
                break
            task = prepare(spec, server, args)
            run_job.with_policy(key=job_key(spec), tag=(spec.job_id, task.token)).submit(task)
            pending += 1
        if exhausted and pending == 0:
            return
        mw.loop(timeout=1.0)
        for result in mw.results():
            job_id, token = result.tag
            server.forget(token)
            summary.job(outcome_record(job_id, result))
            pending -= 1
        for lost in mw.unrunnable_tasks():
            job_id, token = lost.tag
            server.forget(token)
            summary.job({"job": job_id, "status": "failed", "why": "unrunnable: its slave was lost"})
            pending -= 1


if __name__ == "__main__":
    run()

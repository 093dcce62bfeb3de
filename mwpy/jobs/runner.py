"""One job on a slave, as Condor's starter would run it: scratch folder, inputs, streams, outputs back.

The master sends a :class:`JobTask` (everything already expanded and every
input named by its hash); :func:`run` places the inputs from the slave's
:class:`~mwpy.net.filestore.InputCache` (hard links to read-only cached files, so
a shared database is neither fetched nor copied again), runs the executable
with stdin/stdout/stderr as declared, sends the outputs back through the
file service and answers a :class:`JobOutcome`. A job that could not start
(an input not fetched, an executable that does not exec) raises
:class:`JobSetupError`: a failed *task*, which ``--mw-task-attempts`` may run
again elsewhere and ``--mw-slave-max-failures`` counts against this slave.
A job that ran and failed is an outcome, as in Condor.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import attrs

from mwpy.errors import MwpyError
from mwpy.net.filestore import FileClient, FileServiceError, InputCache, output_upload_name

#: Scratch names of the job's streams (Condor's own), sent back under the submit file's names.
STDOUT_NAME = "_condor_stdout"
STDERR_NAME = "_condor_stderr"
#: Upload names the master maps to the submit file's ``output`` and ``error`` (never a file name: ':').
STDOUT_UPLOAD = ":stdout"
STDERR_UPLOAD = ":stderr"


class JobSetupError(MwpyError):
    """The job could not be started on this slave (an input not fetched, an executable that does not run)."""


@attrs.frozen
class JobTask:
    """What a slave needs to run one job; inputs are ``(name in the scratch folder, sha256)``."""

    job_id: str
    token: str  # names the job to the file service for its outputs
    service: tuple[str, int]
    executable: str  # a scratch name (transferred) or a path on the slave
    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    inputs: tuple[tuple[str, str], ...]
    executables: frozenset[str]  # scratch names to make executable
    stdin: str | None  # scratch name (transfer) or path
    stdout: bool | str | None  # transfer: whether to capture; shared file system: the path
    stderr: bool | str | None
    transfer_outputs: tuple[str, ...] | None
    transfer: bool
    outputs_on_success_only: bool
    initialdir: str  # where the job runs when it does not transfer files (a shared file system)


@attrs.frozen
class JobOutcome:
    """How a job ended: its exit code or signal, its times, where it ran, what came back."""

    job_id: str
    exit_code: int | None
    signal: int | None
    started: float
    ended: float
    host: str
    pid: int
    outputs: tuple[str, ...]
    output_errors: tuple[str, ...]
    fetched_bytes: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.output_errors


class _SlaveState:
    """What a slave keeps between jobs: its file-service connection and its input cache."""

    def __init__(
        self, service: tuple[str, int], secret: bytes, member_id: str, tls_fingerprint: str | None = None
    ) -> None:
        self.workspace = Path(tempfile.mkdtemp(prefix="mwpy-jobs-"))
        atexit.register(shutil.rmtree, self.workspace, ignore_errors=True)  # the cache lives as long as the slave
        self.client = FileClient(service[0], service[1], secret, member_id, tls_fingerprint)
        self.cache = InputCache(self.workspace / "cache", self.client)


_state: _SlaveState | None = None


def run(task: JobTask, secret: bytes, member_id: str, tls_fingerprint: str | None = None) -> JobOutcome:
    """Run ``task`` on this slave (the slave's cache and connection are made on the first job).

    ``tls_fingerprint``: the master's, when it speaks TLS (its file service then does too).
    """
    global _state  # one cache per slave process, for its life
    if _state is None or _state.client.address != task.service:  # the first job, or a restarted master
        if _state is not None:
            _state.client.close()
        _state = _SlaveState(task.service, secret, member_id, tls_fingerprint)
    if not task.transfer:
        return _run_in(Path(task.initialdir), task, _state, fetched=0)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=_state.workspace))
    try:
        fetched = _place_inputs(task, _state.cache, scratch)
        return _run_in(scratch, task, _state, fetched=fetched)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _place_inputs(task: JobTask, cache: InputCache, scratch: Path) -> int:
    before = cache.fetched_bytes
    for name, digest in task.inputs:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            cached = cache.get(digest)
        except FileServiceError as exc:
            raise JobSetupError(f"job {task.job_id}: input {name}: {exc}") from None
        try:
            os.link(cached, target)  # the cache's read-only file itself: no copy of a large input
        except OSError:
            shutil.copyfile(cached, target)
    return cache.fetched_bytes - before


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Top-level regular files and what they looked like (to find the new or changed ones afterwards)."""
    seen = {}
    for entry in os.scandir(folder):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            seen[entry.name] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return seen


def _run_in(folder: Path, task: JobTask, state: _SlaveState, *, fetched: int) -> JobOutcome:
    executable = str(folder / task.executable) if task.transfer else task.executable
    for name in task.executables:
        (folder / name).chmod(0o555)  # the cached file is shared and read-only: execute, never write
    before = _snapshot(folder) if task.transfer else {}
    environment = dict(task.environment)
    environment.setdefault("_CONDOR_SCRATCH_DIR", str(folder))
    started = time.time()
    with contextlib.ExitStack() as files:
        stdin = files.enter_context(open(folder / task.stdin if task.stdin else os.devnull, "rb"))
        stdout = files.enter_context(open(_stream(folder, task.stdout, STDOUT_NAME), "wb"))
        stderr = files.enter_context(open(_stream(folder, task.stderr, STDERR_NAME), "wb"))
        try:
            process = subprocess.Popen(
                [executable, *task.arguments],
                cwd=folder,
                env=environment,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            raise JobSetupError(f"job {task.job_id}: cannot run {task.executable}: {exc.strerror}") from None
        try:
            status = process.wait()
        finally:  # a task timeout interrupts the wait: the job's whole process group goes with it
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    ended = time.time()
    outputs: list[str] = []
    errors: list[str] = []
    if task.transfer and (status == 0 or not task.outputs_on_success_only):
        outputs, errors = _send_outputs(folder, task, state.client, before)
    return JobOutcome(
        job_id=task.job_id,
        exit_code=status if status >= 0 else None,
        signal=-status if status < 0 else None,
        started=started,
        ended=ended,
        host=socket.gethostname(),
        pid=os.getpid(),
        outputs=tuple(outputs),
        output_errors=tuple(errors),
        fetched_bytes=fetched,
    )


def _stream(folder: Path, declared: bool | str | None, scratch_name: str) -> str:
    if isinstance(declared, str):
        return declared  # no transfer: the submit file's path, on the shared file system
    return str(folder / scratch_name) if declared else os.devnull


def _send_outputs(
    folder: Path, task: JobTask, client: FileClient, before: dict[str, tuple[int, int, int]]
) -> tuple[list[str], list[str]]:
    """Send the streams and the outputs back; return the names sent and one line per output that failed."""
    errors: list[str] = []
    sent: list[str] = []
    for name, path in _outputs(folder, task, before, errors):
        try:
            client.upload(task.token, name, path)
            sent.append(name)
        except FileServiceError as exc:
            errors.append(f"{name}: {exc}")
    return sent, errors


def _outputs(
    folder: Path, task: JobTask, before: dict[str, tuple[int, int, int]], errors: list[str]
) -> list[tuple[str, Path]]:
    """The streams, then the outputs named by transfer_output_files, or every new or changed top-level file."""
    wanted: list[tuple[str, Path]] = []
    if task.stdout:
        wanted.append((STDOUT_UPLOAD, folder / STDOUT_NAME))
    if task.stderr:
        wanted.append((STDERR_UPLOAD, folder / STDERR_NAME))
    if task.transfer_outputs is None:
        after = _snapshot(folder)
        changed = (name for name in sorted(after) if after[name] != before.get(name))
        # Hidden files come back only when named: the master takes no others (mwpy/net/filestore.py).
        wanted.extend(
            (name, folder / name) for name in changed if name not in (STDOUT_NAME, STDERR_NAME) and name[0] != "."
        )
        return wanted
    for name in task.transfer_outputs:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            wanted.extend(_tree(path, output_upload_name(name)))
        elif path.is_file() and not path.is_symlink():
            wanted.append((output_upload_name(name), path))
        else:
            errors.append(f"{name}: not produced by the job")
    return wanted


def _tree(root: Path, prefix: str) -> list[tuple[str, Path]]:
    """A folder's regular files as ``(prefix/relative name, path)``; symbolic links are not followed."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in files:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                found.append((f"{prefix}/{path.relative_to(root)}", path))
    return sorted(found)

"""One job on a slave, as Condor's starter would run it: scratch folder, inputs, streams, outputs back.

The master sends a :class:`JobTask` (everything already expanded and every
input named by its hash and mode); :func:`run` places the inputs from the
slave's one :class:`~mwpy.data.cache.SlaveCache` (hard links to cached files
with the submit side's permission bits, so a shared database is neither
fetched nor copied again, and a file a Python task shared is not fetched for
a job either), runs the executable with stdin/stdout/stderr as
declared, sends the outputs back through the file service and answers a
:class:`JobOutcome`. While a job whose policy has periodic expressions runs,
the slave tells the master what it has used every ``check_interval`` seconds
and stops the job (``kill_sig``, then SIGKILL after ``kill_timeout``) when the
master's evaluation says hold or remove. A job that could not start (an input
not fetched, an executable that does not exec) raises :class:`JobSetupError`:
a failed *task*, which ``--mw-task-attempts`` may run again elsewhere and
``--mw-slave-max-failures`` counts against this slave. A job that ran and
failed is an outcome, as in Condor.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import attrs

from mwpy.data.cache import SlaveCache
from mwpy.data.client import FileClient
from mwpy.data.service import FileServiceError
from mwpy.errors import MwpyError
from mwpy.jobs.outputs import output_upload_name
from mwpy.parent_death import DeathWatch

#: Scratch names of the job's streams (Condor's own), sent back under the submit file's names.
STDOUT_NAME = "_condor_stdout"
STDERR_NAME = "_condor_stderr"
#: Upload names the master maps to the submit file's ``output`` and ``error`` (never a file name: ':').
STDOUT_UPLOAD = ":stdout"
STDERR_UPLOAD = ":stderr"
#: The permission bits a transferred executable gets, as Condor's starter gives them.
EXECUTABLE_MODE = 0o755
#: Set to the job's CPUs unless the job sets them (HTCondor's STARTER_NUM_THREADS_ENV_VARS default).
THREAD_VARIABLES = (
    "CUBACORES",
    "GOMAXPROCS",
    "JULIA_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OMP_THREAD_LIMIT",
    "OPENBLAS_NUM_THREADS",
    "PYTHON_CPU_COUNT",
    "ROOT_MAX_THREADS",
    "TF_LOOP_PARALLEL_ITERATIONS",
    "TF_NUM_THREADS",
)


class JobSetupError(MwpyError):
    """The job could not be started on this slave (an input not fetched, an executable that does not run)."""


@attrs.frozen
class JobTask:
    """What a slave needs to run one job; inputs are ``(name in the scratch folder, sha256, permission bits)``."""

    job_id: str
    token: str  # names the job to the file service for its outputs
    service: tuple[str, int]
    executable: str  # a scratch name (transferred) or a path on the slave (relative: to the folder it runs in)
    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    inputs: tuple[tuple[str, str, int], ...]
    stdin: str | None  # scratch name (transfer) or path
    stdout: bool | str | None  # transfer: whether to capture; otherwise the path
    stderr: bool | str | None
    transfer_outputs: tuple[str, ...] | None
    transfer: bool
    outputs_on_success_only: bool
    initialdir: str  # where the job runs when it does not transfer files (a shared file system)
    #: the exit code that means success (``success_exit_code``, else 0): what ON_SUCCESS waits for, as the starter does
    success_code: int = 0
    kill_signal: int = int(signal.SIGTERM)  # how a job is asked to end (a task timeout)
    #: (hold_kill_sig, remove_kill_sig): how a job the policy holds or removes while it runs is asked to end
    stop_signals: tuple[int, int] = (int(signal.SIGTERM), int(signal.SIGTERM))
    kill_timeout: float = 10.0  # seconds before SIGKILL follows
    core_size: int | None = None  # RLIMIT_CORE of the job's processes, bytes
    check_interval: float | None = None  # seconds between usage reports to the master (None: no periodic policy)
    cpus: int = 1  # request_cpus: OMP_NUM_THREADS and its kin, as Condor's starter sets them
    #: should_transfer_files = IF_NEEDED: the submit side's (FileSystemDomain, host); a slave that shares it runs
    #: the job in initialdir with ``in_place``'s (executable, stdin, stdout, stderr) instead of in a scratch folder
    shared: tuple[str, str] | None = None
    in_place: tuple[str, str | None, str | None, str | None] | None = None
    #: output and error name the same file: one stream for both, as Condor's starter merges them
    merged_streams: bool = False


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
    user_cpu: float = 0.0
    sys_cpu: float = 0.0
    stopped: str | None = None  # "hold" or "remove": the master's policy stopped it while it ran
    #: (reason, code, subcode) when the job could not be executed: Condor holds it (code 6, the errno)
    hold: tuple[str, int, int] | None = None

    def succeeded(self, success_code: int = 0) -> bool:
        """Exited with the job's success code (``success_code``, 0 unless declared), every output back."""
        clean = not self.output_errors and self.stopped is None and self.hold is None
        return clean and self.exit_code == success_code


class _SlaveState:
    """What a slave keeps between jobs of one master: its file service's connection, the slave's cache, the
    folder the jobs' scratch folders are made in, the scratch folders of finished jobs not yet removed, and
    the watch that kills a job when the slave dies."""

    def __init__(self, service: tuple[str, int], cache: SlaveCache, watch: DeathWatch) -> None:
        self.workspace = Path(tempfile.mkdtemp(prefix="mwpy-jobs-"))
        atexit.register(shutil.rmtree, self.workspace, ignore_errors=True)
        self.cache = cache
        self.client = cache.client(service)
        self.host = socket.gethostname()
        self.watch = watch
        self.finished: list[Path] = []

    def remove_finished(self) -> None:
        """Remove the finished jobs' scratch folders: called once the next job runs, so that a job's result and
        the next task do not wait for it (a slave that stops leaves them to the workspace's removal)."""
        while self.finished:
            shutil.rmtree(self.finished.pop(), ignore_errors=True)


_state: _SlaveState | None = None


def run(task: JobTask, cache: SlaveCache) -> JobOutcome:
    """Run ``task`` on this slave, its inputs from ``cache`` (the slave's one cache, kept for its life)."""
    global _state  # the connection to this master's file service, kept between jobs
    if _state is None or _state.client.address != task.service:  # the first job, or a restarted master
        _state = _SlaveState(task.service, cache, DeathWatch() if _state is None else _state.watch)
    if task.shared is not None and task.in_place is not None and _shares(*task.shared):
        executable, stdin, stdout, stderr = task.in_place
        task = attrs.evolve(task, transfer=False, executable=executable, stdin=stdin, stdout=stdout, stderr=stderr)
    if not task.transfer:
        return _run_in(Path(task.initialdir), task, _state, fetched=0)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=_state.workspace))
    try:
        fetched = _place_inputs(task, _state.cache, scratch)
        return _run_in(scratch, task, _state, fetched=fetched)
    finally:
        _state.finished.append(scratch)


def _shares(domain: str, host: str) -> bool:
    """Whether this slave sees the submit side's files: a Condor slot of the same FileSystemDomain (its machine
    ad says), or, outside Condor, a slave on the submit host itself."""
    machine = os.environ.get("_CONDOR_MACHINE_AD")
    if machine:
        with contextlib.suppress(OSError):
            for line in Path(machine).read_text(errors="replace").splitlines():
                name, _, value = line.partition("=")
                if name.strip().lower() == "filesystemdomain":
                    return value.strip().strip('"') == domain
    return socket.gethostname() == host


def _environment(folder: Path, task: JobTask) -> dict[str, str]:
    """The job's environment as Condor's starter makes it: the submit file's, the scratch folder as TMPDIR, the
    thread counts of STARTER_NUM_THREADS_ENV_VARS at the job's CPUs (unless the job sets them)."""
    environment = {
        "BATCH_SYSTEM": "HTCondor",
        "_CONDOR_SCRATCH_DIR": str(folder),
        "_CONDOR_JOB_IWD": str(folder),
        "TMPDIR": str(folder),
        "TEMP": str(folder),
        "TMP": str(folder),
    }
    environment |= {name: str(task.cpus) for name in THREAD_VARIABLES}
    return environment | dict(task.environment)


def _place_inputs(task: JobTask, cache: SlaveCache, scratch: Path) -> int:
    before = cache.counters["bytes_fetched"]
    for name, digest, mode in task.inputs:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            cached = cache.get(digest, task.service, mode)
        except (FileServiceError, OSError) as exc:  # the service's trouble, or this slave's disk (full, say)
            raise JobSetupError(f"job {task.job_id}: input {name}: {exc}") from None
        try:
            os.link(cached, target)  # the cached file itself, with the submit side's mode: no copy of a large input
        except OSError:
            shutil.copy2(cached, target)
    return cache.counters["bytes_fetched"] - before


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Top-level regular files and what they looked like (to find the new or changed ones afterwards)."""
    seen = {}
    for entry in os.scandir(folder):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            seen[entry.name] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return seen


def _executable(folder: Path, task: JobTask) -> str:
    """A transferred executable runs from the scratch folder; another by its path, a relative one from the folder
    the job runs in (never looked up in PATH, as Condor never does)."""
    if task.transfer or not os.path.isabs(task.executable):
        return str(folder / task.executable)
    return task.executable


def _run_in(folder: Path, task: JobTask, state: _SlaveState, *, fetched: int) -> JobOutcome:
    before = _snapshot(folder) if task.transfer else {}
    environment = _environment(folder, task)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    with contextlib.ExitStack() as files:
        try:
            stdin = _standard(files, _path(folder, task.stdin) if task.stdin else os.devnull, "input")
            stdout = _standard(files, _stream(folder, task.stdout, STDOUT_NAME), "output")
            stderr = (
                stdout if task.merged_streams else _standard(files, _stream(folder, task.stderr, STDERR_NAME), "error")
            )
        except _Unopened as exc:  # Condor's starter holds such a job (a missing output folder where it runs in place)
            return _unstarted(task, state, started, fetched, (f"Error from {state.host}: {exc}", exc.code, exc.errno))
        try:
            process = subprocess.Popen(
                [_executable(folder, task), *task.arguments],
                cwd=folder,
                env=environment,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=_core_limit(task.core_size),  # noqa: PLW1509 (one system call, before exec)
            )
        except OSError as exc:  # Condor holds such a job: "Failed to execute", code 6, the errno as subcode
            reason = f"Error from {state.host}: Failed to execute '{_executable(folder, task)}': "
            reason += f"(errno={exc.errno}: '{exc.strerror}')"
            return _unstarted(task, state, started, fetched, (reason, 6, exc.errno or 0))
        status, stopped = _wait(process, task, state, started)
    ended = time.time()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    outputs: list[str] = []
    errors: list[str] = []
    if task.transfer and stopped is None and (status == task.success_code or not task.outputs_on_success_only):
        outputs, errors = _send_outputs(folder, task, state.client, before)
    return JobOutcome(
        job_id=task.job_id,
        exit_code=status if status >= 0 else None,
        signal=-status if status < 0 else None,
        started=started,
        ended=ended,
        host=state.host,
        pid=os.getpid(),
        outputs=tuple(outputs),
        output_errors=tuple(errors),
        fetched_bytes=fetched,
        user_cpu=round(used.ru_utime - children.ru_utime, 6),
        sys_cpu=round(used.ru_stime - children.ru_stime, 6),
        stopped=stopped,
    )


class _Unopened(MwpyError):
    """A standard stream of the job could not be opened: the job does not start (Condor's starter holds it)."""

    def __init__(self, path: str, name: str, error: OSError) -> None:
        super().__init__(f"Failed to open '{path}' as standard {name}: {error.strerror} (errno {error.errno})")
        self.errno = error.errno or 0
        self.code = 8 if name == "input" else 7  # CONDOR_HOLD_CODE::UnableToOpenInput / UnableToOpenOutput


def _standard(files: contextlib.ExitStack, path: str, name: str) -> BinaryIO:
    """The job's standard ``name`` (input, output, error), opened for it, or :class:`_Unopened`."""
    try:
        return files.enter_context(open(path, "rb" if name == "input" else "wb"))
    except OSError as exc:
        raise _Unopened(path, name, exc) from None


def _unstarted(
    task: JobTask, state: _SlaveState, started: float, fetched: int, hold: tuple[str, int, int]
) -> JobOutcome:
    return JobOutcome(
        job_id=task.job_id,
        exit_code=None,
        signal=None,
        started=started,
        ended=time.time(),
        host=state.host,
        pid=os.getpid(),
        outputs=(),
        output_errors=(),
        fetched_bytes=fetched,
        hold=hold,
    )


def _core_limit(core_size: int | None) -> Callable[[], None] | None:
    """The job's core size limit (``coresize``), set before its exec; None (the usual case) when the submit file
    sets none: with nothing to run before the exec, subprocess starts the job by ``vfork``, not a fork of the
    whole slave (see :mod:`mwpy.parent_death`)."""
    if core_size is None:
        return None

    def before_exec() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (core_size, core_size))

    return before_exec


def _wait(
    process: subprocess.Popen[bytes], task: JobTask, state: _SlaveState, started: float
) -> tuple[int, str | None]:
    """The job's exit status, reporting its usage to the master every ``check_interval`` seconds when asked to;
    ``(status, "hold"|"remove")`` when the master's policy stopped it. A task timeout interrupts the wait: the
    job's whole process group goes with it.

    While it runs the job is guarded by the slave's death watch: Condor's starter kills a job whose shadow is
    gone; a slave that leaves by ``os._exit`` (its master lost while the job ran, a stuck task) or is killed
    would otherwise leave the job running, in its own session, for nobody. Only the job's own process gets
    SIGKILL; what it started in its group is its to stop. The finished jobs' scratch folders are removed
    while it runs.
    """
    stopped = None
    try:
        state.watch.guard(process.pid)
        state.remove_finished()
        while True:
            try:
                return process.wait(timeout=task.check_interval), stopped
            except subprocess.TimeoutExpired:
                pass
            verdict = state.client.check(task.token, _usage(process.pid, started))
            if verdict is not None:
                stopped = verdict
                _stop(process, task, task.stop_signals[0] if verdict == "hold" else task.stop_signals[1])
    finally:
        if process.poll() is None:
            _stop(process, task, task.kill_signal)
        state.watch.release()


def _stop(process: subprocess.Popen[bytes], task: JobTask, signal_number: int) -> None:
    """``signal_number`` to the job's process group, then SIGKILL once ``kill_timeout`` has passed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal_number)
    try:
        process.wait(timeout=task.kill_timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # what the job left behind in its group


def _usage(pid: int, started: float) -> dict[str, float]:
    """What the job has used so far, as the starter reports it: wall clock, CPU, resident memory (its session)."""
    user = system = 0.0
    rss_pages = 0
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) != pid:  # field 6 of stat: the session id (start_new_session made the job's pid one)
            continue
        user += int(fields[11]) / ticks
        system += int(fields[12]) / ticks
        rss_pages += int(fields[21])
    rss_kb = rss_pages * (os.sysconf("SC_PAGE_SIZE") // 1024)
    return {
        "RemoteWallClockTime": round(time.time() - started, 3),
        "RemoteUserCpu": round(user, 3),
        "RemoteSysCpu": round(system, 3),
        "ResidentSetSize": rss_kb,
        "MemoryUsage": (rss_kb + 1023) // 1024,
        "ImageSize": rss_kb,
    }


def _path(folder: Path, path: str) -> str:
    return path if os.path.isabs(path) else str(folder / path)


def _stream(folder: Path, declared: bool | str | None, scratch_name: str) -> str:
    if isinstance(declared, str):
        return _path(folder, declared)  # not transferred: the submit file's path, as the execute side sees it
    return str(folder / scratch_name) if declared else os.devnull


def _send_outputs(
    folder: Path, task: JobTask, client: FileClient, before: dict[str, tuple[int, int, int]]
) -> tuple[list[str], list[str]]:
    """Send the streams and the outputs back; return the names sent and one line per output that failed."""
    errors: list[str] = []
    outputs = _outputs(folder, task, before, errors)
    failed = client.upload_all(task.token, outputs) if outputs else []
    errors += [error for error in failed if error is not None]
    return [name for (name, _), error in zip(outputs, failed, strict=True) if error is None], errors


def _outputs(
    folder: Path, task: JobTask, before: dict[str, tuple[int, int, int]], errors: list[str]
) -> list[tuple[str, Path]]:
    """The streams, then the outputs named by transfer_output_files, or every new or changed top-level file."""
    wanted: list[tuple[str, Path]] = []
    if task.stdout is True:
        wanted.append((STDOUT_UPLOAD, folder / STDOUT_NAME))
    if task.stderr is True:
        wanted.append((STDERR_UPLOAD, folder / STDERR_NAME))
    if task.transfer_outputs is None:
        after = _snapshot(folder)
        changed = (name for name in sorted(after) if after[name] != before.get(name))
        # Hidden files come back only when named: the master takes no others (mwpy/jobs/outputs.py).
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

"""Helpers for tests that run real masters and slaves as processes.

Waiting is always on a condition with a deadline, never a bare sleep.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs

from mwpy import options as mwpy_options
from mwpy import resource_file
from mwpy.errors import ResourceFileError
from mwpy.master import Master
from mwpy.observe.audit import Audit
from mwpy.resource_file import ResourceFile
from mwpy.task_records import Result, Task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROGRAMS = Path(__file__).resolve().parent / "programs"
PYTHON = sys.executable

T = TypeVar("T")


class Quiet:
    """A task listener (mwpy/core/scheduler.py's Listener) that lets every task run and lists what it is told."""

    def may_start(self) -> bool:
        return True

    def began(self) -> None:
        pass

    def unrunnable(self, reason: str | None = None) -> bool:
        return True

    def settle(self, result: Result) -> bool:
        return True


QUIET = Quiet()


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.02,
    step: Callable[[], object] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` s.

    Between polls it sleeps ``interval`` s, or calls ``step`` (e.g. one pass of an event loop).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        if step is None:
            time.sleep(interval)
        else:
            step()


def mwpy_command(*args: str) -> list[str]:
    """The ``mwpy`` command, run with this interpreter."""
    return [PYTHON, "-m", "mwpy", *args]


def run_local(program: Path, *args: str, slaves: int = 2, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``mwpy local PROGRAM --slaves N -- ARGS``, as a user types it."""
    command = mwpy_command("local", str(program), "--slaves", str(slaves), "--no-progress")
    if args:
        command += ["--", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def used_beside_its_holder(parked: Path, producer: str, dependent: Any, blockers: list[Any]) -> int:
    """Both slaves parked (``park`` tasks in ``parked``, tests/programs), the producer's among them: let the other
    go, so that it runs ``dependent`` (a future of ``where``, the large value's user), then the producer. Checks
    that ``dependent`` ran on the other slave with the producer's value; returns the value's size."""
    other = next(p.stem for p in parked.glob("*.parked") if p.stem != producer)
    (parked / f"{other}.go").touch()
    ran_on, made_on, size = dependent.result(timeout=120)
    assert (str(ran_on), str(made_on)) == (other, producer)
    (parked / f"{producer}.go").touch()
    assert sorted(str(b.result(timeout=60)) for b in blockers) == sorted([producer, other])
    return int(size)


@attrs.define
class Computation:
    """A master process started by a test, and the slaves the test starts for it."""

    program: Path
    workdir: Path
    master: subprocess.Popen[str]
    slaves: list[subprocess.Popen[str]] = attrs.Factory(list)

    @property
    def resource_path(self) -> Path:
        return self.workdir / "resource.json"

    def resource(self) -> ResourceFile:
        return resource_file.read(self.resource_path)

    def start_slave(self, *args: str) -> subprocess.Popen[str]:
        """A slave reading the resource file (extra ``args`` come after it)."""
        process = subprocess.Popen(
            [PYTHON, str(self.program), "--mw-slave", "--mw-resource-file", str(self.resource_path), *args],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.slaves.append(process)
        return process

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """Wait for the master to exit; returns (status, stdout, stderr)."""
        out, err = self.master.communicate(timeout=timeout)
        return self.master.returncode, out, err

    def stop(self) -> None:
        """Kill whatever is still running (test clean-up)."""
        for process in [self.master, *self.slaves]:
            if process.poll() is None:
                process.kill()
            process.communicate()


def start_master(program: Path, workdir: Path, *args: str, timeout: float = 30) -> Computation:
    """Start ``program`` as master on loopback and wait until its resource file exists."""
    rf = workdir / "resource.json"
    master = subprocess.Popen(
        [
            PYTHON,
            str(program),
            "--mw-master",
            "--mw-master-host",
            "127.0.0.1",
            "--mw-resource-file",
            str(rf),
            *args,
        ],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    computation = Computation(program, workdir, master)

    def ready() -> bool:
        if master.poll() is not None:
            raise AssertionError(f"master exited early with {master.returncode}: {master.communicate()}")
        try:
            resource_file.read(rf)
        except ResourceFileError:
            return False
        return True

    wait_until(ready, timeout, "the master's resource file")
    return computation


# ---------------------------------------------------------------------- core runtime tests
#
# Processes here write stdout and stderr to files, so that no pipe can fill up
# and stall a process a test is waiting on, and a test can read what a process
# said while it still runs.

_spawned = itertools.count()
_live: list[Proc] = []


@attrs.define
class Proc:
    """A process started by a test; its stdout and stderr go to files in its folder."""

    popen: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float = 30) -> int:
        """The exit status; fails the test if the process is still running after ``timeout`` s."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"process {self.popen.args!r} still running after {timeout} s") from None

    def out(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    def err(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def json_lines(self) -> list[dict[str, Any]]:
        """The JSON objects among the stdout lines (audit lines are skipped)."""
        return [json.loads(line) for line in self.out().splitlines() if line.startswith("{")]

    def kill(self) -> None:
        """SIGKILL and reap (no-op if it has already exited)."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


def spawn(command: list[str], cwd: Path, name: str) -> Proc:
    """Start ``command`` in ``cwd``; output goes to ``NAME-K.out`` / ``NAME-K.err`` there."""
    number = next(_spawned)
    out_path = cwd / f"{name}-{number}.out"
    err_path = cwd / f"{name}-{number}.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        popen = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    proc = Proc(popen, out_path, err_path)
    _live.append(proc)
    return proc


def reap_spawned() -> None:
    """SIGKILL every process :func:`spawn` started that still runs (after a failed test)."""
    while _live:
        _live.pop().kill()


def run_program(program: Path, cwd: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``program`` with ``args`` to completion (for runs that need no slave)."""
    return subprocess.run(
        [PYTHON, str(program), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def spawn_master(program: Path, workdir: Path, *args: str, timeout: float = 30) -> Proc:
    """``program --mw-master`` on loopback writing ``workdir/resource.json``; returns once that file exists.

    ``args`` go after the standard options (more ``--mw-*`` options and the master's own arguments).
    """
    rf = workdir / "resource.json"
    command = [PYTHON, str(program), "--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", str(rf)]
    proc = spawn([*command, *args], workdir, "master")

    def ready() -> bool:
        exited = not proc.alive()  # looked at first: a quick master may write its file and exit in between
        try:
            if resource_file.read(rf).master_pid == proc.pid:  # not a file left by an earlier master
                return True
        except ResourceFileError:
            pass
        if exited:
            raise AssertionError(f"master exited early with {proc.returncode}: {proc.out()} {proc.err()}")
        return False

    wait_until(ready, timeout, "the master's resource file")
    return proc


def spawn_slave(program: Path, workdir: Path, *args: str, resource: Path | None = None) -> Proc:
    """``program --mw-slave --mw-resource-file RF ARGS`` in ``workdir`` (RF: ``workdir/resource.json``)."""
    rf = workdir / "resource.json" if resource is None else resource
    return spawn([PYTHON, str(program), "--mw-slave", "--mw-resource-file", str(rf), *args], workdir, "slave")


def catches(pid: int, signal_number: int) -> bool:
    """Whether process ``pid`` has a handler for ``signal_number`` now (Linux: ``SigCgt`` in /proc/PID/status).

    What to wait for before sending a signal a process handles once it is set up: the master may count a
    slave as connected a moment before the slave, reading the master's welcome, installs its handler.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal_number - 1) & 1)
    return False


def audit_lines(text: str) -> list[str]:
    """The ``[A]`` audit lines in ``text``, without their timestamps."""
    return [line.split(" [A] ", 1)[1] for line in text.splitlines() if " [A] " in line]


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nobody listens on, and that nothing else on the machine is about to take.

    A port the system picks (bind to 0) comes from its ephemeral range, which it hands out again to
    every outgoing connection and every bind to 0 on the machine: released, it could be taken by
    another process before the test's master binds it, or listened on before a slave is sent to it
    to find nobody there. Below that range only a program that names the port can take it.
    """
    start = _ephemeral_start()
    for port in random.sample(range(start // 2, start), 100):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free loopback port found below the ephemeral range ({start})")


def resource_record(**changes: Any) -> ResourceFile:
    """A valid, fresh resource file naming a master nobody listens on (a free port), with ``changes``."""
    record = ResourceFile(
        computation_status="in-progress",
        timestamp=time.time(),
        update_interval=300.0,
        member_id="m",
        master_host="127.0.0.1",
        master_port=free_port(),
        slaves_needed=1,
        slave_executable=PYTHON,
        slave_files=[],
        slave_arguments=[],
        master_pid=1,
        secret="00" * 32,
    )
    return attrs.evolve(record, **changes)


def write_resource_file(path: Path, **changes: Any) -> ResourceFile:
    """Write :func:`resource_record` at ``path`` as the master would (atomically, mode 0600)."""
    record = resource_record(**changes)
    resource_file.write(path, record)
    return record


class LocalMaster:
    """A master running inside the test process, with real slave processes and sockets.

    The test drives the event loop (``drive_until``), so it can act between
    events: kill a slave mid-task, submit to an ordered slave once it connected.
    Everything the master reports is drained after each pass and kept here, in
    arrival order, so a test can assert that something was reported exactly once.
    """

    def __init__(self, program: Path, workdir: Path, *args: str) -> None:
        self.program = program
        self.workdir = workdir
        self.resource_path = workdir / "resource.json"
        self.audit_path = workdir / "master.audit"
        argv = [
            "--mw-master",
            "--mw-master-host",
            "127.0.0.1",
            "--mw-resource-file",
            str(self.resource_path),
            "--mw-audit-file",
            str(self.audit_path),
            *args,
        ]
        options, rest = mwpy_options.parse(argv)
        assert not rest, f"LocalMaster takes only --mw-* options, got {rest}"
        self._audit = Audit(options.audit_file, packets=options.audit_packets)
        self.mw = Master(options, audit=self._audit, secret=secrets.token_bytes(32), program=str(program))
        self.mw.__enter__()  # current, as mwpy.run() makes it with `with`
        self.slaves: list[Proc] = []
        self.results: list[Result] = []
        self.unrunnable: list[Task] = []
        self.connected: list[str] = []
        self.disconnected: list[str] = []
        self.finished = False

    def start_slave(self, *args: str) -> Proc:
        proc = spawn_slave(self.program, self.workdir, *args, resource=self.resource_path)
        self.slaves.append(proc)
        return proc

    def pump(self, timeout: float = 0.05) -> None:
        """One call of the event loop, then drain what it reports."""
        self.mw.loop(timeout=timeout)
        self.results += self.mw.results()
        self.unrunnable += self.mw.unrunnable_tasks()
        self.connected += self.mw.connected_ordered_slaves()
        self.disconnected += self.mw.disconnected_ordered_slaves()

    def drive_until(self, predicate: Callable[[], T], what: str, timeout: float = 30) -> T:
        """Run the event loop until ``predicate()`` is truthy; fail the test after ``timeout`` s."""
        return wait_until(predicate, timeout, what, step=self.pump)

    def results_of(self, task_id: int) -> list[Result]:
        return [r for r in self.results if r.task_id == task_id]

    def result_of(self, task_id: int, timeout: float = 30) -> Result:
        """Drive until task ``task_id`` has a result; return it."""
        found = self.drive_until(lambda: self.results_of(task_id), f"the result of task {task_id}", timeout)
        return found[0]

    def connected_slave(self, timeout: float = 30) -> str:
        """Drive until the next ordered/intermingle slave connects; its id."""
        count = len(self.connected)
        self.drive_until(lambda: len(self.connected) > count, "an ordered slave to connect", timeout)
        return self.connected[count]

    def resource(self) -> ResourceFile:
        """The resource file as the master last wrote it."""
        return resource_file.read(self.resource_path)

    def audit_text(self) -> str:
        self._audit.flush()
        return self.audit_path.read_text(encoding="utf-8")

    def finish(self) -> None:
        """Shut the computation down as ``mwpy.run`` does after the master algorithm returns."""
        if not self.finished:
            self.finished = True
            try:
                self.mw.__exit__(None, None, None)  # finishes, and restores the previous current master
            finally:
                self._audit.close()

    def close(self) -> None:
        """Finish, then make sure no slave outlives the test."""
        try:
            self.finish()
        finally:
            for proc in self.slaves:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(10)
                proc.kill()


@contextlib.contextmanager
def local_master(program: Path, workdir: Path, *args: str) -> Iterator[LocalMaster]:
    master = LocalMaster(program, workdir, *args)
    try:
        yield master
    finally:
        master.close()


# ---------------------------------------------------------------------- trust and survival tests


@attrs.define
class MasterAudit:
    """The audit file of a master process (``--mw-audit-file``), read as it grows."""

    path: Path

    def lines(self) -> list[str]:
        return audit_lines(self.path.read_text(encoding="utf-8")) if self.path.exists() else []

    def _first(self, prefix: str, suffix_of: Callable[[str], str], what: str, timeout: float) -> str:
        def find() -> str:
            return next((suffix_of(line) for line in self.lines() if line.startswith(prefix)), "")

        return wait_until(find, timeout, what)

    def sid_of(self, pid: int, timeout: float = 60) -> str:
        """The id the master gave slave process ``pid`` (waits until it connected)."""

        def find() -> str:
            marker = f", pid {pid}, "
            return next(
                (line.split(" ", 1)[0] for line in self.lines() if " connecting [" in line and marker in line), ""
            )

        return wait_until(find, timeout, f"slave process {pid} to connect")

    def slave_dropped(self, sid: str, timeout: float = 60) -> str:
        """Why the master dropped slave ``sid``: the rest of its "disconnected (" line (waits for it)."""
        prefix = f"{sid} -> disconnected ("
        return self._first(prefix, lambda line: line[len(prefix) :], f"the master to drop {sid}", timeout)

    def peer_dropped(self, port: int, timeout: float = 60) -> str:
        """Why the master dropped the not-yet-a-slave peer at local ``port`` on 127.0.0.1 (waits for it)."""
        prefix = f"EOF -> 127.0.0.1:{port} ("
        return self._first(prefix, lambda line: line[len(prefix) : -1], f"the master to drop port {port}", timeout)


TRUST_STREAM = PROGRAMS / "trust_stream.py"


@attrs.define
class Live:
    """A live computation: tests/programs/trust_stream.py as master, streaming ``scrambled(i)`` tasks
    with an exactly checkable answer to its slaves until :meth:`finish` tells it to stop."""

    workdir: Path
    master: Proc
    slaves: list[Proc]
    record: ResourceFile
    deadline: float = 60.0

    @property
    def port(self) -> int:
        return self.record.master_port

    @property
    def secret(self) -> bytes:
        assert self.record.secret is not None
        return bytes.fromhex(self.record.secret)

    @property
    def audit(self) -> MasterAudit:
        return MasterAudit(self.workdir / "master.audit")

    def done(self) -> int:
        """Results the master algorithm has received so far (its latest progress line)."""
        done = 0
        for line in self.master.out().splitlines():
            if line.startswith('{"done"'):
                with contextlib.suppress(ValueError):  # the line being written right now
                    done = json.loads(line)["done"]
        return done

    def progresses(self, more: int = 20) -> None:
        """Wait until the master algorithm received ``more`` results beyond those it has now."""
        start = self.done()
        wait_until(lambda: self.done() >= start + more, self.deadline, f"{more} more results")

    def peak_rss_kib(self) -> int:
        """The master's peak resident set size so far (Linux ``VmHWM``), in KiB."""
        for line in Path(f"/proc/{self.master.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc/PID/status")

    def finish(self) -> dict[str, Any]:
        """Stop the stream; the master must end with every result exactly once and right; its summary."""
        (self.workdir / "stop").touch()
        status = self.master.wait(self.deadline)
        summaries = [line["summary"] for line in self.master.json_lines() if "summary" in line]
        assert summaries, self.master.err()
        summary: dict[str, Any] = summaries[-1]
        assert status == 0, (summary, self.master.err())
        assert summary["received"] == summary["submitted"] > 0
        for slave in self.slaves:
            assert slave.wait(self.deadline) == 0, slave.err()
        return summary


def start_live(workdir: Path, *master_args: str, slaves: int = 2, client_timeout: float = 3) -> Live:
    """Start a :class:`Live` computation (audit in ``workdir/master.audit``) and wait for its first results."""
    master = spawn_master(
        TRUST_STREAM,
        workdir,
        "--mw-client-timeout",
        f"{client_timeout:g}",
        "--mw-audit-file",
        str(workdir / "master.audit"),
        *master_args,
        "stream",
        str(workdir / "stop"),
    )
    live = Live(workdir, master, [], resource_file.read(workdir / "resource.json"))
    live.slaves += [spawn_slave(TRUST_STREAM, workdir) for _ in range(slaves)]
    live.progresses()
    return live

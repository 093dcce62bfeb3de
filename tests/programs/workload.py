"""An mwpy program for the core runtime tests: assorted task algorithms and a scripted master.

The tests run it as real slave processes, and either as a real master process
(the master algorithm below, driven by its argv) or import it to run a master
inside the test process. Its task algorithms exist to make slave behaviour
observable: ``block`` writes a marker file and waits for a release file, so a
test can SIGKILL the slave while it is inside a task, deterministically.

Master usage (after the ``--mw-*`` options, which mwpy strips)::

    argv ARG...        print {"argv": [...]} (what the master algorithm saw); exit 0
    exit VALUE         return VALUE (a Python literal) from the master algorithm; "raise" raises
    run N              submit square(0..N-1), print one JSON line per result, exit 0
    serve SECONDS      run the event loop for SECONDS (a test kills it before), exit 1
    stream N TARGET    stream N tiny tasks through the general target number; print the RSS (KiB)
                       before, after N/4 and after N tasks, and the peak RSS
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import mwpy

#: The longest any task here waits for a file before giving up (a test gone wrong).
WAIT_LIMIT = 60.0


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


# ---------------------------------------------------------------------- task algorithms


@mwpy.task
def signature(a: Any, b: Any = 2, *args: Any, c: Any, d: Any = 4, **kwargs: Any) -> dict[str, Any]:
    """Every kind of parameter, echoed back exactly as the slave received them."""
    return {"a": a, "b": b, "args": args, "c": c, "d": d, "kwargs": kwargs}


@mwpy.task
def square(x: int) -> int:
    return x * x


@mwpy.task
def whoami() -> int:
    """The slave's process id."""
    return os.getpid()


@mwpy.task
def fail(kind: str, message: str) -> None:
    """Raise (or exit) the way ``kind`` says."""
    if kind == "ValueError":
        raise ValueError(message)
    if kind == "SystemExit":
        sys.exit(message)
    raise KeyError(message)


@mwpy.task
def checked(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x


@mwpy.task
def unpicklable_result() -> Any:
    return lambda: None


@mwpy.task
def nested_submit() -> int:
    """Try to submit from inside a task (on a slave, where no master runs)."""
    return square.submit(1).task_id


@mwpy.task
def size_of(blob: bytes) -> int:
    return len(blob)


@mwpy.task
def blob(size: int) -> bytes:
    return b"x" * size


@mwpy.task
def block(folder: str, name: str) -> int:
    """Write ``started-NAME`` (holding this pid), wait for ``release-NAME``; return the pid."""
    here = Path(folder)
    marker = here / f"started-{name}"
    partial = here / f".started-{name}.{os.getpid()}"
    partial.write_text(str(os.getpid()))
    partial.replace(marker)
    deadline = time.monotonic() + WAIT_LIMIT
    while not (here / f"release-{name}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"release-{name} never appeared")
        time.sleep(0.005)
    return os.getpid()


@mwpy.task
def nap(seconds: float, value: Any) -> Any:
    time.sleep(seconds)
    return value


@mwpy.task
def tiny(x: int) -> int:
    return x


def _count_run(path: str) -> int:
    """Append one mark to ``path``; the number of marks (this run included) counts the runs."""
    with open(path, "a") as out:
        out.write("x")
    return len(Path(path).read_text())


@mwpy.task
def raise_counted(path: str, kind: str) -> None:
    """Count the run, then raise ``kind`` (OSError or ValueError): a task without a retries= of its own."""
    _count_run(path)
    raise OSError("os") if kind == "OSError" else ValueError("value")


@mwpy.task(retries=2)
def fail_then_succeed(path: str, failures: int) -> int:
    """Raise on the first ``failures`` runs, then return the run's number."""
    run = _count_run(path)
    if run <= failures:
        raise RuntimeError(f"run {run} fails")
    return run


@mwpy.task
def sleepy(seconds: float) -> int:
    """Sleep (interruptibly), then return this slave's pid."""
    time.sleep(seconds)
    return os.getpid()


@mwpy.task
def stubborn(seconds: float) -> int:
    """Swallow the timeout's interruption and go on sleeping: a task stuck past its timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(mwpy.TaskTimeoutError):
            time.sleep(0.05)
    return os.getpid()


@mwpy.task(retries=3, retry_on=(OSError,))
def retried_on_oserror(path: str, kind: str) -> None:
    _count_run(path)
    raise OSError("os") if kind == "OSError" else ValueError("value")


# ---------------------------------------------------------------------- master algorithm


def _run(count: int) -> int:
    ids = {square.submit(i).task_id: i for i in range(count)}
    seen = 0
    while seen < count:
        mwpy_master.loop()
        for result in mwpy_master.results():
            seen += 1
            emit({"x": ids[result.task_id], "value": result.value, "slave_id": result.slave_id})
    return 0


def _memory_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status, in KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _peak_rss_kib() -> int:
    """The most this process has held in RAM since it started.

    VmHWM, not getrusage's ru_maxrss: that one survives exec and so starts at
    the size of the forking parent (a big pytest process), hiding the master's own peak.
    """
    return _memory_kib("VmHWM")


def _rss_kib() -> int:
    """What this process holds in RAM now."""
    return _memory_kib("VmRSS")


def _stream(count: int, target: int) -> int:
    mw = mwpy_master
    rss_at_start = _rss_kib()
    peak_at_start = _peak_rss_kib()
    mw.target_number = target
    submitted = received = total = 0
    checkpoint = count // 4
    rss_at_checkpoint = 0
    most_pending = 0
    while received < count:
        for _ in range(min(mw.upto_target_number(), count - submitted)):
            tiny.submit(submitted)
            submitted += 1
        most_pending = max(most_pending, mw.pending_tasks())
        mw.loop()
        for result in mw.results():
            total += result.value
            received += 1
        if not rss_at_checkpoint and received >= checkpoint:
            rss_at_checkpoint = _rss_kib()
    emit(
        {
            "received": received,
            "sum": total,
            "most_pending": most_pending,
            "rss_kib_at_start": rss_at_start,
            "rss_kib_at_quarter": rss_at_checkpoint,
            "rss_kib_at_end": _rss_kib(),
            "peak_rss_kib_at_start": peak_at_start,
            "peak_rss_kib": _peak_rss_kib(),
        }
    )
    return 0


mwpy_master: mwpy.Master


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> Any:
    global mwpy_master
    mwpy_master = mw
    command, *rest = argv
    if command == "argv":
        emit({"argv": rest})
        return 0
    if command == "exit":
        if rest[0] == "raise":
            raise RuntimeError("the master algorithm gave up")
        return ast.literal_eval(rest[0])
    if command == "run":
        return _run(int(rest[0]))
    if command == "serve":
        deadline = time.monotonic() + float(rest[0])
        while time.monotonic() < deadline:
            mw.loop(timeout=0.1)
        return 1
    if command == "stream":
        return _stream(int(rest[0]), int(rest[1]))
    raise ValueError(f"unknown command {command!r}")


if __name__ == "__main__":
    mwpy.run()

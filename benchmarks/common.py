"""Records, statistics and subprocess plumbing shared by every scenario.

Each measurement runs in fresh child processes (mwpy master and slaves, or one
process per peer), so no scenario inherits another's threads, caches or heap,
and the "master" whose peak RSS is reported is a process of its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: The repository root: put on PYTHONPATH of every child so ``benchmarks`` imports anywhere.
REPO = Path(__file__).resolve().parent.parent


class BenchError(Exception):
    """A measurement could not be taken (a child failed or missed its deadline)."""


@dataclasses.dataclass
class Row:
    """One line of the table: one system in one scenario."""

    scenario: str
    system: str
    tasks: int | None = None
    seconds: float | None = None
    tasks_per_s: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    peak_rss_mb: float | None = None
    cpu_percent: float | None = None
    note: str = ""
    skipped: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Check:
    """One target of issue 5: the measured ratio or figure against the bound it must meet."""

    target: str
    measured: float | None
    bound: str
    ok: bool | None  # None: not measured (a side was skipped or failed)
    detail: str = ""


@dataclasses.dataclass
class Sizes:
    """Problem sizes of one run; ``--quick`` shrinks them all for the smoke test."""

    throughput_tasks: int = 100_000
    slow_peer_tasks: int = 10_000  # dask and Parsl: ~1k tasks/s, so 100k would take minutes
    latency_round_trips: int = 2_000
    slow_peer_round_trips: int = 300
    streaming_small: int = 100_000
    streaming_large: int = 1_000_000
    fanin_connections: int = 500
    fanin_tasks: int = 100_000
    idle_seconds: float = 10.0
    warmup_tasks: int = 2_000

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            throughput_tasks=2_000,
            slow_peer_tasks=300,
            latency_round_trips=100,
            slow_peer_round_trips=30,
            streaming_small=2_000,
            streaming_large=10_000,
            fanin_connections=20,
            fanin_tasks=2_000,
            idle_seconds=1.0,
            warmup_tasks=100,
        )

    def scaled(self, factor: float) -> Sizes:
        """Every task count times ``factor`` (``--tasks``); durations stay."""

        def scale(n: int) -> int:
            return max(1, round(n * factor))

        return dataclasses.replace(
            self,
            throughput_tasks=scale(self.throughput_tasks),
            slow_peer_tasks=scale(self.slow_peer_tasks),
            latency_round_trips=scale(self.latency_round_trips),
            slow_peer_round_trips=scale(self.slow_peer_round_trips),
            streaming_small=scale(self.streaming_small),
            streaming_large=scale(self.streaming_large),
            fanin_tasks=scale(self.fanin_tasks),
            warmup_tasks=scale(self.warmup_tasks),
        )


@dataclasses.dataclass
class Settings:
    """What every scenario needs to know about this run."""

    workers: int
    sizes: Sizes
    peers: frozenset[str]
    repeat: int = 1
    python: str = sys.executable
    profile_dir: Path | None = None
    verbose: bool = False

    def log(self, text: str) -> None:
        """Progress on stderr, so a long run shows it is alive without spoiling the table."""
        if self.verbose:
            print(f"[bench] {text}", file=sys.stderr, flush=True)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (``q`` in 0..100)."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p99/mean of round-trip times, in microseconds."""
    ordered = sorted(seconds)
    return {
        "p50_us": percentile(ordered, 50) * 1e6,
        "p99_us": percentile(ordered, 99) * 1e6,
        "mean_us": sum(ordered) / len(ordered) * 1e6,
    }


def peak_rss_mb() -> float:
    """This process's peak resident set (the kernel's ``VmHWM``), in MB.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries that across ``exec``, so a
    child would report the size of the parent it was forked from.
    """
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def child_env() -> dict[str, str]:
    """The environment for children: the repository importable, the venv's scripts found, no buffering."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) if not path else f"{REPO}{os.pathsep}{path}"
    env["PYTHONUNBUFFERED"] = "1"
    # The venv's scripts (Parsl starts interchange.py and process_worker_pool.py by name) even when not activated.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def wait_for(condition: Callable[[], bool], deadline: float, what: str, *, poll: float = 0.01) -> None:
    """Wait until ``condition()`` holds; raise :class:`BenchError` naming ``what`` past ``deadline``."""
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(poll)


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End a child we started: terminate, then kill if it does not go within ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def tail(path: Path, lines: int = 15) -> str:
    """The end of a child's log, for error messages."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class RssSampler:
    """Samples a child's RSS with psutil from outside, as a cross-check of its own high-water mark."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        import psutil  # noqa: PLC0415 - optional until a scenario needs it

        self._process = psutil.Process(pid)
        self._interval = interval
        self._stopped = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.peak = max(self.peak, self._process.memory_info().rss)
            except Exception:  # the child exited: nothing more to sample
                return
            self._stopped.wait(self._interval)

    def stop(self) -> float:
        """Stop sampling; the largest RSS seen, in MB."""
        self._stopped.set()
        self._thread.join()
        return self.peak / 2**20


def run_child_json(argv: list[str], *, timeout: float, name: str, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``argv`` (which writes JSON to the path given as its last argument) and return that JSON."""
    with tempfile.TemporaryDirectory(prefix=f"mwpy-bench-{name}-") as tmp:
        out = Path(tmp) / "out.json"
        log = Path(tmp) / "log.txt"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*argv, str(out)], stdout=sink, stderr=subprocess.STDOUT, env=child_env(), cwd=cwd or tmp
            )
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                stop(process)
                raise BenchError(f"{name}: no answer within {timeout:g} s\n{tail(log)}") from None
        if code != 0 or not out.exists():
            raise BenchError(f"{name}: exit status {code}\n{tail(log)}")
        data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return data

"""Records, statistics and subprocess plumbing shared by every scenario.

Each measurement runs in fresh child processes (mwpy master and slaves, or one
process per peer), so no scenario inherits another's threads, caches or heap,
and the "master" whose peak RSS is reported is a process of its own.

Figures are taken in *rounds* (issue 13): a round runs every system of a
scenario once, back to back, and every ratio is computed within one round. A
:class:`Row` is one system's run in one round, a :class:`Series` all of one
system's runs, and a :class:`Check` a target's per-round values with their
median and range.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
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
    """One run of one system in one scenario (in one round, once the harness has placed it)."""

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
    #: The round this run belongs to (0-based), and its place in that round's order.
    round: int | None = None
    position: int | None = None


def figure(row: Row, name: str) -> float | None:
    """A figure of a run: a column of :class:`Row` or, failing that, a number in its ``extra``."""
    value = getattr(row, name) if name in _ROW_FIELDS else row.extra.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(Row))


@dataclasses.dataclass(frozen=True)
class Spread:
    """Median and range of one figure over rounds: what the report prints, never a best-of-N."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))

    def format(self, spec: str) -> str:
        """``median [min-max]`` (an en dash in the output), or the one value when there was one round."""
        if self.count == 1 or format(self.low, spec) == format(self.high, spec):
            return format(self.median, spec)
        return f"{self.median:{spec}} [{self.low:{spec}}\N{EN DASH}{self.high:{spec}}]"


@dataclasses.dataclass
class Series:
    """One system of one scenario over all rounds: one line of the table."""

    scenario: str
    system: str
    key: str
    runs: list[Row]
    note: str = ""

    @property
    def valid(self) -> list[Row]:
        return [run for run in self.runs if not run.skipped]

    @property
    def skipped(self) -> str | None:
        """Why the system has no figure at all (``None`` when at least one round measured it)."""
        if self.valid or not self.runs:
            return None if self.runs else "not run"
        return self.runs[0].skipped

    def values(self, name: str) -> list[float]:
        return [v for run in self.valid if (v := figure(run, name)) is not None]

    def spread(self, name: str) -> Spread | None:
        return Spread.of(self.values(name))

    def median(self, name: str) -> float | None:
        spread = self.spread(name)
        return None if spread is None else spread.median

    def as_json(self, fields: Sequence[str]) -> dict[str, Any]:
        """Medians and ranges of ``fields`` plus every run, raw, so each figure can be re-derived."""
        figures: dict[str, Any] = {}
        for name in fields:
            spread = self.spread(name)
            if spread is not None:
                figures[name] = {**dataclasses.asdict(spread), "values": self.values(name)}
        return {
            "scenario": self.scenario,
            "system": self.system,
            "key": self.key,
            "skipped": self.skipped,
            "note": self.note,
            "figures": figures,
            "runs": [dataclasses.asdict(run) for run in self.runs],
        }


@dataclasses.dataclass
class Check:
    """One target: its value in every round, judged by the median of those values.

    ``measured`` is that median; ``values`` holds one value per round in which
    both sides were measured (``rounds`` says which). A check built from a
    single measurement (scenario 5) has one value.
    """

    target: str
    measured: float | None
    bound: str
    ok: bool | None  # None: not measured (a side was skipped or failed), or for information
    detail: str = ""
    values: list[float] = dataclasses.field(default_factory=list)
    rounds: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.values and self.measured is not None:
            self.values = [self.measured]
            self.rounds = [0]

    @property
    def spread(self) -> Spread | None:
        return Spread.of(self.values)


@dataclasses.dataclass
class Sizes:
    """Problem sizes of one run; ``--quick`` shrinks them all for the smoke test."""

    throughput_tasks: int = 100_000
    slow_peer_tasks: int = 10_000  # dask and Parsl: ~1k tasks/s, so 100k would take minutes
    latency_round_trips: int = 2_000
    slow_peer_round_trips: int = 300
    streaming_small: int = 100_000
    streaming_large: int = 1_000_000
    fanin_connections: int = 10_000
    fanin_tasks: int = 100_000
    idle_seconds: float = 10.0
    warmup_tasks: int = 2_000
    #: Scenario 7's short script: calls that sleep this long each, about 2 s of work on 2 workers.
    script_tasks: int = 20
    script_task_seconds: float = 0.2
    #: Scenario 8 (issue 22): a shared array of this many MiB over this many short tasks; and the keyword form's.
    shared_megabytes: int = 200
    shared_tasks: int = 1_000
    kwargs_megabytes: int = 60
    kwargs_tasks: int = 200
    #: Scenario 9 (issue 22): distinct arguments of 1 MB through ``mw.map``.
    large_argument_tasks: int = 100_000
    #: Scenario overseer-queries (issue 24): slave jobs the overseer keeps, and seconds each arm runs.
    overseer_jobs: int = 100
    overseer_seconds: float = 180.0
    #: Scenario 10 (dataflow): a chain of dependent tasks, a fan-in of futures into one task, a tree reduction's
    #: leaves (dask takes ~250 s at 100,000: ``--tree-leaves``), an intermediate value of this many MB, and the
    #: tasks over which the master's CPU per task and per dependency is taken.
    dataflow_chain: int = 1_000
    dataflow_fanin: int = 10_000
    dataflow_tree_leaves: int = 10_000
    dataflow_megabytes: int = 200
    dataflow_cpu_tasks: int = 5_000

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
            script_tasks=4,
            script_task_seconds=0.05,
            shared_megabytes=4,
            shared_tasks=50,
            kwargs_megabytes=2,
            kwargs_tasks=20,
            large_argument_tasks=200,
            overseer_jobs=20,
            overseer_seconds=30.0,
            dataflow_chain=50,
            dataflow_fanin=200,
            dataflow_tree_leaves=300,
            dataflow_megabytes=4,
            dataflow_cpu_tasks=100,
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
            shared_tasks=scale(self.shared_tasks),
            kwargs_tasks=scale(self.kwargs_tasks),
            large_argument_tasks=scale(self.large_argument_tasks),
            dataflow_chain=scale(self.dataflow_chain),
            dataflow_fanin=scale(self.dataflow_fanin),
            dataflow_tree_leaves=scale(self.dataflow_tree_leaves),
            dataflow_cpu_tasks=scale(self.dataflow_cpu_tasks),
        )


@dataclasses.dataclass(frozen=True)
class Checkout:
    """An mwpy source tree and the interpreter whose mwpy is that tree's: what an mwpy run executes.

    The harness runs this checkout; ``--baseline PATH`` adds another one (an
    older commit in a worktree with its own ``.venv``), and the children of each
    must import only their own ``mwpy`` and ``benchmarks``.
    """

    root: Path
    python: str

    @classmethod
    def this(cls) -> Checkout:
        return cls(REPO, sys.executable)

    @classmethod
    def baseline(cls, where: str) -> Checkout:
        """The checkout ``where`` names, run by its own ``.venv/bin/python``.

        ``where`` is a folder (another checkout with its own ``.venv``) or a
        commit of this repository (``HEAD~3``, a tag, a hash): that commit is
        checked out once, with its own venv, under :data:`BASELINES` and reused
        by later runs, so "compare with commit X" is one option, not a set-up.
        :class:`BenchError` if it is neither, or the set-up fails.
        """
        path = Path(where)
        root = path.resolve() if path.is_dir() else _commit_checkout(where)
        python = root / ".venv" / "bin" / "python"
        if not python.exists():
            raise BenchError(f"{root}: no .venv/bin/python (python -m venv .venv && .venv/bin/pip install -e .)")
        checkout = cls(root, str(python))
        if not checkout.program.exists():
            raise BenchError(f"{root}: no {checkout.program.relative_to(root)}")
        return checkout

    @property
    def startup_program(self) -> Path:
        """This checkout's short-script program (scenario 7), so each side's start-up runs its own."""
        return self.root / "benchmarks" / "startup_program.py"

    @property
    def program(self) -> Path:
        """The benchmark's mwpy program of this checkout (its own, so old and new each run theirs)."""
        return self.root / "benchmarks" / "mwpy_program.py"

    def env(self) -> dict[str, str]:
        """The environment for this checkout's children: its tree first on PYTHONPATH, its venv's scripts on PATH.

        For a checkout other than the harness's own, entries of an inherited
        PYTHONPATH or PATH that point into the harness's tree are dropped, so
        nothing of the new code leaks into the baseline's processes.
        """
        env = dict(os.environ)
        foreign = self.root != REPO
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not (foreign and _inside(p, REPO))]
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), *paths])
        env["PYTHONUNBUFFERED"] = "1"
        # The venv's scripts (Parsl starts interchange.py and process_worker_pool.py by name) even when not activated.
        bin_dir = Path(self.python).parent
        found = [p for p in env.get("PATH", "").split(os.pathsep) if p and not (foreign and _inside(p, REPO))]
        env["PATH"] = os.pathsep.join([str(bin_dir), *found])
        if foreign:
            env["VIRTUAL_ENV"] = str(bin_dir.parent)
        return env

    def describe(self) -> dict[str, Any]:
        """Commit, local changes and where this interpreter imports ``mwpy`` from: what the figures were taken on.

        Raises :class:`BenchError` when the interpreter's ``mwpy`` is not this
        tree's (an install of another checkout would make the comparison a lie).
        """
        info: dict[str, Any] = {"root": str(self.root), "python": self.python}
        for key, cmd in (
            ("commit", ["rev-parse", "HEAD"]),
            ("changes", ["status", "--porcelain", "--untracked-files=no"]),
        ):
            done = subprocess.run(["git", "-C", str(self.root), *cmd], capture_output=True, text=True, check=False)
            info[key] = done.stdout.strip() if done.returncode == 0 else None
        with tempfile.TemporaryDirectory(prefix="mwpy-bench-which-") as tmp:
            done = subprocess.run(
                [self.python, "-c", "import mwpy, sys; print(mwpy.__file__); print(sys.version.split()[0])"],
                capture_output=True, text=True, env=self.env(), cwd=tmp, check=False, timeout=60,
            )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"{self.python} cannot import mwpy:\n{done.stderr.strip()}")
        mwpy_file, version = done.stdout.split()[:2]
        if not _inside(mwpy_file, self.root):
            raise BenchError(f"{self.python} imports mwpy from {mwpy_file}, not from {self.root}")
        info.update(mwpy=mwpy_file, python_version=version)
        return info


#: Where ``--baseline COMMIT`` keeps its checkouts, one folder per commit hash (with its own ``.venv``).
BASELINES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mwpy-bench-baselines"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)


def _commit_checkout(rev: str) -> Path:
    """A checkout of commit ``rev`` of this repository with its own venv, made once and kept under BASELINES."""
    found = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise BenchError(f"{rev!r} is neither a folder nor a commit of {REPO}")
    root = BASELINES / found.stdout.strip()
    python = root / ".venv" / "bin" / "python"
    if python.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    if not root.exists():
        added = _git("worktree", "add", "--detach", str(root), found.stdout.strip())
        if added.returncode != 0:
            raise BenchError(f"git worktree add {root}: {added.stderr.strip()}")
    steps = (
        [sys.executable, "-m", "venv", str(root / ".venv")],
        [str(python), "-m", "pip", "install", "--quiet", "-e", str(root)],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(step)}: {done.stderr.strip()[-500:]}")
    return root


def _inside(path: str, root: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(root)
    except OSError:
        return False


@dataclasses.dataclass
class Settings:
    """What every scenario needs to know about this run."""

    workers: int
    sizes: Sizes
    peers: frozenset[str]
    rounds: int = 1
    python: str = sys.executable
    profile_dir: Path | None = None
    verbose: bool = False
    #: ``--baseline PATH``: the other checkout the ``baseline`` scenario compares this one with.
    baseline: Checkout | None = None

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


def add_master_cpu(report: dict[str, Any]) -> None:
    """Add ``master_cpu_us_per_task``: the master process's user + system CPU over the timed phase, per task."""
    user, system = report.get("master_user_us_per_task"), report.get("master_system_us_per_task")
    if user is not None and system is not None:
        report["master_cpu_us_per_task"] = user + system


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
    """The environment for children of this checkout: the repository importable, the venv's scripts found."""
    return Checkout.this().env()


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


def run_child_json(
    argv: list[str], *, timeout: float, name: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``argv`` (which writes JSON to the path given as its last argument) and return that JSON.

    ``env``: the environment of the checkout whose program runs (default: this one's).
    """
    with tempfile.TemporaryDirectory(prefix=f"mwpy-bench-{name}-") as tmp:
        out = Path(tmp) / "out.json"
        log = Path(tmp) / "log.txt"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [*argv, str(out)], stdout=sink, stderr=subprocess.STDOUT, env=env or child_env(), cwd=cwd or tmp
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

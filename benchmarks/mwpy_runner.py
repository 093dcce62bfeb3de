"""Start an mwpy master and its slaves (real ones, or the fan-in load generator) and collect the figures.

The processes are started exactly as in production: the master with
``--mw-master`` writes its resource file, and slaves are started only once that
file exists (they read address and secret from it). Nothing here depends on the
``mwpy local`` command, so the harness measures the engine alone.

A run may name another :class:`~benchmarks.common.Checkout` (``--baseline``):
master and slaves are then that checkout's interpreter running that
checkout's ``benchmarks/mwpy_program.py``, with its environment, so the
baseline measures its own mwpy and nothing of this tree.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import BenchError, Checkout, RssSampler, Settings, stop, tail, wait_for

Spawn = Callable[[list[str], str], "subprocess.Popen[bytes]"]


@dataclasses.dataclass
class MwpyRun:
    """How to run one mwpy measurement."""

    params: dict[str, Any]
    slaves: int = 2
    #: Fan-in: this many load-generator processes holding ``slaves`` connections between them.
    loadgen_processes: int = 0
    #: ``--mw-slave-task-group`` / ``--mw-slave-result-group``; ``None``: the checkout's defaults (not passed).
    task_group: int | None = None
    result_group: int | None = None
    timeout: float = 600.0
    sample_rss: bool = False
    profile_name: str | None = None
    #: The mwpy to run; ``None``: this checkout (the harness's own interpreter).
    checkout: Checkout | None = None
    #: Give the master ``--mw-events FILE`` (the event log) and report the file's size.
    events: bool = False


def _python(python: str, profile: Path | None) -> list[str]:
    if profile is None:
        return [python]
    return [python, "-m", "cProfile", "-o", str(profile)]


def run_mwpy(settings: Settings, run: MwpyRun) -> dict[str, Any]:
    """Run one master with its slaves; the master's JSON report, plus the RSS sampled from outside."""
    with tempfile.TemporaryDirectory(prefix="mwpy-bench-") as tmp_name:
        tmp = Path(tmp_name)
        resource_file = tmp / "rf.json"
        out = tmp / "out.json"
        params = {**run.params, "slaves": run.slaves}
        profile = settings.profile_dir if run.profile_name else None
        checkout = run.checkout or Checkout(Checkout.this().root, settings.python)
        events = tmp / "events.jsonl"
        master_cmd = _master_command(
            checkout, run, profile=profile, params=params, resource_file=resource_file, events=events, out=out
        )
        env = checkout.env()
        logs: list[Path] = []
        children: list[subprocess.Popen[bytes]] = []

        def spawn(cmd: list[str], name: str) -> subprocess.Popen[bytes]:
            log = tmp / f"{name}.log"
            logs.append(log)
            with log.open("wb") as sink:
                child = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=tmp)
            children.append(child)
            return child

        try:
            master = spawn(master_cmd, "master")
            deadline = time.monotonic() + 60
            wait_for(lambda: resource_file.exists() or master.poll() is not None, deadline, "the resource file")
            if master.poll() is not None:
                raise BenchError(f"the master exited with status {master.returncode}\n{tail(logs[0])}")
            sampler = RssSampler(master.pid) if run.sample_rss else None
            slaves = _start_slaves(settings, checkout, run, resource_file, spawn, profile=profile)
            try:
                code = master.wait(run.timeout)
            except subprocess.TimeoutExpired:
                raise BenchError(f"the master did not finish within {run.timeout:g} s\n{tail(logs[0])}") from None
            sampled = sampler.stop() if sampler else None
            if code != 0 or not out.exists():
                raise BenchError(f"the master exited with status {code}\n{tail(logs[0])}")
            for slave in slaves:  # the master told them to shut down: they go on their own
                try:
                    slave.wait(30)
                except subprocess.TimeoutExpired:
                    raise BenchError("a slave did not exit after the master's shutdown") from None
            return _report(out, checkout, sampled, events if run.events else None)
        finally:
            for child in children:
                stop(child)


def _master_command(
    checkout: Checkout,
    run: MwpyRun,
    *,
    profile: Path | None,
    params: dict[str, Any],
    resource_file: Path,
    events: Path,
    out: Path,
) -> list[str]:
    return [
        *_python(checkout.python, profile / f"{run.profile_name}-master.prof" if profile else None),
        str(checkout.program),
        "--mw-master",
        "--mw-master-host", "127.0.0.1",
        "--mw-resource-file", str(resource_file),
        "--mw-audit-file", "/dev/null",
        *(["--mw-slave-task-group", str(run.task_group)] if run.task_group is not None else []),
        *(["--mw-slave-result-group", str(run.result_group)] if run.result_group is not None else []),
        *(["--mw-events", str(events)] if run.events else []),
        json.dumps(params),
        str(out),
    ]  # fmt: skip


def _report(out: Path, checkout: Checkout, sampled: float | None, events: Path | None) -> dict[str, Any]:
    """The master's JSON report, with which checkout ran, the sampled RSS and the event log's size (when asked for)."""
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    report["checkout"] = str(checkout.root)  # which tree's mwpy produced these figures
    if sampled is not None:
        report["sampled_peak_rss_mb"] = sampled
    if events is not None:
        if not events.exists():
            raise BenchError("--mw-events was given but the master wrote no event log")
        report["events_bytes"] = events.stat().st_size
    return report


def _start_slaves(
    settings: Settings, checkout: Checkout, run: MwpyRun, resource_file: Path, spawn: Spawn, *, profile: Path | None
) -> list[subprocess.Popen[bytes]]:
    if run.loadgen_processes:
        per_process, extra = divmod(run.slaves, run.loadgen_processes)
        return [
            spawn(
                [
                    checkout.python, "-m", "benchmarks.loadgen",
                    str(resource_file), str(per_process + (1 if i < extra else 0)),
                ],
                f"loadgen-{i}",
            )
            for i in range(run.loadgen_processes)
        ]  # fmt: skip
    slaves = []
    for i in range(run.slaves):
        prof = profile / f"{run.profile_name}-slave{i}.prof" if profile else None
        cmd = [
            *_python(checkout.python, prof),
            str(checkout.program),
            "--mw-slave",
            "--mw-resource-file", str(resource_file),
            "--mw-audit-file", "/dev/null",
        ]  # fmt: skip
        slaves.append(spawn(cmd, f"slave-{i}"))
    return slaves

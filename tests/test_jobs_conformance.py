"""Submit files nobody here wrote, run by condor_submit and by mwpy jobs: the same files, exits, holds and log events.

The corpus (tests/conformance/, one folder per file, its source named in it)
holds examples of HTCondor's manual and condor_submit man page and published
OSG tutorials, with their executables and inputs recreated. Each runs three
ways from identical copies: ``condor_submit`` on the test pool (the
reference), ``mwpy jobs --pool`` on the same pool, and ``mwpy jobs`` with
local slaves (where placement does not apply). Compared, byte for byte: every
file the jobs leave behind (outputs, stdout and stderr files, under their
names with the cluster id made neutral); each job's end (completed with its
exit code or signal, held with its reason, removed); and each job's user-log
events (the kinds HTCondor's starter adds about file transfer and image size
left out), read with ``htcondor2.JobEventLog``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.condor_support import POOL_TOOL, Pool, history, query
from tests.support import mwpy_command

pytestmark = pytest.mark.condor

CORPUS = Path(__file__).resolve().parent / "conformance"
CASES = sorted(path.name for path in CORPUS.iterdir() if path.is_dir())
#: How long one arm of one case may take.
DEADLINE = 300.0
#: Events of Condor's starter and shadow that mwpy does not write: image size (6), job-ad information (28), and
#: its file-transfer machinery: transfers (40), space reserved and released (41, 42), reuse (43-45), the common
#: files of HTCondor 25 (47).
STARTER_EVENTS = frozenset({6, 28, 40, 41, 42, 43, 44, 45, 47})
#: Condor's job states.
REMOVED, COMPLETED, HELD = 3, 4, 5
#: What the runs add that the jobs did not make: mwpy's summary and work folder.
OURS = re.compile(r"(^|/)[^/]*\.summary\.jsonl$|(^|/)[^/]*\.mwpy(/|$)")


@attrs.frozen
class Case:
    """One corpus folder: its submit file, the folder to submit from, and how to run it."""

    name: str
    submit: str = "job.sub"
    cwd: str = "."
    slaves: int = 4
    periodic_interval: float = 5.0
    min_condor: int = 0  # the HTCondor major version whose condor_submit knows every command of the file
    max_condor: int = 99  # the last one that takes it (HTCondor 24 refuses several queue statements)

    @classmethod
    def load(cls, name: str) -> Case:
        settings = CORPUS / name / "case.json"
        extra: dict[str, Any] = json.loads(settings.read_text()) if settings.exists() else {}
        return cls(name, **extra)

    def copy(self, where: Path) -> Path:
        """A fresh copy of the folder at ``where``."""
        shutil.copytree(CORPUS / self.name, where, symlinks=True)
        return where


@attrs.frozen
class JobEnd:
    """How one job ended: completed (exit code or signal), held (reason, codes) or removed."""

    state: str
    exit_code: int | None = None
    signal: int | None = None
    hold: str | None = None


def _environment(cwd: Path) -> dict[str, str]:
    """$ENV(PWD) in a submit file is the folder it is submitted from, as a shell sets it."""
    return {**os.environ, "PWD": str(cwd)}


# ---------------------------------------------------------------------- the three arms


def run_condor(pool: Pool, cwd: Path, case: Case) -> tuple[int, dict[int, JobEnd]]:
    """``condor_submit`` in ``cwd``; waits until every job has left the queue or sits held; the jobs' ends."""
    cluster = pool.condor_submit(cwd, case.submit)
    constraint = f"ClusterId == {cluster}"
    deadline = time.monotonic() + DEADLINE
    settled_since: float | None = None
    while True:
        ads = query(constraint, ("ProcId", "JobStatus", "HoldReason", "HoldReasonCode", "HoldReasonSubCode"))
        moving = [ad for ad in ads if int(ad["JobStatus"]) != HELD]
        if moving:
            settled_since = None
        elif settled_since is None:
            settled_since = time.monotonic()
        elif time.monotonic() - settled_since > 2 * case.periodic_interval:  # held jobs nothing releases
            break
        assert time.monotonic() < deadline, f"condor_submit's jobs of {case.name} did not end: {ads}"
        time.sleep(1.0)
    ends = {int(ad["ProcId"]): _held(ad) for ad in ads}
    projection = ["ProcId", "JobStatus", "ExitCode", "ExitBySignal", "ExitSignal"]
    for ad in _history_of(constraint, projection):
        ends.setdefault(int(ad["ProcId"]), _completed(ad))
    if ads:
        pool.inside(cwd, "condor_rm", str(cluster))
    return cluster, ends


def _history_of(constraint: str, projection: list[str]) -> list[Any]:
    deadline = time.monotonic() + 30
    while True:
        found = history(constraint, projection)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _held(ad: Any) -> JobEnd:
    hold = f"{neutral(ad.get('HoldReason'))} [{ad.get('HoldReasonCode')}/{ad.get('HoldReasonSubCode')}]"
    return JobEnd("held", hold=hold)


#: What a hold reason names that differs between runs by construction: the execute side ("Error from
#: slot1@host:"), the access point and execution point of a transfer, and the folders of paths.
_PLACES = (
    (re.compile(r"Error from [^:\s]*:"), "Error from EP:"),
    (re.compile(r"at access point \S+ while sending files to execution point \S+\. "), "at AP sending to EP. "),
    (re.compile(r"SHADOW at \S+ failed"), "SHADOW at AP failed"),
    (re.compile(r"<[^<>]*>"), "<AP>"),
    (re.compile(r"(?<=['\s])/\S*/"), ".../"),
)


def neutral(reason: object) -> str:
    """A hold reason with the places it names made neutral, the rest as it is."""
    text = str(reason)
    for pattern, replacement in _PLACES:
        text = pattern.sub(replacement, text)
    return text


def _completed(ad: Any) -> JobEnd:
    if int(ad["JobStatus"]) == REMOVED:
        return JobEnd("removed")
    if ad.get("ExitBySignal"):
        return JobEnd("completed", signal=int(ad["ExitSignal"]))
    return JobEnd("completed", exit_code=int(ad["ExitCode"]))


def run_mwpy_pool(pool: Pool, cwd: Path, case: Case) -> tuple[int, dict[int, JobEnd], str]:
    """``mwpy jobs FILE --pool`` in ``cwd``, inside the pool's root as its user would type it."""
    command = [
        sys.executable,
        str(POOL_TOOL),
        "exec",
        "--base",
        pool.facts["base"],
        "--cwd",
        str(cwd),
        "--env",
        "_condor_SEC_FS_ENFORCE_CHANNEL_BINDING=false",  # the pool venv's bindings are newer than its schedd
        "--",
        "mwpy",
        "jobs",
        case.submit,
        "--pool",
        "--slaves",
        str(case.slaves),
        "--periodic-interval",
        str(case.periodic_interval),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, check=False)
    found = re.search(r"master job (\d+)\.0", done.stderr)
    assert found is not None, f"mwpy jobs --pool did not submit:\n{done.stdout}\n{done.stderr}"
    return int(found[1]), _summary_ends(cwd / f"{case.submit}.summary.jsonl"), done.stdout + done.stderr


def run_mwpy_local(cwd: Path, case: Case, cluster: int) -> tuple[dict[int, JobEnd], str]:
    """``mwpy jobs FILE --slaves N`` with local slaves, ``$(Cluster)`` the reference run's."""
    command = mwpy_command(
        "jobs",
        case.submit,
        "--slaves",
        str(case.slaves),
        "--cluster",
        str(cluster),
        "--no-progress",
        "--periodic-interval",
        str(case.periodic_interval),
    )
    done = subprocess.run(
        command, cwd=cwd, env=_environment(cwd), capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    return _summary_ends(cwd / f"{case.submit}.summary.jsonl"), done.stdout + done.stderr


def _summary_ends(path: Path) -> dict[int, JobEnd]:
    assert path.exists(), f"no summary {path}"
    ends = {}
    for line in map(json.loads, path.read_text().splitlines()):
        if "job" not in line:
            continue
        process = int(line["job"].rpartition(".")[2])
        if line["status"] == "held":
            ends[process] = JobEnd("held", hold=neutral(line["why"]))
        elif line["status"] == "removed":
            ends[process] = JobEnd("removed")
        else:
            ends[process] = JobEnd("completed", exit_code=line.get("exit_code"), signal=line.get("signal"))
    return ends


# ---------------------------------------------------------------------- what is compared


def files(folder: Path, renamed: Callable[[str], str] = str) -> dict[str, bytes]:
    """Every file below ``folder`` but the user logs and mwpy's own, by its name (``renamed``)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file() or OURS.search(relative) or _is_user_log(path):
            continue
        found[renamed(relative)] = path.read_bytes()
    return found


def as_named_by(reference: set[str], cluster: int, own: int) -> Callable[[str], str]:
    """A run's file name with its own cluster id (``own``) as the reference run's (``cluster``): the occurrences
    of ``own`` that make a name the reference has (``job.7.7.out`` may hold a cluster 7 and a process 7)."""

    def renamed(name: str) -> str:
        spots = [match.span() for match in re.finditer(rf"(?<!\d){own}(?!\d)", name)]
        for chosen in itertools.product((False, True), repeat=len(spots)):
            candidate, last = "", 0
            for (start, end), swap in zip(spots, chosen, strict=True):
                candidate += name[last:start] + (str(cluster) if swap else name[start:end])
                last = end
            candidate += name[last:]
            if candidate in reference:
                return candidate
        return name

    return renamed


def _is_user_log(path: Path) -> bool:
    with open(path, "rb") as head:
        return re.match(rb"\d{3} \(\d+\.\d+\.\d+\) ", head.read(32)) is not None


def events(folder: Path, renamed: Callable[[str], str] = str) -> dict[str, list[tuple[Any, ...]]]:
    """Each user log's events, per job: kind, and the hold reason, codes or exit code it carries."""
    import htcondor2  # noqa: PLC0415

    found: dict[str, list[tuple[Any, ...]]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file() or OURS.search(relative) or not _is_user_log(path):
            continue
        name = renamed(relative)
        for event in htcondor2.JobEventLog(str(path)).events(0):
            kind = int(event.type)
            if kind in STARTER_EVENTS:
                continue
            detail: tuple[Any, ...] = ()
            if kind == 5:
                detail = (event.get("ReturnValue"), event.get("TerminatedBySignal"))
            elif kind == 12:
                detail = (neutral(event.get("HoldReason")), event.get("HoldReasonCode"), event.get("HoldReasonSubCode"))
            found.setdefault(f"{name} {event.proc}", []).append((kind, *detail))
    return found


def _before_our_removal(
    found: dict[str, list[tuple[Any, ...]]], ends: dict[int, JobEnd]
) -> dict[str, list[tuple[Any, ...]]]:
    """The reference's events without the aborted event (009) of run_condor's own condor_rm of the jobs it left
    held: the case's jobs end held, as mwpy's do."""
    return {
        key: kinds[:-1] if kinds[-1:] == [(9,)] and ends.get(int(key.rsplit(" ", 1)[1]), JobEnd("")).state == "held"
        else kinds
        for key, kinds in found.items()
    }  # fmt: skip


def _holds_as_mwpy_says(ends: dict[int, JobEnd]) -> dict[int, JobEnd]:
    """The summary names a held job's reason only: compare that part of Condor's."""
    return {
        process: attrs.evolve(end, hold=end.hold.rsplit(" [", 1)[0]) if end.hold else end
        for process, end in ends.items()
    }


@pytest.mark.parametrize("name", CASES)
def test_a_published_submit_file_runs_under_mwpy_jobs_as_under_condor_submit(
    name: str, condor_pool: Pool, condor_workdir: Path, tmp_path: Path
) -> None:
    case = Case.load(name)
    major = int(str(condor_pool.facts.get("condor_version") or "0").split(".")[0] or 0)
    if not case.min_condor <= major <= case.max_condor:
        versions = f"{case.max_condor} and earlier" if case.max_condor < 99 else f"{case.min_condor} or later"
        pytest.skip(f"{name}: condor_submit of HTCondor {versions} runs it; this pool has {major}")
    reference = case.copy(condor_workdir / "condor")
    pooled = case.copy(condor_workdir / "mwpy-pool")
    condor_pool.give(condor_workdir)
    cluster, condor_ends = run_condor(condor_pool, reference / case.cwd, case)
    master, pool_ends, pool_said = run_mwpy_pool(condor_pool, pooled / case.cwd, case)
    local = case.copy(tmp_path / "local")
    local_ends, local_said = run_mwpy_local(local / case.cwd, case, cluster)

    expected_files = files(reference)
    names = {path.relative_to(reference).as_posix() for path in reference.rglob("*")}
    assert files(pooled, as_named_by(names, cluster, master)) == expected_files, pool_said
    assert files(local) == expected_files, local_said  # local runs get the reference's $(Cluster)
    expected_ends = _holds_as_mwpy_says(condor_ends)
    assert pool_ends == expected_ends, pool_said
    assert local_ends == expected_ends, local_said
    expected_events = _before_our_removal(events(reference), condor_ends)
    assert events(pooled, as_named_by(names, cluster, master)) == expected_events, pool_said
    assert events(local) == expected_events, local_said

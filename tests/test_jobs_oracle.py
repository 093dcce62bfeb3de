"""The job list and job ads mwpy jobs makes of a submit file, against ``condor_submit -dry-run`` of the same file.

``condor_submit -dry-run -`` (in the test pool's root) prints the ads it would
queue: the cluster's first, then what each further job changes. Every queue
form, several queue statements, queue variables named like commands, a count
that is an expression, and the policy and placement commands are compared
with :class:`mwpy.jobs.description.SubmitDescription`: the same number of
jobs, and for each its executable, arguments, stdin/stdout/stderr,
initialdir, input files, and the policy attributes condor_submit writes
(``OnExitRemove``, ``OnExitHold``, ``JobMaxRetries``, ...) with the same text.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from mwpy.jobs.description import JobSpec, SubmitDescription
from tests.condor_support import Pool

pytestmark = pytest.mark.condor

#: Submit files whose job lists and ads are compared (name, text); files they read are made by _inputs.
FILES = {
    "queue-n-count-expression": "executable = /bin/echo\nN = 3\narguments = $(Process)\nqueue $(N)+1\n",
    "queue-in-with-count": "executable = /bin/echo\narguments = $(Item) $(Step)\nqueue 2 in (red, green, blue)\n",
    "queue-variable-named-input": "executable = /bin/cat\nqueue 1 input in A, B, C\n",
    "queue-input-arguments-from-list": (
        "executable = /bin/echo\nqueue input, arguments from (\n  file1, -a -b 26\n  file2, -c -d 92\n)\n"
    ),
    "queue-from-file-and-slice": "executable = /bin/echo\narguments = $(a)-$(b)\nqueue a, b from [1:] rows.txt\n",
    "queue-matching-files": (
        "executable = /bin/echo\narguments = -infile $(filename)\ntransfer_input_files = $(filename)\n"
        "queue filename matching files *.dat\n"
    ),
    "queue-initialdir-matching-dirs": "executable = /bin/pwd\nqueue initialdir matching dirs run_*\n",
    "queue-from-command": "executable = /bin/echo\narguments = item $(item)\nqueue from seq 7 9 |\n",
    "two-queue-statements": (
        "executable = /bin/echo\ninput = test.data\noutput = loop.out\ninitialdir = run_1\nqueue\n"
        "initialdir = run_2\narguments = second $(Process)\nqueue 2\n"
    ),
    "policy-retries": (
        "executable = /bin/true\nmax_retries = 3\nsuccess_exit_code = 2\nretry_until = ExitCode == 5 || ExitCode == 6\n"
        "on_exit_remove = ExitCode == 7\nqueue\n"
    ),
    "policy-holds": (
        'executable = /bin/true\non_exit_hold = ExitCode != 0\non_exit_hold_reason = strcat("failed ", ExitCode)\n'
        'on_exit_hold_subcode = ExitCode\nperiodic_hold = NumJobStarts > 3\nperiodic_hold_reason = "too many"\n'
        "periodic_hold_subcode = 42\nPeriodicRelease = (HoldReasonSubCode == 42)\n"
        "periodic_remove = (time() - QDate) > (100 * 3600)\nallowed_job_duration = 100\nhold = true\nqueue\n"
    ),
    "placement": (
        "executable = /bin/true\nrequest_cpus = 2\nrequest_memory = 1 GB\nrequest_disk = 100 Gb\n"
        'requirements = (OpSysAndVer == "Debian13")\n+ProjectName = "mwpy"\nbatch_name = conformance\n'
        "priority = 5\nqueue 2\n"
    ),
}
#: Attributes compared as condor_submit writes them (when it writes them).
POLICY = (
    "OnExitRemove",
    "OnExitHold",
    "OnExitHoldReason",
    "OnExitHoldSubCode",
    "PeriodicHold",
    "PeriodicHoldReason",
    "PeriodicHoldSubCode",
    "PeriodicRelease",
    "PeriodicRemove",
    "JobMaxRetries",
    "JobSuccessExitCode",
    "AllowedJobDuration",
    "RequestCpus",
    "RequestMemory",
    "RequestDisk",
    "JobBatchName",
    "JobPrio",
    "ProjectName",
)


def _inputs(folder: Path) -> None:
    for name in ("A", "B", "C", "file1", "file2", "initial.dat", "middle.dat", "ending.dat"):
        (folder / name).write_text(name)
    (folder / "rows.txt").write_text("x 1\ny 2\nz 3\n")
    for run in ("run_1", "run_2"):
        (folder / run).mkdir()
        (folder / run / "test.data").write_text(run)


def dry_run(pool: Pool, folder: Path, name: str) -> list[dict[str, str]]:
    """The ads ``condor_submit -dry-run -`` prints, one per job, each attribute's text as printed."""
    done = pool.inside(folder, "condor_submit", "-dry-run", "-", name)
    assert done.returncode == 0, done.stdout + done.stderr
    ads: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line == ".":
            merged = dict(ads[-1]) if ads else {}
            for pair in (("Args", "Arguments"), ("Arguments", "Args")):  # a job states its arguments one way
                if pair[0] in current:
                    merged.pop(pair[1], None)
            ads.append(merged | current)
            current = {}
            continue
        found = re.match(r"^([A-Za-z_][\w.]*)=(.*)$", line)
        if found:
            current[found.group(1)] = found.group(2)
    return ads


def _unquoted(text: str) -> str:
    return text[1:-1].replace('\\"', '"') if text.startswith('"') and text.endswith('"') else text


def _arguments(ad: dict[str, str]) -> list[str]:
    """Condor's ``Arguments`` (V2: spaces, ``'...'`` groups) or ``Args`` (V1: spaces) as an argv list."""
    if "Arguments" in ad:
        words = re.findall(r"'((?:[^']|'')*)'|(\S+)", _unquoted(ad["Arguments"]))
        return [quoted.replace("''", "'") if quoted else plain for quoted, plain in words]
    return _unquoted(ad.get("Args", '""')).split()


def _compared(spec: JobSpec, ad: dict[str, str]) -> list[str]:
    """The policy and placement attributes both write (condor_submit -dry-run leaves its defaults out)."""
    return [name for name in POLICY if name in ad and spec.ad.get(name)]


def _canonical(expression: str) -> str:
    """An expression as HTCondor's ClassAd library writes it back (spaces and parentheses its own way)."""
    import classad2  # noqa: PLC0415

    return str(classad2.ExprTree(expression))


def _expected(spec: JobSpec, ad: dict[str, str]) -> dict[str, Any]:
    """What of ``spec`` the dry run's ``ad`` must show."""
    found = {
        "Iwd": os.path.normpath(spec.initialdir),
        "arguments": list(spec.arguments),
        "In": spec.stdin or "/dev/null",
        "transfer_input": sorted(Path(item.source).name for item in spec.inputs),
    }
    return found | {name: _canonical(spec.ad.get(name)) for name in _compared(spec, ad)}


def _seen(spec: JobSpec, ad: dict[str, str]) -> dict[str, Any]:
    stdin = _unquoted(ad.get("In", '"/dev/null"'))
    iwd = os.path.normpath(_unquoted(ad["Iwd"]))  # matching dirs gives "run_1/"
    found = {
        "Iwd": iwd,
        "arguments": _arguments(ad),
        "In": stdin if stdin.startswith("/") else str(Path(iwd) / stdin),
        "transfer_input": sorted(Path(x).name for x in _unquoted(ad.get("TransferInput", '""')).split(",") if x),
    }
    return found | {name: _canonical(ad[name]) for name in _compared(spec, ad)}


@pytest.mark.parametrize("name", sorted(FILES))
def test_mwpy_jobs_makes_the_jobs_condor_submit_makes(name: str, condor_pool: Pool, condor_workdir: Path) -> None:
    major = int(str(condor_pool.facts.get("condor_version") or "0").split(".")[0] or 0)
    if name == "two-queue-statements" and major >= 24:
        pytest.skip("condor_submit of HTCondor 24 and later refuses several queue statements")
    _inputs(condor_workdir)
    (condor_workdir / f"{name}.sub").write_text(FILES[name])
    condor_pool.give(condor_workdir)
    ads = dry_run(condor_pool, condor_workdir, f"{name}.sub")
    specs = list(SubmitDescription(condor_workdir / f"{name}.sub", base=str(condor_workdir)).jobs())
    assert [spec.process for spec in specs] == [int(ad["ProcId"]) for ad in ads]
    pairs = list(zip(specs, ads, strict=True))
    assert [_expected(spec, ad) for spec, ad in pairs] == [_seen(spec, ad) for spec, ad in pairs]

"""``mwpy jobs FILE --pool``: the jobs master and its overseer as HTCondor jobs, in one command.

Both are submitted from the submit files inside the package
(``mwpy/submit/jobs-master.sub`` and ``mwpy/submit/overseer.sub``), so a user
with nothing but ``pip install mwpy`` and a submit file runs it on the pool.
Both go to the scheduler universe on this submit host, from a work folder
beside the submit file (``FILE.mwpy/``: the resource file, the slave bundle,
the journal, the master's and the overseer's output and logs); the overseer
submits up to ``--slaves`` slave jobs and removes them when the run is over.
The master keeps a journal: when Condor restarts it (a schedd restart, a
reboot), finished jobs are answered from the journal, and it says so.

The overseer is told the master's job id (``--master-job``): once that job
has left the queue -- finished, removed, or failed before it wrote its
resource file -- it removes the slave jobs and leaves too, so that no
overseer waits for ever for a file that will never come.

The command then waits for the master to leave the queue, relays its output
(the run's one line, the jobs that were not ok), waits for the overseer to
remove the slave jobs and leave (for ``OVERSEER_GRACE`` seconds at most) and
exits with the master's status, like ``mwpy jobs`` with local slaves: once
it returns, nothing of the run is queued. Ctrl-C leaves the run to the pool
and says how to follow it.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mwpy import safe_text
from mwpy.errors import MwpyError
from mwpy.jobs import bindings
from mwpy.names import RESOURCE_FILE

#: The submit files shipped inside the package.
SUBMIT = Path(__file__).resolve().parent.parent / "submit"
#: The program the master and the slaves run, by path (mwpy.jobs.program runs that way).
PROGRAM = Path(__file__).resolve().parent / "program.py"
#: Seconds between looks at the queue while the run goes on.
POLL = 2.0
#: Seconds the command waits for the overseer to leave after the master: it removes idle slave jobs at once
#: and running ones after their grace (mwpy/overseer.py's FINISH_GRACE), reconciling every 5 s.
OVERSEER_GRACE = 60.0


class PoolRunError(MwpyError):
    """The pool refused the master or the overseer, or lost them."""


def workdir(submit_file: str) -> Path:
    """The run's folder beside the submit file: ``FILE.mwpy``."""
    return Path(os.path.abspath(submit_file) + ".mwpy")


def run(options: argparse.Namespace, program_args: list[str]) -> int:
    """Submit the master and the overseer, wait for the master, relay what it printed; its exit status."""
    htcondor2 = bindings.htcondor()  # only --pool needs the bindings

    from mwpy.backends.htcondor import explain  # noqa: PLC0415

    work = Path(options.workdir).resolve() if options.workdir else workdir(options.submit_file)
    try:
        master, overseer = _submit(htcondor2, options, program_args, work)
    except (htcondor2.HTCondorException, ValueError, OSError) as exc:
        print(f"mwpy jobs: error: cannot submit to the pool: {explain(exc)}", file=sys.stderr)
        return 1
    print(
        f"mwpy jobs: master job {master}.0 and overseer job {overseer}.0 submitted; follow with mwpy status "
        f"{work / RESOURCE_FILE}",
        file=sys.stderr,
    )
    try:
        status = _wait(htcondor2, master)
    except KeyboardInterrupt:
        print(
            f"mwpy jobs: interrupted; the run goes on in the pool (mwpy status {work / RESOURCE_FILE}, "
            f"condor_rm {master} {overseer} to stop it)",
            file=sys.stderr,
        )
        return 130
    except PoolRunError as exc:
        print(f"mwpy jobs: error: {exc}", file=sys.stderr)
        status = 1
    else:
        _relay(work, master)
    _wait_overseer(htcondor2, overseer)
    return status


def _submit(htcondor2: Any, options: argparse.Namespace, program_args: list[str], work: Path) -> tuple[int, int]:
    """Both jobs, each from its packaged submit file with the macros set (as ``condor_submit -a`` would)."""
    if work.exists():
        shutil.rmtree(work / "journal", ignore_errors=True)  # a new run is a new run: no answers from the last one
        (work / "journal").unlink(missing_ok=True)
        (work / RESOURCE_FILE).unlink(missing_ok=True)  # the last run's says "finished": the overseer would stop
    work.mkdir(parents=True, exist_ok=True)
    submit, summary = program_args[0], program_args[2]  # --cluster: on the pool, the master job's own cluster id
    condor = {name: value for name, value in os.environ.items() if name.lower().startswith("_condor_")}
    environment = " ".join(f"{name}={value}" for name, value in sorted(condor.items()))
    common = {"initialdir": str(work), "python": sys.executable, "resource": RESOURCE_FILE}
    master = _one(
        htcondor2,
        SUBMIT / "jobs-master.sub",
        {
            **common,
            "jobs": submit,
            "summary": summary,
            "journal": str(work / "journal"),
            "program": str(PROGRAM),
            "slave_python": options.slave_python,
            "jobs_options": " ".join(_quoted(arg) for arg in program_args[program_args.index("--base") :]),
            "master_options": " ".join(_quoted(arg) for arg in options.program_args),
        },
    )
    overseer = _one(
        htcondor2,
        SUBMIT / "overseer.sub",
        {
            **common,
            "max_jobs": str(options.slaves),
            "max_idle": str(options.slaves),
            "batch": str(options.slaves),
            "interval": "5",
            "extra_environment": environment,
            "overseer_options": f"--master-job {master}.0",
        },
    )
    return master, overseer


def _quoted(argument: str) -> str:
    """One argument inside the new-syntax ``arguments`` of the packaged file: single-quoted."""
    return "'" + argument.replace("'", "''").replace('"', '""') + "'"


def _one(htcondor2: Any, path: Path, macros: dict[str, str]) -> int:
    description = htcondor2.Submit(path.read_text())
    for name, value in macros.items():
        description[name] = value
    result = htcondor2.Schedd().submit(description)
    return int(result.cluster())


def _wait(htcondor2: Any, cluster: int) -> int:
    """Until the master's job has left the queue; its exit code from the history.

    The schedd may restart meanwhile (the master then resumes from its journal): a failed query is asked
    again of a freshly located schedd (after a restart the first calls fail on stale sessions).
    """
    _left_queue(htcondor2, cluster, deadline=math.inf)
    constraint = f"ClusterId == {cluster}"
    projection = ["ExitCode", "ExitBySignal", "JobStatus"]
    for _ in range(30):  # the history may lag the queue by a moment
        ads = _ask(htcondor2, lambda schedd: list(schedd.history(constraint, projection=projection, match=1)))
        if ads:
            ad = ads[0]
            if int(ad.get("JobStatus", 0)) == 3:
                raise PoolRunError(f"the master job {cluster}.0 was removed from the queue")
            if ad.get("ExitBySignal"):
                return 1
            return int(ad.get("ExitCode", 1))
        time.sleep(1.0)
    raise PoolRunError(f"the master job {cluster}.0 left the queue but is not in the history")


def _wait_overseer(htcondor2: Any, cluster: int) -> None:
    """Until the overseer has removed the run's slave jobs and left the queue, for ``OVERSEER_GRACE`` s at most."""
    try:
        if not _left_queue(htcondor2, cluster, deadline=time.monotonic() + OVERSEER_GRACE):
            print(
                f"mwpy jobs: note: the overseer job {cluster}.0 is still removing the run's slave jobs "
                f"(condor_q {cluster})",
                file=sys.stderr,
            )
    except PoolRunError as exc:
        print(f"mwpy jobs: note: cannot see whether the overseer job {cluster}.0 has left: {exc}", file=sys.stderr)


def _left_queue(htcondor2: Any, cluster: int, *, deadline: float) -> bool:
    """Wait until job ``cluster``.0 has left the queue (True), or until ``deadline`` (monotonic) passes (False)."""
    constraint = f"ClusterId == {cluster}"
    while _ask(htcondor2, lambda schedd: schedd.query(constraint, projection=["JobStatus"])):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def _ask(htcondor2: Any, call: Any) -> Any:
    """A schedd call, tried again for up to a minute while the schedd is away or restarting."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call(htcondor2.Schedd())
        except htcondor2.HTCondorException:
            if time.monotonic() > deadline:
                raise PoolRunError("the schedd did not answer for a minute") from None
            time.sleep(POLL)


def _relay(work: Path, cluster: int) -> None:
    """What the master printed: its stdout here, its stderr lines that were not already said before it ran."""
    for name, stream in ((f"master.{cluster}.0.out", sys.stdout), (f"master.{cluster}.0.err", sys.stderr)):
        try:
            text = (work / name).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "warning:" in line or "note:" in line:
                continue  # said before the run started
            print(safe_text.one_line(line), file=stream)  # the master's lines quote jobs: shown safe

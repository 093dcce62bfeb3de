"""The ``mwpy`` command: ``local``, ``overseer``, ``status``, ``report`` and ``bundle``.

Each subcommand reports a wrong argument in one line and exits 2; nothing here
prints a traceback for a user's mistake. ``mwpy overseer`` knows no back end
by itself: it looks ``--backend`` up in :mod:`mwpy.backends` and lets the back
end add its own options, so a new back end needs no edit here.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from mwpy import backends, overseer_state, resource_file, safe_text
from mwpy._version import __version__
from mwpy.backends import Backend, BackendFactory, Job, MasterWatch
from mwpy.errors import BackendError, ConfigurationError, EventLogError, MwpyError, ResourceFileError
from mwpy.jobs import command as jobs_command
from mwpy.names import BUNDLE_FILE
from mwpy.options import DEFAULT_MASTER_LEASE, condor_job_id, positive_float, positive_int
from mwpy.overseer import ABANDON_AFTER, CONNECT_LIMIT, Limits, Overseer, Verdict
from mwpy.pool import bundle
from mwpy.resources import slave_shape

#: The back end ``mwpy overseer`` uses without ``--backend``.
DEFAULT_BACKEND = "condor"
#: ``mwpy status --explain TASK`` for a task id the master never issued (docs/exit-codes.md).
UNKNOWN_TASK = 3


def _parser(backend: BackendFactory | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``backend`` (the one ``--backend`` names) adds its options to ``overseer``."""
    parser = argparse.ArgumentParser(prog="mwpy", description="Run and oversee mwpy computations.")
    parser.add_argument("--version", action="version", version=f"mwpy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    local = commands.add_parser(
        "local",
        help="run a program as master with N local slave processes",
        description="Run PROGRAM as master with N local slaves. Arguments after -- go to the program "
        "(--mw-* options among them go to mwpy).",
    )
    local.add_argument("program", help="the mwpy program (a .py file)")
    local.add_argument(
        "--slaves",
        type=positive_int,
        default=2,
        help="most slave processes at once (default 2): slaves start as the master asks for them",
    )
    local.add_argument(
        "--slave-resources",
        action="append",
        type=slave_shape,
        default=[],
        metavar="SHAPE",
        help="what each slave offers to tasks' resources=, e.g. cpus=2,memory=16GB,gpus=1 (repeatable: the "
        "slaves are dealt among the shapes); default: this machine's cpus and memory. A task no shape "
        "satisfies fails at once (mwpy.NoMatchingSlaveError)",
    )
    local.add_argument("--workdir", help="folder for the resource file, logs and slave sandboxes (kept)")
    local.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the live status view (default: on a terminal; plain lines otherwise)",
    )
    local.add_argument("--total", type=positive_int, help="tasks in all, for the progress bar and ETA")
    local.add_argument(
        "--quiet", action="store_true", help="do not show what tasks print (the master's --mw-quiet); kept in results"
    )
    local.add_argument(
        "--slave-lifetime",
        type=positive_float,
        metavar="SECONDS",
        help="each slave leaves by plan before this many seconds (the master's --mw-slave-lifetime) and a fresh "
        "one takes its place: to try out what a pool's run-time limit does to the program",
    )

    overseer = commands.add_parser(
        "overseer",
        help="keep a batch system's slave jobs matched to a resource file",
        description="Watch RESOURCE_FILE and grow or shrink the computation's slave jobs until it finishes. "
        "The options below --interval are those of the back end --backend names.",
        # --backend is read before the rest (it decides which options exist): no abbreviations, which
        # that first reading could not follow.
        allow_abbrev=False,
    )
    overseer.add_argument("resource_file")
    overseer.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        help=f"batch system: {', '.join(backends.names())}, or package.module:attr (default {DEFAULT_BACKEND})",
    )
    overseer.add_argument(
        "--max-jobs", type=positive_int, default=Limits().max_jobs, help="cap on all slave jobs, of every shape"
    )
    overseer.add_argument(
        "--max-idle", type=positive_int, default=Limits().max_idle, help="cap on idle slave jobs, of every shape"
    )
    overseer.add_argument(
        "--batch",
        type=positive_int,
        default=Limits().batch,
        help="most jobs submitted at once (shared among shapes in turn)",
    )
    overseer.add_argument(
        "--max-memory", type=positive_int, default=Limits().max_memory, metavar="MB",
        help="a slave job held for memory that asked for this much stays held (and, for a master of earlier mwpy, "
        "the cap on what a held job's shape is raised to)",
    )  # fmt: skip
    overseer.add_argument("--interval", type=positive_float, default=10.0, help="seconds between timed reconciliations")
    overseer.add_argument(
        "--abandon-after",
        type=positive_float,
        default=ABANDON_AFTER,
        metavar="SECONDS",
        help="remove the computation's jobs and exit 1 once the resource file has been stale this long "
        "past its update interval and grace, or absent this long with no master job to watch: the master is "
        f"gone for good (default {ABANDON_AFTER:g})",
    )
    overseer.add_argument(
        "--master-job",
        type=condor_job_id,
        metavar="CLUSTER.PROC",
        help="the master's own job, as condor_q shows it: once it has left the queue, remove every slave job and "
        "exit 1, even if no resource file was ever written (default: the resource file's master_condor_job); "
        "a job the schedd never knew is refused (exit 2)",
    )
    overseer.add_argument(
        "--connect-limit",
        type=positive_float,
        default=CONNECT_LIMIT,
        metavar="SECONDS",
        help="remove and replace a slave job that has run this long without its slave connecting to the "
        f"master (Condor job ids; default {CONNECT_LIMIT:g})",
    )
    overseer.add_argument(
        "--slave-lifetime",
        type=positive_float,
        metavar="SECONDS",
        help="the slave jobs submitted leave by plan before this many seconds from their start and are replaced "
        "(their --mw-slave-lifetime, winning over the master's; docs/condor.md, Lifetimes)",
    )
    if backend is not None:
        backend.add_arguments(overseer)

    bundle_cmd = commands.add_parser(
        "bundle",
        help="write mwpy.pyz: mwpy and its dependencies, to ship to execute nodes",
        description="Write a zipapp that runs an mwpy program with mwpy importable: "
        "python3 mwpy.pyz PROGRAM.py --mw-slave ...",
    )
    bundle_cmd.add_argument("-o", "--output", default=BUNDLE_FILE, help=f"where to write it (default {BUNDLE_FILE})")

    status = commands.add_parser("status", help="show a computation's state from its resource file")
    status.add_argument("resource_file")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--condor",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the slave jobs in the Condor schedd (default: when a schedd answers)",
    )
    status.add_argument("--schedd", metavar="NAME", help="the Condor schedd's name (default: the local schedd)")
    status.add_argument(
        "--collector", metavar="HOST:PORT", help="the collector that knows the schedd (default: the local pool)"
    )
    status.add_argument(
        "--explain",
        type=positive_int,
        metavar="TASK",
        help="why task TASK (its id, as results and the event log give it) is not running; exit 3 for an unknown id",
    )
    status.add_argument("--watch", action="store_true", help="a live view until the computation finishes")
    status.add_argument("--interval", type=positive_float, default=1.0, help="--watch: seconds between refreshes")
    status.add_argument("--total", type=positive_int, help="--watch: tasks in all, for the progress bar and ETA")
    status.add_argument(
        "--events",
        help="the master's event log (--mw-events): --watch shows failures and the total from it, --explain how the "
        "task ended and its failed runs",
    )

    jobs_command.add_parser(commands)
    report = commands.add_parser(
        "report",
        help="write an HTML report (plots, goodput, failures) from an event log",
        description="Write one self-contained HTML file from the event log a master wrote with --mw-events.",
    )
    report.add_argument("events", help="the event log")
    report.add_argument("-o", "--output", default="report.html", help="where to write it (default report.html)")
    for sub in commands.choices.values():  # a command's own mistakes are told with its own usage
        sub.set_defaults(command_parser=sub)
    return parser


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> argparse.Namespace:
    """``args`` parsed; an argument a command does not know gets that command's usage (not mwpy's), and under
    ``mwpy local`` a hint that the program's own arguments go after ``--``."""
    options, unknown = parser.parse_known_args(args)
    if unknown:
        command: argparse.ArgumentParser = options.command_parser
        hint = ""
        if options.command == "local" and not any(arg.startswith("-") for arg in unknown):
            hint = f" (arguments for the program go after --: {command.prog} ... -- {' '.join(unknown)})"
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    program_args: list[str] = []
    if args[:1] in (["local"], ["jobs"]) and "--" in args:
        cut = args.index("--")
        args, program_args = args[:cut], args[cut + 1 :]
    backend: BackendFactory | None = None
    if args[:1] == ["overseer"]:
        try:
            backend = backends.lookup(_backend_name(args[1:]))
        except (ConfigurationError, BackendError) as exc:
            print(f"mwpy overseer: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigurationError) else 1
    options = _parse(_parser(backend), args)
    options.program_args, options.backend_factory = program_args, backend
    command: Callable[[argparse.Namespace], int] = _COMMANDS[options.command]
    return command(options)


def _local(options: argparse.Namespace) -> int:
    from mwpy.pool.local import run_local  # noqa: PLC0415 (rich, for its live view, is only needed here)

    return run_local(
        options.program,
        options.slaves,
        _mwpy_options(options) + options.program_args,
        workdir=options.workdir,
        progress=options.progress,
        total=options.total,
        shapes=options.slave_resources,
    )


def _mwpy_options(options: argparse.Namespace) -> list[str]:
    """The master's ``--mw-*`` options that ``mwpy local``'s own options stand for."""
    given = ["--mw-quiet"] if options.quiet else []
    if options.slave_lifetime is not None:
        given += ["--mw-slave-lifetime", str(options.slave_lifetime)]
    return given


def _overseer_command(options: argparse.Namespace) -> int:
    assert options.backend_factory is not None
    return _overseer(options, options.backend_factory)


def _bundle(options: argparse.Namespace) -> int:
    print(bundle.build(options.output))
    return 0


def _report(options: argparse.Namespace) -> int:
    from mwpy.observe import report  # noqa: PLC0415 (plotly is heavy and optional)

    try:
        path = report.build_report(options.events, options.output)
    except EventLogError as exc:
        print(f"mwpy report: error: {exc}", file=sys.stderr)
        return 1
    except ImportError:
        print("mwpy report: error: the report needs plotly: pip install 'mwpy[report]'", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mwpy report: error: {options.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def _status_command(options: argparse.Namespace) -> int:
    if not options.watch:
        return _status(options)
    from mwpy.observe.statusview import watch  # noqa: PLC0415 (rich is only needed here)

    return watch(
        options.resource_file,
        interval=options.interval,
        total=options.total,
        events=options.events,
        condor=options.condor,
    )


def _log(text: str) -> None:
    """One overseer line; it may quote Condor's hold reasons and the jobs they quote: shown safe."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [O] {safe_text.one_line(text)}", flush=True)


def _backend_name(args: Sequence[str]) -> str:
    """The ``--backend`` of an ``mwpy overseer`` command line, read before the rest is parsed."""
    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    first.add_argument("--backend", default=DEFAULT_BACKEND)
    name: str = first.parse_known_args(args)[0].backend
    return name


def _overseer(options: argparse.Namespace, factory: BackendFactory) -> int:
    try:
        backend: Backend = factory.create(options.resource_file, options)
    except ConfigurationError as exc:
        print(f"mwpy overseer: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, BackendError, ResourceFileError) as exc:
        print(f"mwpy overseer: error: {exc}", file=sys.stderr)
        return 1
    if options.master_job and (unwatchable := _master_job_problem(backend, options.master_job)) is not None:
        backend.close()
        print(f"mwpy overseer: error: {unwatchable[1]}", file=sys.stderr)
        return unwatchable[0]
    limits = Limits(
        max_jobs=options.max_jobs, max_idle=options.max_idle, batch=options.batch, max_memory=options.max_memory
    )
    overseer = Overseer(
        options.resource_file,
        backend,
        limits,
        log=_log,
        abandon_after=options.abandon_after,
        connect_limit=options.connect_limit,
        slave_lifetime=options.slave_lifetime,
        master_job=options.master_job,
    )
    watching = f", watching master job {options.master_job}" if options.master_job else ""
    _log(f"overseeing {overseer.path} with the {backend.name} back end ({limits}){watching}")
    started = time.monotonic()
    try:
        problem = overseer_state.write(options.resource_file, limits.max_jobs, backend.name)
        if problem is not None:
            _log(problem)
        verdict = overseer.run(threading.Event(), interval=options.interval)
    except KeyboardInterrupt:
        verdict = Verdict.RUNNING
    finally:
        overseer_state.remove(options.resource_file)
        backend.close()
        _log_queries(backend, time.monotonic() - started)
    if verdict in (Verdict.INVALID, Verdict.ABANDONED):
        print(f"mwpy overseer: error: {overseer.problem}", file=sys.stderr)
    return 0 if verdict is Verdict.FINISHED else 1


def _master_job_problem(backend: Backend, job: str) -> tuple[int, str] | None:
    """(exit status, line) when ``--master-job`` cannot be watched: the back end cannot see a master job, or
    never knew this one (a typo would be watched for ever: it never leaves a queue it was never in), or cannot
    be asked; None when it can be watched."""
    if not isinstance(backend, MasterWatch):
        return 2, f"--master-job: the {backend.name} back end cannot see a master job"
    try:
        if backend.master_known(job):
            return None
    except BackendError as exc:
        return 1, f"--master-job {job}: {exc}"
    return 2, f"--master-job {job}: no such master job in the queue or the history of this schedd"


def _log_queries(backend: Backend, seconds: float) -> None:
    """``schedd queries: 4 in 12.0 min (jobs 3, master 1)``, for a back end that counts them (Condor's)."""
    queries = getattr(backend, "queries", None)
    if isinstance(queries, dict) and queries:
        parts = ", ".join(f"{purpose} {count}" for purpose, count in sorted(queries.items()))
        _log(f"schedd queries: {sum(queries.values())} in {seconds / 60:.1f} min ({parts})")


def _status(options: argparse.Namespace) -> int:
    try:
        record = resource_file.read(options.resource_file)
    except ResourceFileError as exc:
        print(f"mwpy status: error: {exc}", file=sys.stderr)
        return 1
    listed, why, gone = _condor_view(record, options) if options.condor is not False else (None, None, None)
    gone = record.removal() or gone  # the master's own word needs no schedd
    if options.explain is not None:
        return _explain(record, options, listed, why if options.condor else None, gone)
    state = "finished" if record.finished else "master gone" if gone else "stale" if record.stale() else "in progress"
    report = {
        "status": state,
        "age_seconds": round(record.age(), 1),
        "master": f"{record.master_host}:{record.master_port}",
        "member_id": record.member_id,
        "slaves_needed": record.slaves_needed,
        "overseer_max_jobs": overseer_state.max_jobs(options.resource_file),
        "slaves_connected": record.slaves_connected,
        "condor_jobs_connected": record.condor_jobs_connected,
        "tasks_done": record.tasks_done,
        "tasks_queued": record.tasks_pending,
        "tasks_running": record.tasks_running,
        "shapes": [attrs.asdict(shape) for shape in record.shapes],
        "learned_memory": record.learned_memory or {},
        "journal_answers": record.journal_answers,
        "awaited_handovers": record.awaited_handovers,
        "demand_reason": record.demand_reason,
    }
    report.update(jobs_command.status_report(options.resource_file))
    report["master_condor_job"] = record.master_condor_job
    report["master_gone"] = gone
    jobs = _counts(listed) if listed is not None else None
    report["slave_jobs"] = jobs
    if listed is not None:
        report["slave_job_list"] = [_job_report(job) for job in listed]
    if why and options.condor:
        report["slave_jobs_error"] = why
    if options.json:
        print(json.dumps(report, indent=2))
    else:
        _print_status(record, report, listed, why if options.condor else None)
    return 1 if why and options.condor else 0


def _print_status(
    record: resource_file.ResourceFile, report: dict[str, Any], listed: list[Job] | None, why: str | None
) -> None:
    """``mwpy status`` as rows of text: the report, and each slave job with its reason."""
    connected = sum(record.slaves_connected.values())
    groups = ", ".join(f"{k} {v}" for k, v in record.slaves_connected.items() if v)
    cap = report["overseer_max_jobs"]
    needed = overseer_state.needed_within(record.slaves_needed, connected, cap)
    capped = f" (overseer cap: --max-jobs {cap})" if needed < record.slaves_needed else ""
    # An mwpy jobs run's counts (RESOURCE.jobs, written every second) replace the resource file's task counts
    # (written every update interval): two sources at different rates disagree.
    tasks = jobs_command.status_rows(report) or [
        ("tasks", f"{record.tasks_done} done, {record.tasks_running} running, {record.tasks_pending} queued")
    ]
    rows = [
        ("status", f"{report['status']} (written {record.age():.0f} s ago, every {record.update_interval:g} s)"),
        ("master", f"{report['master']}  member id {record.member_id!r}"),
        ("slaves", f"{connected} connected{f' ({groups})' if groups else ''}, {needed:,} more needed{capped}"),
        *([("demand", record.demand_reason)] if record.demand_reason else []),  # why that many (core/demand.py)
        *tasks,
        *_side_rows(record),
    ]
    if record.condor_jobs_connected:
        rows.insert(3, ("", f"Condor jobs of connected slaves: {' '.join(record.condor_jobs_connected)}"))
    if report["status"] == "stale":  # a master killed or its host lost: Condor may be starting it again
        rows.insert(1, ("", "the master is silent: gone or restarting; its slaves keep their tasks and wait for a "
                            f"master of this member id up to their --mw-master-lease ({DEFAULT_MASTER_LEASE:g} s by "
                            "default), then exit 4"))  # fmt: skip
    if report["master_gone"]:
        from mwpy.observe.explain import master_left  # noqa: PLC0415 (only a gone master needs it)

        rows.insert(2, ("", master_left(report["master_gone"], finished=record.finished)))
    elif record.master_condor_job:
        rows.insert(2, ("", f"master job {record.master_condor_job}"))
    jobs = report["slave_jobs"]
    if jobs is not None:
        rows.append(("jobs", f"{jobs['idle']} idle, {jobs['running']} running, {jobs['held']} held (Condor slaves)"))
        rows.extend(("", _job_line(job)) for job in listed or [])
    elif why:
        rows.append(("jobs", f"unknown: {why}"))
    for name, value in rows:  # hold reasons and the summary's path may quote a job: shown safe
        print(f"{name:<8} {safe_text.one_line(value)}")


def _side_rows(record: resource_file.ResourceFile) -> list[tuple[str, str]]:
    """The rows under the task counts that apply: demand per need, learned memory, a resume from the journal."""
    rows = [("shapes", "; ".join(shape.describe() for shape in record.shapes))] if record.shapes else []
    if record.learned_memory:
        rows.append(("learned", f"memory {resource_file.describe_learned(record.learned_memory)}"))
    if record.journal_answers:
        rows.append(("resumed", f"{record.journal_answers:,} answers from the journal"))
    if record.awaited_handovers:
        rows.append(("restart", f"master restarting: {record.awaited_handovers:,} keyed tasks wait for the slaves "
                                "of the previous master, which outlive it, to hand over"))  # fmt: skip
    return rows


def _explain(
    record: resource_file.ResourceFile,
    options: argparse.Namespace,
    listed: list[Job] | None,
    why: str | None,
    gone: str | None,
) -> int:
    """``mwpy status --explain TASK``: 0 with the lines, 3 for a task the master never issued, 1 without a board."""
    from mwpy.observe import explain  # noqa: PLC0415 (only this option needs it)

    try:
        failures, problem = explain.failures_of(options.events, options.explain) if options.events else (None, None)
        lines = explain.explain(
            record, options.explain, jobs=listed, condor_problem=why, master_gone=gone, failures=failures
        )
    except MwpyError as exc:
        print(f"mwpy status: error: {exc}", file=sys.stderr)
        return UNKNOWN_TASK if isinstance(exc, explain.UnknownTaskError) else 1
    lines += [f"event log: {problem}"] if problem else []
    lines = [safe_text.one_line(line) for line in lines]  # job reasons, slave names, task errors: shown safe
    print(json.dumps({"task": options.explain, "explanation": lines}, indent=2) if options.json else "\n".join(lines))
    return 0


def _condor_view(
    record: resource_file.ResourceFile, options: argparse.Namespace
) -> tuple[list[Job] | None, str | None, str | None]:
    """The computation's slave jobs in the schedd (``--schedd``/``--collector``), or None and why not;
    and how the master's own job left the queue, when it did."""
    try:
        from mwpy.backends.htcondor import queue_view  # noqa: PLC0415 (slow to import, often not needed)

        jobs, gone = queue_view(
            record.member_id, record.master_condor_job, schedd=options.schedd, collector=options.collector
        )
    except (ImportError, BackendError) as exc:
        return None, str(exc), None
    return jobs, None, gone


def _counts(jobs: Sequence[Job]) -> dict[str, int]:
    """Jobs by state (the ``slave_jobs`` object of ``mwpy status --json``)."""
    counts = {state: sum(job.state.value == state for job in jobs) for state in ("idle", "running", "held")}
    counts["total"] = len(jobs)
    return counts


def _job_report(job: Job) -> dict[str, object]:
    """One slave job for ``mwpy status --json``: id, state, since when (and for how long), and why."""
    how_long = job.in_state_for()
    return {
        "job_id": job.job_id,
        "state": job.state.value,
        "since": job.since,
        "state_seconds": None if how_long is None else round(how_long, 1),
        "reason": job.reason,
    }


def _job_line(job: Job) -> str:
    """``41.3 held for 2 min: <hold reason>``: one slave job for ``mwpy status``."""
    how_long = job.in_state_for()
    line = f"{job.job_id} {job.state.value}" + ("" if how_long is None else f" for {how_long:.0f} s")
    return f"{line}: {job.reason}" if job.reason else line


#: What each subcommand runs, by name.
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "local": _local,
    "overseer": _overseer_command,
    "bundle": _bundle,
    "report": _report,
    "status": _status_command,
    "jobs": jobs_command.run,
}

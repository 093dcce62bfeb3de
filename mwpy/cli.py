"""The ``mwpy`` command: ``local``, ``overseer``, ``status`` and ``bundle``.

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
from collections.abc import Sequence

from mwpy import backends, bundle, resource_file
from mwpy._version import __version__
from mwpy.backends import Backend, BackendFactory
from mwpy.errors import BackendError, ConfigurationError, ResourceFileError
from mwpy.local import run_local
from mwpy.options import positive_float, positive_int
from mwpy.overseer import Limits, Overseer, Verdict

#: The back end ``mwpy overseer`` uses without ``--backend``.
DEFAULT_BACKEND = "condor"


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
    local.add_argument("--workdir", help="folder for the resource file, logs and slave sandboxes (kept)")
    local.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="live progress line (default: on a tty)"
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
    overseer.add_argument("--max-jobs", type=positive_int, default=Limits().max_jobs, help="cap on all slave jobs")
    overseer.add_argument("--max-idle", type=positive_int, default=Limits().max_idle, help="cap on idle slave jobs")
    overseer.add_argument("--batch", type=positive_int, default=Limits().batch, help="most jobs submitted at once")
    overseer.add_argument("--interval", type=positive_float, default=10.0, help="seconds between timed reconciliations")
    if backend is not None:
        backend.add_arguments(overseer)

    bundle_cmd = commands.add_parser(
        "bundle",
        help="write mwpy.pyz: mwpy and its dependencies, to ship to execute nodes",
        description="Write a zipapp that runs an mwpy program with mwpy importable: "
        "python3 mwpy.pyz PROGRAM.py --mw-slave ...",
    )
    bundle_cmd.add_argument("-o", "--output", default="mwpy.pyz", help="where to write it (default mwpy.pyz)")

    status = commands.add_parser("status", help="show a computation's state from its resource file")
    status.add_argument("resource_file")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--condor",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the slave jobs in the local Condor schedd (default: when a schedd answers)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    program_args: list[str] = []
    if args[:1] == ["local"] and "--" in args:
        cut = args.index("--")
        args, program_args = args[:cut], args[cut + 1 :]
    backend: BackendFactory | None = None
    if args[:1] == ["overseer"]:
        try:
            backend = backends.lookup(_backend_name(args[1:]))
        except (ConfigurationError, BackendError) as exc:
            print(f"mwpy overseer: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigurationError) else 1
    options = _parser(backend).parse_args(args)
    if options.command == "local":
        return run_local(
            options.program, options.slaves, program_args, workdir=options.workdir, progress=options.progress
        )
    if options.command == "overseer":
        assert backend is not None
        return _overseer(options, backend)
    if options.command == "bundle":
        print(bundle.build(options.output))
        return 0
    return _status(options)


def _log(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [O] {text}", flush=True)


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
    limits = Limits(max_jobs=options.max_jobs, max_idle=options.max_idle, batch=options.batch)
    overseer = Overseer(options.resource_file, backend, limits, log=_log)
    _log(f"overseeing {overseer.path} with the {backend.name} back end ({limits})")
    try:
        verdict = overseer.run(threading.Event(), interval=options.interval)
    except KeyboardInterrupt:
        verdict = Verdict.RUNNING
    finally:
        backend.close()
    if verdict is Verdict.INVALID:
        print(f"mwpy overseer: error: {overseer.problem}", file=sys.stderr)
    return 0 if verdict is Verdict.FINISHED else 1


def _status(options: argparse.Namespace) -> int:
    try:
        record = resource_file.read(options.resource_file)
    except ResourceFileError as exc:
        print(f"mwpy status: error: {exc}", file=sys.stderr)
        return 1
    state = "finished" if record.finished else ("stale" if record.stale() else "in progress")
    report = {
        "status": state,
        "age_seconds": round(record.age(), 1),
        "master": f"{record.master_host}:{record.master_port}",
        "member_id": record.member_id,
        "slaves_needed": record.slaves_needed,
        "slaves_connected": record.slaves_connected,
        "tasks_done": record.tasks_done,
        "tasks_queued": record.tasks_pending,
        "tasks_running": record.tasks_running,
    }
    jobs, why = _condor_jobs(record.member_id) if options.condor is not False else (None, None)
    report["slave_jobs"] = jobs
    if why and options.condor:
        report["slave_jobs_error"] = why
    if options.json:
        print(json.dumps(report, indent=2))
        return 1 if why and options.condor else 0
    connected = sum(record.slaves_connected.values())
    groups = ", ".join(f"{k} {v}" for k, v in record.slaves_connected.items() if v)
    rows = [
        ("status", f"{state} (written {record.age():.0f} s ago, every {record.update_interval:g} s)"),
        ("master", f"{report['master']}  member id {record.member_id!r}"),
        ("slaves", f"{connected} connected{f' ({groups})' if groups else ''}, {record.slaves_needed} more needed"),
        ("tasks", f"{record.tasks_done} done, {record.tasks_running} running, {record.tasks_pending} queued"),
    ]
    if jobs is not None:
        rows.append(("jobs", f"{jobs['idle']} idle, {jobs['running']} running, {jobs['held']} held (Condor slaves)"))
    elif why and options.condor:
        rows.append(("jobs", f"unknown: {why}"))
    for name, value in rows:
        print(f"{name:<8} {value}")
    return 1 if why and options.condor else 0


def _condor_jobs(member_id: str) -> tuple[dict[str, int] | None, str | None]:
    """The computation's slave jobs in the local schedd, by state, or None and why not."""
    try:
        from mwpy.backends.htcondor import job_counts  # noqa: PLC0415 (slow to import, often not needed)

        return job_counts(member_id), None
    except (ImportError, BackendError) as exc:
        return None, str(exc)

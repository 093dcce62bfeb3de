"""One program, two roles: ``mwpy.run()`` reads ``--mw-master``/``--mw-slave`` and runs that side.

A program declares its task algorithms with ``@mwpy.task``, its master
algorithm with ``@mwpy.master`` and, optionally, a slave algorithm with
``@mwpy.slave``, and ends with ``mwpy.run()``. Every ``--mw-*`` option is
removed from argv before either algorithm sees it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from mwpy import membership as _membership
from mwpy import safe_text
from mwpy._version import __version__
from mwpy.errors import ConfigurationError, EventLogError, JournalError, ResourceFileError, UsageError
from mwpy.exits import exit_status, program_name, status_of
from mwpy.membership import Membership
from mwpy.names import JOURNAL_SIDE_FILES
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.options import Options, parse, usage
from mwpy.slaveside.startup import SlaveAlgorithm, run_slave, slave_cache
from mwpy.wire.protocol import ExitCode

if TYPE_CHECKING:  # the master's parts load only in a master (a slave never needs them)
    from mwpy.master import Master

# exit_status is mwpy's; Membership and slave_cache are for mwpy jobs' file service and task.
__all__ = ["Membership", "exit_status", "main", "master", "membership", "run", "slave", "slave_cache"]

MasterAlgorithm = Callable[["Master", list[str]], Any]

#: The master and slave algorithms of this program ("master", "slave"): set by the decorators at
#: import time, read by :func:`main`. One program has one of each; a later declaration replaces an earlier.
_algorithms: dict[str, Callable[..., Any]] = {}


def membership() -> Membership | None:
    """The running master's or slave's membership, or None outside one (before ``mwpy.run()`` got that far).

    For a program's own authenticated service beside the master (``mwpy jobs``' file service), so that it
    proves membership exactly as the master and its slaves do, with no second reading of the options.
    """
    return _membership.current()


def master(fn: MasterAlgorithm) -> MasterAlgorithm:
    """Declare the master algorithm: ``fn(mw, argv) -> exit status 0..255``."""
    _algorithms["master"] = fn
    return fn


def slave(fn: SlaveAlgorithm) -> SlaveAlgorithm:
    """Declare a slave algorithm: ``fn(slave, argv) -> exit status``; default: work until shutdown."""
    _algorithms["slave"] = fn
    return fn


def run(
    argv: Sequence[str] | None = None, *, initializer: Callable[..., object] | None = None, initargs: Sequence[Any] = ()
) -> NoReturn:
    """Run this program as master or slave and exit with that side's status.

    ``initializer(*initargs)``, as in ``ProcessPoolExecutor``: each slave runs
    it once, before it connects and takes its first task (state kept between
    tasks: a model, a database connection); if it raises, the slave prints
    the traceback and exits 255, a set-up failure (docs/reliability.md).
    """
    sys.exit(main(argv, initializer=initializer, initargs=initargs))


def main(
    argv: Sequence[str] | None = None, *, initializer: Callable[..., object] | None = None, initargs: Sequence[Any] = ()
) -> int:
    """Like :func:`run`, but return the exit status instead of exiting."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        options, rest = parse(args)
    except UsageError as exc:
        print(f"{program_name()}: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        logs.configure(options.log_level)
    except ConfigurationError as exc:
        print(f"{program_name()}: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if options.show_help:
        sys.stdout.write(usage())
        return 0
    if options.show_version:
        print(f"mwpy {__version__}")
        return 0
    try:
        audit = Audit(options.audit_file, packets=options.audit_packets)
    except OSError as exc:
        print(f"{program_name()}: error: --mw-audit-file: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    setup = None if initializer is None else (initializer, tuple(initargs))
    try:
        return (
            _run_master(options, rest, audit)
            if options.role == "master"
            else run_slave(options, rest, audit, setup, _algorithms.get("slave"))
        )
    finally:
        audit.close()


# ---------------------------------------------------------------------- master

#: The exit status of a master whose Condor job was removed (128 + SIGTERM, as a shell reports it).
REMOVED = 143


def _run_master(options: Options, argv: list[str], audit: Audit) -> int:
    algorithm = _algorithms.get("master")
    if algorithm is None:
        audit("NO MASTER ALGORITHM (declare one with @mwpy.master)")
        print(f"{program_name()}: error: no master algorithm; declare one with @mwpy.master", file=sys.stderr)
        return 255
    try:
        secret = _master_secret(options)
        _membership.join(
            Membership(
                secret,
                options.member_id,
                options.resource_file,
                tls_cert=options.tls_cert,
                tls_key=options.tls_key,
                client_timeout=options.client_timeout,
                own_files=_own_files(options),
            )
        )
        from mwpy.master import Master  # noqa: PLC0415 (a slave, which never gets here, need not load it)
        from mwpy.pool.removal import MasterRemoved, leaving_when_removed  # noqa: PLC0415 (the same)

        mw = Master(options, audit=audit, secret=secret, program=sys.argv[0])
    except (OSError, ConfigurationError, JournalError, EventLogError, ResourceFileError) as exc:
        print(f"{program_name()}: error: {exc}", file=sys.stderr)
        return 1
    removed = False
    with mw:  # current while the algorithm runs; finished on the way out, whatever happens
        try:
            with leaving_when_removed():
                returned = algorithm(mw, argv)
            status = exit_status(returned)
            if status != returned:
                audit(f"MASTER ALGORITHM RETURNED {returned!r}: exit status {status}")
        except MasterRemoved:
            status, removed = REMOVED, True
            audit(f"MASTER JOB REMOVED (condor_rm): the slaves are told to leave; exit status {status}")
        except KeyboardInterrupt:
            status = 130
        except SystemExit as exc:  # sys.exit() or argparse in the master algorithm: its status, no traceback
            status = status_of(exc)
            audit(f"MASTER ALGORITHM EXITED: exit status {status}")
        except BaseException:  # a task's exception re-raised here quotes the task: printed safe
            sys.stderr.write(safe_text.terminal(traceback.format_exc()))
            audit("MASTER ALGORITHM RAISED: exit status 255")
            status = 255
        mw.finish(status, removed=removed)
    return status


def _own_files(options: Options) -> tuple[str, ...]:
    """The files a master writes or trusts, named by its options (SQLite's side files with the journal)."""
    named = (options.resource_file, options.events, options.audit_file, options.secret_file, options.tls_cert)
    journal = () if options.journal is None else tuple(options.journal + side for side in ("", *JOURNAL_SIDE_FILES))
    return (*(path for path in named if path is not None), *journal)


def _master_secret(options: Options) -> bytes:
    """The computation's secret: from --mw-secret-file (created if missing), else fresh."""
    import secrets  # noqa: PLC0415 (a master's business: a slave, which never gets here, need not load it)

    if options.secret_file is None:
        return secrets.token_bytes(32)
    path = options.secret_file
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _membership.read_secret(path)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return _membership.read_secret(path)

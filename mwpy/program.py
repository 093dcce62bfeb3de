"""One program, two roles: ``mwpy.run()`` reads ``--mw-master``/``--mw-slave`` and runs that side.

A program declares its task algorithms with ``@mwpy.task``, its master
algorithm with ``@mwpy.master`` and, optionally, a slave algorithm with
``@mwpy.slave``, and ends with ``mwpy.run()``. Every ``--mw-*`` option is
removed from argv before either algorithm sees it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs

from mwpy import safe_files, safe_text
from mwpy._version import __version__
from mwpy.data.plane import SlaveData
from mwpy.errors import (
    ConfigurationError,
    EventLogError,
    InvalidResourceFileError,
    JournalError,
    MwpyError,
    ResourceFileError,
    UnsafeFileError,
    UsageError,
)
from mwpy.lifetime import Lifetime
from mwpy.lifetime import find as find_lifetime
from mwpy.names import JOURNAL_SIDE_FILES
from mwpy.net.chirp import Chirp
from mwpy.observe import logs
from mwpy.observe.audit import Audit
from mwpy.options import Options, parse, usage
from mwpy.resources import own_shape
from mwpy.slave import Endpoint, Slave, SlaveExit, connect, exit_named
from mwpy.wire.protocol import ExitCode

if TYPE_CHECKING:  # the master's parts load only in a master (a slave never needs them)
    from mwpy import resource_file
    from mwpy.data.cache import SlaveCache
    from mwpy.master import Master

MasterAlgorithm = Callable[["Master", list[str]], Any]
SlaveAlgorithm = Callable[[Slave, list[str]], Any]

#: A secret file is a few dozen bytes; anything past this is not one.
SECRET_MAX_SIZE = 4096

#: The master and slave algorithms of this program ("master", "slave"): set by the decorators at
#: import time, read by :func:`main`. One program has one of each; a later declaration replaces an earlier.
_algorithms: dict[str, Callable[..., Any]] = {}


@attrs.frozen
class Membership:
    """This process in its computation: the secret and member id it proves membership with, its resource file.

    And what a service beside the master (``mwpy jobs``' file service) needs to be as safe as the master's
    own port: its TLS settings, its client timeout, the run's own files no peer may replace.
    """

    secret: bytes
    member_id: str
    resource_file: str | None
    #: Master with ``--mw-tls-cert``: the certificate and key it speaks TLS with.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Slave of a TLS master: the fingerprint it pinned for the master's certificate.
    tls_fingerprint: str | None = None
    #: ``--mw-client-timeout``.
    client_timeout: float = 60.0
    #: Master: the files of the run (resource file, journal, event log, audit, secret...), which no peer may replace.
    own_files: tuple[str, ...] = ()


#: Set once this process's side knows it (the master at start, a slave once it has read its endpoint).
_membership: Membership | None = None
#: How this slave gets its one cache (made on first use), once it knows its master (:func:`slave_cache`).
_slave_cache: Callable[[], SlaveCache] | None = None


def slave_cache() -> SlaveCache:
    """This slave's one content-addressed cache, made on first use: shared objects, ``mwpy.File`` arguments and
    ``mwpy jobs``' inputs, fetched once per slave whichever needs them first (mwpy/data/cache.py)."""
    if _slave_cache is None:
        raise MwpyError("no slave cache: this process is not an mwpy slave")
    return _slave_cache()


def membership() -> Membership | None:
    """The running master's or slave's membership, or None outside one (before ``mwpy.run()`` got that far).

    For a program's own authenticated service beside the master (``mwpy jobs``' file service), so that it
    proves membership exactly as the master and its slaves do, with no second reading of the options.
    """
    return _membership


def master(fn: MasterAlgorithm) -> MasterAlgorithm:
    """Declare the master algorithm: ``fn(mw, argv) -> exit status 0..255``."""
    _algorithms["master"] = fn
    return fn


def slave(fn: SlaveAlgorithm) -> SlaveAlgorithm:
    """Declare a slave algorithm: ``fn(slave, argv) -> exit status``; default: work until shutdown."""
    _algorithms["slave"] = fn
    return fn


#: What a slave runs once before it connects: ``initializer(*initargs)``.
Initializer = tuple[Callable[..., object], tuple[Any, ...]]


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
        print(f"{_program_name()}: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        logs.configure(options.log_level)
    except ConfigurationError as exc:
        print(f"{_program_name()}: error: {exc}", file=sys.stderr)
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
        print(f"{_program_name()}: error: --mw-audit-file: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    setup = None if initializer is None else (initializer, tuple(initargs))
    try:
        return (
            _run_master(options, rest, audit) if options.role == "master" else _run_slave(options, rest, audit, setup)
        )
    finally:
        audit.close()


def exit_status(value: object) -> int:
    """An algorithm's return value as an exit status: an int 0..255 as is, anything else 255."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return value
    return 255


def _status_of(exc: SystemExit) -> int:
    """The exit status ``sys.exit(code)`` asks for, as Python itself would exit with it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exit_status(exc.code)
    print(exc.code, file=sys.stderr)
    return 1


def _program_name() -> str:
    return os.path.basename(sys.argv[0]) or "mwpy"


# ---------------------------------------------------------------------- master

#: The exit status of a master whose Condor job was removed (128 + SIGTERM, as a shell reports it).
REMOVED = 143


def _run_master(options: Options, argv: list[str], audit: Audit) -> int:
    algorithm = _algorithms.get("master")
    if algorithm is None:
        audit("NO MASTER ALGORITHM (declare one with @mwpy.master)")
        print(f"{_program_name()}: error: no master algorithm; declare one with @mwpy.master", file=sys.stderr)
        return 255
    global _membership  # this process's, for membership()
    try:
        secret = _master_secret(options)
        _membership = Membership(
            secret,
            options.member_id,
            options.resource_file,
            tls_cert=options.tls_cert,
            tls_key=options.tls_key,
            client_timeout=options.client_timeout,
            own_files=_own_files(options),
        )
        from mwpy.master import Master  # noqa: PLC0415 (a slave, which never gets here, need not load it)
        from mwpy.pool.removal import MasterRemoved, leaving_when_removed  # noqa: PLC0415 (the same)

        mw = Master(options, audit=audit, secret=secret, program=sys.argv[0])
    except (OSError, ConfigurationError, JournalError, EventLogError, ResourceFileError) as exc:
        print(f"{_program_name()}: error: {exc}", file=sys.stderr)
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
            status = _status_of(exc)
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
    path = Path(options.secret_file)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_secret(path)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    """The secret in ``path``: a regular file of this user's that nobody else can write or read.

    Whoever can write the secret file controls every slave, and whoever can read it is inside
    the computation and can run code in the master (docs/security.md): a file others could have
    changed or read is refused, as ssh refuses such a private key, rather than trusted.
    """
    try:
        secret = safe_files.read_bytes(path, max_size=SECRET_MAX_SIZE, secret=True).strip()
    except UnsafeFileError as exc:
        raise ConfigurationError(f"--mw-secret-file: cannot use {exc}") from None
    if not secret:
        raise ConfigurationError(f"--mw-secret-file: {path} is empty")
    return secret


# ---------------------------------------------------------------------- slave


def _initialize(initializer: Initializer | None, audit: Audit, member_id: str) -> int | None:
    """Run the program's initializer (if any) in this slave; the exit status if it raised, else None."""
    if initializer is None:
        return None
    fn, args = initializer
    try:
        fn(*args)
    except KeyboardInterrupt:
        return 130
    except BaseException:
        traceback.print_exc()
        audit(f'FINI INITIALIZER RAISED (exit {int(ExitCode.ALGORITHM_ERROR)}) "{member_id}"')
        return ExitCode.ALGORITHM_ERROR
    return None


def _run_slave(options: Options, argv: list[str], audit: Audit, initializer: Initializer | None) -> int:
    lifetime = find_lifetime(options.slave_lifetime)  # counted from the job's start, else from now
    try:
        waited = _wait_for_resource_file(options)
    except KeyboardInterrupt:  # Ctrl-C while waiting for the master: 130, as everywhere else
        return 130
    global _membership  # this process's, for membership()
    try:
        endpoint, stale = _endpoint(options, audit)
    except SlaveExit as exc:
        return _slave_exit(exc, audit, options.member_id)
    _membership = Membership(
        endpoint.secret,
        endpoint.member_id,
        options.resource_file,
        tls_fingerprint=endpoint.tls_fingerprint,
        client_timeout=options.client_timeout,
    )
    data = _slave_data(endpoint, options.cache_size)
    audit(f'INIT SLAVE "{endpoint.member_id}"')
    failed = _initialize(initializer, audit, endpoint.member_id)
    if failed is not None:
        return failed
    chirp = Chirp.open(f"{endpoint.host}:{endpoint.port}")  # its state in its Condor job ad (docs/condor.md)
    try:
        status = _connect_and_serve(endpoint, stale, options=options, audit=audit, waited=waited, argv=argv,
                                    chirp=chirp, data=data, lifetime=lifetime)  # fmt: skip
        chirp.publish("draining", chirp.done)
        chirp.log(
            f"mwpy slave leaving: exit status {status}" + (f" {ExitCode(status).name}" if status in _CODES else "")
        )
        return status
    finally:
        chirp.close()


def _connect_and_serve(
    endpoint: Endpoint,
    stale: _Stale | None,
    *,
    options: Options,
    audit: Audit,
    waited: float,
    argv: list[str],
    chirp: Chirp,
    data: SlaveData,
    lifetime: Lifetime | None,
) -> int:
    """Connect, then run the slave algorithm (or serve until shutdown); the exit status. ``data``: the slave's
    data plane (its tasks' shared objects and large values; its cache's counters, which heartbeats carry)."""
    chirp.publish("connecting", 0)
    try:
        worker = _connect(endpoint, stale, options, audit, waited, leave_at=lifetime.leave_at if lifetime else 0.0)
    except SlaveExit as exc:
        return _slave_exit(exc, audit, endpoint.member_id)
    except KeyboardInterrupt:  # Ctrl-C while still connecting: the same 130 as once connected
        audit(f'FINI INTERRUPTED (exit 130) "{endpoint.member_id}"')
        return 130
    worker.cache_counts, worker.data = data.counts, data
    chirp.log(f"mwpy slave {worker.slave_id} connected to master {endpoint.host}:{endpoint.port}")
    chirp.follow(worker.pilot_state)
    if lifetime is not None:
        worker.retire_by(lifetime)
        audit(f"LIFETIME {lifetime.why}: leaving by plan within {lifetime.left():.0f} s")
    algorithm = _algorithms.get("slave")
    try:
        returned = worker.loop_until_shutdown() if algorithm is None else algorithm(worker, argv)
        status = exit_status(returned)
    except KeyboardInterrupt:
        status = 130
    except SystemExit as exc:  # sys.exit() in the slave algorithm: its status, no traceback
        status = _status_of(exc)
    except BaseException:
        traceback.print_exc()
        worker.give_back()  # the tasks it holds go to other slaves, not blamed for its end
        status = ExitCode.ALGORITHM_ERROR
    finally:
        worker.close()
    chirp.publish(*worker.pilot_state())
    if worker.retired is not None and status == 0:
        _say_retired(worker.retired, chirp)
    if status in _LEAVING_LINES:
        print(f"{_program_name()}: {_LEAVING_LINES[status]} {exit_named(ExitCode(status))}", file=sys.stderr)
    audit(f'FINI {"SHUTDOWN" if status == 0 else f"EXIT {status}"} "{endpoint.member_id}"')
    return status


def _say_retired(why: str, chirp: Chirp) -> None:
    """The line of a slave that leaves by plan at the end of its lifetime: on stderr and in its job's user log."""
    line = f"leaving by plan: {why} [exit status 0: Condor removes the job; a fresh one takes its place]"
    print(f"{_program_name()}: {line}", file=sys.stderr)
    chirp.log(f"mwpy slave {line}")


def _slave_data(endpoint: Endpoint, cache_size: int) -> SlaveData:
    """The slave's data plane (its one cache, :func:`slave_cache`, and its shared objects and files:
    ``mw.share``, ``mwpy.File``); both load with their first use."""
    global _slave_cache  # this process's, for slave_cache()
    data = SlaveData(endpoint.secret, endpoint.member_id, endpoint.tls_fingerprint, cache_size)
    _slave_cache = data.cache
    return data


#: The statuses mwpy names (docs/exit-codes.md).
_CODES = frozenset(int(code) for code in ExitCode)


#: The one stderr line of a slave that leaves a working connection with one of these statuses (the others
#: say why where they happen): a job's .err file then names the status Condor's user log records.
_LEAVING_LINES: dict[int, str] = {ExitCode.MASTER_LOST: "the connection to the master ended without a shutdown"}


@attrs.frozen
class _Stale:
    """A resource file past its stale point: why, and how long until its master counts as gone for good."""

    why: str
    left: float
    gone: str


def _connect(
    endpoint: Endpoint, stale: _Stale | None, options: Options, audit: Audit, waited: float, *, leave_at: float
) -> Slave:
    """Connect; with a stale file, keep trying until the master counts as gone for good, then leave (exit 0).

    A master the schedd restarts writes a fresh file within seconds, so a slave
    started on a stale one waits for its master at the old address (one run,
    no restarts) for at most ``--mw-abandon-after`` seconds past the stale point.
    """
    try:
        return connect(
            endpoint,
            audit=audit,
            max_frame=options.max_read_buffer_size,
            timeout=options.client_timeout,
            patience=stale.left if stale else max(0.0, options.connect_timeout - waited),
            spin_us=options.spin_us,
            shape=own_shape(options.slave_resources[-1] if options.slave_resources else None),  # mwpy/resources.py
            leave_at=leave_at,
        )
    except SlaveExit as exc:
        if stale and exc.code == ExitCode.UNREACHABLE:
            print(f"{_program_name()}: {stale.gone}", file=sys.stderr)  # exit 0 is quiet otherwise
            raise SlaveExit(ExitCode.OK, stale.gone) from None
        if stale:
            exc.reason += f" ({stale.why})"
        raise


def _wait_for_resource_file(options: Options) -> float:
    """A slave started before its master (by hand, or by a quick batch system) waits for the file to appear.

    Only while the file does not exist, and at most ``--mw-connect-timeout``
    seconds; a file that is there but wrong is reported at once by the reader.
    Returns the seconds spent, which count against the same timeout.
    """
    path = options.resource_file
    if path is None or (options.master_host and options.master_port):
        return 0.0
    started = time.monotonic()
    deadline = started + options.connect_timeout
    while not os.path.lexists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    return time.monotonic() - started


def _slave_exit(exc: SlaveExit, audit: Audit, member_id: str) -> int:
    """One line on stderr (unless it is a normal end) and the audit's FINI line, under the real member id."""
    if exc.code != ExitCode.OK:
        print(f"{_program_name()}: {exc.reason} {exit_named(ExitCode(exc.code))}", file=sys.stderr)
    audit(f'FINI {exc.reason} (exit {int(exc.code)}) "{member_id}"')
    return int(exc.code)


def _endpoint(options: Options, audit: Audit) -> tuple[Endpoint, _Stale | None]:
    """Where to connect and with which secret, applying CL-MW's option-ordering rule.

    The second value describes the resource file's staleness, if it is stale:
    then the slave tries the master once and exits quickly if it is gone.
    """
    record = None
    if options.resource_file is not None:
        # Loaded here: an Executor's early slaves are told everything on their command line (mwpy/executor.py).
        from mwpy import resource_file  # noqa: PLC0415

        try:
            record = resource_file.read(options.resource_file)
        except ResourceFileError as exc:
            missing = not isinstance(exc, InvalidResourceFileError)
            if not (missing and options.master_host and options.master_port):
                raise SlaveExit(ExitCode.BAD_RESOURCE_FILE, str(exc)) from None
            audit(f"WARNING {exc}; using --mw-master-host and --mw-master-port")
    if record is not None and record.finished:
        raise SlaveExit(ExitCode.OK, "the resource file says the computation is finished")
    if record is not None and record.master_removed:
        why = "the master's Condor job was removed (condor_rm): the computation has no master; leaving the queue"
        print(f"{_program_name()}: {why}", file=sys.stderr)  # exit 0 is quiet otherwise: say why the job ends
        raise SlaveExit(ExitCode.OK, why)

    def pick(field: str, from_file: Any) -> Any:
        given = getattr(options, field)
        if record is None or (given is not None and field in options.after_resource_file):
            return given
        return from_file

    host = pick("master_host", record.master_host if record else None)
    port = pick("master_port", record.master_port if record else None)
    member_id = pick("member_id", record.member_id if record else None)
    if options.secret_file is not None:
        secret = _read_secret_for_slave(options.secret_file)
    elif record is not None and record.secret:
        secret = bytes.fromhex(record.secret)
    else:
        raise SlaveExit(ExitCode.USAGE, "no secret: give --mw-secret-file or a resource file that carries one")
    stale = None if record is None else _staleness(record, options, audit)
    fingerprint = options.tls_fingerprint or (record.tls_fingerprint if record else None)
    return Endpoint(host, port, member_id, secret, fingerprint), stale


def _staleness(record: resource_file.ResourceFile, options: Options, audit: Audit) -> _Stale | None:
    """The file's staleness (the slave then waits for its master at most until it is gone for good), or None.

    SlaveExit(0) when the master is gone for good already.
    """
    limit = f"stale for over --mw-abandon-after {options.abandon_after:g} s; leaving the queue"
    if record.abandoned(options.abandon_after):
        gone = f"the master is gone for good: its resource file was written {record.age():.0f} s ago, {limit}"
        print(f"{_program_name()}: {gone}", file=sys.stderr)  # exit 0 is quiet otherwise: say why the job ends
        raise SlaveExit(ExitCode.OK, gone)
    if not record.stale():
        return None
    stale = (
        f"the resource file is stale: written {record.age():.0f} s ago, update interval {record.update_interval:g} s"
    )
    audit(f"STALE RESOURCE FILE ({stale})")
    left = options.abandon_after - record.overdue()
    address = f"{record.master_host}:{record.master_port}"
    return _Stale(
        stale, left, f"the master is gone for good: no answer at {address} for {left:.0f} s, its file {limit}"
    )


def _read_secret_for_slave(path: str) -> bytes:
    try:
        return _read_secret(Path(path))
    except ConfigurationError as exc:
        raise SlaveExit(ExitCode.USAGE, str(exc)) from None

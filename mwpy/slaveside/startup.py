"""A slave's start-up, from ``--mw-slave`` to a connected slave and back to an exit status.

Where to connect (the resource file, CL-MW's option-ordering rule, its
staleness), the secret, this process's membership and cache of shared objects,
the program's initializer, the connection, the slave algorithm (or serving
until shutdown), and the one line and the audit's FINI line it ends with.
Its state in its Condor job ad goes through Chirp (docs/condor.md).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from mwpy import membership
from mwpy.data.plane import SlaveData
from mwpy.errors import ConfigurationError, InvalidResourceFileError, MwpyError, ResourceFileError
from mwpy.exits import exit_status, program_name, status_of
from mwpy.job_ad import submit_side_path
from mwpy.lifetime import Lifetime
from mwpy.lifetime import find as find_lifetime
from mwpy.net.chirp import Chirp
from mwpy.observe.audit import Audit
from mwpy.options import Options
from mwpy.resources import own_shape
from mwpy.slave import Endpoint, Slave, SlaveExit, connect
from mwpy.slaveside import lease
from mwpy.slaveside.lifecycle import exit_named
from mwpy.wire.codec import DataPlane
from mwpy.wire.protocol import ExitCode, HeldItem

if TYPE_CHECKING:  # loaded with their first use (an Executor's early slaves read no resource file)
    from mwpy import resource_file
    from mwpy.data.cache import SlaveCache

SlaveAlgorithm = Callable[[Slave, list[str]], Any]
#: Seconds between two fetches of the resource file from the submit machine by a Condor slave waiting for a
#: restarted master (Chirp: each costs its job's shadow a file read).
FETCH_EVERY = 5.0
#: The folder, beside a Condor slave's copy of its resource file, where the copies it fetches from the submit
#: machine go. Not over that copy: at the job's exit Condor sends back every top-level file the job made or
#: changed, and writes it in place of the submit machine's file (a reader there sees it empty meanwhile, and
#: the master's newer file is replaced by an older one); folders it does not send back.
FETCHED_FOLDER = ".mwpy-fetched"
#: What a slave runs once before it connects: ``initializer(*initargs)``.
Initializer = tuple[Callable[..., object], tuple[Any, ...]]

#: How this slave gets its one cache (made on first use), once it knows its master (:func:`slave_cache`).
_slave_cache: Callable[[], SlaveCache] | None = None

#: The statuses mwpy names (docs/exit-codes.md).
_CODES = frozenset(int(code) for code in ExitCode)

#: The one stderr line of a slave that leaves a working connection with one of these statuses (the others
#: say why where they happen): a job's .err file then names the status Condor's user log records.
_LEAVING_LINES: dict[int, str] = {ExitCode.MASTER_LOST: "the connection to the master ended without a shutdown"}


def slave_cache() -> SlaveCache:
    """This slave's one content-addressed cache, made on first use: shared objects, ``mwpy.File`` arguments and
    ``mwpy jobs``' inputs, fetched once per slave whichever needs them first (mwpy/data/cache.py)."""
    if _slave_cache is None:
        raise MwpyError("no slave cache: this process is not an mwpy slave")
    return _slave_cache()


def run_slave(
    options: Options, argv: list[str], audit: Audit, initializer: Initializer | None, algorithm: SlaveAlgorithm | None
) -> int:
    """Run this process as a slave (``algorithm``, else serving until shutdown); its exit status."""
    lifetime = find_lifetime(options.slave_lifetime)  # counted from the job's start, else from now
    try:
        waited = _wait_for_resource_file(options)
    except KeyboardInterrupt:  # Ctrl-C while waiting for the master: 130, as everywhere else
        return 130
    try:
        endpoint, stale = _endpoint(options, audit)
    except SlaveExit as exc:
        return _slave_exit(exc, audit, options.member_id)
    data = _join(endpoint, options)
    audit(f'INIT SLAVE "{endpoint.member_id}"')
    failed = _initialize(initializer, audit, endpoint.member_id)
    if failed is not None:
        return failed
    chirp = Chirp.open(f"{endpoint.host}:{endpoint.port}")  # its state in its Condor job ad (docs/condor.md)
    try:
        status = _connect_and_serve(endpoint, stale, options=options, audit=audit, waited=waited, argv=argv,
                                    chirp=chirp, data=data, lifetime=lifetime, slave=algorithm)  # fmt: skip
        chirp.publish("draining", chirp.done)
        chirp.log(
            f"mwpy slave leaving: exit status {status}" + (f" {ExitCode(status).name}" if status in _CODES else "")
        )
        return status
    finally:
        chirp.close()


def _join(endpoint: Endpoint, options: Options) -> SlaveData:
    """This process's membership of the computation ``endpoint`` names, and its data plane (both per master:
    a restarted master may have a new secret)."""
    membership.join(
        membership.Membership(
            endpoint.secret,
            endpoint.member_id,
            options.resource_file,
            tls_fingerprint=endpoint.tls_fingerprint,
            client_timeout=options.client_timeout,
        )
    )
    return _slave_data(endpoint, options.cache_size)


def _rejoin(old: DataPlane | None, endpoint: Endpoint, options: Options) -> SlaveData:
    """The data plane for a restarted master: the old one if the computation's secret is unchanged (its cache
    stays, and the values it holds, which the results handed over may name, stay offered), else a new one,
    the old one closed (its files and file service are another secret's, and would last until exit)."""
    if isinstance(old, SlaveData):
        if old.member_of(endpoint.secret, endpoint.member_id, endpoint.tls_fingerprint):
            return old
        old.close()
    return _join(endpoint, options)


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
    slave: SlaveAlgorithm | None,
) -> int:
    """Connect, then run the slave algorithm (or serve until shutdown); the exit status. ``data``: the slave's
    data plane (its tasks' shared objects and large values; its cache's counters, which heartbeats carry)."""
    chirp.publish("connecting", 0)
    try:
        # Only a slave that can find a restarted master (its resource file) and serves tasks itself outlives one.
        outlive = options.resource_file is not None and options.master_lease > 0 and slave is None
        worker = _connect(endpoint, stale, options, audit, waited, leave_at=lifetime.leave_at if lifetime else 0.0,
                          held={} if outlive else None)  # fmt: skip
    except SlaveExit as exc:
        if exc.code == ExitCode.UNREACHABLE:
            exc = _finished_meanwhile(options, audit, chirp) or exc
        return _slave_exit(exc, audit, endpoint.member_id)
    except KeyboardInterrupt:  # Ctrl-C while still connecting: the same 130 as once connected
        audit(f'FINI INTERRUPTED (exit 130) "{endpoint.member_id}"')
        return 130
    worker.cache_counts, worker.data, data.host = data.counts, data, worker.host
    chirp.log(f"mwpy slave {worker.slave_id} connected to master {endpoint.host}:{endpoint.port}")
    chirp.follow(worker.pilot_state)
    if lifetime is not None:
        worker.retire_by(lifetime)
        audit(f"LIFETIME {lifetime.why}: leaving by plan within {lifetime.left():.0f} s")
    try:
        returned = worker.loop_until_shutdown() if slave is None else slave(worker, argv)
        status = exit_status(returned)
        if status == ExitCode.MASTER_LOST and worker.outlives:
            return _outlive(worker, options, audit, lifetime, chirp, member_id=endpoint.member_id)
    except KeyboardInterrupt:
        status = 130
    except SystemExit as exc:  # sys.exit() in the slave algorithm: its status, no traceback
        status = status_of(exc)
    except BaseException:
        traceback.print_exc()
        worker.give_back()  # the tasks it holds go to other slaves, not blamed for its end
        status = ExitCode.ALGORITHM_ERROR
    finally:
        worker.close()
    chirp.publish(*worker.pilot_state())
    if worker.retired is not None and status == 0:
        _say_retired(worker.retired, chirp)
    return _fini(status, audit, endpoint.member_id)


def _outlive(
    worker: Slave, options: Options, audit: Audit, lifetime: Lifetime | None, chirp: Chirp, *, member_id: str
) -> int:
    """The master vanished: serve each restarted master that answers within the lease (lease.py); the exit status."""
    status = int(ExitCode.MASTER_LOST)
    try:
        while status == ExitCode.MASTER_LOST and worker.outlives:
            worker = _reconnect(worker, options, audit, lifetime, chirp)
            status = exit_status(worker.loop_until_shutdown())
    except SlaveExit as exc:  # no master came back within the lease, or the computation finished meanwhile
        return _slave_exit(exc, audit, member_id)
    finally:
        worker.close()
    chirp.publish(*worker.pilot_state())
    return _fini(status, audit, member_id)


def _finished_meanwhile(options: Options, audit: Audit, chirp: Chirp) -> SlaveExit | None:
    """A master that refuses because the computation ended while this slave started: its exit 0 (a fresh look
    at the resource file says so), not 3, which would have Condor start the job again for nothing."""
    if options.resource_file is None:
        return None
    remote = submit_side_path(os.path.basename(options.resource_file))
    path = _fetch(remote, options.resource_file, chirp)  # a Condor job's file is a copy: the submit machine's, anew
    from mwpy import resource_file  # noqa: PLC0415 (as in _endpoint)

    try:
        return _computation_over(resource_file.read(path))
    except ResourceFileError:
        return None


def _fetch(remote: str | None, local: str, chirp: Chirp) -> str:
    """The resource file to read: the submit machine's file ``remote``, fetched anew into
    :data:`FETCHED_FOLDER` beside the job's copy ``local``; else the copy fetched last; else ``local``."""
    fetched = os.path.join(os.path.dirname(local), FETCHED_FOLDER, os.path.basename(local))
    if remote is not None:
        try:
            os.makedirs(os.path.dirname(fetched), exist_ok=True)
        except OSError:
            return local
        chirp.fetch(remote, fetched)
    return fetched if os.path.exists(fetched) else local


def _computation_over(record: resource_file.ResourceFile) -> SlaveExit | None:
    """The exit 0 of a slave whose resource file says the computation is over (finished, or its master's job
    removed), or None."""
    if record.finished:
        return SlaveExit(ExitCode.OK, "the resource file says the computation is finished")
    if record.master_removed:
        why = "the master's Condor job was removed (condor_rm): the computation has no master; leaving the queue"
        print(f"{program_name()}: {why}", file=sys.stderr)  # exit 0 is quiet otherwise: say why the job ends
        return SlaveExit(ExitCode.OK, why)
    return None


def _fini(status: int, audit: Audit, member_id: str) -> int:
    """The last words of a slave that served: a line on stderr for a lost master, the audit's FINI line."""
    if status in _LEAVING_LINES:
        print(f"{program_name()}: {_LEAVING_LINES[status]} {exit_named(ExitCode(status))}", file=sys.stderr)
    audit(f'FINI {"SHUTDOWN" if status == 0 else f"EXIT {status}"} "{member_id}"')
    return status


def _reconnect(old: Slave, options: Options, audit: Audit, lifetime: Lifetime | None, chirp: Chirp) -> Slave:
    """A slave whose master vanished: connect to the restarted master within the lease, handing over what
    ``old`` held."""
    old.close()
    held = old.held
    assert held is not None

    assert options.resource_file is not None
    local = options.resource_file
    remote = submit_side_path(os.path.basename(local))  # a Condor job's file is a copy: the old master's
    fetched: list[float] = []  # when the file was last fetched

    def attempt() -> Slave:
        due = remote is not None and (not fetched or time.monotonic() - fetched[-1] >= FETCH_EVERY)
        if due:
            fetched.append(time.monotonic())
        # The submit machine's file, over Chirp (the job's +WantIOProxy) when due; else the copy fetched last.
        path = _fetch(remote if due else None, local, chirp)
        # Read again: the restarted master's address and secret.
        endpoint, _ = _endpoint(attrs.evolve(options, resource_file=path), audit)
        worker = connect(
            endpoint,
            audit=audit,
            max_frame=options.max_read_buffer_size,
            timeout=options.client_timeout,
            patience=0.0,
            spin_us=options.spin_us,
            shape=own_shape(options.slave_resources[-1] if options.slave_resources else None),
            leave_at=lifetime.leave_at if lifetime else 0.0,
            held=held,
            resumed=True,
            lease=options.master_lease,
        )
        data = _rejoin(old.data, endpoint, options)
        worker.cache_counts, worker.data, data.host = data.counts, data, worker.host
        chirp.log(f"mwpy slave {worker.slave_id} connected to the restarted master {endpoint.host}:{endpoint.port}")
        return worker

    waiting = ("waiting for its master", chirp.done)
    chirp.publish(*waiting)
    chirp.follow(lambda: waiting)  # not the old connection's "draining"
    worker = lease.await_master(attempt, old.lease_left(), audit)  # the lease counts from the loss
    chirp.follow(worker.pilot_state)
    if lifetime is not None:
        worker.retire_by(lifetime)
    return worker


def _say_retired(why: str, chirp: Chirp) -> None:
    """The line of a slave that leaves by plan at the end of its lifetime: on stderr and in its job's user log."""
    line = f"leaving by plan: {why} [exit status 0: Condor removes the job; a fresh one takes its place]"
    print(f"{program_name()}: {line}", file=sys.stderr)
    chirp.log(f"mwpy slave {line}")


def _slave_data(endpoint: Endpoint, cache_size: int) -> SlaveData:
    """The slave's data plane (its one cache, :func:`slave_cache`, and its shared objects and files:
    ``mw.share``, ``mwpy.File``); both load with their first use."""
    global _slave_cache  # this process's, for slave_cache()
    data = SlaveData(endpoint.secret, endpoint.member_id, endpoint.tls_fingerprint, cache_size)
    _slave_cache = data.cache
    return data


class _Stale(NamedTuple):
    """A resource file past its stale point: why, and how long until its master counts as gone for good."""

    why: str
    left: float
    gone: str


def _connect(
    endpoint: Endpoint,
    stale: _Stale | None,
    options: Options,
    audit: Audit,
    waited: float,
    *,
    leave_at: float,
    held: dict[str, HeldItem] | None,
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
            held=held,
            lease=options.master_lease,
        )
    except SlaveExit as exc:
        if stale and exc.code == ExitCode.UNREACHABLE:
            print(f"{program_name()}: {stale.gone}", file=sys.stderr)  # exit 0 is quiet otherwise
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
        print(f"{program_name()}: {exc.reason} {exit_named(ExitCode(exc.code))}", file=sys.stderr)
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
    over = None if record is None else _computation_over(record)
    if over is not None:
        raise over

    def pick(field: str, from_file: Any) -> Any:
        given = getattr(options, field)
        if record is None or (given is not None and field in options.after_resource_file):
            return given
        return from_file

    host = pick("master_host", record.master_host if record else None)
    port = pick("master_port", record.master_port if record else None)
    member_id = pick("member_id", record.member_id if record else None)
    if options.secret_file is not None:
        secret = _read_secret(options.secret_file)
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
        print(f"{program_name()}: {gone}", file=sys.stderr)  # exit 0 is quiet otherwise: say why the job ends
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


def _read_secret(path: str) -> bytes:
    try:
        return membership.read_secret(path)
    except ConfigurationError as exc:
        raise SlaveExit(ExitCode.USAGE, str(exc)) from None

"""What the master tells the world: the resource file, how to start a slave, the slave bundle.

Kept apart from the event loop (:mod:`mwpy.net.engine`) and the API
(:mod:`mwpy.master`) because it is policy about files, not about sockets or
tasks: when to rewrite the resource file (on a change, debounced, and at least
every ``--mw-resource-file-update-interval``), what it says, and which
executable, files and arguments start a slave (computed once).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Mapping

from mwpy import resource_file
from mwpy.core import board, demand
from mwpy.core.facts import Facts, ResourceFileNotWritten, ResourceFileWritten
from mwpy.core.scheduler import Scheduler
from mwpy.errors import ConfigurationError, ResourceFileError
from mwpy.job_ad import own_job_id
from mwpy.names import BUNDLE_FILE
from mwpy.options import DEFAULT_CACHE_SIZE, Options
from mwpy.resource_file import ShapeDemand

#: Shortest time between two resource-file writes caused by a change.
DEBOUNCE = 1.0
#: Seconds ahead of a slave's planned leave (its lifetime, mwpy/lifetime.py) that its replacement is asked for.
REPLACE_AHEAD = 300.0
#: Interpreter slaves started through the bundle use unless --mw-slave-executable says otherwise.
DEFAULT_BUNDLE_PYTHON = "/usr/bin/python3"


#: What a rewrite compares with the last written: slaves needed and connected, demand stated, Condor jobs, peak
#: memory, tasks in all, demand per need, learned memory per algorithm.
_Key = tuple[int, dict[str, int], bool, list[str], int, int | None, list[ShapeDemand], dict[str, int], int]


def restart_lease(options: Options) -> float:
    """Seconds a master with a journal waits for the slaves of a predecessor that died (mwpy/core/adoption.py):
    ``--mw-master-lease`` when its resource file says this computation is in progress, else 0 (a first run, or
    one after a finished computation: nobody outlived anything).

    Raises ConfigurationError when the master that file names still answers: two masters started for one
    computation, of which the second would take the first one's slaves and journal.
    """
    path = options.resource_file
    if path is None or not options.journal or not options.master_lease:
        return 0.0
    try:
        record = resource_file.read(path)
    except (ResourceFileError, OSError):  # none yet (a first run), or one the master replaces anyway
        return 0.0
    if record.finished or record.member_id != options.member_id:
        return 0.0
    address = f"{record.master_host}:{record.master_port}"
    try:
        socket.create_connection((record.master_host, record.master_port), timeout=2.0).close()
    except OSError:
        return options.master_lease  # its master is gone: this one is its restart
    raise ConfigurationError(
        f"{path}: a master of member id {record.member_id!r} is running at {address} (pid {record.master_pid}); "
        "not starting a second one for the same computation"
    )


class Publisher:
    """Writes one master's resource file; builds its slave bundle once, at creation."""

    def __init__(
        self,
        options: Options,
        *,
        facts: Facts,
        sched: Scheduler,
        program: str,
        secret: bytes,
        host: str,
        port: int,
        tls_fingerprint: str | None,
        condor_jobs: Callable[[], list[str]] | None = None,
        tasks_total: Callable[[], int | None] | None = None,
        slaves_greeted: Callable[[], int] | None = None,
        leave_at: Mapping[str, float] | None = None,
        journal_answers: int = 0,
        task_seconds: Callable[[], float | None] | None = None,
        durable: bool = True,
    ) -> None:
        self._options = options
        #: Whether each write reaches the disk before it replaces the file (resource_file.write).
        self._durable = durable
        #: Tasks in all when the master knows (for progress bars), else None.
        self._tasks_total = tasks_total or (lambda: None)
        #: The Condor job ids of the connected slaves (the engine knows them from their Hello).
        self._condor_jobs = condor_jobs or list
        #: Slaves that ever connected (written with whatever else changed: an arrival changes the counts).
        self._slaves_greeted = slaves_greeted or int
        #: When (Unix time) each connected slave with a lifetime leaves by plan: each is replaced ahead of time.
        self._leave_at: Mapping[str, float] = {} if leave_at is None else leave_at
        #: Answers the master's journal held when it started (written in every file: a resume says so).
        self.journal_answers = journal_answers
        #: The mean run time of the tasks answered so far (None before the first): the demand model's input.
        self._task_seconds = task_seconds or (lambda: None)
        #: Keyed tasks waiting for a previous master's slaves to hand over (mwpy/core/adoption.py).
        self.awaited: Callable[[], int] = int
        #: When (monotonic) the master first asked for slaves with none connected, until the first came; then
        #: the seconds that took: what a slave's start-up costs the run, as the demand model counts it.
        self._asked_at: float | None = None
        self._startup: float | None = None
        #: Why the demand last published is what it is (mwpy/core/demand.py), for the file's demand_reason.
        self._why = ""
        self._facts = facts
        self._sched = sched
        self._program = os.path.abspath(program)
        self._secret_hex = None if options.secret_file else secret.hex()
        self._host = host
        self._port = port
        self._tls_fingerprint = tls_fingerprint
        self._next = 0.0
        self._written = 0.0
        self._ever_written = False  # the first write must work (a full disk at the start is one line, status 1)
        self._key: _Key | None = None
        #: Set by the master once its algorithm runs the loop; until then slaves_needed is not its word.
        self.demand_stated = False
        #: Bytes: the largest peak memory a slave reported (set by the master from its engine).
        self.slave_peak_memory = 0
        #: This master's own Condor job id (submit/master.sub), read once: it never changes while it runs.
        self._condor_job = own_job_id() or None
        self._bundle = self._build_bundle()
        self.slave_executable, self.slave_files, self.slave_arguments = self._how_to_start_a_slave()

    def maybe_write(self, now: float, *, finished: bool) -> None:
        """Rewrite the file if what it says changed (debounced) or it is due for a refresh."""
        connected = self._sched.connected()
        needed = self._needed(now, sum(connected.values()))
        key = (needed, connected, self.demand_stated, self._condor_jobs(), self.slave_peak_memory, self._tasks_total(),
               self._shapes(), dict(self._sched.shapes.learned), self.awaited())  # fmt: skip
        changed = key != self._key and now - self._written >= DEBOUNCE
        if changed or now >= self._next:
            self.write(now, needed, connected, finished=finished)

    def _needed(self, now: float, connected: int) -> int:
        """Slaves wanted beyond those connected (as many as would shorten the run, once task times are measured:
        mwpy/core/demand.py), plus a replacement for each that leaves by plan within ``REPLACE_AHEAD`` while
        tasks remain: a batch system takes a while to start a job."""
        sched = self._sched
        self._measure_startup(now, connected, sched.slaves_needed)
        if not sched.pending_total:
            self._why = ""
            return sched.slaves_needed
        wanted = demand.Demand(sched.slaves_needed)
        if sched.demand_follows_tasks:
            wanted = demand.adaptive(per_task=sched.slaves_needed, tasks=sched.pending_total, connected=connected,
                                     task_seconds=self._task_seconds(), startup_seconds=self._startup)  # fmt: skip
        self._why = wanted.why
        soon = time.time() + REPLACE_AHEAD
        return wanted.needed + sum(at <= soon for at in self._leave_at.values())

    def _measure_startup(self, now: float, connected: int, asked: int) -> None:
        """Time from the first demand with no slave connected to the first slave connected: a slave's start-up."""
        if self._startup is not None:
            return
        if connected:
            if self._asked_at is not None:
                self._startup = now - self._asked_at
        elif asked and self._asked_at is None:
            self._asked_at = now

    def write(
        self, now: float, needed: int, connected: dict[str, int], *, finished: bool, removed: bool = False
    ) -> None:
        """Write the file now (a failure is audited: the computation goes on without it; but a first write that
        fails raises :class:`ResourceFileError`, the master cannot start); ``removed``: the master's Condor job
        was removed (``master_removed``)."""
        path = self._options.resource_file
        sched = self._sched
        jobs, total, shapes = self._condor_jobs(), self._tasks_total(), self._shapes()
        learned = dict(sched.shapes.learned)
        awaited = self.awaited()
        self._key = (needed, connected, self.demand_stated, jobs, self.slave_peak_memory, total, shapes, learned,
                     awaited)  # fmt: skip
        self._written = now
        self._next = now + self._options.resource_file_update_interval
        if path is None:
            return
        record = resource_file.ResourceFile(
            computation_status=resource_file.FINISHED if finished else resource_file.IN_PROGRESS,
            timestamp=time.time(),
            update_interval=self._options.resource_file_update_interval,
            member_id=self._options.member_id,
            master_host=self._host,
            master_port=self._port,
            slaves_needed=needed,
            slave_executable=self.slave_executable,
            slave_files=self.slave_files,
            slave_arguments=self.slave_arguments,
            master_pid=os.getpid(),
            tasks_done=sched.done_total,
            tasks_pending=sched.queued_total,
            tasks_running=sched.running_total,
            slaves_connected=connected,
            secret=self._secret_hex,
            tls_fingerprint=self._tls_fingerprint,
            demand_stated=self.demand_stated or finished,
            condor_jobs_connected=jobs,
            slave_peak_memory=self.slave_peak_memory,
            tasks_total=total,
            slaves_greeted=self._slaves_greeted(),
            master_condor_job=self._condor_job,
            task_board=board.snapshot(sched, now, self._leave_at),
            shapes=shapes,
            learned_memory=learned,
            journal_answers=self.journal_answers,
            master_removed=removed,
            demand_reason="" if finished else self._why,
            awaited_handovers=0 if finished else awaited,
        )
        try:
            resource_file.write(path, record, durable=self._durable)
        except OSError as exc:
            if not self._ever_written:  # no slave could ever find the master: say so now, not wait in silence
                folder = os.path.dirname(os.path.abspath(path))
                raise ResourceFileError(
                    f"{path}: cannot write the resource file ({exc.strerror or exc}): the folder mwpy writes it and "
                    f"its audit in, {folder}, needs room (or give --mw-resource-file elsewhere)"
                ) from None
            self._facts(ResourceFileNotWritten(path, str(exc)))
            return
        self._ever_written = True
        self._facts(ResourceFileWritten(record))

    def _shapes(self) -> list[ShapeDemand]:
        """Demand and supply per need of the tasks (empty while no task asked for resources)."""
        return [ShapeDemand(str(need), tasks, slaves) for need, tasks, slaves in self._sched.shape_demand()]

    def _build_bundle(self) -> str | None:
        if not self._options.slave_bundle:
            return None
        from mwpy.pool import bundle  # noqa: PLC0415 (zipfile and importlib.metadata only for --mw-slave-bundle)

        folder = os.path.dirname(os.path.abspath(self._options.resource_file or self._program))
        return str(bundle.build(os.path.join(folder, BUNDLE_FILE)))

    def _how_to_start_a_slave(self) -> tuple[str, list[str], list[str]]:
        """Executable, files and arguments of a slave, as the resource file advertises them."""
        options = self._options
        executable = options.slave_executable or (DEFAULT_BUNDLE_PYTHON if self._bundle else sys.executable)
        files = [self._program, *(os.path.abspath(f) for f in options.slave_files)]
        arguments = [os.path.basename(self._program), "--mw-slave"]
        if self._bundle:
            files.insert(0, self._bundle)
            arguments.insert(0, BUNDLE_FILE)
        if options.resource_file:
            arguments += ["--mw-resource-file", os.path.basename(options.resource_file)]
        if options.secret_file:
            files.append(os.path.abspath(options.secret_file))
            arguments += ["--mw-secret-file", os.path.basename(options.secret_file)]
        if options.cache_size != DEFAULT_CACHE_SIZE:  # a slave-side bound given to the master: its slaves keep it
            arguments += ["--mw-cache-size", str(options.cache_size)]
        if options.slave_lifetime is not None:  # the same: a slave-side limit its slaves keep
            arguments += ["--mw-slave-lifetime", str(options.slave_lifetime)]
        return executable, files, [*arguments, *options.slave_arguments]

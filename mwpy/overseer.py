"""The overseer: keeps a batch system's slave jobs matched to what the master asks for.

It watches the resource file (watchdog, mwpy/pool/watch.py: it reacts within moments of a rewrite)
and also reconciles on a timer. Each reconciliation is idempotent: it compares
the jobs in the queue with the slaves the master wants and only then submits
or removes, so repeated events never over-submit, and a restarted overseer
picks up where the last one stopped.

* wanted slaves = slaves connected + slaves needed (both from the file);
  with a back end that makes slave jobs per need (Condor), each need of the
  tasks (the file's ``shapes``) has its own jobs, sized by its own demand,
  and plain jobs the rest (mwpy/pool/shape_plan.py);
* serving jobs = idle + running; held jobs do not serve but count against
  the total cap, so a job held or removed behind the overseer's back is
  replaced while the caps hold;
* grow: submit the shortfall in one batch, within ``max_jobs`` (total),
  ``max_idle`` (idle) and ``batch``, all shapes together, shared in turn;
* shrink: remove idle jobs only, never a running slave (it may hold work);
* memory: a job held for using more memory than it asked for is removed; the
  master learns which task algorithm ran out and gives its tasks a need of
  their own (mwpy/core/memory.py), made into jobs like any need. For a master
  from before (no ``learned_memory`` in its file), new jobs of the held job's
  shape (its need, or plain) ask for double its request (up to
  ``max_memory``), and all ask for the slaves' published peak memory with a
  quarter more;
* finished: remove every remaining job of the computation (running slaves
  get ``FINISH_GRACE`` seconds to leave by themselves first), and stop once
  none is left;
* stale (the master is overdue): submit nothing, keep the queue, say so, and
  carry on when a fresh file appears;
* master job gone (``--master-job`` or the file names the master's own Condor
  job, and it has left the queue: ``condor_rm``, or it ended without
  finishing the computation): remove every job of the computation at once,
  running ones too, say how the master left, and stop (``mwpy overseer``
  exits 1): pilots never outlive their master by more than one
  reconciliation -- even when the master never wrote its file, or the file
  is gone (its folder removed);
* no file: wait for the master's first file; a computation once seen
  finished stays finished when its file goes. With no master job to watch,
  a file absent for ``abandon_after`` seconds means no master will come:
  say so and stop (exit 1);
* abandoned (stale for longer than ``abandon_after`` beyond the stale point):
  the master is gone for good; remove every job of the computation, say why,
  and stop (``mwpy overseer`` exits 1);
* a master not seen before (new pid, port or host: a restarted master, or
  the first file this overseer reads) has not stated its demand yet: its first
  file may say ``slaves_needed: 0`` before it has counted its tasks, so no
  idle job is removed until it writes a later file or one update interval has
  passed. Growing is never held back;
* never connected (the third view: the slaves the master says are connected,
  by their Condor job ids): a job running for longer than ``connect_limit``
  seconds -- counted from when it started running or when this overseer
  first saw the current master, whichever is later -- whose slave has not
  been seen connected during that run is removed and replaced. Only jobs
  with Condor job ids (``CLUSTER.PROC``, what slaves report) are judged.

Every decision line says why: how long idle jobs have waited, why held jobs
are held, and why jobs were submitted or removed.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from mwpy import resource_file
from mwpy.backends import Backend, Job, JobState, Launch, MasterWatch, ShapedJobs
from mwpy.errors import InvalidResourceFileError, ResourceFileError
from mwpy.names import CONDOR_JOB_ID
from mwpy.pool import shape_plan
from mwpy.resources import Resources

Log = Callable[[str], None]

#: Seconds before a failed reconciliation is tried again, and before the
#: overseer checks that the jobs it removed at the end are gone.
RETRY_DELAY = 2.0
#: Seconds running slaves get to leave by themselves once the computation is
#: finished (the master told them to shut down) before the overseer removes them.
FINISH_GRACE = 10.0
#: Seconds a stale resource file is tolerated beyond the stale point before the master counts as gone
#: for good and its jobs are removed (``--abandon-after``): long, so that a master restarted within it
#: (a submit host down for a while) finds its queue intact. A master job that left the queue is acted on at
#: once; slaves have their own, shorter limit (``--mw-abandon-after``, mwpy/options.py).
ABANDON_AFTER = 3600.0
#: Idle jobs waiting longer than this many seconds are reported as unmatched ("no slot matched").
LONG_IDLE = 60.0
#: Bytes in a MB as Condor counts request_memory.
MIB = 1 << 20
#: At most this many held jobs are named, each with its hold reason, in one decision line.
HELD_NAMED = 3
#: Seconds a job may run without its slave connecting before it is removed and replaced
#: (``--connect-limit``): far more than a slave needs to start and connect, even with heavy imports.
CONNECT_LIMIT = 600.0


class Verdict(enum.Enum):
    """What one reconciliation found."""

    WAITING = "waiting"  # no readable resource file yet
    RUNNING = "running"
    STALE = "stale"
    FINISHED = "finished"  # the computation is finished; its jobs are being removed
    INVALID = "invalid"  # the file is there but can never be used (wrong version, not a regular file, ...)
    ABANDONED = "abandoned"  # the master is gone for good: its jobs were removed


@attrs.frozen
class Limits:
    """Caps that keep the overseer polite to a shared pool."""

    # The one source of the default caps: ``mwpy overseer``'s defaults and submit/overseer.sub's
    # macros (tests/test_overseer.py keeps the file in agreement). Polite to a shared pool.
    max_jobs: int = 100
    max_idle: int = 20
    batch: int = 20
    #: MB: a slave job held for exceeding its memory request is replaced asking for double, up to this.
    max_memory: int = 16384
    #: Slave jobs kept while the computation runs, whatever its demand: an ``mwpy.Executor`` starts its
    #: ``max_workers`` at once, so its first calls do not wait for the master's next resource file.
    #: Not in the repr: ``mwpy overseer`` logs its caps, and has no such option.
    min_jobs: int = attrs.field(default=0, repr=False)


@attrs.frozen
class Decision:
    """The outcome of one reconciliation, for logs and tests."""

    verdict: Verdict
    submitted: int = 0
    removed: int = 0
    idle: int = 0
    running: int = 0
    held: int = 0
    wanted: int = 0


class Overseer:
    """Reconciles one computation's slave jobs with its resource file."""

    def __init__(
        self,
        path: str | Path,
        backend: Backend,
        limits: Limits,
        *,
        log: Log | None = None,
        finish_grace: float = FINISH_GRACE,
        abandon_after: float = ABANDON_AFTER,
        connect_limit: float = CONNECT_LIMIT,
        slave_lifetime: float | None = None,
        master_job: str | None = None,
    ) -> None:
        self.path = _real_path(Path(path))
        #: The master's own batch job as its submitter named it (``--master-job``), else None: the file's is watched.
        self.master_job = master_job
        self._file_master_job: str | None = None  # the last readable file's master_condor_job
        self._missing_since: float | None = None  # when (monotonic) the file was first found missing, this time
        self.problem: str | None = None  # why the overseer gave up, when it did
        self.backend = backend
        self.limits = limits
        self.finish_grace = finish_grace
        self.abandon_after = abandon_after
        self.connect_limit = connect_limit
        #: ``--mw-slave-lifetime`` for the slave jobs submitted here (after the master's: it wins), or None.
        self.slave_lifetime = slave_lifetime
        #: (job id, when it started running) of the job runs whose slave was seen connected.
        self._seen_connected: set[tuple[str, float | None]] = set()
        self._finished_at: float | None = None
        # The master whose demand may be acted on by removing jobs: (pid, port, host), its first
        # file's timestamp, and when (monotonic) this overseer first saw it.
        self._master: tuple[int, int, str] | None = None
        self._master_first_file = 0.0
        self._master_seen_at = 0.0
        self._log = log or (lambda text: None)
        self._last_note = ""
        self._wake = threading.Event()
        #: MB new slave jobs of a shape (the need's text; None: plain jobs) ask for at least, raised each
        #: time one of that shape is held for exceeding its request.
        self._memory_floor: dict[str | None, int] = {}
        #: Jobs removed for a memory hold whose slave the file still lists as connected: the master has not
        #: noticed yet, and counting that slave would submit a replacement its tasks' next need makes useless.
        self._removed_connected: set[str] = set()

    def reconcile(self) -> Decision:
        """Look at the file and the queue once, and act on the difference."""
        try:
            record = resource_file.read(self.path)
        except InvalidResourceFileError as exc:
            # mwpy's master writes the file atomically: a bad file will not fix itself.
            self.problem = str(exc)
            self._note(f"giving up: {exc}")
            return Decision(Verdict.INVALID)
        except ResourceFileError as exc:
            return self._without_file(exc)
        self._missing_since, self._file_master_job = None, record.master_condor_job
        jobs = self.backend.jobs()
        if record.finished:
            return self._finish(jobs, _counts(jobs))
        gone = record.removal() or self._master_departure(record)
        if gone is not None:
            return self._give_up(jobs, f"{gone}: the computation has no master")
        if record.stale():
            return self._stale(record, jobs, _counts(jobs))
        unconfirmed = self._unconfirmed_master(record)
        jobs, replaced = self._replace_memory_holds(jobs, learning=record.learned_memory is not None)
        jobs, removed, why = self._replace_unconnected(record, jobs)
        self._removed_connected &= set(record.condor_jobs_connected)
        groups = shape_plan.plan(
            record,
            jobs,
            min_jobs=self.limits.min_jobs,
            max_jobs=self.limits.max_jobs,
            shaped=isinstance(self.backend, ShapedJobs),
            departed=len(self._removed_connected),
        )
        submitted, dropped = self._act(record, groups, len(jobs), unconfirmed, why)
        removed += replaced + dropped
        why.extend(_explain_jobs(jobs))
        counts = _counts(jobs)
        wanted = sum(group.wanted for group in groups)
        because = f": {record.demand_reason}" if record.demand_reason else ""  # the master's demand model
        self._note(
            f"wanted {wanted} (connected {sum(record.slaves_connected.values())} + needed {record.slaves_needed}"
            f"{because}); "
            f"jobs idle {counts['idle']} running {counts['running']} held {counts['held']}{_held_because(jobs)}; "
            f"submitted {submitted}, removed {removed}" + (f" -- {'; '.join(why)}" if why else "")
        )
        return Decision(Verdict.RUNNING, submitted, removed, wanted=wanted, **counts)

    def _act(
        self,
        record: resource_file.ResourceFile,
        groups: list[shape_plan.Group],
        queued: int,
        unconfirmed: str,
        why: list[str],
    ) -> tuple[int, int]:
        """Submit each group's shortfall (the caps' room shared fairly) and remove idle jobs no group wants.

        Returns how many were submitted and removed; ``why`` gets a line for each group acted on or held back.
        """
        idle = sum(len(group.idle) for group in groups)
        room = min(self.limits.max_jobs - queued, self.limits.max_idle - idle, self.limits.batch)
        grants = shape_plan.share([group.short for group in groups], room)
        submitted = removed = 0
        for group, grant in zip(groups, grants, strict=True):
            label, tally = group.label(), f"{group.wanted} wanted, {group.serving} serving"
            if grant > 0:
                self._submit(record, group, grant)
                submitted += grant
                why.append(f"{label}submitted {grant}: {tally}{_capped(grant, group.short)}")
            elif group.surplus and unconfirmed:
                why.append(
                    f"{label}kept {group.surplus} idle although demand is lower: master {unconfirmed} has "
                    f"not stated its demand yet (waiting for its next file, at most {record.update_interval:g} s)"
                )
            elif group.surplus:
                doomed = group.idle[-group.surplus :]
                self.backend.remove(doomed)
                removed += len(doomed)
                why.append(f"{label}removed {len(doomed)} idle: demand fell ({tally})")
            elif group.short:
                why.append(f"{label}{group.short} short but at a cap ({self.limits})")
        return submitted, removed

    def _submit(self, record: resource_file.ResourceFile, group: shape_plan.Group, count: int) -> None:
        """``count`` slave jobs for ``group``: plain ones, or jobs made for its need."""
        launch = self._launch(record, group.need)
        if launch.shape is not None and isinstance(self.backend, ShapedJobs):
            self.backend.submit_shaped(launch, count)
        else:
            self.backend.submit(launch, count)

    def _replace_memory_holds(self, jobs: list[Job], *, learning: bool) -> tuple[list[Job], int]:
        """Remove slave jobs held for exceeding their memory request, so that fresh jobs take their place.

        ``learning``: the master learns memory per task algorithm (a resource file with ``learned_memory``,
        mwpy/core/memory.py): the algorithm that ran out gets a need of its own, whose jobs the overseer makes
        as for any need, and the held job's shape keeps its request. Otherwise (a master from before) new jobs
        of the held job's shape (its need, or plain) ask for double its request, up to ``limits.max_memory``
        MB, from now on. Either way a job that already asked for the cap stays held, and says so: more memory
        is not to be had. Returns the jobs left and how many were removed.
        """
        cap = self.limits.max_memory
        doomed: list[Job] = []
        for job in jobs:
            if not job.memory_hold:
                continue
            floor = self._memory_floor.get(job.shape)
            asked = job.memory if job.memory is not None else floor
            if asked is None or asked >= cap:
                continue  # nothing to double, or no more to be had: left held (the decision line names it)
            doomed.append(job)
            if learning:
                self._log(f"job {job.job_id} held: {job.reason or 'over its memory request'}; removed (the master "
                          "learns which task algorithm needs more; its tasks get jobs of their own)")  # fmt: skip
                continue
            floor = self._memory_floor[job.shape] = max(floor or 0, min(cap, 2 * asked))
            self._log(
                f"job {job.job_id} held: {job.reason or 'over its memory request'}; removed, replaced by "
                f"{_shape_jobs(job.shape)} asking for {floor} MB (it asked for {asked} MB)"
            )
        if doomed:
            self.backend.remove([job.job_id for job in doomed])
            self._removed_connected.update(job.job_id for job in doomed)
        return [job for job in jobs if job not in doomed], len(doomed)

    def _memory_request(self, record: resource_file.ResourceFile, shape: str | None) -> int | None:
        """MB a new slave job of ``shape`` asks for at least: its shape's held jobs' doubling, and the slaves'
        peak plus a quarter (a need's own memory is added by the back end) -- for a master that does not learn
        memory per algorithm; one that does puts it in the needs instead."""
        if record.learned_memory is not None:
            return None
        peak = -(-record.slave_peak_memory * 5 // (4 * MIB)) if record.slave_peak_memory else 0
        wanted = max(peak, self._memory_floor.get(shape) or 0)
        return min(wanted, self.limits.max_memory) if wanted else None

    def _stale(self, record: resource_file.ResourceFile, jobs: list[Job], counts: dict[str, int]) -> Decision:
        """Keep the queue for a master that may come back; remove it once the master is gone for good."""
        overdue = record.overdue()
        if overdue <= self.abandon_after:
            self._note(
                f"master silent for {record.age():.0f} s (update interval {record.update_interval:g} s): "
                f"not submitting; keeping {len(jobs)} jobs queued "
                f"(they are removed if it stays silent {self.abandon_after - overdue:.0f} s more)"
            )
            return Decision(Verdict.STALE, **counts)
        return self._give_up(
            jobs,
            f"master {record.master_host}:{record.master_port} (pid {record.master_pid}) silent for "
            f"{record.age():.0f} s, over {self.abandon_after:g} s past its update interval and grace: gone for good",
        )

    def _master_departure(self, record: resource_file.ResourceFile | None) -> str | None:
        """How the master's own job left the queue, when one is known (``--master-job``, else the file's, else
        the last file's) and the back end can see it."""
        job = self._watched_master_job(record)
        if job is None or not isinstance(self.backend, MasterWatch):  # (the second test is for the type checker)
            return None
        return self.backend.master_departure(job)

    def _watched_master_job(self, record: resource_file.ResourceFile | None) -> str | None:
        """The master's own job to watch (``--master-job``, else the file's, else the last file's), when the back
        end can see one."""
        if not isinstance(self.backend, MasterWatch):
            return None
        return self.master_job or (self._file_master_job if record is None else record.master_condor_job)

    def _without_file(self, problem: ResourceFileError) -> Decision:
        """No readable file: wait for the master's first -- unless the computation is over without it.

        A computation seen finished stays finished when its file goes (its folder removed): its jobs are
        removed as at any finish. A master job that has left the queue never writes one: its jobs go, as
        when the file names it. With no master job to watch, the wait ends after ``abandon_after`` seconds.
        """
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        if self._finished_at is not None:
            jobs = self.backend.jobs()
            return self._finish(jobs, _counts(jobs))
        gone = self._master_departure(None)
        if gone is not None:
            return self._give_up(self._jobs_if_known(), f"{gone}: the computation has no master")
        if self._watched_master_job(None) is None and now - self._missing_since > self.abandon_after:
            return self._give_up(
                self._jobs_if_known(),
                f"{problem} for {self.abandon_after:g} s (--abandon-after), and no master job to watch "
                "(--master-job): no master is coming",
            )
        self._note(f"waiting: {problem}")
        return Decision(Verdict.WAITING)

    def _jobs_if_known(self) -> list[Job]:
        """The computation's jobs, or none when the back end cannot tell which they are without the file (a
        Condor back end learns the member id from the file, or from the master job's ad)."""
        try:
            return self.backend.jobs()
        except ResourceFileError:
            return []

    def _launch(self, record: resource_file.ResourceFile, need: Resources | None = None) -> Launch:
        """What new slave jobs (for ``need``, or plain) run: the resource file's slave command line, with this
        overseer's lifetime."""
        memory = self._memory_request(record, None if need is None else str(need))
        launch = Launch.of(record, str(self.path), memory, need)
        if self.slave_lifetime is None:
            return launch
        return attrs.evolve(launch, arguments=[*launch.arguments, "--mw-slave-lifetime", str(self.slave_lifetime)])

    def _give_up(self, jobs: list[Job], why: str) -> Decision:
        """The master is gone for good: remove every job of the computation (running ones too), say why, stop."""
        doomed = [job.job_id for job in jobs]
        if doomed:
            self.backend.remove(doomed)
        self.problem = f"{why}; removed its {len(doomed)} slave jobs"
        self._note(f"giving up: {self.problem}")
        return Decision(Verdict.ABANDONED, removed=len(doomed), **_counts(jobs))

    def _replace_unconnected(
        self, record: resource_file.ResourceFile, jobs: list[Job]
    ) -> tuple[list[Job], int, list[str]]:
        """Remove the running jobs whose slave has not connected within ``connect_limit``.

        Returns the jobs left, how many were removed (the caller's shortfall then replaces
        them), and why: the removed jobs by name, and how long others have waited so far.
        """
        unconnected = self._unconnected(record, jobs)
        lost = [(job, ran) for job, ran, waited in unconnected if waited > self.connect_limit]
        why: list[str] = []
        if lost:
            gone = [job.job_id for job, _ in lost]
            self.backend.remove(gone)
            why.append(_explain_lost(lost))
            jobs = [job for job in jobs if job.job_id not in gone]
        waiting = [ran for _, ran, waited in unconnected if ran >= LONG_IDLE and waited <= self.connect_limit]
        if waiting:
            why.append(
                f"{len(waiting)} jobs running up to {_minutes(max(waiting))} without their slave connected "
                f"(each is replaced once it had {_minutes(self.connect_limit)} to connect)"
            )
        return jobs, len(lost), why

    def _unconnected(self, record: resource_file.ResourceFile, jobs: list[Job]) -> list[tuple[Job, float, float]]:
        """Running jobs whose slave has not connected in this run: (job, seconds running, seconds it had).

        The time it had counts from when it started running, or from when this overseer first saw
        the current master if that is later (a restarted master has not had the chance to see anyone).
        """
        if record.awaited_handovers:  # a restarted master waits for slaves busy with its predecessor's tasks
            return []
        connected = set(record.condor_jobs_connected)
        runs = {(job.job_id, job.since) for job in jobs if job.state is JobState.RUNNING}
        self._seen_connected = {run for run in self._seen_connected if run in runs}
        self._seen_connected.update(run for run in runs if run[0] in connected)
        with_this_master = time.monotonic() - self._master_seen_at
        unconnected: list[tuple[Job, float, float]] = []
        for job in jobs:
            ran = job.in_state_for()
            if (
                job.state is JobState.RUNNING
                and ran is not None
                and (job.job_id, job.since) not in self._seen_connected
                and CONDOR_JOB_ID.fullmatch(job.job_id) is not None
            ):
                unconnected.append((job, ran, min(ran, with_this_master)))
        return unconnected

    def _unconfirmed_master(self, record: resource_file.ResourceFile) -> str:
        """ "pid P at HOST:PORT" while this master has not yet had the chance to state its demand, else "".

        A master's first file is written before it has counted its tasks (a restarted master replays
        its journal first), so its ``slaves_needed`` may read 0. Only a later file of the same master,
        or one update interval since this overseer first saw it, confirms the demand.
        """
        identity = (record.master_pid, record.master_port, record.master_host)
        now = time.monotonic()

        if identity != self._master:
            if self._master is not None:
                self._log(
                    f"new master pid {record.master_pid} at {record.master_host}:{record.master_port} "
                    f"(was pid {self._master[0]} at {self._master[2]}:{self._master[1]}): "
                    "no idle job is removed until it has stated its demand"
                )
            self._master = identity
            self._master_first_file = record.timestamp
            self._master_seen_at = now
        if not record.demand_stated:  # the master says so itself, however long that takes (a long journal replay)
            return f"pid {record.master_pid} at {record.master_host}:{record.master_port}"
        if record.timestamp != self._master_first_file or now - self._master_seen_at >= record.update_interval:
            return ""
        return f"pid {record.master_pid} at {record.master_host}:{record.master_port}"

    def _finish(self, jobs: list[Job], counts: dict[str, int]) -> Decision:
        """Remove what is left: idle and held jobs at once, running ones once they had time to leave.

        Slaves the master told to shut down exit 0 by themselves (and Condor
        then brings their output back); only one still running after
        ``finish_grace`` seconds is removed.
        """
        now = time.monotonic()
        if self._finished_at is None:
            self._finished_at = now
        late = now - self._finished_at >= self.finish_grace
        doomed = [j.job_id for j in jobs if late or j.state is not JobState.RUNNING]
        if doomed:
            self.backend.remove(doomed)
        waiting = len(jobs) - len(doomed)
        if not jobs:
            self._note("computation finished: no slave jobs left")
        elif waiting:
            left = self.finish_grace - (now - self._finished_at)
            self._note(
                f"computation finished: removed {len(doomed)} slave jobs; "
                f"{waiting} running ones get {left:.0f} s more to exit by themselves"
            )
        else:
            self._note(f"computation finished: removed {len(doomed)} slave jobs")
        return Decision(Verdict.FINISHED, removed=len(doomed), **counts)

    def wake(self) -> None:
        """Cut :meth:`run`'s wait short (to reconcile now, or to see ``stop`` at once)."""
        self._wake.set()

    def run(self, stop: threading.Event, *, interval: float = 10.0, poll: float = 0.25) -> Verdict:
        """Reconcile on every rewrite of the file and every ``interval`` seconds until finished or ``stop``.

        Returns ``FINISHED`` once the computation is finished and a reconciliation
        found none of its jobs left. A failing reconciliation (the schedd is
        restarting, say) is logged and tried again after ``RETRY_DELAY`` seconds:
        the overseer outlives its batch system's hiccups.

        The first reconciliation comes before the file watcher starts: it starts
        the first slaves, which a short script waits for, while watchdog is
        imported and its threads start; a rewrite in between wakes the loop.
        With no inotify instance left (a busy host) the folder is polled instead.
        """
        before = _stamp(self.path)
        if stop.is_set():
            return Verdict.RUNNING
        verdict, next_at = self._turn(0.0, interval)
        if verdict is not None or stop.is_set():
            return verdict or Verdict.RUNNING
        from mwpy.pool.watch import watching  # noqa: PLC0415 - see above: after the first slaves started

        with watching(self.path, self._wake, poll=poll, log=self._log):
            if _stamp(self.path) != before:
                self._wake.set()
            while True:
                self._wake.wait(poll)
                if stop.is_set():
                    return Verdict.RUNNING
                verdict, next_at = self._turn(next_at, interval)
                if verdict is not None:
                    return verdict

    def _turn(self, next_at: float, interval: float) -> tuple[Verdict | None, float]:
        """One turn of :meth:`run`: poll the back end, and reconcile if woken or due (at ``next_at``).

        Returns the verdict that ends the run (None: go on) and when the next reconciliation is due.
        """
        now = time.monotonic()
        try:
            self.backend.poll()
            if self._wake.is_set() or now >= next_at:
                self._wake.clear()
                next_at = now + interval
                decision = self.reconcile()
                if decision.verdict in (Verdict.INVALID, Verdict.ABANDONED):
                    return decision.verdict, next_at
                if decision.verdict is Verdict.FINISHED:
                    if not decision.idle + decision.running + decision.held:
                        return Verdict.FINISHED, next_at
                    next_at = now + min(interval, RETRY_DELAY)  # see that they are gone
        except Exception as exc:
            self._note(f"reconciliation failed: {exc} (trying again in {min(interval, RETRY_DELAY):g} s)")
            next_at = now + min(interval, RETRY_DELAY)
        return None, next_at

    def _note(self, text: str) -> None:
        """Log a line, but not the same line over and over."""
        if text != self._last_note:
            self._last_note = text
            self._log(text)


def _real_path(path: Path) -> Path:
    """The file the master renames into place, whose folder the watcher must watch.

    A symlink loop has no real path; the loop itself is reported by the first
    read, as for every other reader of resource files.
    """
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop on Python < 3.13
        return Path(os.path.abspath(path))


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of the file from the next (inode, size, modification time), or None if absent:
    the master renames each version into place."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _counts(jobs: list[Job]) -> dict[str, int]:
    """Jobs by state, as a Decision counts them."""
    return {state.value: sum(job.state is state for job in jobs) for state in JobState}


def _explain_lost(lost: list[tuple[Job, float]]) -> str:
    """``job 41.3 running 10 min, its slave never connected: removed, replacing`` (a few named)."""
    named = ", ".join(f"job {job.job_id} running {_minutes(ran)}" for job, ran in lost[:HELD_NAMED])
    more = f" and {len(lost) - HELD_NAMED} more" if len(lost) > HELD_NAMED else ""
    whose = "its slave" if len(lost) == 1 else "their slaves"
    return f"{named}{more}, {whose} never connected: removed, replacing"


def _held_because(jobs: list[Job]) -> str:
    """`` (REASON)`` of the first held job that has one, else "": held jobs serve nobody until someone acts."""
    reason = next((job.reason for job in jobs if job.state is JobState.HELD and job.reason), None)
    return f" ({reason})" if reason else ""


def _shape_jobs(shape: str | None) -> str:
    """``jobs`` (plain) or ``jobs for memory 16384 MB``: whose request a memory hold raises."""
    return "jobs" if shape is None else f"jobs for {shape}"


def _capped(submitted: int, short: int) -> str:
    """`` (capped)`` when a cap held the submission below the shortfall."""
    return " (capped)" if submitted < short else ""


def _minutes(seconds: float) -> str:
    """A duration as people say it in a log: "40 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _explain_jobs(jobs: list[Job], now: float | None = None) -> list[str]:
    """Why jobs do not serve: idle ones waiting long (no slot matched), held ones with their reasons."""
    reasons: list[str] = []
    waits = [t for t in (j.in_state_for(now) for j in jobs if j.state is JobState.IDLE) if t is not None]
    long_waits = [t for t in waits if t >= LONG_IDLE]
    if long_waits:
        reasons.append(f"{len(long_waits)} jobs idle up to {_minutes(max(long_waits))}: no slot matched")
    held = [j for j in jobs if j.state is JobState.HELD]
    for job in held[:HELD_NAMED]:
        how_long = job.in_state_for(now)
        since = f" for {_minutes(how_long)}" if how_long is not None else ""
        reasons.append(f"job {job.job_id} held{since}: {job.reason or 'no reason given'}")
    if len(held) > HELD_NAMED:
        reasons.append(f"{len(held) - HELD_NAMED} more held")
    return reasons

"""Slaves for one master on this side: a work folder, a back end, an overseer thread, and how it all stops.

``mwpy local`` (mwpy/pool/local.py) and ``mwpy.Executor`` (mwpy/executor.py)
start their slaves the same way, as the overseer starts them on a pool: the
master publishes a resource file in a work folder, and an
:class:`~mwpy.overseer.Overseer` with a back end (local processes, or
Condor jobs) keeps at most N slave jobs matched to it, in a thread.
:class:`SlavePool` is that arrangement, once: it also watches for slaves that
fail before the computation has any result (:class:`SetupFailures`: they
would be restarted for ever), and at the end stops the overseer, lets the
slaves leave (or removes their jobs: a batch system's jobs outlive this
process) and releases the back end.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mwpy import safe_files, safe_text
from mwpy.backends import Backend
from mwpy.errors import BackendError
from mwpy.names import RESOURCE_FILE
from mwpy.pool.failing_slaves import SetupFailures

if TYPE_CHECKING:  # made by the pool's thread, when it first looks: an Executor's first result does not wait for it
    from mwpy.overseer import Overseer

log = safe_text.logger(__name__)

#: How often the overseer reconciles without being woken by a resource-file write.
OVERSEER_INTERVAL = 0.5
#: Seconds between two looks at the back end's jobs for slaves that fail to start.
JOB_LOOK_INTERVAL = 1.0
#: Seconds the end of a pool keeps removing slave jobs until the back end lists none.
JOBS_GONE_TIMEOUT = 30.0


@attrs.frozen
class WorkFolder:
    """The folder of the resource file, the master's audit and the slave sandboxes."""

    path: Path
    #: Made here (no folder given): removed at the end; one given is kept.
    own: bool

    @classmethod
    def make(cls, given: str | os.PathLike[str] | None, *, prefix: str) -> WorkFolder:
        """``given``, or a new temporary folder; a resource file left there by an earlier run is removed."""
        path = Path(safe_files.run_folder(prefix) if given is None else given).resolve()
        path.mkdir(parents=True, exist_ok=True)
        (path / RESOURCE_FILE).unlink(missing_ok=True)  # a previous run's file would look like a live master
        return cls(path, own=given is None)

    @property
    def resource_file(self) -> Path:
        return self.path / RESOURCE_FILE

    def remove(self) -> None:
        """Remove the folder if it is ours."""
        if self.own:
            shutil.rmtree(self.path, ignore_errors=True)


class SlavePool:
    """At most ``slaves`` slave jobs of ``backend``, kept matched to the resource file in ``work`` by an overseer."""

    def __init__(
        self,
        work: WorkFolder,
        backend: Backend,
        slaves: int,
        *,
        name: str,
        at_once: bool = False,
        first_look_after: float = 0.0,
        before_first_look: Callable[[], object] | None = None,
    ) -> None:
        """``first_look_after``: seconds at most before the overseer's first reconciliation, unless
        :meth:`look_now` comes first (slaves running already: an Executor's early ones, which its master greets
        meanwhile without the overseer's thread taking the interpreter from it to read the file, loading cattrs
        and watchdog, and list the jobs). ``before_first_look``: a chore for the overseer's thread then (an
        Executor's sweep of what killed runs left), off the path to the first result; done even if the pool
        stops first, so that a run shorter than its first look does it too."""
        self.work = work
        #: The slaves it keeps at most.
        self.slaves = slaves
        self.backend = backend
        self._name = name
        #: All ``slaves`` start now and stay while the computation runs (an Executor's workers).
        self._at_once = at_once
        self._overseer: Overseer | None = None
        self._stop = threading.Event()
        self._look = threading.Event()  # the first look is due (or the pool stops)
        self._thread = threading.Thread(
            target=self._oversee, args=(first_look_after, before_first_look), name=f"mwpy-overseer-{name}", daemon=True
        )
        self._setup = SetupFailures()
        self._next_look = 0.0
        self._thread.start()

    def _oversee(self, first_look_after: float, before_first_look: Callable[[], object] | None) -> None:
        """The overseer's thread: its first look after ``first_look_after`` seconds or :meth:`look_now`, unless
        stopped before."""
        self._look.wait(first_look_after)
        if before_first_look is not None:
            before_first_look()
        if self._stop.is_set():
            return
        from mwpy.overseer import Limits, Overseer  # noqa: PLC0415 (see the top of this file)

        # No grace at the end: the master tells its slaves to leave, and one still trying to reach the finished
        # master would only keep the pool waiting.
        slaves = self.slaves
        limits = Limits(max_jobs=slaves, max_idle=slaves, batch=slaves, min_jobs=slaves if self._at_once else 0)
        self._overseer = Overseer(self.work.resource_file, self.backend, limits, finish_grace=0.0)
        self._overseer.run(self._stop, interval=OVERSEER_INTERVAL)

    def look_now(self) -> None:
        """The overseer's first look now (the slaves it would have found starting are connected)."""
        self._look.set()

    def setup_problem(self, results_so_far: int, *, slaves_connected: int) -> str | None:
        """Why to give up (slaves that fail at set-up, before any result, would restart for ever), or None.

        ``slaves_connected``: slaves that ever connected (mwpy/pool/failing_slaves.py: once
        one has, a slave that dies may have been killed by a task, which is not a set-up failure).

        Looks at the back end's jobs at most every ``JOB_LOOK_INTERVAL``; call it as often as convenient.
        """
        now = time.monotonic()
        if now >= self._next_look:
            self._next_look = now + JOB_LOOK_INTERVAL
            self._setup.look(self.backend.jobs())
        return self._setup.problem(results_so_far, slaves_connected=slaves_connected)

    def stop_overseeing(self) -> None:
        """Submit no more slave jobs: call it before the master tells its slaves to leave.

        Else a slave that exits 0 at the shutdown, seen before the file says finished, is replaced at once
        (an Executor keeps all its workers): a slave started only to be removed.
        """
        self._stop.set()
        self._look.set()
        if self._overseer is not None:  # else made after the stop: it sees the stop before it does anything
            self._overseer.wake()  # not a poll interval later
        self._thread.join()

    def stop(self, *, grace: float = 0.0) -> None:
        """Stop the overseer; give the slaves ``grace`` seconds to leave; remove the jobs left; release the back end.

        A batch system's jobs outlive this process: a slave job still idle when
        the computation ends would start later, find the finished resource file
        and leave, but it would hold a place in the queue until then (and none
        would ever start if the file were gone). So every job is removed, and
        the back end is asked again until it lists none, for at most
        ``JOBS_GONE_TIMEOUT`` seconds (a schedd that does not answer is logged,
        not waited for).
        """
        self.stop_overseeing()
        backend = self.backend
        try:
            deadline = time.monotonic() + grace
            while backend.jobs() and time.monotonic() < deadline:
                time.sleep(0.05)  # slaves told to shut down exit 0 by themselves
            deadline = time.monotonic() + JOBS_GONE_TIMEOUT
            jobs = backend.jobs()
            while jobs:
                if time.monotonic() > deadline:
                    log.warning("%s: %d slave jobs are left in the queue", self._name, len(jobs))
                    break
                backend.remove([job.job_id for job in jobs])
                jobs = backend.jobs()
                if jobs:
                    time.sleep(JOB_LOOK_INTERVAL / 4)
        except BackendError as exc:
            log.warning("%s: cannot remove its slave jobs: %s", self._name, exc)
        finally:
            backend.close()

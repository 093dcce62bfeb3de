"""The master as a master algorithm sees it: submit tasks, drive the loop, drain what it reports.

:class:`Master` is the user-facing API (docs: README.md) and nothing more. It composes the parts that each own one job:

* :class:`mwpy.core.scheduler.Scheduler`: which task goes to which slave (no I/O);
* :class:`mwpy.core.outcomes.Outcomes`: what a result means (retries, the journal, black holes, timeouts) and
  where it goes;
* :class:`mwpy.net.engine.Engine`: the epoll event loop and every slave connection (each a sans-IO
  :class:`mwpy.wire.session.MasterSession`);
* :class:`mwpy.observe.renderers.Observers`: the audit, the log and, when asked for, the event log and the
  metrics exporter, which render the facts the others report (mwpy/core/facts.py);
* :class:`mwpy.pool.publish.Publisher`: the resource file, how to start a slave, the slave bundle.

``mw.map``/``mw.as_completed`` are :mod:`mwpy.streams`'. ``with Master(...) as mw:`` makes it *current*
(``hello.submit(...)`` finds it: a :class:`contextvars.ContextVar` in :mod:`mwpy.task`) and, on exit, finishes
the computation and restores whichever master was current before.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from types import TracebackType
from typing import Any, ClassVar, TypeVar, cast

from mwpy import streams
from mwpy.core import facts
from mwpy.core.news import LoopEvents
from mwpy.core.outcomes import Outcomes
from mwpy.core.scheduler import Scheduler, SlaveKind
from mwpy.data.shares import SharedObjects
from mwpy.errors import ConfigurationError
from mwpy.futures import submit_task
from mwpy.intake import Intake
from mwpy.net.engine import TICK, Engine
from mwpy.observe.audit import Audit
from mwpy.observe.renderers import Observers
from mwpy.options import Options
from mwpy.pool.publish import Publisher, restart_lease
from mwpy.slave_exits import Exits
from mwpy.task import Submissions, TaskAlgorithm, reset_master, use_master
from mwpy.task_records import Result, Task

__all__ = ["LoopEvents", "Master"]
T = TypeVar("T")


class Master:
    """The running master: the object a master algorithm receives.

    Task algorithms submit through it (``hello.submit(...)`` finds it), the
    algorithm drives it with :meth:`loop` and drains what it reports with
    :meth:`results`, :meth:`unrunnable_tasks`, :meth:`connected_ordered_slaves`
    and :meth:`disconnected_ordered_slaves`. Use it as a context manager (or
    let ``mwpy.run()`` do so): inside the ``with`` block it is the current
    master; leaving the block finishes the computation.
    """

    #: What other mwpy modules may use besides the public API (tests/test_architecture.py): the intake and the facts,
    #: through which ``mwpy.Executor`` queues tasks, waits and reports; ``_submit``, which ``submit()`` (below) calls.
    _SHARED_WITH: ClassVar[Mapping[str, tuple[str, ...]]] = {"_intake": ("mwpy.executor_service",),
        "_facts": ("mwpy.executor_service",), "_submit": ("mwpy.task",)}  # fmt: skip

    def __init__(self, options: Options, *, audit: Audit, secret: bytes, program: str,
                 listener: socket.socket | None = None, durable: bool = True) -> None:  # fmt: skip
        """``listener``: a socket listening already, for the engine to take (mwpy.Executor's early slaves).
        ``durable``: each resource file on disk before it replaces the last (an Executor's own scratch folder:
        no fsync, milliseconds and on a busy disk tens of them, before its first task and then in its engine)."""
        self._options = options
        self._audit = audit
        self._sched = Scheduler(task_group=options.slave_task_group, fixed_window=options.slave_window,
                                task_attempts=options.task_attempts, black_hole_failures=options.slave_max_failures,
                                task_timeout=options.task_timeout)  # fmt: skip
        self._sched.shapes.offer(options.slave_resources)
        #: The total the algorithm declared (``mw.tasks_total = n``), or None.
        self._declared_total: int | None = None
        self._tokens: list[contextvars.Token[Submissions | None]] = []
        #: Whether finishing prints the goodput summary (--mw-events); off in a program with a last line of its own.
        self.goodput_summary = True
        with contextlib.ExitStack() as undo:  # a part that fails to start (a port taken) releases those before it
            self._observers = Observers(options, audit)
            undo.callback(self._observers.close)
            self._facts = self._observers.facts
            journal = None
            if options.journal:
                from mwpy.core.journal import Journal  # noqa: PLC0415 (sqlite3 only for --mw-journal)

                journal = Journal(options.journal, on_failure=lambda why: self._facts(facts.JournalOff(why)))
                undo.callback(journal.close)
            self._journal = journal
            exits = Exits.beside(options.resource_file)
            self._outcomes = Outcomes(self._sched, self._facts, journal, allowed_failures=options.allowed_failures,
                                      how_ended=exits, lease=restart_lease(options), gone=lambda h: exits.ended(*h),
                                      printed=self._observers.printed.take)  # fmt: skip
            self._engine = Engine(options, secret=secret, sched=self._sched, outcomes=self._outcomes,
                                  facts=self._facts, on_tick=self._on_tick, listener=listener)  # fmt: skip
            undo.callback(self._engine.close)
            self.host, self.port = self._engine.host, self._engine.port
            #: The address it listens on ("" for every interface): a service beside the master listens alike.
            self.bind = self._engine.bind
            self._shared = SharedObjects(options, secret, self.host, self.bind)
            self._engine.store = self._shared.address  # slaves are told it: their large results go there
            self._intake = Intake(self._sched, self._engine, self._outcomes, self._shared, self._facts,
                                  max_frame=options.max_write_buffer_size, timed=self._observers.timed)  # fmt: skip
            #: ``submit()`` (mwpy/task.py): arguments checked and pickled, a future; a partial (no frame per task).
            self._submit = functools.partial(submit_task, self._intake)
            #: The ports a service beside the master takes its port from (``--mw-master-port-range``), or None.
            self.port_range = options.master_port_range
            self._publisher = Publisher(options, facts=self._facts, sched=self._sched, program=program, secret=secret,
                                        host=self.host, port=self.port, tls_fingerprint=self._engine.tls_fingerprint,
                                        leave_at=self._engine.leave_at, condor_jobs=self._engine.condor_jobs,
                                        tasks_total=lambda: self.tasks_total, journal_answers=len(journal or ()),
                                        slaves_greeted=lambda: self._engine.slaves_greeted,
                                        task_seconds=self._outcomes.mean_run, durable=durable)  # fmt: skip
            self._publisher.awaited = self._outcomes.awaited  # its predecessor's slaves, in the resource file
            undo.pop_all()
        self._facts(facts.MasterStarted(options.member_id, socket.gethostname(), self._publisher.journal_answers))
        self._publisher.write(time.monotonic(), self._sched.slaves_needed, self._sched.connected(), finished=False)
        self._facts(facts.MasterReady(self.host, self.port))
        audit.flush()

    # ------------------------------------------------------------------ being the current master

    def __enter__(self) -> Master:
        """Make this the current master (what ``submit()`` talks to) until the ``with`` block ends; a
        ``future.result()`` drives the loop in the thread that entered."""
        self._tokens.append(use_master(self))
        self._intake.owner = threading.get_ident()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Finish the computation and make the previous master current again."""
        try:
            self.finish(0 if kind is None else 255)
        finally:
            reset_master(self._tokens.pop())

    # ------------------------------------------------------------------ the event loop

    def loop(self, timeout: float | None = None) -> LoopEvents:
        """Do network I/O until there is something to report, or ``timeout`` seconds pass.

        Returns the counts of results, unrunnable tasks, newly connected and newly disconnected ordered slaves
        waiting to be drained (all zero on timeout).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        sched, outcomes, step = self._sched, self._outcomes, self._engine.step
        if outcomes.results or sched.news.pending():
            step(0.0)  # undrained reports (futures saw them) are answered at once, but never without I/O
            return self._events()
        while True:
            wait = TICK
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return self._events()
            step(wait)
            # Plain truth tests: a LoopEvents record is found only when it is returned (here without _events' call).
            if outcomes.results or sched.news.pending():
                return sched.news.events(len(outcomes.results))

    def loop_once(self, timeout: float = 0.05) -> LoopEvents:
        """One pass of network I/O (waiting at most ``timeout`` seconds); reports as :meth:`loop`."""
        self._engine.step(timeout)
        return self._events()

    def _events(self) -> LoopEvents:
        return self._sched.news.events(len(self._outcomes.results))

    def _on_tick(self, now: float) -> None:
        # Ticks run only inside loop passes, which the master algorithm asks for once it has submitted
        # what it wants (and replayed its journal): from then on slaves_needed is its word.
        self._publisher.demand_stated = True
        self._publisher.slave_peak_memory = self._engine.peak_memory
        self._publisher.maybe_write(now, finished=self._intake.finished)

    # ------------------------------------------------------------------ what the algorithm drains

    def results(self) -> list[Result]:
        """All results that arrived since the last call (CL-MW's get-results); a value that stayed on its slave
        (another task's input: mwpy/held_tasks.py) is fetched from there now."""
        return self._intake.results()

    def unrunnable_tasks(self) -> list[Task]:
        """Tasks whose policy made them unrunnable since the last call."""
        return [entry.task() for entry in self._sched.news.drain_unrunnable()]

    def connected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that connected since the last call."""
        return self._sched.news.drain_connected_ordered()

    def disconnected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that disconnected since the last call."""
        return self._sched.news.drain_disconnected_ordered()

    @property
    def num_runnable_tasks(self) -> int:
        """Tasks waiting or running on slaves."""
        return self._sched.pending_total

    @property
    def num_unrunnable_tasks(self) -> int:
        """Unrunnable tasks not yet drained with :meth:`unrunnable_tasks`."""
        return len(self._sched.news.unrunnable)

    @property
    def tasks_total(self) -> int | None:
        """Tasks the computation runs in all, when known: drives progress bars and ETAs (``mwpy status``).

        What the algorithm declared (``mw.tasks_total = n``); else, once a ``map``/``as_completed`` over sized inputs
        started, the tasks done, queued and running plus the inputs still to submit; else None (a loop says nothing).
        """
        if self._declared_total is not None:
            return self._declared_total
        ahead = self._intake.ahead
        if ahead is None:
            return None
        return self._sched.done_total + self._sched.queued_total + self._sched.running_total + ahead

    @tasks_total.setter
    def tasks_total(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 0):
            raise ConfigurationError(f"tasks_total must be a whole number >= 0 or None, not {value!r}")
        self._declared_total = value
        self._engine.tick_soon()

    # ------------------------------------------------------------------ slave groups

    def allocate_slaves(self, amount: int = 1000, kind: SlaveKind | str = SlaveKind.UNORDERED) -> None:
        """Want ``amount`` more slaves of ``kind`` (ordered, intermingle or unordered).

        Ordered and intermingle slaves beyond ``--mw-max-slaves`` (``mwpy local --slaves``) could never
        all come, and their tasks would wait for ever: that is an error, at once.
        """
        kind = SlaveKind(kind)
        limit = self._options.max_slaves
        if limit is not None and kind is not SlaveKind.UNORDERED and self._sched.reserved + amount > limit:
            raise ConfigurationError(
                f"allocate_slaves: {self._sched.reserved + amount} ordered and intermingle slaves wanted, but at "
                f"most {limit} slaves can connect (--slaves {limit})"
            )
        self._sched.allocate(amount, kind)
        self._engine.tick_soon()

    def deallocate_slaves(self, amount: int = 0, kind: SlaveKind | str = SlaveKind.UNORDERED) -> None:
        """Want ``amount`` fewer slaves of ``kind``; no slave is disconnected."""
        self._sched.deallocate(amount, SlaveKind(kind))
        self._engine.tick_soon()

    def free_slave(self, sid: str) -> None:
        """Move an ordered slave to the unordered group once its ordered tasks in flight are done."""
        self._sched.free(sid)
        self._engine.tick_soon()

    def slave_kind(self, sid: str) -> SlaveKind | None:
        """The group of a connected slave, or ``None`` if it is not connected."""
        return self._sched.kind_of(sid)

    def connected_slaves(self) -> dict[str, SlaveKind]:
        """Every connected slave (of any group) and its group, now."""
        return self._sched.slaves()

    # ------------------------------------------------------------------ target numbers

    @property
    def target_number(self) -> int:
        """The general target number: pending tasks of any algorithm to keep (advisory)."""
        return self._sched.general_target

    @target_number.setter
    def target_number(self, value: int) -> None:
        self._sched.general_target = max(0, value)

    def pending_tasks(self) -> int:
        """Tasks of any algorithm known to the master and not yet answered."""
        return self._sched.pending_total

    def upto_target_number(self) -> int:
        """How many tasks to create now to reach the general target number."""
        return max(0, self._sched.general_target - self._sched.pending_total)

    def target_number_for(self, algorithm: str) -> int:
        return self._sched.target_for(algorithm)

    def set_target_number_for(self, algorithm: str, value: int) -> None:
        self._sched.set_target_for(algorithm, value)

    def pending_tasks_for(self, algorithm: str) -> int:
        return self._sched.pending_for(algorithm)

    # ------------------------------------------------------------------ convenience (mwpy/streams.py)

    def as_completed(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
        window_bytes: int = streams.WINDOW_BYTES,
        **kwargs: Any,
    ) -> Generator[Result, None, None]:
        """Run ``algorithm`` over the zipped ``iterables``; yield each Result as it arrives.

        Input is consumed lazily, keeping at most ``window`` tasks and ``window_bytes`` of their pickled
        arguments (beyond one task's) in the master, so an endless iterable streams with bounded memory.
        Results of these tasks go only to this iterator, never to :meth:`results`. Each result's ``tag`` is
        the position of its arguments in the input; ``key(*args)`` names each task for the journal
        (``--mw-journal``). ``kwargs`` go to every call, as with dask's ``client.map``. Closing the iterator
        (``break``) cancels every task that has not left for a slave.
        """
        return streams.as_completed(
            self._intake, algorithm, iterables, window=(window, window_bytes), key=key, kwargs=kwargs
        )

    def map(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
        chunksize: int = 1,
        window_bytes: int = streams.WINDOW_BYTES,
        **kwargs: Any,
    ) -> Generator[Any, None, None]:
        """Like the builtin ``map`` (and ``Executor.map``), run on the slaves: values in input order.

        A task that raised makes the iterator raise that exception, as itself (the slave's traceback is its
        ``__cause__``); one the master cannot rebuild raises :class:`~mwpy.task_records.TaskRaisedError`, which
        names its type. ``kwargs`` go to every call; closing the iterator cancels what has not started.
        ``chunksize`` (as ``ProcessPoolExecutor.map``'s): one task makes that many calls, so a tiny function pays
        the per-task cost once per chunk; the algorithm's policy (retries, timeout) then applies to the whole
        chunk, ``window`` counts chunks, and ``key`` cannot be given (it names one call); ``window_bytes`` as
        in :meth:`as_completed`.
        """
        window_ = (window, window_bytes)
        return streams.in_order(
            self._intake, algorithm, iterables, window=window_, key=key, chunksize=chunksize, kwargs=kwargs
        )

    # ------------------------------------------------------------------ objects shared once per slave

    def share(self, obj: T) -> T:
        """Send ``obj`` to each slave once: the small handle returned (typed as ``obj``) stands for it in tasks.

        ``obj`` is pickled now, once (protocol 5: a numpy array's data is not
        copied), into a file the master's file service offers by its SHA-256
        until the computation finishes. A slave fetches it, checks its hash,
        and unpickles it from a read-only memory map the first time a task's
        arguments name the handle; it keeps the object for its life, so later
        tasks there get it with no transfer (a numpy array arrives read-only,
        as with Ray's object store: copy it to change it). Sharing an equal
        object again gives an equal handle and no second file.
        """
        return cast(T, self._shared.share(obj))

    def file_counters(self) -> dict[str, Any]:
        """What the file service of shared objects sent: ``fetches`` (per hash), ``bytes_sent`` and the rest."""
        return self._shared.counters()

    # ------------------------------------------------------------------ the end

    def finish(self, status: int = 0, *, removed: bool = False) -> None:
        """Tell the slaves to shut down, wait briefly, mark the computation finished (``status``: the exit status for
        ``master-stop``), or that its Condor job was ``removed`` (said first: Condor kills it soon; pool/removal.py)."""
        if self._intake.finished:
            return
        self._intake.finished = True
        if removed:
            self._publisher.write(time.monotonic(), 0, self._sched.connected(), finished=False, removed=True)
        self._engine.shutdown()
        if self._journal is not None:
            self._journal.close()
        if not removed:
            self._publisher.write(time.monotonic(), 0, self._sched.connected(), finished=True)
        self._facts(facts.MasterStopped(self._options.member_id, status, self._sched.done_total))
        self._audit.flush()
        self._observers.stop(status, summary=self.goodput_summary)
        self._shared.close()

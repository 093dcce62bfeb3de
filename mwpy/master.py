"""The master as a master algorithm sees it: submit tasks, drive the loop, drain what it reports.

:class:`Master` is the user-facing API (docs: README.md) and nothing more. It
composes three parts that each own one job:

* :class:`mwpy.core.scheduler.Scheduler`: which task goes to which slave (no I/O);
* :class:`mwpy.net.engine.Engine`: the selectors event loop and every slave
  connection (each a sans-IO :class:`mwpy.wire.session.MasterSession`);
* :class:`mwpy.pool.publish.Publisher`: the resource file, how to start a slave,
  the slave bundle.

A master is *current* while its algorithm runs, so that ``hello.submit(...)``
finds it: ``with Master(...) as mw:`` makes it current and, on exit, finishes
the computation and restores whichever master was current before (a
:class:`contextvars.ContextVar` in :mod:`mwpy.task`, not a process global).
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from types import TracebackType
from typing import Any, TypeVar, cast

import attrs

from mwpy.core.journal import Entry as JournalEntry
from mwpy.core.journal import Journal
from mwpy.core.scheduler import Scheduler, SlaveKind
from mwpy.errors import ComputationFinishedError, ConfigurationError
from mwpy.net.engine import TICK, Engine, decode_result
from mwpy.observe import goodput
from mwpy.observe.audit import Audit
from mwpy.observe.events import EventWriter
from mwpy.options import Options
from mwpy.pool.publish import BUNDLE_NAME, DEFAULT_BUNDLE_PYTHON, Publisher
from mwpy.task import (
    Policy,
    Result,
    Task,
    TaskAlgorithm,
    TaskFuture,
    encode_arguments,
    registry,
    reset_master,
    task,
    task_exception,
    use_master,
)
from mwpy.wire import protocol

__all__ = ["BUNDLE_NAME", "DEFAULT_BUNDLE_PYTHON", "LoopEvents", "Master"]

T = TypeVar("T")


@attrs.frozen
class LoopEvents:
    """What :meth:`Master.loop` found for the master algorithm (CL-MW's four counts)."""

    results: int = 0
    unrunnable: int = 0
    connected_ordered: int = 0
    disconnected_ordered: int = 0

    def __bool__(self) -> bool:
        return bool(self.results or self.unrunnable or self.connected_ordered or self.disconnected_ordered)


class Master:
    """The running master: the object a master algorithm receives.

    Task algorithms submit through it (``hello.submit(...)`` finds it), the
    algorithm drives it with :meth:`loop` and drains what it reports with
    :meth:`results`, :meth:`unrunnable_tasks`, :meth:`connected_ordered_slaves`
    and :meth:`disconnected_ordered_slaves`. Use it as a context manager (or
    let ``mwpy.run()`` do so): inside the ``with`` block it is the current
    master; leaving the block finishes the computation.
    """

    def __init__(self, options: Options, *, audit: Audit, secret: bytes, program: str) -> None:
        self._options = options
        self._audit = audit
        self._sched = Scheduler(
            task_group=options.slave_task_group,
            fixed_window=options.slave_window,
            task_attempts=options.task_attempts,
            black_hole_failures=options.slave_max_failures,
            task_timeout=options.task_timeout,
        )
        self._results: list[Result] = []
        self._owner = threading.get_ident()  # the thread that runs the master (and its loop)
        self._finished = False
        #: The total the algorithm declared (``mw.tasks_total = n``), or None.
        self._declared_total: int | None = None
        #: Inputs of sized ``map``/``as_completed`` calls not submitted yet; None until such a call starts.
        self._ahead: int | None = None
        self._tokens: list[contextvars.Token[Master | None]] = []
        self._observers = _Observers.open(options)
        #: Whether tasks need their queue time (only the event log and the metrics exporter read it).
        self._timed = self._observers.events is not None
        try:
            self._journal = Journal(options.journal) if options.journal else None
        except BaseException:
            self._observers.close()
            raise
        try:
            self._engine = Engine(
                options,
                audit=audit,
                secret=secret,
                sched=self._sched,
                journal=self._journal,
                deliver=self._deliver,
                on_tick=self._on_tick,
                events=self._observers.events,
            )
        except BaseException:  # e.g. the port is taken: release the journal
            if self._journal is not None:
                self._journal.close()
            self._observers.close()
            raise
        self.host = self._engine.host
        self.port = self._engine.port
        #: The address it listens on ("" for every interface): a service beside the master listens alike.
        self.bind = self._engine.bind
        try:
            self._publisher = Publisher(
                options,
                audit=audit,
                sched=self._sched,
                program=program,
                secret=secret,
                host=self.host,
                port=self.port,
                tls_fingerprint=self._engine.tls_fingerprint,
                events=self._observers.events,
                condor_jobs=self._engine.condor_jobs,
                tasks_total=lambda: self.tasks_total,
            )
        except BaseException:  # e.g. the slave bundle cannot be built: do not leave the port open
            self._engine.close()
            if self._journal is not None:
                self._journal.close()
            self._observers.close()
            raise
        if self._observers.events is not None:
            self._observers.events.master_start(member_id=options.member_id, host=socket.gethostname())
        audit(f'INIT MASTER "{options.member_id}"')
        self._publisher.write(time.monotonic(), self._sched.slaves_needed, self._sched.connected(), finished=False)
        audit(f"MASTER READY {self.host}:{self.port}")
        audit.flush()

    # ------------------------------------------------------------------ being the current master

    def __enter__(self) -> Master:
        """Make this the current master (what ``submit()`` talks to) until the ``with`` block ends.

        The thread that enters is the one whose ``future.result()`` drives the loop.
        """
        self._tokens.append(use_master(self))
        self._owner = threading.get_ident()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Finish the computation and make the previous master current again."""
        try:
            self.finish(0 if kind is None else 255)
        finally:
            reset_master(self._tokens.pop())

    # ------------------------------------------------------------------ task submission

    def _submit(
        self,
        algorithm: TaskAlgorithm[Any, Any],
        policy: Policy,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        sink: Callable[[Result], None] | None = None,
    ) -> int:
        if self._finished:
            raise ComputationFinishedError("the computation has finished; no more tasks can be submitted")
        payload = encode_task(algorithm, args, kwargs, self._options.max_write_buffer_size)
        return self._enqueue(algorithm.name, payload, policy, sink=sink)

    def _submit_future(
        self, algorithm: TaskAlgorithm[Any, Any], policy: Policy, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskFuture[Any]:
        """``submit()``: queue a task whose result goes to :meth:`results` and settles the returned future."""
        if self._finished:
            raise ComputationFinishedError("the computation has finished; no more tasks can be submitted")
        payload = encode_task(algorithm, args, kwargs, self._options.max_write_buffer_size)
        future: TaskFuture[Any] = TaskFuture(self._sched.new_id(), self)
        task = Task(future.task_id, algorithm.name, payload, policy, future=future)
        if self._timed or (policy.key is not None and self._journal is not None):
            self._add(task)
        else:
            self._sched.add(task)  # the hot path: no queue time to stamp, no journal to ask
        return future

    def _wait_for(self, future: TaskFuture[Any], timeout: float | None) -> None:
        """Drive the loop until ``future`` is done or ``timeout`` passes (only in the thread that runs the master)."""
        if future.done() or threading.get_ident() != self._owner:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while not future.done():
            if self._finished:
                raise ComputationFinishedError(f"the computation finished before task {future.task_id} had a result")
            wait = TICK if deadline is None else min(TICK, deadline - time.monotonic())
            if wait <= 0:
                return
            self._engine.step(wait)

    def _enqueue(
        self,
        name: str,
        payload: bytes,
        policy: Policy,
        *,
        sink: Callable[[Result], None] | None = None,
        start: Callable[[], bool] | None = None,
        begin: Callable[[], object] | None = None,
    ) -> int:
        """Queue a task whose arguments :func:`encode_task` already checked and pickled (maybe in another thread)."""
        if self._finished:
            raise ComputationFinishedError("the computation has finished; no more tasks can be submitted")
        task = Task(self._sched.new_id(), name, payload, policy, sink=sink, start=start, begin=begin)
        self._add(task)
        return task.task_id

    def _add(self, task: Task) -> None:
        if self._timed:
            task.queued_at = time.monotonic()  # the event log's queue wait starts here
        key = task.policy.key
        entry = None if key is None or self._journal is None else self._journal.lookup(key)
        if entry is not None:
            replay = decode_result(task, entry.slave_id, True, entry.value, entry.compute_time, journaled=True)
            unusable = _unusable(entry, task, replay)
            if unusable is None:
                self._deliver(task, replay)
                return
            self._audit(f"JOURNAL ENTRY {key!r} UNUSABLE ({unusable}): task {task.task_id} runs again")
        self._sched.add(task)

    def _cancel(self, task_ids: list[int]) -> None:
        """Cancelled futures: tasks still queued here are dropped when they would leave (their start hook);
        those in a slave's window are asked back (Cancel), and what the slave gives back leaves the books."""
        if self._finished:
            return  # every slave has been told to shut down
        for sid, ids in self._sched.holders(task_ids).items():
            self._engine.cancel(sid, ids)

    def _deliver(self, task: Task, result: Result) -> None:
        future = task.future
        if future is not None and future.cancelled():
            return  # no result of a cancelled task reaches the user
        if task.sink is None:
            self._results.append(result)
        else:
            task.sink(result)
        if future is not None:
            if result.error is None:
                future._finish(result.value, None)
            else:
                future._settle(result)

    # ------------------------------------------------------------------ the event loop

    def loop(self, timeout: float | None = None) -> LoopEvents:
        """Do network I/O until there is something to report, or ``timeout`` seconds pass.

        Returns the counts of results, unrunnable tasks, newly connected and
        newly disconnected ordered slaves waiting to be drained (all zero on
        timeout).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        sched = self._sched
        step = self._engine.step
        while True:
            # Plain truth tests first: a LoopEvents record is built only when it is returned.
            if self._results or sched.has_news():
                return self._events()
            wait = TICK
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return self._events()
            step(wait)

    def loop_once(self, timeout: float = 0.05) -> LoopEvents:
        """One pass of network I/O (waiting at most ``timeout`` seconds); reports as :meth:`loop`."""
        self._engine.step(timeout)
        return self._events()

    def _events(self) -> LoopEvents:
        return LoopEvents(len(self._results), *self._sched.news_counts())

    def _run_until(self, done: Callable[[], bool]) -> None:
        """Run passes until ``done()`` (used by the convenience API's private result sinks)."""
        while not done():
            self._engine.step(TICK)

    def _on_tick(self, now: float) -> None:
        # Ticks run only inside loop passes, which the master algorithm asks for once it has submitted
        # what it wants (and replayed its journal): from then on slaves_needed is its word.
        self._publisher.demand_stated = True
        self._publisher.slave_peak_memory = self._engine.peak_memory
        self._publisher.maybe_write(now, finished=self._finished)

    # ------------------------------------------------------------------ what the algorithm drains

    def results(self) -> list[Result]:
        """All results that arrived since the last call (CL-MW's get-results)."""
        results, self._results = self._results, []
        return results

    def unrunnable_tasks(self) -> list[Task]:
        """Tasks whose policy made them unrunnable since the last call."""
        return self._sched.drain_unrunnable()

    def connected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that connected since the last call."""
        return self._sched.drain_connected_ordered()

    def disconnected_ordered_slaves(self) -> list[str]:
        """Ids of ordered/intermingle slaves that disconnected since the last call."""
        return self._sched.drain_disconnected_ordered()

    @property
    def num_runnable_tasks(self) -> int:
        """Tasks waiting or running on slaves."""
        return self._sched.pending_total

    @property
    def num_unrunnable_tasks(self) -> int:
        """Unrunnable tasks not yet drained with :meth:`unrunnable_tasks`."""
        return self._sched.num_unrunnable

    @property
    def tasks_total(self) -> int | None:
        """Tasks the computation runs in all, when known: drives progress bars and ETAs (``mwpy status``).

        What the algorithm declared (``mw.tasks_total = n``); else, once a
        ``map`` or ``as_completed`` over sized inputs has started, the tasks
        done, queued and running plus the inputs those calls have still to
        submit; else None (a loop that submits as it goes says nothing of
        what is to come).
        """
        if self._declared_total is not None:
            return self._declared_total
        if self._ahead is None:
            return None
        sched = self._sched
        return sched.done_total + sched.queued_total + sched.running_total + self._ahead

    @tasks_total.setter
    def tasks_total(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 0):
            raise ConfigurationError(f"tasks_total must be a whole number >= 0 or None, not {value!r}")
        self._declared_total = value
        self._engine.tick_soon()

    def _count_submitted_as_total(self) -> None:
        """Without a declared total, the total is every task submitted so far (for an Executor, which has no
        lazy map: its ``map`` makes every future at once, as ``concurrent.futures`` does)."""
        self._ahead = self._ahead or 0

    # ------------------------------------------------------------------ slave groups

    def allocate_slaves(self, amount: int = 1000, kind: SlaveKind | str = SlaveKind.UNORDERED) -> None:
        """Want ``amount`` more slaves of ``kind`` (ordered, intermingle or unordered)."""
        self._sched.allocate(amount, SlaveKind(kind))
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

    # ------------------------------------------------------------------ convenience

    def as_completed(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
        **kwargs: Any,
    ) -> Generator[Result, None, None]:
        """Run ``algorithm`` over the zipped ``iterables``; yield each Result as it arrives.

        Input is consumed lazily, keeping at most ``window`` tasks in the
        master, so an endless iterable streams with bounded memory. Results of
        these tasks go only to this iterator, never to :meth:`results`.
        Each result's ``tag`` is the position of its arguments in the input;
        ``key(*args)`` names each task for the journal (``--mw-journal``).
        ``kwargs`` go to every call, as with dask's ``client.map``. Closing the
        iterator (``break``) cancels every task that has not left for a slave.
        """
        algorithm = _check_algorithm("as_completed", algorithm)
        each = zip(*iterables, strict=False)
        calls = _Calls(algorithm, algorithm.policy, each, _known_length(iterables), key, kwargs)
        return _as_they_come(self._stream(calls, window))

    def map(
        self,
        algorithm: TaskAlgorithm[..., Any],
        *iterables: Iterable[Any],
        window: int = 10_000,
        key: Callable[..., str] | None = None,
        chunksize: int = 1,
        **kwargs: Any,
    ) -> Generator[Any, None, None]:
        """Like the builtin ``map`` (and ``Executor.map``), run on the slaves: values in input order.

        A task that raised makes the iterator raise that exception, as itself
        (the slave's traceback is its ``__cause__``); one the master cannot
        rebuild raises :class:`~mwpy.task.TaskRaisedError`, which names its type.
        ``kwargs`` go to every call; closing the iterator cancels what has not started.
        ``chunksize`` (as ``ProcessPoolExecutor.map``'s): one task makes that many
        calls, so a tiny function pays the per-task cost once per chunk; the
        algorithm's policy (retries, timeout) then applies to the whole chunk,
        ``window`` counts chunks, and ``key`` cannot be given (it names one call).
        """
        algorithm = _check_algorithm("map", algorithm)
        if chunksize < 1:
            raise ConfigurationError("chunksize must be at least 1")
        each = zip(*iterables, strict=False)
        size = _known_length(iterables)
        if chunksize == 1:
            return _in_order(self._stream(_Calls(algorithm, algorithm.policy, each, size, key, kwargs), window))
        if key is not None:
            raise ConfigurationError("key names one call's task: it cannot be given with chunksize > 1")
        chunks = _chunks(algorithm, each, chunksize, kwargs)
        calls = _Calls(_map_chunk, algorithm.policy, chunks, None if size is None else -(-size // chunksize))
        return _flattened(_in_order(self._stream(calls, window)))

    def _stream(self, calls: _Calls, window: int) -> Generator[tuple[int, Result], None, None]:
        """Submit ``calls`` lazily, at most ``window`` outstanding; yield (input position, result)."""
        if window < 1:
            raise ConfigurationError("window must be at least 1")
        return self._streaming(calls, window)

    def _streaming(self, calls: _Calls, window: int) -> Generator[tuple[int, Result], None, None]:
        algorithm, base, key, kwargs = calls.algorithm, calls.policy, calls.key, calls.kwargs
        arrived: deque[tuple[int, Result]] = deque()
        items = enumerate(calls.each)
        ahead = _Ahead(self, calls.size)
        outstanding = 0
        exhausted = False
        open_ = [True]  # cleared when the consumer closes the iterator: queued tasks are then dropped unsent
        live: set[int] = set()  # tasks submitted and not answered: on close, slaves are asked to give them back

        def start() -> bool:
            return open_[0]

        try:
            while True:
                while not exhausted and outstanding < window:
                    item = next(items, None)
                    if item is None:
                        exhausted = True
                        break
                    index, args = item
                    ahead.took_one()
                    policy = base.for_item(index, None if key is None else key(*args))
                    payload = encode_task(algorithm, args, kwargs, self._options.max_write_buffer_size)
                    sink = functools.partial(_put, arrived, live, index)
                    task_id = self._enqueue(algorithm.name, payload, policy, sink=sink, start=start)
                    if not arrived or arrived[-1][0] != index:  # not answered at once from the journal
                        live.add(task_id)
                    outstanding += 1
                if not arrived:
                    if exhausted and not outstanding:
                        return
                    self._run_until(lambda: bool(arrived))
                outstanding -= 1
                yield arrived.popleft()
        finally:
            open_[0] = False
            ahead.close()
            if live:
                self._cancel(list(live))  # those waiting in a slave's window come back unrun

    # ------------------------------------------------------------------ the end

    def finish(self, status: int = 0) -> None:
        """Tell every slave to shut down, wait briefly for them, mark the computation finished.

        ``status`` is the master's exit status, for the event log's ``master-stop``.
        """
        if self._finished:
            return
        self._finished = True
        self._engine.shutdown()
        if self._journal is not None:
            self._journal.close()
        self._publisher.write(time.monotonic(), 0, self._sched.connected(), finished=True)
        self._audit(f'FINI SHUTDOWN "{self._options.member_id}"')
        self._audit.flush()
        self._observers.stop(status, self._sched.done_total)


@attrs.frozen
class _Calls:
    """What one ``map``/``as_completed`` submits: a task of ``algorithm`` per item of ``each``, under ``policy``.

    ``size`` is how many items there will be, when the inputs tell (for the
    total); ``key(*args)`` names each task for the journal.
    """

    algorithm: TaskAlgorithm[..., Any]
    policy: Policy
    each: Iterator[tuple[Any, ...]]
    size: int | None
    key: Callable[..., str] | None = None
    kwargs: dict[str, Any] = attrs.field(factory=dict)


class _Ahead:
    """What one sized ``map``/``as_completed`` call has still to submit, kept in its master's total.

    Sized inputs tell the total before their tasks exist, for the progress
    bar and the ETA; an unsized one (a generator) says nothing.
    """

    def __init__(self, master: Master, size: int | None) -> None:
        self._master = master
        self._left = size or 0
        if size is not None:
            master._ahead = (master._ahead or 0) + size

    def took_one(self) -> None:
        """One input became a task (now counted as queued)."""
        if self._left:
            self._left -= 1
            self._master._ahead = max(0, (self._master._ahead or 0) - 1)

    def close(self) -> None:
        """The call ended, perhaps early (``break``): what it never submitted will not run."""
        if self._left and self._master._ahead is not None:
            self._master._ahead = max(0, self._master._ahead - self._left)
        self._left = 0


#: The exit status of a master algorithm stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


def _unusable(entry: JournalEntry, task: Task, replay: Result) -> str | None:
    """Why a journal entry cannot answer ``task`` (then it is treated as absent), or None when it can."""
    if entry.damaged:
        return "damaged: its digest does not match"
    if entry.algorithm != task.algorithm:
        return f"written for algorithm {entry.algorithm!r}"
    if replay.error is not None:
        return f"its value does not unpickle here: {replay.error.message}"
    return None


class _Observers:
    """The event log (``--mw-events``), its running goodput account and the metrics exporter, if asked for.

    Both options feed one :class:`~mwpy.observe.events.EventWriter` (without ``--mw-events`` it
    writes no file and only feeds the exporter). At the end the master prints
    the goodput summary of its run on stderr, Condor MW's end-of-run statistics.
    """

    def __init__(self, events: EventWriter | None, accountant: goodput.Accountant | None, exporter: Any) -> None:
        self.events = events
        self._accountant = accountant
        self._exporter = exporter

    @classmethod
    def open(cls, options: Options) -> _Observers:
        """Open what the options ask for; one-line errors (EventLogError, ConfigurationError) otherwise."""
        if options.events is None and options.metrics_port is None:
            return cls(None, None, None)
        events = EventWriter(options.events)
        accountant = None
        if options.events is not None:
            accountant = goodput.Accountant()
            events.subscribers.append(accountant.add)
        exporter = None
        if options.metrics_port is not None:
            from mwpy.observe import metrics  # noqa: PLC0415 (prometheus_client only when asked for)

            try:
                exporter = metrics.start(options.metrics_port)
            except BaseException:
                events.close()
                raise
            events.subscribers.append(exporter)
        return cls(events, accountant, exporter)

    def stop(self, status: int, tasks_done: int) -> None:
        """Record the end, print where the slot time went, release the file and the port."""
        if self.events is not None:
            self.events.master_stop(status=status, tasks_done=tasks_done)
            if self.events.failed is not None:
                print(f"mwpy: {self.events.failed}", file=sys.stderr)
        if self._accountant is not None and status != INTERRUPTED:  # Ctrl-C ends with one line, nothing more
            print(goodput.summary(self._accountant.result()), end="", file=sys.stderr, flush=True)
        self.close()

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
        if self._exporter is not None:
            self._exporter.close()


def encode_task(
    algorithm: TaskAlgorithm[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], max_frame: int
) -> bytes:
    """Check and pickle a task's arguments at the call site: a wrong or unsendable argument fails here."""
    algorithm.check_arguments(args, kwargs)
    payload = encode_arguments(algorithm.name, args, kwargs)
    if not protocol.fits(len(payload), max_frame):
        raise ConfigurationError(
            f"the arguments of task {algorithm.name!r} take {len(payload)} bytes, more than a frame "
            f"of --mw-max-write-buffer-size {max_frame} bytes can carry"
        )
    return payload


def _check_algorithm(form: str, algorithm: object) -> TaskAlgorithm[Any, Any]:
    """A plain function given to ``mw.map``: say what to do instead of failing deep inside."""
    if not isinstance(algorithm, TaskAlgorithm):
        name = getattr(algorithm, "__qualname__", type(algorithm).__name__)
        raise TypeError(
            f"mw.{form}() runs task algorithms: decorate {name} with @mwpy.task "
            "(or use mwpy.Executor, which takes plain module-level functions)"
        )
    return algorithm


def _as_they_come(stream: Generator[tuple[int, Result], None, None]) -> Generator[Result, None, None]:
    try:
        for _, result in stream:
            yield result
    finally:
        stream.close()  # cancels what has not started


def _known_length(iterables: tuple[Iterable[Any], ...]) -> int | None:
    """How many calls zipping ``iterables`` makes, if they are all sized; ``None`` otherwise (a generator)."""
    if not iterables or not all(isinstance(i, Sized) for i in iterables):
        return None
    return min(len(cast(Sized, i)) for i in iterables)


def chunked(items: Iterator[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter): ``mw.map``'s and ``Executor.map``'s chunks."""
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _chunks(
    algorithm: TaskAlgorithm[..., Any], calls: Iterator[tuple[Any, ...]], size: int, kwargs: dict[str, Any]
) -> Iterator[tuple[str, list[tuple[Any, ...]], dict[str, Any]]]:
    """``mw.map(..., chunksize=size)``: the arguments of :func:`_map_chunk`, each call's checked at the call site."""
    for chunk in chunked(calls, size):
        for args in chunk:
            algorithm.check_arguments(args, kwargs)
        yield algorithm.name, chunk, kwargs


@task(name="mwpy.map_chunk")
def _map_chunk(name: str, chunk: list[tuple[Any, ...]], kwargs: dict[str, Any]) -> list[Any]:
    """One task of ``mw.map(..., chunksize=n)`` on a slave: the task algorithm ``name`` over n argument tuples."""
    fn = registry.require(name).fn
    return [fn(*args, **kwargs) for args in chunk]


def _in_order(stream: Generator[tuple[int, Result], None, None]) -> Generator[Any, None, None]:
    """Values of (position, result) pairs in input order; a failure raises the task's exception."""
    early: dict[int, Result] = {}
    next_index = 0
    try:
        for index, result in stream:
            early[index] = result
            while next_index in early:
                ready = early.pop(next_index)
                next_index += 1
                if ready.error is not None:
                    raise task_exception(ready)
                yield ready.value
    finally:
        stream.close()  # cancels what has not started


def _flattened(chunks: Generator[list[Any], None, None]) -> Generator[Any, None, None]:
    """The values of ``mw.map(..., chunksize=n)``'s chunks, one by one; closing this closes ``chunks`` (which
    cancels what has not started), as ``itertools.chain`` would not."""
    try:
        for values in chunks:
            yield from values
    finally:
        chunks.close()


def _put(queue: deque[tuple[int, Result]], live: set[int], index: int, result: Result) -> None:
    live.discard(result.task_id)
    queue.append((index, result))

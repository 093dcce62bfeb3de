"""The event log (``--mw-events FILE``): one JSON object per line for everything that matters.

A public, versioned format (docs/observability.md documents it field by
field). Every line is ``{"v": 3, "t": <unix time>, "kind": "<kind>", ...}``;
each kind is an attrs record below, and the reader checks every line against
its record with strict types.

Two halves with opposite needs:

* :class:`EventWriter` sits on the master's hot path. It never touches the
  disk per event: lines go to an in-memory buffer, and per-task events
  (dispatches, finished tasks) are only *accumulated* — one list append per
  task — and written as one compact line per (slave, algorithm, outcome) at
  most every ``FLUSH_INTERVAL`` seconds (the master calls
  :meth:`EventWriter.flush` once per loop pass; most calls only read the clock). It appends,
  so a restarted master continues the same file: its ``master-start`` event
  carries the next run number, and a line torn by a crash is cut off first so
  that the history stays readable.
* :func:`iter_events` reads a log that may be large, foreign or hostile: it
  streams (one line in memory at a time, each at most ``MAX_LINE`` bytes),
  opens only regular files (mwpy/safe_files.py), and turns every problem into
  one :class:`~mwpy.errors.EventLogError` ``"FILE:LINE: problem"``.

Nothing here imports rich, plotly or prometheus_client: the master (and so
anything a slave might import) stays free of the optional extras.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
import cattrs

from mwpy import safe_files, strict_json
from mwpy._version import __version__
from mwpy.core.facts import CAUSES, OUTCOMES, Outcome
from mwpy.errors import EventLogError, UnsafeFileError
from mwpy.names import EVENTS_FILE
from mwpy.resource_file import ResourceFile

#: The format version every line this mwpy writes carries as ``"v"``; a reader refuses versions above it.
#: 2 added the ``slave-cache`` kind, 3 ``tasks-adopted`` and ``value-moved``; an earlier line reads as before (a
#: log a restarted master of another mwpy appended to holds both).
VERSION: Final = 3
#: Longest line a reader accepts (a ``tasks-finished`` line of a huge pass, a long traceback).
MAX_LINE: Final = 16 << 20
#: Tracebacks and captured output are cut to this many characters in ``task-failed`` events.
MAX_TEXT: Final = 8192
#: Problem texts quoting the file are cut to this many characters.
MAX_MESSAGE: Final = 300
#: Seconds at least between two writes of the log. The master
#: calls :meth:`EventWriter.flush` every loop pass; writing at most every ``FLUSH_INTERVAL`` s makes per-task events
#: of many passes share one line (a pass often holds one result) and bounds what a crash can lose.
FLUSH_INTERVAL: Final = 0.25
#: Times (``t``) are written rounded to microseconds.
DIGITS: Final = 6


def _one_of(values: tuple[str, ...]) -> Callable[[Any, Any, Any], Any]:
    return attrs.validators.in_(values)


_not_negative: Callable[[Any, Any, Any], Any] = attrs.validators.ge(0)


@attrs.frozen(kw_only=True)
class Event:
    """What every event has: ``t``, the Unix time (seconds) it happened. ``KIND`` names the record's kind."""

    KIND: ClassVar[str] = ""
    t: float


@attrs.frozen(kw_only=True)
class MasterStart(Event):
    """The master started (or started again: ``run`` counts the starts recorded in this file, from 1)."""

    KIND: ClassVar[str] = "master-start"
    run: int = attrs.field(validator=attrs.validators.ge(1))
    pid: int
    host: str
    version: str
    member_id: str
    #: Tasks the program will submit, when it says so in advance (drives progress bars and ETAs).
    total: int | None = None
    #: Answers the master's journal held when it started: a restarted master takes them instead of running.
    journal_answers: int = attrs.field(default=0, validator=_not_negative)


@attrs.frozen(kw_only=True)
class MasterStop(Event):
    """The master algorithm returned ``status`` after ``tasks_done`` results; the slaves were told to leave."""

    KIND: ClassVar[str] = "master-stop"
    run: int = attrs.field(validator=attrs.validators.ge(1))
    status: int
    tasks_done: int = attrs.field(validator=_not_negative)


@attrs.frozen(kw_only=True)
class SlaveConnected(Event):
    """A slave proved its membership and joined slave group ``group``."""

    KIND: ClassVar[str] = "slave-connected"
    slave: str
    host: str
    address: str
    group: str
    #: The Condor job id (``cluster.proc``) when the slave runs as a Condor job, else null.
    job: str | None = None


@attrs.frozen(kw_only=True)
class SlaveDisconnected(Event):
    """A slave is gone; ``in_flight`` tasks it held went back to the queue or became unrunnable."""

    KIND: ClassVar[str] = "slave-disconnected"
    slave: str
    cause: str = attrs.field(validator=_one_of(CAUSES))
    reason: str
    in_flight: int = attrs.field(default=0, validator=_not_negative)


@attrs.frozen(kw_only=True)
class SlaveCache(Event):
    """``slave``'s cache of shared objects and files so far (``mw.share``, ``mwpy.File``, large arguments):
    the counters since it connected, written when they change (its heartbeats carry them)."""

    KIND: ClassVar[str] = "slave-cache"
    slave: str
    hits: int = attrs.field(validator=_not_negative)
    misses: int = attrs.field(validator=_not_negative)
    bytes_fetched: int = attrs.field(validator=_not_negative)
    evictions: int = attrs.field(validator=_not_negative)


#: How a value that stayed on its slave reached a task, or what became of it (``value-moved``).
WAYS: Final = ("local", "peer", "via-master", "relayed", "recomputed")


@attrs.frozen(kw_only=True)
class ValueMoved(Event):
    """A large value that stayed on the slave that made it (``holder``): used there (``local``), fetched by
    ``slave`` from the holder (``peer``) or from the master's file service (``via-master``), sent by the
    holder to the master because a peer could not reach it (``relayed``), or made again because its holder
    lost it (``recomputed``)."""

    KIND: ClassVar[str] = "value-moved"
    task: str
    bytes: int = attrs.field(validator=_not_negative)
    holder: str
    slave: str
    way: str = attrs.field(validator=_one_of(WAYS))


@attrs.frozen(kw_only=True)
class TasksDispatched(Event):
    """``n`` tasks were sent to ``slave`` since the last flush (one line per slave and loop pass)."""

    KIND: ClassVar[str] = "tasks-dispatched"
    slave: str
    n: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class TasksFinished(Event):
    """Tasks of ``algorithm`` that ``slave`` answered since the last flush, all with one ``outcome``.

    ``run_us[i]`` is task i's compute time on the slave, ``wait_us[i]`` the
    time it sat in the master's queue before it was sent, both in whole
    microseconds (integers: about three times cheaper to write than floats);
    the lists have the same length, the number of tasks. ``ok``: a value came back; ``error``:
    the task raised and the error went to the program; ``retried``: it raised
    and was queued to run again.
    """

    KIND: ClassVar[str] = "tasks-finished"
    slave: str
    algorithm: str
    outcome: str = attrs.field(validator=_one_of(OUTCOMES))
    run_us: list[int]
    wait_us: list[int]

    def __attrs_post_init__(self) -> None:
        if len(self.run_us) != len(self.wait_us):
            raise ValueError(f"run_us has {len(self.run_us)} times and wait_us {len(self.wait_us)}; they must match")
        if not self.run_us:
            raise ValueError("run_us and wait_us are empty (a line must count at least one task)")

    @property
    def n(self) -> int:
        return len(self.run_us)


@attrs.frozen(kw_only=True)
class TaskFailed(Event):
    """One task raised on its slave: the error as text, and whether it runs again."""

    KIND: ClassVar[str] = "task-failed"
    task: int
    slave: str
    algorithm: str
    error: str
    message: str
    traceback: str
    retried: bool
    #: What the task printed, when the slave captured it.
    output: str | None = None


@attrs.frozen(kw_only=True)
class TasksRequeued(Event):
    """``n`` tasks that ``slave`` held when it vanished were queued again (a retry)."""

    KIND: ClassVar[str] = "tasks-requeued"
    slave: str
    n: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class TasksAdopted(Event):
    """``n`` keyed tasks were answered by the results ``slave`` kept from the previous master (not run again)."""

    KIND: ClassVar[str] = "tasks-adopted"
    slave: str
    n: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class TasksUnrunnable(Event):
    """``n`` tasks became unrunnable (their ordered slave vanished, or ``retry=False``)."""

    KIND: ClassVar[str] = "tasks-unrunnable"
    n: int = attrs.field(validator=attrs.validators.ge(1))
    reason: str
    slave: str | None = None


@attrs.frozen(kw_only=True)
class TasksCancelled(Event):
    """``n`` queued tasks were dropped without running (the program stopped wanting them)."""

    KIND: ClassVar[str] = "tasks-cancelled"
    n: int = attrs.field(validator=attrs.validators.ge(1))
    reason: str


@attrs.frozen(kw_only=True)
class ResourceFileWritten(Event):
    """The master rewrote its resource file; the demand it stated (see docs/resource-file.md)."""

    KIND: ClassVar[str] = "resource-file"
    slaves_needed: int = attrs.field(validator=_not_negative)
    slaves_connected: dict[str, int]
    tasks_done: int = attrs.field(validator=_not_negative)
    tasks_pending: int = attrs.field(validator=_not_negative)
    tasks_running: int = attrs.field(validator=_not_negative)
    finished: bool = False
    #: Tasks in all when the master knew (``tasks_total`` of the resource file); absent in logs of earlier mwpy.
    tasks_total: int | None = attrs.field(default=None, validator=attrs.validators.optional(_not_negative))


@attrs.frozen(kw_only=True)
class CondorJobs(Event):
    """The computation's slave jobs in the schedd, by state, when someone asked it."""

    KIND: ClassVar[str] = "condor-jobs"
    idle: int = attrs.field(validator=_not_negative)
    running: int = attrs.field(validator=_not_negative)
    held: int = attrs.field(default=0, validator=_not_negative)


#: Every kind of event, by its ``kind`` string.
KINDS: Final[dict[str, type[Event]]] = {
    cls.KIND: cls
    for cls in (
        MasterStart,
        MasterStop,
        SlaveConnected,
        SlaveDisconnected,
        SlaveCache,
        ValueMoved,
        TasksDispatched,
        TasksFinished,
        TaskFailed,
        TasksRequeued,
        TasksAdopted,
        TasksUnrunnable,
        TasksCancelled,
        ResourceFileWritten,
        CondorJobs,
    )
}


def resource_file_event(t: float, record: ResourceFile) -> ResourceFileWritten:
    """The ``resource-file`` event for a resource file the master just wrote."""
    return ResourceFileWritten(
        t=t,
        slaves_needed=record.slaves_needed,
        slaves_connected=dict(record.slaves_connected),
        tasks_done=record.tasks_done,
        tasks_pending=record.tasks_pending,
        tasks_running=record.tasks_running,
        finished=record.finished,
        tasks_total=record.tasks_total,
    )


# ---------------------------------------------------------------------------------------------- writing


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... [{len(text) - MAX_TEXT} characters cut]"


def _microseconds(values: list[float]) -> list[int]:
    """Seconds as the file's whole microseconds; the fast path, then a careful one if some value is not finite."""
    try:
        return [int(v * 1e6) for v in values]
    except (OverflowError, ValueError):  # inf or NaN: a slave reporting nonsense must not stop the log
        return [int(v * 1e6) if math.isfinite(v) else 0 for v in values]


_compact = json.JSONEncoder(separators=(",", ":")).encode


def encode(record: Event) -> str:
    """One line (with its newline) for ``record``: compact JSON, ``v``, ``t`` and ``kind`` first."""
    fields = attrs.asdict(record, recurse=False)
    head = {"v": VERSION, "t": round(fields.pop("t"), DIGITS), "kind": record.KIND}
    return json.dumps({**head, **fields}, separators=(",", ":"), allow_nan=False) + "\n"


class EventWriter:
    """Appends events to the log; cheap enough to leave on (see docs/observability.md for the cost).

    Call :meth:`flush` once per loop pass: at most every ``FLUSH_INTERVAL``
    seconds it turns what the per-task methods accumulated into lines and
    writes them with one ``write``.
    ``subscribers`` (e.g. the Prometheus exporter) see every record as it is
    written, the aggregated ones at flush. A write that fails (a full disk)
    does not stop the computation: the writer turns itself off and says why in
    :attr:`failed`, which the master reports once.
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, clock: Callable[[], float] = time.time) -> None:
        """``path`` None: no file, only the subscribers (``--mw-metrics-port`` without ``--mw-events``)."""
        self.path = "" if path is None else os.fspath(path)
        self.clock = clock
        self.subscribers: list[Callable[[Event], None]] = []
        self.failed: str | None = None
        self._lines: list[str] = []
        self._finished: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
        self._dispatched: dict[str, int] = {}
        self._written = float("-inf")
        #: Bytes of a torn last line cut off before appending (a master killed mid-write).
        self.repaired = 0
        #: This master's run number: one more than the ``master-start`` events already in the file.
        self.run = 1
        self._fd = -1
        self._closed = False
        if path is None:
            return
        try:
            self._fd = safe_files.open_checked(self.path, flags=os.O_RDWR | os.O_APPEND | os.O_CREAT, create_mode=0o600)
        except UnsafeFileError as exc:
            raise EventLogError(self.path, f"cannot write the event log: {exc.problem}") from None
        try:
            self.repaired = _cut_torn_line(self._fd)
            self.run = _count_runs(self._fd) + 1
        except OSError as exc:
            os.close(self._fd)
            raise EventLogError(self.path, f"cannot write the event log: {exc.strerror or exc}") from None

    # -- any event

    def emit(self, record: Event) -> None:
        """Queue ``record``'s line for the next write (for rare events; per-task ones have their own methods).

        Per-task events counted so far are turned into lines first, so the
        file keeps the order things happened in (a slave's finished tasks
        before its disconnection).
        """
        if self._finished or self._dispatched:
            self._aggregate(self.now())
        self._lines.append(encode(record))
        for subscriber in self.subscribers:
            subscriber(record)

    def now(self) -> float:
        return self.clock()

    # -- the hot path: one dict lookup and two appends per task

    def task_finished(self, slave: str, algorithm: str, outcome: Outcome, run: float, wait: float) -> None:
        """Count one answered task; written at the next flush as part of a ``tasks-finished`` line."""
        key = (slave, algorithm, outcome)
        lists = self._finished.get(key)
        if lists is None:
            lists = self._finished[key] = ([], [])
        lists[0].append(run)
        lists[1].append(wait)

    def tasks_dispatched(self, slave: str, n: int) -> None:
        """Count ``n`` tasks sent to ``slave``; written at the next flush as one ``tasks-dispatched`` line."""
        self._dispatched[slave] = self._dispatched.get(slave, 0) + n

    # -- convenience for the rare events (they build the record, so the schema is checked at the source)

    def master_start(
        self, *, member_id: str, host: str, total: int | None = None, journal_answers: int = 0
    ) -> MasterStart:
        record = MasterStart(
            t=self.now(),
            run=self.run,
            pid=os.getpid(),
            host=host,
            version=__version__,
            member_id=member_id,
            total=total,
            journal_answers=journal_answers,
        )
        self.emit(record)
        self.flush(force=True)
        return record

    def master_stop(self, *, status: int, tasks_done: int) -> None:
        self.emit(MasterStop(t=self.now(), run=self.run, status=status, tasks_done=tasks_done))
        self.flush(force=True)

    def task_failed(
        self,
        *,
        task: int,
        slave: str,
        algorithm: str,
        error: str,
        message: str,
        traceback: str,
        retried: bool,
        output: str | None = None,
    ) -> None:
        self.emit(
            TaskFailed(
                t=self.now(),
                task=task,
                slave=slave,
                algorithm=algorithm,
                error=error,
                message=_clip(message),
                traceback=_clip(traceback),
                retried=retried,
                output=None if output is None else _clip(output),
            )
        )

    # -- writing

    def flush(self, *, force: bool = False) -> None:
        """Write what was queued with one system call, if ``FLUSH_INTERVAL`` has passed since the last write.

        Cheap to call every loop pass (a clock read when it is not time yet);
        ``force`` writes now (master start and stop, close).
        """
        now = self.now()
        if not force and now - self._written < FLUSH_INTERVAL:
            return
        self._written = now
        if self._finished or self._dispatched:
            self._aggregate(now)
        if not self._lines:
            return
        data = "".join(self._lines).encode("utf-8")
        self._lines.clear()
        if self.failed is not None or self._fd < 0:
            return
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            self.failed = f"{self.path}: cannot write the event log ({exc.strerror or exc}); events are off"

    def _aggregate(self, now: float) -> None:
        t = round(now, DIGITS)
        lines = self._lines
        for slave, n in self._dispatched.items():
            record = TasksDispatched(t=now, slave=slave, n=n)
            lines.append(encode(record))
            for subscriber in self.subscribers:
                subscriber(record)
        self._dispatched.clear()
        for (slave, algorithm, outcome), (runs, waits) in self._finished.items():
            run, wait = _microseconds(runs), _microseconds(waits)
            lines.append(
                f'{{"v":{VERSION},"t":{t!r},"kind":"tasks-finished","slave":{json.dumps(slave)},'
                f'"algorithm":{json.dumps(algorithm)},"outcome":"{outcome}","run_us":{_compact(run)},'
                f'"wait_us":{_compact(wait)}}}\n'
            )
            if self.subscribers:
                finished = TasksFinished(
                    t=now, slave=slave, algorithm=algorithm, outcome=outcome, run_us=run, wait_us=wait
                )
                for subscriber in self.subscribers:
                    subscriber(finished)
        self._finished.clear()

    def close(self) -> None:
        """Flush and close; the writer is unusable afterwards."""
        if self._closed:
            return
        self.flush(force=True)
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CHUNK = 1 << 20
_START_MARK = b'"kind":"master-start"'


def _cut_torn_line(fd: int) -> int:
    """Cut the file back to its last newline; return how many bytes went (0 for a clean file)."""
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            end = start + cut + 1
            break
        end = start
    if end != size:
        os.ftruncate(fd, end)
    return size - end


def _count_runs(fd: int) -> int:
    """How many masters already wrote to this file (``master-start`` lines), by a byte scan.

    Safe as a count: our encoder writes ``"kind":"master-start"`` only as a
    key and value (a quote inside a JSON string is always escaped).
    """
    count, offset, tail = 0, 0, b""
    while True:
        chunk = os.pread(fd, _CHUNK, offset)
        if not chunk:
            return count
        data = tail + chunk
        count += data.count(_START_MARK)
        tail = data[-(len(_START_MARK) - 1) :]  # a mark cut by the chunk boundary is found whole next time
        offset += len(chunk)


# ---------------------------------------------------------------------------------------------- reading


_converter = strict_json.converter(int)


def _short(text: object) -> str:
    one = str(text).replace("\r", "\\r").replace("\n", "\\n")
    return one if len(one) <= MAX_MESSAGE else one[:MAX_MESSAGE] + "..."


def decode(line: str) -> Event:
    """The record for one line (without its newline); ``ValueError`` with the problem otherwise."""
    data = strict_json.loads(line)
    if type(data) is not dict:
        raise ValueError(f"not an mwpy event (a JSON {type(data).__name__}, not an object)")
    if "v" not in data or "kind" not in data:
        raise ValueError(f"not an mwpy event (no {'v' if 'v' not in data else 'kind'!r} key)")
    if type(data["v"]) is not int or not 1 <= data["v"] <= VERSION:
        raise ValueError(f"event format version {_short(repr(data['v']))}, this mwpy reads versions 1 to {VERSION}")
    kind = data.pop("kind")
    cls = KINDS.get(kind) if type(kind) is str else None
    if cls is None:
        raise ValueError(f"unknown event kind {_short(repr(kind))}")
    del data["v"]
    try:
        return _converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(cattrs.transform_error(exc, format_exception=strict_json.describe, path=kind))
        raise ValueError(problems) from None
    except (TypeError, ValueError) as exc:  # attrs validators and __attrs_post_init__
        raise ValueError(f"{kind}: {exc}") from None


def iter_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event in the log at ``path``, in file order, streamed; :class:`EventLogError` at the first bad line.

    The error names the file and line: a truncated last line (no newline: the
    master was killed mid-write, or the file was cut), a line that is not
    JSON, not an mwpy event, another format version, an unknown kind, or a
    field of the wrong type. An empty file yields nothing.
    """
    name = _short(os.fspath(path))
    try:
        fd = safe_files.open_checked(path)
    except UnsafeFileError as exc:
        problem = "no such event log" if exc.errno == errno.ENOENT else f"cannot read the event log: {exc.problem}"
        raise EventLogError(name, problem) from None
    with open(fd, "rb", buffering=_CHUNK) as stream:
        number = 0
        while True:
            try:
                raw = stream.readline(MAX_LINE + 1)
            except OSError as exc:
                raise EventLogError(name, f"cannot read the event log: {exc.strerror or exc}", number + 1) from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE:
                raise EventLogError(name, f"line longer than {MAX_LINE} bytes (not an mwpy event log?)", number)
            if not raw.endswith(b"\n"):
                raise EventLogError(
                    name,
                    "truncated line (no newline at its end: the writer stopped mid-line, or the file was cut)",
                    number,
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EventLogError(name, f"not UTF-8 ({exc.reason} at byte {exc.start})", number) from None
            try:
                yield decode(text)
            except ValueError as exc:
                raise EventLogError(name, _short(exc), number) from None


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """All events at once (small logs and tests; :func:`iter_events` for big ones)."""
    return list(iter_events(path))


def default_path(resource_file: str | os.PathLike[str]) -> Path:
    """Where ``mwpy local`` puts the event log: next to the resource file."""
    return Path(resource_file).with_name(EVENTS_FILE)

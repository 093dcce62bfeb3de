"""What a master reports about its connections and tasks: each fact built once, rendered by whoever listens.

The engine and the master's outcomes *report* facts; they neither format nor
write anything. Each kind of fact is a record here, and an :class:`Observer`
has one method per kind (dask's ``SchedulerPlugin`` is the model): the
``[A]`` audit, the ``mwpy.*`` log and the event log are three observers
(mwpy/observe/renderers.py), and a test may be a fourth. :class:`Facts`
hands each fact to the observers that render its kind, so a fact has one
source and its wording one home per output. A disconnection's cause travels
as data (:data:`Cause`), never recovered from a text.

Per-task facts (tasks sent, results received, a task finished) sit on the
hot path: they are plain calls with arguments, no record, and a kind nobody
listens to is ``None`` in :class:`Facts`, which the caller tests before
calling: without ``--mw-events`` or ``--mw-audit-packets`` they cost one
attribute test per batch or result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, NamedTuple

from mwpy.resource_file import ResourceFile

#: Why a slave's connection ended, as the event log's ``slave-disconnected`` records it.
Cause = Literal["eof", "timeout", "error", "expelled", "shutdown", "refused"]
CAUSES: Final = ("eof", "timeout", "error", "expelled", "shutdown", "refused")
#: What became of an answered task, as the event log's ``tasks-finished`` records it.
Outcome = Literal["ok", "error", "retried"]
OUTCOMES: Final = ("ok", "error", "retried")


class MasterStarted(NamedTuple):
    """The master listens; no slave has connected yet. ``journal_answers``: answers its journal holds already
    (a restarted master takes them instead of running those tasks again)."""

    member_id: str
    host: str
    journal_answers: int = 0


class MasterReady(NamedTuple):
    """The master published its resource file: slaves may come (``host:port`` is where they connect)."""

    host: str
    port: int


class MasterStopped(NamedTuple):
    """The master algorithm ended with ``status``; the slaves were told to leave."""

    member_id: str
    status: int
    tasks_done: int


class ResourceFileWritten(NamedTuple):
    """The master rewrote its resource file (``record``: what it says now)."""

    record: ResourceFile


class ResourceFileNotWritten(NamedTuple):
    """The resource file could not be written; the computation goes on without it."""

    path: str
    error: str


class Accepted(NamedTuple):
    """A connection came in (it is not a slave until it has proved membership)."""

    address: str


class AcceptFailed(NamedTuple):
    """``accept()`` failed for one caller (it gave up); the next is served on the next pass."""

    error: str


class AcceptPaused(NamedTuple):
    """Out of descriptors: the master stops accepting for ``seconds`` (``first``: the first time in this run)."""

    seconds: float
    why: str
    first: bool


class Refused(NamedTuple):
    """A peer proved it knows the secret but is another computation's member."""

    address: str
    member_id: str
    reason: str


class Connected(NamedTuple):
    """A slave proved its membership and joined slave group ``group``."""

    sid: str
    address: str
    member_id: str
    host: str
    pid: int
    version: str
    group: str
    #: ``CLUSTER.PROC`` when the slave runs as a Condor job.
    job: str | None


class PeerDropped(NamedTuple):
    """A connection that is no slave (not proved yet, or sent away) ended: ``reason`` says how."""

    address: str
    reason: str


class SlaveLeft(NamedTuple):
    """A slave's connection ended, or the master sent it away (``cause`` "expelled"), and what it held.

    ``in_flight`` tasks it held went back to the queue (``requeued``) or
    became unrunnable (``unrunnable``); ``sent`` and ``returned`` count the
    tasks it was sent and the results it gave back over its connection.
    """

    sid: str
    cause: Cause
    reason: str
    sent: int
    returned: int
    in_flight: int
    requeued: int
    unrunnable: int


class SlaveCache(NamedTuple):
    """``sid``'s cache of shared objects and files so far (its heartbeats carry the counters once they change)."""

    sid: str
    hits: int
    misses: int
    bytes_fetched: int
    evictions: int


class ValueMoved(NamedTuple):
    """A large value that stayed on ``holder`` reached the slave of a task that takes it (``way``: ``local``,
    ``peer``, ``via-master``), or went to the master (``relayed``), or was made again (``recomputed``: its
    holder lost it). ``label``: the task that made it."""

    label: str
    size: int
    holder: str
    slave: str
    way: str


class HandedBack(NamedTuple):
    """A slave leaving (``why``: on a soft-kill signal, by plan...) gave back ``n`` tasks it had not started
    (queued again first)."""

    sid: str
    n: int
    why: str


class CancelSent(NamedTuple):
    """The master asked ``sid`` to give back ``n`` queued tasks whose futures were cancelled."""

    sid: str
    n: int


class CancelledBack(NamedTuple):
    """``sid`` gave back ``n`` cancelled tasks unstarted (the others of its Cancel ran or run)."""

    sid: str
    n: int


class ShutdownSent(NamedTuple):
    """The master told ``sid`` to shut down (the computation is finished)."""

    sid: str


class StrayResult(NamedTuple):
    """``sid`` sent a result for a task it does not hold (a cancelled task that ran anyway, say): ignored."""

    sid: str
    task_id: int


class TaskFailed(NamedTuple):
    """A task raised on ``sid``; ``retried``: it is queued to run again, else the failure goes to the program."""

    sid: str
    task_id: int
    algorithm: str
    #: The exception's type name, its text and the slave's traceback.
    error: str
    message: str
    traceback: str
    stdout: str
    stderr: str
    retried: bool


class TaskPrinted(NamedTuple):
    """A task running on ``sid`` printed this (whole lines, or the rest when it ended): shown where the master runs."""

    sid: str
    task_id: int
    stdout: str
    stderr: str


class TaskTimedOut(NamedTuple):
    """A task ran past its timeout on ``sid`` (and its grace): it failed, and ``sid`` is dropped."""

    sid: str
    task_id: int
    timeout: float


class JournalEntryUnusable(NamedTuple):
    """The journal has an entry for task ``task_id``'s key that cannot answer it (``why``): the task runs again."""

    key: str
    task_id: int
    why: str


class JournalOff(NamedTuple):
    """The journal could not be read or written (``why``: one line naming the file): it is off for the run."""

    why: str


class TaskAdopted(NamedTuple):
    """Task ``task_id`` (key ``key``) was answered by the result ``sid`` kept from the previous master: not run."""

    sid: str
    task_id: int
    key: str


class HandedOver(NamedTuple):
    """``sid`` outlived the previous master and handed over the ``n`` results of keyed tasks it kept."""

    sid: str
    n: int


class HeldResultDropped(NamedTuple):
    """The result ``sid`` kept from the previous master for ``key`` was dropped: no task of this run asked for
    it (its key not submitted, or answered from the journal)."""

    sid: str
    key: str


#: Every kind of fact record, and the Observer method that hears it.
KINDS: Final[dict[type[Any], str]] = {
    MasterStarted: "master_started",
    MasterReady: "master_ready",
    MasterStopped: "master_stopped",
    ResourceFileWritten: "resource_file_written",
    ResourceFileNotWritten: "resource_file_not_written",
    Accepted: "accepted",
    AcceptFailed: "accept_failed",
    AcceptPaused: "accept_paused",
    Refused: "refused",
    Connected: "connected",
    PeerDropped: "peer_dropped",
    SlaveLeft: "slave_left",
    SlaveCache: "slave_cache",
    ValueMoved: "value_moved",
    HandedBack: "handed_back",
    CancelSent: "cancel_sent",
    CancelledBack: "cancelled_back",
    ShutdownSent: "shutdown_sent",
    StrayResult: "stray_result",
    TaskFailed: "task_failed",
    TaskTimedOut: "task_timed_out",
    JournalEntryUnusable: "journal_entry_unusable",
    JournalOff: "journal_off",
    TaskAdopted: "task_adopted",
    HandedOver: "handed_over",
    HeldResultDropped: "held_result_dropped",
    TaskPrinted: "task_printed",
}
#: The per-task kinds: plain calls, ``None`` in :class:`Facts` while nobody listens.
HOT_KINDS: Final = ("tasks_dispatched", "results_received", "task_finished")


class Observer:
    """Hears the master's facts: override the methods of the kinds you render; the others cost nothing.

    :meth:`handler` gives the callable that hears a kind, or None (by
    default: the method, when this class overrides it); :meth:`flush` runs
    after every loop pass.
    """

    def handler(self, kind: str) -> Callable[..., None] | None:
        """What hears ``kind`` (one of :data:`KINDS`' names or :data:`HOT_KINDS`), or None: not wanted."""
        overridden = getattr(type(self), kind) is not getattr(Observer, kind)
        return getattr(self, kind) if overridden else None

    def flush(self) -> None:
        """The loop pass is over: write what was kept back (called every pass: be cheap when there is nothing)."""

    # -- the master
    def master_started(self, fact: MasterStarted) -> None: ...
    def master_ready(self, fact: MasterReady) -> None: ...
    def master_stopped(self, fact: MasterStopped) -> None: ...
    def resource_file_written(self, fact: ResourceFileWritten) -> None: ...
    def resource_file_not_written(self, fact: ResourceFileNotWritten) -> None: ...

    # -- connections
    def accepted(self, fact: Accepted) -> None: ...
    def accept_failed(self, fact: AcceptFailed) -> None: ...
    def accept_paused(self, fact: AcceptPaused) -> None: ...
    def refused(self, fact: Refused) -> None: ...
    def connected(self, fact: Connected) -> None: ...
    def peer_dropped(self, fact: PeerDropped) -> None: ...
    def slave_left(self, fact: SlaveLeft) -> None: ...
    def slave_cache(self, fact: SlaveCache) -> None: ...
    def value_moved(self, fact: ValueMoved) -> None: ...
    def handed_back(self, fact: HandedBack) -> None: ...
    def cancel_sent(self, fact: CancelSent) -> None: ...
    def cancelled_back(self, fact: CancelledBack) -> None: ...
    def shutdown_sent(self, fact: ShutdownSent) -> None: ...

    # -- tasks
    def stray_result(self, fact: StrayResult) -> None: ...
    def task_failed(self, fact: TaskFailed) -> None: ...
    def task_timed_out(self, fact: TaskTimedOut) -> None: ...
    def journal_entry_unusable(self, fact: JournalEntryUnusable) -> None: ...
    def journal_off(self, fact: JournalOff) -> None: ...
    def task_adopted(self, fact: TaskAdopted) -> None: ...
    def handed_over(self, fact: HandedOver) -> None: ...
    def held_result_dropped(self, fact: HeldResultDropped) -> None: ...
    def task_printed(self, fact: TaskPrinted) -> None: ...

    # -- per task, on the hot path (no record)
    def tasks_dispatched(self, sid: str, n: int) -> None:
        """``n`` tasks left for ``sid`` in one frame."""

    def results_received(self, sid: str, n: int) -> None:
        """A Results message of ``n`` results came from ``sid``."""

    def task_finished(self, sid: str, algorithm: str, outcome: Outcome, run: float, wait: float) -> None:
        """A task of ``algorithm`` ran ``run`` s on ``sid`` after ``wait`` s in the master's queue."""


def _handlers(observers: Sequence[Observer], kind: str) -> tuple[Callable[..., None], ...]:
    return tuple(handler for o in observers if (handler := o.handler(kind)) is not None)


def _fan_out(handlers: Sequence[Callable[..., None]]) -> Callable[..., None] | None:
    """One callable for all ``handlers`` (the handler itself when alone: no call of ours between); None for none."""
    if len(handlers) <= 1:
        return handlers[0] if handlers else None

    def each(*args: Any) -> None:
        for handler in handlers:
            handler(*args)

    return each


def _nothing() -> None:
    return None


class Facts:
    """The master's facts, each reported once, to every observer that hears its kind."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        #: A record's type → the observers' handlers that hear it.
        self._routes = {kind: _handlers(observers, name) for kind, name in KINDS.items()}
        #: After each loop pass: the observers write what they kept back (the one observer's own flush when
        #: only one keeps anything back, as the audit alone does: no call of ours between, every pass).
        self.flush: Callable[[], None] = (
            _fan_out([o.flush for o in observers if type(o).flush is not Observer.flush]) or _nothing
        )
        hot = {name: _handlers(observers, name) for name in HOT_KINDS}
        # Per-task facts: None while nobody listens (the caller tests it, which costs next to nothing).
        self.tasks_dispatched: Callable[[str, int], None] | None = _fan_out(hot["tasks_dispatched"])
        self.results_received: Callable[[str, int], None] | None = _fan_out(hot["results_received"])
        self.task_finished: Callable[[str, str, Outcome, float, float], None] | None = _fan_out(hot["task_finished"])

    def __call__(self, fact: object) -> None:
        """Report ``fact`` (one of the records above) to whoever hears its kind."""
        for handler in self._routes[type(fact)]:
            handler(fact)

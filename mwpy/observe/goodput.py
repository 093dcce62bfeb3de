"""Goodput accounting from the event log, in Condor's terms.

Condor users judge a computation by what the pool gave it and what it made of
it: *slot time* granted (here: each slave from connect to disconnect), the
part spent running tasks whose results counted (*goodput*), and the rest —
slaves sitting *idle*, and time *lost* to runs that did not count (tasks that
raised and were retried, or raised for good, and tasks a slave was running when
it timed out, was evicted, or the master stopped: a master that ended with
tasks running, by a crash or by finishing, evicted no slave). Efficiency is
goodput over slot time.

Pure functions over events (no I/O besides :func:`account_file`), so the
report, ``mwpy local``'s closing summary and the master's can share them, and
the tests can check them against synthetic logs with known times.

What the log cannot say exactly is estimated, and the estimate is stated:
a slave that vanished with tasks in flight is taken to have been running them
from its last answered task (or its connection) until it vanished.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import attrs

from mwpy.observe import events as ev


@attrs.define
class _Slot:
    """One slave's connection, while it lasts."""

    start: float
    last_active: float


@attrs.define
class Goodput:
    """Seconds of slot time and where they went; counts of tasks by outcome."""

    slaves: int = 0
    slot: float = 0.0
    good: float = 0.0
    failed: float = 0.0
    retried: float = 0.0
    timed_out: float = 0.0
    evicted: float = 0.0
    #: Tasks slaves were running when the master stopped (its algorithm crashed, or it finished without them).
    stopped: float = 0.0
    tasks_ok: int = 0
    tasks_failed: int = 0
    tasks_retried: int = 0
    #: First and last event times seen (the run's wall-clock span).
    first: float | None = None
    last: float | None = None

    @property
    def busy(self) -> float:
        """Time slaves spent running tasks, whatever became of them."""
        return self.good + self.failed + self.retried

    @property
    def lost(self) -> float:
        """Slot time spent on runs that did not count."""
        return self.failed + self.retried + self.timed_out + self.evicted + self.stopped

    @property
    def idle(self) -> float:
        """Slot time not spent running tasks (never negative: clocks of slaves and master differ a little)."""
        return max(0.0, self.slot - self.busy - self.timed_out - self.evicted - self.stopped)

    @property
    def efficiency(self) -> float:
        """Goodput over slot time (0 when no slot time was granted)."""
        return self.good / self.slot if self.slot > 0 else 0.0

    @property
    def wall(self) -> float:
        return 0.0 if self.first is None or self.last is None else self.last - self.first


class Accountant:
    """Feed it events in file order (:meth:`add`), then :meth:`result`; one pass, memory per live slave only."""

    def __init__(self) -> None:
        self.totals = Goodput()
        self._open: dict[str, _Slot] = {}
        #: Time of the last event that was not a master start: where a dead master's slaves are taken to end.
        self._before_start = 0.0

    def add(self, event: ev.Event) -> None:
        totals = self.totals
        t = event.t
        if totals.first is None:
            totals.first = t
        if totals.last is None or t > totals.last:
            totals.last = t
        handler = self._HANDLERS.get(event.KIND)  # by kind: a subclass of a kind is handled as that kind
        if handler is not None and handler(self, event) is False:
            return  # the disconnect of a slave not connected: it does not move the last moment before a start
        if not isinstance(event, ev.MasterStart):
            self._before_start = t

    def _finished(self, event: ev.TasksFinished) -> None:
        totals = self.totals
        seconds = sum(event.run_us) / 1e6
        if event.outcome == "ok":
            totals.good += seconds
            totals.tasks_ok += event.n
        elif event.outcome == "error":
            totals.failed += seconds
            totals.tasks_failed += event.n
        else:
            totals.retried += seconds
            totals.tasks_retried += event.n
        slot = self._open.get(event.slave)
        if slot is not None:
            slot.last_active = max(slot.last_active, event.t)

    def _connected(self, event: ev.SlaveConnected) -> None:
        self._open[event.slave] = _Slot(start=event.t, last_active=event.t)
        self.totals.slaves += 1

    def _disconnected(self, event: ev.SlaveDisconnected) -> bool:
        """Close the slave's slot; False when it had none (a slave not connected)."""
        slot = self._open.pop(event.slave, None)
        if slot is None:
            return False
        totals, t = self.totals, event.t
        totals.slot += max(0.0, t - slot.start)
        if event.in_flight:
            lost = max(0.0, t - slot.last_active)
            if event.cause == "timeout":
                totals.timed_out += lost
            elif event.cause == "shutdown":  # the master's end dropped it, not the pool
                totals.stopped += lost
            else:
                totals.evicted += lost
        return True

    def _master_start(self, event: ev.MasterStart) -> None:
        # Slave ids start again with each master run; a master that died left its slaves' ends unrecorded,
        # so they end at the last event before the new start.
        self._close_all(self._before_start)

    def _master_stop(self, event: ev.MasterStop) -> None:
        self._close_all(event.t)  # a stop is the end for the slaves anyway

    #: What each kind of event does to the totals (kinds not listed only move the clock).
    _HANDLERS: ClassVar[dict[str, Callable[[Accountant, Any], bool | None]]] = {
        ev.TasksFinished.KIND: _finished,
        ev.SlaveConnected.KIND: _connected,
        ev.SlaveDisconnected.KIND: _disconnected,
        ev.MasterStart.KIND: _master_start,
        ev.MasterStop.KIND: _master_stop,
    }

    def _close_all(self, end: float) -> None:
        for slot in self._open.values():
            self.totals.slot += max(0.0, end - slot.start)
        self._open.clear()

    def result(self) -> Goodput:
        """The totals so far, with slaves still connected counted up to the last event."""
        totals = attrs.evolve(self.totals)
        end = totals.last or 0.0
        totals.slot += sum(max(0.0, end - slot.start) for slot in self._open.values())
        return totals


def account(events: Iterable[ev.Event]) -> Goodput:
    """Goodput of a whole history (every master run in it)."""
    accountant = Accountant()
    for event in events:
        accountant.add(event)
    return accountant.result()


def account_file(path: str | os.PathLike[str]) -> Goodput:
    """Goodput of the event log at ``path`` (streamed); :class:`~mwpy.errors.EventLogError` if it is bad."""
    return account(ev.iter_events(path))


def duration(seconds: float) -> str:
    """``1 h 02 min``, ``3 min 05 s``, ``4.2 s``: short and unambiguous."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f} %" if whole > 0 else "    - "


def rows(g: Goodput) -> list[tuple[str, str, str]]:
    """(what, time, share of slot time) rows, for the text summary and the report's table."""
    return [
        ("slot time granted", duration(g.slot), _share(g.slot, g.slot)),
        ("running tasks (goodput)", duration(g.good), _share(g.good, g.slot)),
        ("idle", duration(g.idle), _share(g.idle, g.slot)),
        ("lost: tasks retried", duration(g.retried), _share(g.retried, g.slot)),
        ("lost: tasks that failed", duration(g.failed), _share(g.failed, g.slot)),
        ("lost: slaves timed out", duration(g.timed_out), _share(g.timed_out, g.slot)),
        ("lost: slaves evicted", duration(g.evicted), _share(g.evicted, g.slot)),
        ("lost: master stopped", duration(g.stopped), _share(g.stopped, g.slot)),
    ]


def summary(g: Goodput) -> str:
    """A few lines for the end of ``mwpy local`` and of the master: where the slot time went."""
    head = (
        f"goodput: {g.tasks_ok} tasks ok, {g.tasks_failed} failed, {g.tasks_retried} retried; "
        f"{g.slaves} slave connection{'s' if g.slaves != 1 else ''}, efficiency {100 * g.efficiency:.1f} %"
    )
    lines = [head] + [f"  {what:<24} {time:>12}  {share}" for what, time, share in rows(g)]
    return "\n".join(lines) + "\n"

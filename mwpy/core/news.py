"""What the master algorithm has yet to be told: unrunnable tasks, ordered slaves that came and went.

The scheduler records the news as it happens; the master drains it when the
algorithm asks (``mw.unrunnable_tasks()``, ``mw.connected_ordered_slaves()``,
...). Kept apart from the scheduler's dispatch so that each is short to read.
"""

from __future__ import annotations

import functools
from typing import Generic, TypeVar

import attrs

#: The scheduler's task record (``mwpy.core.entry.Entry``).
T = TypeVar("T")


@attrs.frozen
class LoopEvents:
    """What :meth:`mwpy.Master.loop` found for the master algorithm (CL-MW's four counts)."""

    results: int = 0
    unrunnable: int = 0
    connected_ordered: int = 0
    disconnected_ordered: int = 0

    def __bool__(self) -> bool:
        return bool(self.results or self.unrunnable or self.connected_ordered or self.disconnected_ordered)


#: The record of a pass that brought only results, one per count and kept (it is immutable): most passes are such,
#: and making a frozen record costs as much as a fifth of what the master does for a one-task round trip.
_only_results = functools.lru_cache(maxsize=256)(LoopEvents)


class News(Generic[T]):
    """The scheduler's news for the master algorithm, each list drained once."""

    def __init__(self) -> None:
        self.unrunnable: list[T] = []
        self.connected_ordered: list[str] = []
        self.disconnected_ordered: list[str] = []

    def pending(self) -> bool:
        """Whether an unrunnable task or an ordered slave's arrival or departure waits to be drained."""
        return bool(self.unrunnable or self.connected_ordered or self.disconnected_ordered)

    def events(self, results: int) -> LoopEvents:
        """The counts :meth:`mwpy.Master.loop` reports, with ``results`` results not yet drained."""
        if self.unrunnable or self.connected_ordered or self.disconnected_ordered:
            return LoopEvents(
                results, len(self.unrunnable), len(self.connected_ordered), len(self.disconnected_ordered)
            )
        return _only_results(results)

    def drain_unrunnable(self) -> list[T]:
        """Tasks that became unrunnable since the last call, in order."""
        tasks, self.unrunnable = self.unrunnable, []
        return tasks

    def drain_connected_ordered(self) -> list[str]:
        """Ordered/intermingle slaves that joined (or were moved to those groups) since the last call."""
        sids, self.connected_ordered = self.connected_ordered, []
        return sids

    def drain_disconnected_ordered(self) -> list[str]:
        """Ordered/intermingle slaves that left since the last call."""
        sids, self.disconnected_ordered = self.disconnected_ordered, []
        return sids

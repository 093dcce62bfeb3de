"""What the master algorithm has yet to be told: unrunnable tasks, ordered slaves that came and went.

The scheduler records the news as it happens; the master drains it when the
algorithm asks (``mw.unrunnable_tasks()``, ``mw.connected_ordered_slaves()``,
...). Kept apart from the scheduler's dispatch so that each is short to read.
"""

from __future__ import annotations

from typing import Generic, TypeVar

#: The scheduler's task record (``mwpy.core.entry.Entry``).
T = TypeVar("T")


class News(Generic[T]):
    """The scheduler's news for the master algorithm, each list drained once."""

    def __init__(self) -> None:
        self.unrunnable: list[T] = []
        self.connected_ordered: list[str] = []
        self.disconnected_ordered: list[str] = []

    def pending(self) -> bool:
        """Whether an unrunnable task or an ordered slave's arrival or departure waits to be drained."""
        return bool(self.unrunnable or self.connected_ordered or self.disconnected_ordered)

    def counts(self) -> tuple[int, int, int]:
        """(unrunnable tasks, ordered slaves connected, ordered slaves disconnected) not yet drained."""
        return len(self.unrunnable), len(self.connected_ordered), len(self.disconnected_ordered)

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

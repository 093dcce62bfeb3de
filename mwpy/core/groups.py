"""CL-MW's slave groups in numbers: how many slaves each group wants and how many it has.

A connecting slave fills the ordered group first, then intermingle, then
unordered; ``allocate_slaves`` and ``deallocate_slaves`` set what a group
wants. These counts are all the resource file's ``slaves_needed`` asks of the
groups, so they live here, apart from the scheduler's queues and slots (which
say which slave is in which group and move them).
"""

from __future__ import annotations

import enum
from collections import Counter

from mwpy.errors import ConfigurationError


class SlaveKind(enum.Enum):
    """The slave groups of CL-MW, in the order a connecting slave fills them."""

    ORDERED = "ordered"
    INTERMINGLE = "intermingle"
    UNORDERED = "unordered"


_RESERVED = (SlaveKind.ORDERED, SlaveKind.INTERMINGLE)


class Groups:
    """Slaves wanted (``allocate``, less ``deallocate``) and connected, per group."""

    def __init__(self) -> None:
        self._acquired: Counter[SlaveKind] = Counter()
        self._desired: Counter[SlaveKind] = Counter()
        #: Connected slaves that take shared (unordered) work: kept as they come and go, as dispatch reads it per
        #: task (two lookups by an enum member hash it in Python, each time).
        self.takers = 0
        #: Until the program sets the unordered allocation, one unordered slave is wanted per task for it.
        self._auto_unordered = True

    def first_short(self) -> SlaveKind:
        """The group a connecting slave joins: the first reserved group still short of slaves, else unordered."""
        return next((kind for kind in _RESERVED if self.short(kind)), SlaveKind.UNORDERED)

    def short(self, kind: SlaveKind) -> bool:
        """Whether ``kind`` has fewer slaves than it wants."""
        return self._acquired[kind] < self._desired[kind]

    def joined(self, kind: SlaveKind) -> None:
        self._acquired[kind] += 1
        self.takers += kind is not SlaveKind.ORDERED

    def left(self, kind: SlaveKind) -> None:
        self._acquired[kind] -= 1
        self.takers -= kind is not SlaveKind.ORDERED

    def moved(self, old: SlaveKind, new: SlaveKind) -> None:
        """A connected slave changed groups."""
        self.left(old)
        self.joined(new)

    def want(self, amount: int, kind: SlaveKind) -> None:
        """``allocate_slaves``: ``amount`` more slaves of ``kind``."""
        if amount < 0:
            raise ConfigurationError("allocate_slaves: amount must not be negative")
        self._desired[kind] += amount
        if kind is SlaveKind.UNORDERED:
            self._auto_unordered = False

    def unwant(self, amount: int, kind: SlaveKind) -> None:
        """``deallocate_slaves``: ``amount`` fewer slaves of ``kind`` (never below zero)."""
        if amount < 0:
            raise ConfigurationError("deallocate_slaves: amount must not be negative")
        self._desired[kind] = max(0, self._desired[kind] - amount)
        if kind is SlaveKind.UNORDERED:
            self._auto_unordered = False

    def needed(self, unordered_work: int) -> int:
        """Slaves wanted beyond those connected, ``unordered_work`` being the tasks queued or running on unordered
        slaves (one slave wanted per such task until the program sets the unordered allocation)."""
        needed = sum(max(0, self._desired[kind] - self._acquired[kind]) for kind in _RESERVED)
        wanted = unordered_work if self._auto_unordered else self._desired[SlaveKind.UNORDERED]
        return needed + max(0, wanted - self._acquired[SlaveKind.UNORDERED])

    @property
    def follows_tasks(self) -> bool:
        """Whether the unordered group wants one slave per task (the program never set its allocation)."""
        return self._auto_unordered

    @property
    def reserved(self) -> int:
        """Ordered and intermingle slaves wanted (what ``allocate_slaves`` asked for them, less what was given back)."""
        return sum(self._desired[kind] for kind in _RESERVED)

    def connected(self) -> dict[str, int]:
        """Connected slaves per group."""
        return {kind.value: self._acquired[kind] for kind in SlaveKind}

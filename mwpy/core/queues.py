"""The shared queue of tasks: one first-in first-out queue per priority, the highest served first.

A task of a higher priority (``@mwpy.task(priority=N)``, ``with_policy(priority=N)``) queued behind 10^5
others leaves at the next dispatch: no walk, no sort, only a look at the few priorities in use. While every
task has the default priority 0 the scheduler keeps a plain deque (:data:`Queue`), whose methods cost no
Python call per task; the first task of another priority turns it into a :class:`TaskQueue` for good.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TypeAlias

from mwpy.core.entry import Entry


class TaskQueue:
    """What the scheduler used a deque for: ``append`` (at the back of its priority), ``appendleft`` and
    ``extendleft`` (a task coming back goes first within its priority), ``popleft`` (the first of the highest)."""

    __slots__ = ("_levels", "_order", "_size")

    def __init__(self, tasks: Iterable[Entry] = ()) -> None:
        """``tasks``: of priority 0, in order (the plain deque this queue takes over)."""
        self._levels: dict[int, deque[Entry]] = {0: deque(tasks)}
        self._order: list[int] = [0]  # the priorities in use, highest first (negated in bisect's ascending order)
        self._size = len(self._levels[0])

    def _level(self, priority: int) -> deque[Entry]:
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = deque()
            keys = [-p for p in self._order]
            self._order.insert(bisect.bisect(keys, -priority), priority)
        return level

    def append(self, task: Entry) -> None:
        self._level(task.policy.priority).append(task)
        self._size += 1

    def appendleft(self, task: Entry) -> None:
        self._level(task.policy.priority).appendleft(task)
        self._size += 1

    def extendleft(self, tasks: Iterable[Entry]) -> None:
        for task in tasks:
            self.appendleft(task)

    def popleft(self) -> Entry:
        for priority in self._order:
            level = self._levels[priority]
            if level:
                self._size -= 1
                task = level.popleft()
                if not level and priority:  # a priority no longer in use leaves the list
                    del self._levels[priority]
                    self._order.remove(priority)
                return task
        raise IndexError("pop from an empty queue")

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Entry]:
        return itertools.chain.from_iterable(self._levels[priority] for priority in list(self._order))


#: The shared queue as the scheduler holds it: a deque while only priority 0 is in use, then a TaskQueue.
Queue: TypeAlias = deque[Entry] | TaskQueue

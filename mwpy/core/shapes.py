"""Which slave may run which task: a task's needed resources against a slave's shape.

A task that asks for nothing runs on any slave, and while no task has asked
for anything the scheduler does not look here at all (:attr:`Shapes.active`),
so the common path costs what it cost before shapes existed. The shapes *on
offer* are those the master was told its slaves will have (``mwpy local
--slave-resources``, an Executor's ``slave_resources=``, the master's
``--mw-slave-resources``); a task none of them satisfies is unrunnable at
once, with the reason, instead of waiting for ever. With no shapes on offer
(a Condor overseer makes a slave job for each need) every task may yet run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs

from mwpy.matching import Offer
from mwpy.resources import Resources
from mwpy.task_records import Policy


class _Task(Protocol):
    """What a queued task is to this module (the scheduler's Entry)."""

    algorithm: str
    policy: Policy


def fits(offer: Offer | None, need: Resources | None) -> bool:
    """Whether a slave offering ``offer`` may run a task needing ``need`` (a slave of no known shape: only
    needless tasks). Requirements are evaluated against the slave's slot (mwpy/matching.py)."""
    return need is None or (offer is not None and offer.serves(need))


class Shapes:
    """The shapes on offer, and whether any task has asked for resources yet."""

    def __init__(self) -> None:
        self.offered: tuple[Offer, ...] = ()
        #: True once a task with resources was submitted: from then on dispatch matches tasks to slaves.
        self.active = False
        #: Tasks not answered yet (queued or running), per need.
        self.demand: Counter[Resources] = Counter()
        #: MB each task algorithm was learned to need (mwpy/core/memory.py): its tasks need at least that much.
        self.learned: dict[str, int] = {}

    def offer(self, shapes: Sequence[Resources]) -> None:
        """The master's slaves will have these shapes (none: any need may yet be met by a slave to come)."""
        self.offered = tuple(Offer(shape) for shape in shapes)

    def take(self, need: Resources) -> str | None:
        """A task needing ``need`` arrived (counted until :meth:`settled`): why no slave on offer can ever run
        it (one line), or None when one can."""
        self.active = True
        self.demand[need] += 1
        if self.attainable(need):
            return None
        offer = "; ".join(dict.fromkeys(offer.shape.describe() for offer in self.offered))
        return f"needs {need.describe()}, and no slave on offer has it (the slaves' shapes: {offer})"

    def attainable(self, need: Resources) -> bool:
        """Whether a slave on offer has ``need`` (no shapes on offer: a slave of any shape may yet come)."""
        return not self.offered or any(offer.serves(need) for offer in self.offered)

    def need_of(self, task: _Task) -> Resources | None:
        """``task``'s need, raised to the memory its algorithm was learned to need (its policy changed to say so)."""
        need, memory = task.policy.resources, self.learned.get(task.algorithm, 0)
        if memory <= (0 if need is None else need.memory):
            return need
        raised = attrs.evolve(need or Resources(), memory=memory)
        task.policy = attrs.evolve(task.policy, resources=raised)
        return raised

    def refile(self, task: _Task) -> bool:
        """Give a task not answered yet its algorithm's learned need, its demand count moved from the old need to
        the new one; False when the need it had was enough."""
        old = task.policy.resources
        new = self.need_of(task)
        if new == old or new is None:
            return False
        self.settled(old)
        self.take(new)
        return True

    def settled(self, need: Resources | None) -> None:
        """A task needing ``need`` left the master's books (answered, cancelled, unrunnable)."""
        if need is not None:
            self.demand[need] -= 1
            if not self.demand[need]:
                del self.demand[need]

    def report(self, slaves: Iterable[Offer | None]) -> list[tuple[Resources, int, int]]:
        """(need, tasks not answered, connected slaves that satisfy it) for each need with tasks."""
        offers = list(slaves)
        return [
            (need, tasks, sum(fits(offer, need) for offer in offers))
            for need, tasks in sorted(self.demand.items(), key=lambda item: str(item[0]))
        ]

"""Memory learned per task algorithm: a slave job held for memory raises the need of the algorithm it ran.

A site holds a Condor job that uses more memory than it asked for
(docs/condor.md, "Memory"); the slave leaves on the soft-kill signal and its
tasks come back. Before, the overseer then raised the memory of every new job
of that shape, whatever ran in it. Now the master learns it per algorithm, the
way TaskVine learns per category: it knows which task each slave was running
when its heartbeat reported its peak resident set, so when a Condor slave whose
peak came near what it offered (``NEAR_THE_LIMIT`` of its memory) is lost --
not by plan, not at the end -- the algorithm it ran at that peak needs more:
twice what the slave offered, or a quarter more than its peak, whichever is
larger (never less than learned before). From then on that algorithm's tasks
(those queued, those running, which a lost slave or a hand-back would queue
again, every new one) need at least that much memory (:meth:`mwpy.core.shapes.Shapes.need_of`): they go to slaves of a
bigger shape, which the overseer makes for their need as for any other, and
tasks of other algorithms keep the slaves they had. The resource file
(``learned_memory``) and ``mwpy status`` show what was learned.

Only Condor slaves teach it (a local slave that runs out of memory is not held,
and its machine has no bigger shape); a need no shape on offer could meet is
not learned (the tasks would become unrunnable).
"""

from __future__ import annotations

import math

import attrs

from mwpy.core.scheduler import Scheduler
from mwpy.resources import Resources

#: A lost slave's peak at or above this share of the memory it offered counts as its memory running out.
NEAR_THE_LIMIT = 0.9
#: What an algorithm is learned to need: at least this many times the peak its slave reported.
PEAK_HEADROOM = 1.25
MIB = 1 << 20


@attrs.define
class _Peak:
    """The largest peak a slave reported, the algorithm of the task it ran then, and the memory it offers (MB)."""

    bytes: int
    algorithm: str
    offered: int


class MemoryLearning:
    """Peaks per connected slave, and what each algorithm needs once a slave was lost near its memory limit."""

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched
        self._peaks: dict[str, _Peak] = {}

    def heard(self, sid: str, peak: int) -> None:
        """Slave ``sid`` (a Condor slave) reported ``peak`` bytes: note the task it runs now, if it grew."""
        known = self._peaks.get(sid)
        if known is not None and peak <= known.bytes:
            return
        held, offer = self._sched.held_by(sid), self._sched.offer_of(sid)
        if not held or offer is None or not offer.shape.memory:
            return  # nothing runs (the peak is an earlier task's, noted then) or no memory offered
        self._peaks[sid] = _Peak(peak, held[0].algorithm, offer.shape.memory)  # the first in flight runs

    def lost(self, sid: str, *, suspect: bool) -> str | None:
        """Slave ``sid`` is gone; ``suspect``: not by plan, not at the end, not sent away. Returns a line saying
        what was learned, or None."""
        peak = self._peaks.pop(sid, None)
        if not suspect or peak is None:
            return None
        peak_mb = math.ceil(peak.bytes / MIB)
        if peak_mb < NEAR_THE_LIMIT * peak.offered:
            return None
        shapes = self._sched.shapes
        before = shapes.learned.get(peak.algorithm, 0)
        memory = max(before, 2 * peak.offered, math.ceil(PEAK_HEADROOM * peak_mb))
        if memory == before or not shapes.attainable(Resources(memory=memory)):
            return None
        moved = self._sched.learned(peak.algorithm, memory)
        return (
            f"{sid} was lost with a peak of {peak_mb} MB of the {peak.offered} MB it offered while running "
            f"{peak.algorithm}: {peak.algorithm} tasks now need {memory} MB ({moved} queued or running moved to "
            "that shape)"
        )

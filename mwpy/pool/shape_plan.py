"""How many slave jobs the overseer wants of each shape: one group of jobs per need of the tasks.

The resource file lists, per need of the tasks (``shapes``: the need, its
tasks not answered, the connected slaves that satisfy it), and the back end
lists each job with the need it was submitted for (``Job.shape``, Condor's
``MwpyShape``). A need's group wants a slave job for each of its tasks that
no connected slave can take, on top of its jobs already running, and never
more than it has tasks: ``min(tasks, running + max(0, tasks - slaves))``.
Plain jobs (no need) get the rest of the computation's wanted total
(slaves connected + slaves needed, at least ``min_jobs``, at most
``max_jobs``), less what the shapes keep (a shape's running jobs count even
when its demand fell: running slaves are never removed).

The caps (``max_jobs``, ``max_idle``, ``batch``) hold for all groups
together, and a submission that cannot fill every shortfall is shared
fairly (:func:`share`): each group short of jobs gets one in turn, plain
jobs first, then the needs in the order of their text, until the room is
used up -- a big shape cannot starve a small one.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from mwpy.backends import Job, JobState
from mwpy.resource_file import ResourceFile
from mwpy.resources import Resources


@attrs.frozen
class Group:
    """The slave jobs of one need (``key``, ``str(Resources)``; None: plain jobs), and how many it wants."""

    key: str | None
    wanted: int
    idle: tuple[str, ...]
    running: int

    @property
    def serving(self) -> int:
        return len(self.idle) + self.running

    @property
    def short(self) -> int:
        """Jobs to submit for this group, caps aside."""
        return max(0, self.wanted - self.serving)

    @property
    def surplus(self) -> int:
        """Idle jobs this group no longer wants (running ones are never removed)."""
        return min(len(self.idle), max(0, self.serving - self.wanted))

    @property
    def need(self) -> Resources | None:
        """The need new jobs of this group are submitted for (the key is the resource file's, validated there)."""
        return None if self.key is None else Resources.parse(self.key)

    def label(self) -> str:
        """``"for memory 16384 MB: "`` before a decision about this group; "" for plain jobs."""
        return "" if self.key is None else f"for {Resources.parse(self.key).describe()}: "


def plan(
    record: ResourceFile, jobs: Sequence[Job], *, min_jobs: int, max_jobs: int, shaped: bool, departed: int = 0
) -> list[Group]:
    """The groups of the computation's jobs, plain first, then one per need (``shaped``: the back end makes
    slave jobs per need; otherwise every job is plain, as before shapes existed). ``departed``: connected
    slaves whose jobs the overseer removed, not yet noticed by the master (their tasks come back as needs)."""
    connected = max(0, sum(record.slaves_connected.values()) - departed)
    total = min(max_jobs, max(min_jobs, connected + record.slaves_needed))
    if not shaped:
        return [_group(None, total, jobs)]
    demand = {shape.resources: shape for shape in record.shapes}
    by_shape: dict[str | None, list[Job]] = {key: [] for key in demand}
    for job in jobs:
        by_shape.setdefault(job.shape, []).append(job)
    shapes: list[Group] = []
    for key in sorted(key for key in by_shape if key is not None):
        running = sum(job.state is JobState.RUNNING for job in by_shape[key])
        found = demand.get(key)
        wanted = min(found.tasks, running + max(0, found.tasks - found.slaves)) if found else 0
        shapes.append(_group(key, wanted, by_shape[key]))
    kept = sum(max(group.wanted, group.running) for group in shapes)
    return [_group(None, max(0, total - kept), by_shape.get(None, [])), *shapes]


def _group(key: str | None, wanted: int, jobs: Sequence[Job]) -> Group:
    idle = tuple(job.job_id for job in jobs if job.state is JobState.IDLE)
    return Group(key, wanted, idle, sum(job.state is JobState.RUNNING for job in jobs))


def share(shorts: Sequence[int], room: int) -> list[int]:
    """``room`` jobs dealt to groups short of ``shorts``: one each in turn, in order, until none is short."""
    grants = [0] * len(shorts)
    while room > 0 and any(grant < short for grant, short in zip(grants, shorts, strict=True)):
        for index, short in enumerate(shorts):
            if room > 0 and grants[index] < short:
                grants[index] += 1
                room -= 1
    return grants

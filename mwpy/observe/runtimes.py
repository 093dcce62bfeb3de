"""Run-time figures of a group of tasks (one algorithm, one slave) from the event log's ``tasks-finished`` lines.

``mwpy report`` shows them per algorithm and per slave, the live view
(``mwpy status --watch --events``, ``mwpy local``) per slave: which slave is
slow, which one fails. One histogram of log-spaced buckets per group keeps
memory independent of the number of tasks; percentiles are the upper edge of
the bucket they fall in.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import attrs

from mwpy.observe.events import TasksFinished

#: Histogram buckets per decade of run time.
BUCKETS_PER_DECADE = 10


@attrs.define
class RunTimes:
    """How many tasks, how long they ran, and how many failed (raised, whether retried or not)."""

    count: int = 0
    total_us: int = 0
    max_us: int = 0
    failures: int = 0
    buckets: Counter[int] = attrs.Factory(Counter)

    def add(self, event: TasksFinished) -> None:
        runs = event.run_us
        self.count += len(runs)
        self.total_us += sum(runs)
        self.max_us = max(self.max_us, *runs)
        if event.outcome != "ok":
            self.failures += len(runs)
        buckets = self.buckets
        log10 = math.log10
        for us in runs:
            buckets[int(log10(us) * BUCKETS_PER_DECADE) if us > 0 else -1] += 1

    @property
    def mean(self) -> float:
        """Seconds a task ran on average."""
        return self.total_us / self.count / 1e6 if self.count else 0.0

    def percentile(self, share: float) -> float:
        """Seconds: the upper edge of the histogram bucket where ``share`` of the tasks are reached."""
        target = share * self.count
        seen = 0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= target:
                return 0.0 if key < 0 else min(10 ** ((key + 1) / BUCKETS_PER_DECADE), self.max_us) / 1e6
        return self.max_us / 1e6


def slowest(groups: Mapping[str, RunTimes], n: int) -> list[tuple[str, RunTimes]]:
    """The ``n`` groups with the longest mean run time, slowest first (ties: by name)."""
    return sorted(groups.items(), key=lambda item: (-item[1].mean, item[0]))[:n]


def phrase(name: str, figures: RunTimes) -> str:
    """``slave-2 40 tasks, mean 0.90 s, p95 ≤ 1.26 s, 1 failed``: one slave's figures in words."""
    return (
        f"{name} {figures.count:,} tasks, mean {figures.mean:.2f} s, p95 ≤ {figures.percentile(0.95):.2f} s, "
        f"{figures.failures:,} failed"
    )

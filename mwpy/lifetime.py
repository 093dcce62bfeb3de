"""When a slave must end, and whether a task still fits before then (issue 24: pilots that know their lifetime).

Pools limit how long a job may run; a slave killed at that limit loses the
task it was running, and a site counts the restart. So a slave learns its end
and leaves before it, by plan:

* ``--mw-slave-lifetime SECONDS``;
* ``MaxRuntime`` in its job ad (seconds; CERN's batch service removes jobs past it);
* ``JobDurationCategory`` in its job ad: the OSPool's Medium (20 h at most) and
  Long (40 h) — https://portal.osg-htc.org/documentation/htc_workloads/workload_planning/jobdurationcategory/;
* ``GLIDEIN_ToDie`` in its machine ad (a Unix time: when the glidein it runs in ends).

The earliest end wins; durations count from the job's start (``JobCurrentStartDate``,
else this process's start). Each slave shortens its lifetime by a random share
of up to ``STAGGER``, so slaves started together do not all leave together,
and keeps ``LEAVE_MARGIN`` of it to hand back its tasks and exit. It starts a
task only if the longest run of that task's algorithm seen on this slave, times
``SAFETY``, ends before then (an algorithm not seen yet: the longest run of any;
nothing seen yet: the task runs).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs

from mwpy.job_ad import ad_string, read_ad
from mwpy.names import JOB_AD_VARIABLE, MACHINE_AD_VARIABLE

if TYPE_CHECKING:
    import random

#: OSPool's JobDurationCategory: the longest a job of each category may run (seconds), from the OSPool doc above.
DURATION_CATEGORIES = {"medium": 20 * 3600.0, "long": 40 * 3600.0}
#: The largest share of its lifetime a slave gives up at random, so that slaves leave at different times.
STAGGER = 0.10
#: A slave leaves this share of its lifetime (at most MAX_LEAVE_MARGIN seconds) before the end, to hand back and exit.
LEAVE_MARGIN = 0.05
MAX_LEAVE_MARGIN = 60.0
#: A task's expected run time: the longest run of its algorithm seen so far, times this.
SAFETY = 1.25
#: How a slave's leave by plan starts its reason (its HandBack's ``why``): the master tells it from a loss by it.
PLANNED_LEAVE = "by plan: "


@attrs.frozen
class Lifetime:
    """When a slave's slot ends (``ends``, Unix time), why, and when the slave leaves (``leave_at``)."""

    ends: float
    why: str
    leave_at: float

    def left(self, now: float | None = None) -> float:
        """Seconds until the slave leaves."""
        return self.leave_at - (time.time() if now is None else now)


def find(option: float | None, *, now: float | None = None, rng: random.Random | None = None) -> Lifetime | None:
    """This slave's lifetime from ``--mw-slave-lifetime`` (``option``) and its Condor ads, or None if it has none."""
    now = time.time() if now is None else now
    job, machine = read_ad(JOB_AD_VARIABLE), read_ad(MACHINE_AD_VARIABLE)
    start = _number(job.get("jobcurrentstartdate")) or now
    ends: list[tuple[float, str]] = []
    if option is not None:
        ends.append((start + option, f"--mw-slave-lifetime {option:g} s"))
    runtime = _number(job.get("maxruntime"))
    if runtime:
        ends.append((start + runtime, f"MaxRuntime {runtime:g} s"))
    category = ad_string(job.get("jobdurationcategory"))
    if category.lower() in DURATION_CATEGORIES:
        hours = DURATION_CATEGORIES[category.lower()] / 3600
        ends.append((start + DURATION_CATEGORIES[category.lower()], f"JobDurationCategory {category} ({hours:g} h)"))
    glidein_end = _number(machine.get("glidein_todie"))
    if glidein_end:
        ends.append(
            (glidein_end, f"the glidein's GLIDEIN_ToDie {time.strftime('%H:%M:%S', time.localtime(glidein_end))}")
        )
    if not ends:
        return None
    if rng is None:
        import random  # noqa: PLC0415 (a slave with a lifetime only: the others' start need not load it)

        rng = random.Random()
    end, why = min(ends)
    length = max(0.0, end - start)
    shortened = length * rng.uniform(0.0, STAGGER)
    margin = min(MAX_LEAVE_MARGIN, LEAVE_MARGIN * length)
    return Lifetime(end, why, end - shortened - margin)


class RunTimes:
    """The longest run of each task algorithm, and of any, measured on one slave: what a task is expected to take.

    The one home of the rule both sides apply: the slave before it starts a task (:class:`Retirement`), and
    the master when ``mwpy status --explain`` asks whether any connected slave would start one (mwpy/core/board.py,
    from the run times the slave reports with its results).
    """

    __slots__ = ("_longest", "_longest_any")

    def __init__(self) -> None:
        self._longest: dict[str, float] = {}  # algorithm -> its longest run (seconds)
        self._longest_any = 0.0

    def ran(self, algorithm: str, seconds: float) -> None:
        """A task of ``algorithm`` ran ``seconds``."""
        if seconds > self._longest.get(algorithm, 0.0):
            self._longest[algorithm] = seconds
            self._longest_any = max(self._longest_any, seconds)

    def longest(self, algorithm: str) -> float:
        """The longest run of ``algorithm``; of any algorithm when it has not run here (0.0: nothing ran)."""
        return self._longest.get(algorithm, self._longest_any)

    def starts_in_time(self, algorithm: str | None, left: float) -> bool:
        """Whether a task of ``algorithm`` (None: one that takes no time) would end within ``left`` seconds:
        its :meth:`longest` run times ``SAFETY`` is shorter (nothing measured: it would)."""
        return left > (0.0 if algorithm is None else self.longest(algorithm) * SAFETY)


class Retirement:
    """A slave's judge of whether the next task ends before it must leave, from the run times it measured."""

    def __init__(self, lifetime: Lifetime) -> None:
        self.lifetime = lifetime
        self.times = RunTimes()

    def ran(self, algorithm: str, seconds: float) -> None:
        """A task of ``algorithm`` ran ``seconds``."""
        self.times.ran(algorithm, seconds)

    def fits(self, algorithm: str | None, now: float | None = None) -> bool:
        """Whether a task of ``algorithm`` would end before the slave leaves (None: a task that takes no time)."""
        return self.times.starts_in_time(algorithm, self.lifetime.left(now))

    def wait(self, timeout: float | None, now: float | None = None) -> float:
        """Seconds an idle slave may wait for tasks: ``timeout`` (None: for ever), but not past the time to leave."""
        left = max(0.0, self.lifetime.left(now))
        return left if timeout is None else min(timeout, left)

    def reason(self, algorithm: str | None) -> str:
        """Why the slave leaves now, in one line (for its log, its job's user log and the master)."""
        left = max(0.0, self.lifetime.ends - time.time())
        what = "its lifetime is over" if algorithm is None else f"no {algorithm} task fits in its lifetime"
        return f"{what} ({self.lifetime.why}; the slot ends in {left:.1f} s)"


def _number(text: str | None) -> float:
    """A ClassAd number (0 for none, or for anything else, an expression included)."""
    try:
        value = float(text or "0")
    except ValueError:
        return 0.0
    return value if 0 < value < float("inf") else 0.0

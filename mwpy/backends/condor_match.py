"""Why an idle slave job does not run: the matchmaking ``condor_q -better-analyze`` does, in one line.

The ``htcondor2`` bindings offer no analysis call, so this one does the
check the negotiator does, with the ClassAd library the bindings ship: the
job's ``Requirements`` against each slot the collector lists, and each slot's
own ``Requirements`` (its START policy) against the job; then the schedd's
own word from the job ad (``LastRejMatchReason``, ``NumJobMatches``). A
partitionable slot is judged by the resources it has left.

For ``mwpy status`` and its ``--watch`` view only: the overseer never asks
(one collector query per look, never per job).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import classad2

#: The job attributes the analysis reads from the schedd's own bookkeeping.
NEGOTIATION = ("LastRejMatchReason", "NumJobMatches", "LastMatchTime")


def _matches(judge: classad2.ClassAd, candidate: classad2.ClassAd) -> bool:
    """``candidate``'s Requirements, evaluated with ``judge`` as its TARGET (False when it cannot be evaluated)."""
    with contextlib.suppress(Exception):
        return bool(judge.matches(candidate))
    return False


def _requirements(job: Mapping[str, Any]) -> str:
    text = " ".join(str(job.get("Requirements", "")).split())
    return text if len(text) <= 200 else text[:200] + "..."


def why_idle(job: classad2.ClassAd, slots: Sequence[classad2.ClassAd]) -> str:
    """One line: why ``job`` (its full ad) is idle, against the pool's ``slots`` (startd ads)."""
    said = _schedd_says(job)
    if not slots:
        return "the pool has no execute slot (the collector lists none)" + said
    wanted = [slot for slot in slots if _matches(slot, job)]
    if not wanted:
        return f"its Requirements match none of the pool's {len(slots)} slots ({_requirements(job)})" + said
    willing = [slot for slot in wanted if _matches(job, slot)]
    if not willing:
        return f"the {len(wanted)} slots its Requirements match all refuse it (their START policy)" + said
    free = [slot for slot in willing if str(slot.get("State", "")) == "Unclaimed"]
    if not free:
        return f"all {len(willing)} slots that match it are busy" + said
    return f"{len(free)} matching slots are free: waiting for the next negotiation" + said


def _schedd_says(job: Mapping[str, Any]) -> str:
    """`` (the schedd: no match found; matched 0 times)`` from the job ad, or "" when it has nothing yet."""
    reason = " ".join(str(job.get("LastRejMatchReason") or "").split())
    matched = job.get("NumJobMatches")
    notes = [reason] if reason else []
    if isinstance(matched, int) and not isinstance(matched, bool):
        notes.append(f"matched {matched} time{'' if matched == 1 else 's'}")
    return f" (the schedd: {'; '.join(notes)})" if notes else ""

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


def _clauses(requirements: str) -> list[str]:
    """The ``&&`` terms of an expression at its top level (outside parentheses and strings), as written."""
    clauses: list[str] = []
    depth, start, quoted, i = 0, 0, False, 0
    while i < len(requirements):
        char = requirements[i]
        if quoted:
            quoted = char != '"' or requirements[i - 1] == "\\"
        elif char == '"':
            quoted = True
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth == 0 and requirements.startswith("&&", i):
            clauses.append(requirements[start:i].strip())
            start, i = i + 2, i + 1
        i += 1
    return [*clauses, requirements[start:].strip()]


def _unmet(job: classad2.ClassAd, slots: Sequence[classad2.ClassAd]) -> str:
    """The terms of the job's Requirements that no slot meets, as ``condor_q -better-analyze`` names them."""
    requirements = " ".join(str(job.get("Requirements", "")).split())
    unmet = []
    for clause in _clauses(requirements):
        trial = classad2.ClassAd(str(job))
        try:
            trial["Requirements"] = classad2.ExprTree(clause)
        except Exception:  # a term the library cannot parse alone: not named
            continue
        if not any(_matches(slot, trial) for slot in slots):
            unmet.append(clause)
    text = " && ".join(unmet) if unmet else requirements
    return text if len(text) <= 200 else text[:200] + "..."


def why_idle(job: classad2.ClassAd, slots: Sequence[classad2.ClassAd]) -> str:
    """One line: why ``job`` (its full ad) is idle, against the pool's ``slots`` (startd ads)."""
    said = _schedd_says(job)
    if not slots:
        return "the pool has no execute slot (the collector lists none)" + said
    wanted = [slot for slot in slots if _matches(slot, job)]
    if not wanted:
        return (
            f"its Requirements match none of the pool's {len(slots)} slots: no slot meets {_unmet(job, slots)}" + said
        )
    willing = [slot for slot in wanted if _matches(job, slot)]
    if not willing:
        return f"slots its Requirements match: {len(wanted)}, all refuse it (their START policy)" + said
    free = [slot for slot in willing if str(slot.get("State", "")) == "Unclaimed"]
    if not free:
        return f"slots that match it: {len(willing)}, all busy" + said
    return f"slots that match it: {len(willing)}, {len(free)} free; it waits for the next negotiation" + said


def _schedd_says(job: Mapping[str, Any]) -> str:
    """`` (the schedd: no match found; matched 0 times)`` from the job ad, or "" when it has nothing yet."""
    reason = " ".join(str(job.get("LastRejMatchReason") or "").split())
    matched = job.get("NumJobMatches")
    notes = [reason] if reason else []
    if isinstance(matched, int) and not isinstance(matched, bool):
        notes.append(f"matched {matched} time{'' if matched == 1 else 's'}")
    return f" (the schedd: {'; '.join(notes)})" if notes else ""

"""A job's life as Condor's schedd and shadow see it: its ClassAd, its status, and what its policy decides.

The master keeps a :class:`JobLife` for every job of a file that sets a
policy command (a file that sets none takes the fast path: a job that exits
has completed). The ad holds the attributes ``condor_submit`` writes
(:mod:`mwpy.jobs.jobad`) and the ones the schedd and shadow keep up to date
(``JobStatus``, ``NumJobStarts``, ``NumJobCompletions``, ``ExitCode``,
``ExitBySignal``, ``ExitSignal``, ``RemoteWallClockTime``, ``NumHolds``,
``HoldReasonCode``, ``EnteredCurrentStatus``, ...). HTCondor's own ClassAd
library (``classad2``) evaluates the expressions, in the order and with the
rules of ``UserPolicy::AnalyzePolicy`` (``src/condor_utils/user_job_policy.cpp``):
allowed durations, then periodic hold, release (held jobs, not held by the
user), remove, and, when a job has exited, on-exit hold, then on-exit remove
(false: the job runs again). A value that is not a number (undefined, an
error) does not fire, as there.
"""

from __future__ import annotations

import enum
import getpass
import re
import time
from typing import Any

import attrs
import classad2

from mwpy.jobs.description import JobSpec
from mwpy.jobs.jobad import JOB_EXPRESSION, SUBMITTED_ON_HOLD

#: Condor's job states (JobStatus).
IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5
#: Hold reason codes (CONDOR_HOLD_CODE).
USER_REQUEST, JOB_POLICY, JOB_POLICY_UNDEFINED, FAILED_TO_CREATE_PROCESS = 1, 3, 5, 6
JOB_DURATION_EXCEEDED, JOB_EXECUTE_EXCEEDED = 46, 47
#: Ten years ahead: a held job whose release or removal cannot fire even then stays held for good.
_FAR = 10 * 365 * 86400


class Verdict(enum.Enum):
    """What the policy does with a job."""

    STAY = "stay"  # nothing changes
    HOLD = "hold"
    RELEASE = "release"
    REMOVE = "remove"
    REQUEUE = "requeue"  # it exited, and on_exit_remove said run it again
    COMPLETE = "complete"  # it exited and leaves the queue


@attrs.frozen
class Decision:
    """A verdict, and the reason and codes Condor records with it."""

    verdict: Verdict
    reason: str = ""
    code: int = 0
    subcode: int = 0
    expression: str = ""  # the attribute whose expression decided


STAY = Decision(Verdict.STAY)


@attrs.frozen
class Exit:
    """How one run of a job ended, as the starter reports it."""

    exit_code: int | None
    signal: int | None
    wall: float
    user_cpu: float = 0.0
    sys_cpu: float = 0.0


class JobLife:
    """One job's ad in the master, from queued to completed, removed or held for good."""

    def __init__(self, spec: JobSpec, now: float | None = None) -> None:
        now = time.time() if now is None else now
        ad = classad2.ClassAd()
        for name, expression in spec.ad.attributes:
            ad[name] = classad2.ExprTree(expression)
        ad.update(
            {
                "ClusterId": spec.cluster,
                "ProcId": spec.process,
                "Owner": _owner(),
                "QDate": int(now),
                "JobUniverse": 5,
                "Cmd": spec.executable,
                "Iwd": spec.initialdir,
                "JobStatus": IDLE,
                "EnteredCurrentStatus": int(now),
                "NumJobStarts": 0,
                "JobRunCount": 0,
                "NumJobCompletions": 0,
                "NumHolds": 0,
                "NumSystemHolds": 0,
                "ExitBySignal": False,
                "RemoteWallClockTime": 0.0,
                "CumulativeSlotTime": 0.0,
                "RemoteUserCpu": 0.0,
                "RemoteSysCpu": 0.0,
                "CumulativeRemoteUserCpu": 0.0,
                "CumulativeRemoteSysCpu": 0.0,
            }
        )
        if "CurrentTime" not in ad:
            ad["CurrentTime"] = classad2.ExprTree("time()")
        self.ad = ad
        self.spec = spec
        if spec.ad.hold:
            self._hold(Decision(Verdict.HOLD, "submitted on hold at user's request", SUBMITTED_ON_HOLD), now)

    @property
    def status(self) -> int:
        return int(self.ad["JobStatus"])

    @property
    def hold_reason(self) -> str:
        return str(self.ad.get("HoldReason", ""))

    # ------------------------------------------------------------------ what happens to the job

    def start(self, now: float) -> None:
        """The job starts running on a slave."""
        ad = self.ad
        ad["NumJobStarts"] = int(ad["NumJobStarts"]) + 1
        ad["JobRunCount"] = int(ad["JobRunCount"]) + 1
        if "JobStartDate" not in ad:
            ad["JobStartDate"] = int(now)
        for name in ("JobCurrentStartDate", "JobCurrentStartExecutingDate", "ShadowBday"):
            ad[name] = int(now)
        self._status(RUNNING, now)

    def exit(self, run: Exit, now: float) -> Decision:
        """The job's program ended: record how, then ask the policy (``PERIODIC_THEN_EXIT``) and apply it."""
        ad = self.ad
        ad["NumJobCompletions"] = int(ad["NumJobCompletions"]) + 1
        ad["ExitBySignal"] = run.signal is not None
        if run.signal is not None:
            ad["ExitSignal"] = run.signal
        else:
            ad["ExitCode"] = run.exit_code if run.exit_code is not None else -1
        for name, value in (
            ("RemoteWallClockTime", run.wall),
            ("CumulativeSlotTime", run.wall),
            ("CumulativeRemoteUserCpu", run.user_cpu),
            ("CumulativeRemoteSysCpu", run.sys_cpu),
        ):
            ad[name] = float(ad[name]) + value
        ad["RemoteUserCpu"], ad["RemoteSysCpu"] = run.user_cpu, run.sys_cpu
        ad["LastRemoteWallClockTime"] = run.wall
        decision = self.analyze(now, exited=True)
        self.apply(decision, now)
        return decision

    def periodic(self, now: float, usage: dict[str, float] | None = None) -> Decision:
        """The periodic expressions (``PERIODIC_ONLY``), with a running job's usage so far; applied."""
        if usage:
            for name, value in usage.items():
                self.ad[name] = value
        decision = self.analyze(now, exited=False)
        self.apply(decision, now)
        return decision

    def held_for_good(self, now: float) -> bool:
        """A held job whose release and removal cannot fire, now or ten years from now (so a run can end)."""
        if self.status != HELD:
            return False
        for moment in (now, now + _FAR):
            ad = classad2.ClassAd(dict(self.ad.items()))
            ad["CurrentTime"] = int(moment)
            if self._fires(ad, "PeriodicRelease") or self._fires(ad, "PeriodicRemove"):
                return False
        return True

    def expand(self, text: str) -> str:
        """``$$([expression])`` in ``text``, each evaluated in the job's ad now (as the schedd expands it when the
        job is matched, so ``NumJobCompletions`` grows across retries): a string as it is, another value as the
        ClassAd library writes it."""

        def value(found: re.Match[str]) -> str:
            result = classad2.ExprTree(found[1]).eval(self.ad)
            if isinstance(result, str) and not isinstance(result, classad2.Value):
                return result
            return str(classad2.ClassAd({"Value": result}).lookup("Value"))

        return JOB_EXPRESSION.sub(value, text)

    # ------------------------------------------------------------------ AnalyzePolicy

    def analyze(self, now: float, *, exited: bool) -> Decision:
        """``UserPolicy::AnalyzePolicy``: the first check that fires, in Condor's order."""
        fired = self._periodic_checks(now)
        if fired is not None:
            return fired
        if not exited:
            return STAY
        if self._fires(self.ad, "OnExitHold"):
            return self._fired("OnExitHold", Verdict.HOLD)
        if "OnExitRemove" in self.ad and _number(self.ad.eval("OnExitRemove")) == 0:  # anything else removes
            return Decision(Verdict.REQUEUE, self._because("OnExitRemove", False), expression="OnExitRemove")
        return Decision(Verdict.COMPLETE, expression="OnExitRemove")

    def _periodic_checks(self, now: float) -> Decision | None:
        """The allowed durations (running jobs), then periodic hold, release (held, not by the user), remove."""
        ad, state = self.ad, self.status
        duration = self._durations(now) if state == RUNNING else None
        if duration is not None:
            return duration
        if state not in (HELD, COMPLETED) and self._fires(ad, "PeriodicHold"):
            return self._fired("PeriodicHold", Verdict.HOLD)
        if state == HELD and int(ad.get("HoldReasonCode", 0)) != USER_REQUEST and self._fires(ad, "PeriodicRelease"):
            return self._fired("PeriodicRelease", Verdict.RELEASE)
        if self._fires(ad, "PeriodicRemove"):
            return self._fired("PeriodicRemove", Verdict.REMOVE)
        return None

    def _durations(self, now: float) -> Decision | None:
        ad = self.ad
        started = int(ad.get("JobCurrentStartDate", now))
        for attribute, code, what in (
            ("AllowedJobDuration", JOB_DURATION_EXCEEDED, "job duration"),
            ("AllowedExecuteDuration", JOB_EXECUTE_EXCEEDED, "execute duration"),
        ):
            limit = _number(ad.eval(attribute)) if attribute in ad else None
            if limit is not None and now - started > limit:
                return Decision(Verdict.HOLD, f"The job exceeded allowed {what} of {_short(int(limit))}", code)
        return None

    @staticmethod
    def _fires(ad: Any, attribute: str) -> bool:
        if attribute not in ad:
            return False
        value = _number(ad.eval(attribute))
        return value is not None and value != 0

    def _fired(self, attribute: str, verdict: Verdict) -> Decision:
        """``FiringReason``: the expression's own ``...Reason``/``...SubCode``, or Condor's sentence about it."""
        reason = self.ad.eval(attribute + "Reason") if attribute + "Reason" in self.ad else None
        subcode = _number(self.ad.eval(attribute + "SubCode")) if attribute + "SubCode" in self.ad else None
        text = reason if isinstance(reason, str) and reason else self._because(attribute, True)
        code = JOB_POLICY if verdict == Verdict.HOLD else 0
        return Decision(verdict, text, code, int(subcode or 0), expression=attribute)

    def _because(self, attribute: str, value: bool) -> str:
        verdict = "TRUE" if value else "FALSE"
        return f"The job attribute {attribute} expression '{self.ad.lookup(attribute)}' evaluated to {verdict}"

    # ------------------------------------------------------------------ applying a decision

    def apply(self, decision: Decision, now: float) -> None:
        if decision.verdict == Verdict.HOLD:
            self._hold(decision, now)
        elif decision.verdict == Verdict.RELEASE:
            self.ad["ReleaseReason"] = decision.reason
            self.ad["LastHoldReason"] = self.hold_reason
            self.ad["LastHoldReasonCode"] = int(self.ad.get("HoldReasonCode", 0))
            for name in ("HoldReason", "HoldReasonCode", "HoldReasonSubCode"):
                self.ad.pop(name, None)
            self._status(IDLE, now)
        elif decision.verdict == Verdict.REMOVE:
            self.ad["RemoveReason"] = decision.reason
            self._status(REMOVED, now)
        elif decision.verdict == Verdict.REQUEUE:
            self._status(IDLE, now)
        elif decision.verdict == Verdict.COMPLETE:
            self.ad["CompletionDate"] = int(now)
            self._status(COMPLETED, now)

    def _hold(self, decision: Decision, now: float) -> None:
        ad = self.ad
        ad["HoldReason"] = decision.reason
        ad["HoldReasonCode"] = decision.code
        ad["HoldReasonSubCode"] = decision.subcode
        ad["NumHolds"] = int(ad.get("NumHolds", 0)) + 1
        self._status(HELD, now)

    def _status(self, status: int, now: float) -> None:
        self.ad["LastJobStatus"] = int(self.ad["JobStatus"])
        self.ad["JobStatus"] = status
        self.ad["EnteredCurrentStatus"] = int(now)


def _number(value: object) -> float | None:
    """A ClassAd value as a number (booleans count), or None when it is undefined, an error or a string."""
    if isinstance(value, classad2.Value):  # Undefined and Error are IntEnum members: not numbers
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    return None


def _short(seconds: int) -> str:
    """``format_time_short``: ``dd+hh:mm:ss`` without its leading blanks, zeros and ``+`` (at least ``mm:ss``)."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{days:3d}+{hours:02d}:{minutes:02d}:{secs:02d}"
    offset = 0
    while offset < len(text) and text[offset] in " 0+":
        offset += 1
    if offset < len(text) and text[offset] == ":":
        offset += 1
    return text[offset:]


def _owner() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"

"""What becomes of a task's result: decoded, journaled, retried or failed, and delivered — no socket, no clock.

The engine moves bytes; everything a result *means* is decided here, so the
rules read (and are tested, tests/test_core_outcomes.py) without a network,
like the scheduler's:

* a value is decoded through the codec; one the master cannot unpickle fails
  that result alone (``ResultDecodeError``);
* a success is journaled (with ``--mw-journal`` and a task key) and may prove
  that slaves where the task failed before are black holes, which the engine
  then sends away;
* a failure runs again while its policy allows (``retries``, ``retry_on``)
  unless it would fail anywhere (a result too large, one that does not
  decode); otherwise it goes to the program;
* a task past its timeout fails with ``TaskTimeoutError`` and names the slave
  to drop; a task too big for a slave's frames fails with ``TaskTooLarge``;
* a task whose slaves die while running it (a segfault, ``os._exit``, a kill
  for memory, a freeze that keeps it silent past the client timeout on the
  master's machine) runs again, alone on its slave, until more than its
  ``allowed_failures`` died while they held it alone; then it fails with
  ``KilledSlaveError``, naming how each ended once the back end has said (or
  ``EXIT_WAIT`` has passed);
* a task submitted with a key that the journal knows is answered from it,
  unless the entry is damaged (its digest), names another algorithm or does
  not unpickle here: then it is treated as absent and the task runs again;
* every result reaches the task's listener (mwpy/core/entry.py), which
  says whether ``mw.results()`` gets it too.

Callers pass the time (``now``, monotonic seconds) where a rule needs it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs

from mwpy import safe_text, slave_exits
from mwpy.core.adoption import Adoption, Gone, Holder
from mwpy.core.entry import Death, Entry
from mwpy.core.facts import (
    Facts,
    HandedOver,
    HeldResultDropped,
    JournalEntryUnusable,
    StrayResult,
    TaskAdopted,
    TaskFailed,
    TaskPrinted,
    TaskTimedOut,
)
from mwpy.core.scheduler import Scheduler, hold
from mwpy.errors import KilledSlaveError, TaskTimeoutError
from mwpy.task_records import Result, TaskError, task_exception
from mwpy.wire import codec
from mwpy.wire.protocol import HeldItem, ResultItem

if TYPE_CHECKING:  # loaded for real only with --mw-journal
    from mwpy.core.journal import Entry as JournalEntry
    from mwpy.core.journal import Journal

log = safe_text.logger("mwpy.master")
#: Failures that would recur on any slave: handed over at once, never retried.
NOT_RETRIED: Final = frozenset({"ResultTooLarge", "ResultDecodeError"})
#: Beyond a task's timeout and the slave's own grace (slave.TIMEOUT_GRACE), how long the master waits
#: before it gives up on the slave running the task (stopped, or stuck and its watchdog too).
MASTER_TIMEOUT_GRACE = 10.0
#: Seconds a task that killed too many slaves waits for the back end to say how the last one ended.
EXIT_WAIT = 2.0
#: How the local back end's kill of a slave dropped as silent reads (mwpy/slave_exits.py): said as "killed".
KILLED_WHEN_SILENT: Final = slave_exits.describe(-signal.SIGKILL)
#: How a dead slave ended: a text such as "killed by SIGSEGV", or None while not known (mwpy/slave_exits.py).
HowEnded = Callable[[Death], "str | None"]


def _unknown(death: Death) -> str | None:
    return None


def _alone(deaths: tuple[Death, ...]) -> int:
    """How many of ``deaths`` came while the slave held that task alone: those surely its doing."""
    return sum(1 for death in deaths if not death.others)


def decode(
    entry: Entry,
    sid: str,
    ok: bool,
    blob: bytes,
    compute_time: float,
    *,
    journaled: bool = False,
    received: codec.Received | None = None,
) -> Result:
    """Turn a wire result into a Result; a value the master cannot unpickle becomes an error. ``received``: the
    master's file service's results, for a value or a file a slave stored there (the blob names its hash)."""
    if ok:  # the hot path, without decode_outcome's call (which says why a value does not unpickle)
        try:
            value = codec.decode_value(blob)
        except codec.UNPICKLING_FAILURES:
            pass
        else:
            return Result(entry.task_id, entry.label, sid, entry.tag, compute_time, value=value, journaled=journaled)
    value, failure = codec.decode_outcome(ok, blob, received)  # a failure, a stored value, or why it does not unpickle
    error = None if failure is None else TaskError(*failure)
    return Result(entry.task_id, entry.label, sid, entry.tag, compute_time, value, error, journaled and error is None)


def _retryable(entry: Entry, result: Result) -> bool:
    """Whether the policy's ``retry_on`` (if any) covers the exception the task raised."""
    kinds = entry.policy.retry_on
    return kinds is None or isinstance(task_exception(result), kinds)


def _unusable(found: JournalEntry, entry: Entry, replayed: Result) -> str | None:
    """Why a journal entry cannot answer ``entry``'s task (then it is treated as absent), or None when it can."""
    if found.damaged:
        return "damaged: its digest does not match"
    if found.algorithm != entry.algorithm:
        return f"written for algorithm {found.algorithm!r}"
    if replayed.error is not None:
        return f"its value does not unpickle here: {replayed.error.message}"
    return None


#: What a task run printed, by slave and task id, as its Result keeps it (stdout, stderr), or None.
Printed = Callable[[str, int], tuple[str, str] | None]


def _process_gone(holder: Holder) -> bool:
    """Whether a slave of the previous master has surely ended, by its process alone (this machine's)."""
    return slave_exits.gone(holder.host, holder.pid)


def _nothing_printed(sid: str, task_id: int) -> None:
    return None


class Outcomes:
    """One master's results: from the wire (or the journal) to the task's listener and ``mw.results()``."""

    def __init__(
        self,
        sched: Scheduler,
        facts: Facts,
        journal: Journal | None = None,
        *,
        allowed_failures: int = 3,
        how_ended: HowEnded = _unknown,
        printed: Printed = _nothing_printed,
        lease: float = 0.0,
        gone: Gone = _process_gone,
    ) -> None:
        """``printed(sid, task_id)``: what the task printed on ``sid`` (each stream as its Result keeps it), or
        None: the output comes as it is printed (TaskPrinted facts), some of it with the task's result; ``gone``:
        whether a slave of the previous master has surely ended (mwpy/core/adoption.py)."""
        self._sched = sched
        self._printed = printed
        #: Whether any task printed yet (output came): until then no result asks ``printed``, a call per task.
        self._printing = False
        self._facts = facts
        self._journal = journal
        #: Whether there is a journal: without one, dispatch and each loop pass need not ask it anything.
        self.journaled = journal is not None
        self._allowed_failures = allowed_failures
        self._how_ended = how_ended
        #: Tasks that killed too many slaves, with when they fail even if the back end has not said how.
        self._condemned: list[tuple[Entry, float]] = []
        #: What ``mw.results()`` drains, in arrival order.
        self.results: list[Result] = []
        #: Where results a slave stored on the master's file service are taken from (set with that service).
        self.received: codec.Received | None = None
        #: Tasks whose large values are to stay on the slave that runs them (their futures are other tasks'
        #: inputs: mwpy/held_tasks.py), by id, each told which slave it leaves for; empty without those.
        self.hold: dict[int, Callable[[Entry, str], None]] = {}
        #: Runs measured (results from slaves, answers and failures) and their seconds: the demand model's input.
        self.runs, self.run_seconds = 0, 0.0
        #: With a journal: what its predecessor had out, and what slaves that outlived it hand over
        #: (``lease``: how long after the journal's last write to wait for them).
        self.adoption = None if journal is None else Adoption(
            {key: Holder(*held) for key, held in journal.running().items()}, left=lease - journal.idle,
            queue=self._requeue, adopt=self._adopted, gone=gone,
            dropped=lambda sid, key: facts(HeldResultDropped(sid, key)),
        )  # fmt: skip

    def mean_run(self) -> float | None:
        """Mean seconds a task ran on its slave, over every result so far; None before the first."""
        return self.run_seconds / self.runs if self.runs else None

    def take(
        self, sid: str, items: list[ResultItem], outputs: dict[int, tuple[str, str]] | None, now: float
    ) -> list[str]:
        """One Results message from ``sid``, received at ``now``; returns the slaves it proves black holes.

        ``outputs``: what tasks printed since the last message, finished or not (a message of output alone has
        no items), reported as it comes.
        """
        sched = self._sched
        holes: list[str] = []
        if outputs:
            self._printing = True
            for task_id, (stdout, stderr) in outputs.items():
                self._facts(TaskPrinted(sid, task_id, stdout, stderr))
        for task_id, ok, blob, compute_time in items:
            entry = sched.finish(sid, task_id, compute_time, now)
            printed = self._printed(sid, task_id) if self._printing else None
            if entry is None:
                self._facts(StrayResult(sid, task_id))
                continue
            self.runs += 1
            self.run_seconds += compute_time
            result = decode(entry, sid, ok, blob, compute_time, received=self.received)
            if printed is not None:
                result = attrs.evolve(result, stdout=printed[0], stderr=printed[1])
            if result.error is None:
                holes += self._succeeded(sid, entry, blob, result)
            elif self._runs_again(sid, entry, result, now):
                continue
            sched.complete(entry)
            if entry.listener.settle(result):  # deliver(), inline: a call less per result
                self.results.append(result)
        return holes

    def _succeeded(self, sid: str, entry: Entry, blob: bytes, result: Result) -> list[str]:
        """Book a success (journal, facts); the black holes it reveals."""
        holes = self._sched.succeeded(sid, entry)
        compute_time = result.compute_time
        if entry.key is not None and self._journal is not None:
            self._journal.record(entry.key, entry.algorithm, codec.journal_form(blob, result.value), sid, compute_time)
        finished = self._facts.task_finished
        if finished is not None:
            finished(sid, entry.label, "ok", compute_time, entry.sent_at - entry.queued_at)
        return holes

    def _runs_again(self, sid: str, entry: Entry, result: Result, now: float) -> bool:
        """Whether a task that raised is queued to run again (its policy asks and it could succeed elsewhere)."""
        error = result.error
        assert error is not None
        again = error.type not in NOT_RETRIED and _retryable(entry, result) and self._sched.failed(sid, entry, now)
        finished = self._facts.task_finished
        if finished is not None:
            wait = entry.sent_at - entry.queued_at
            finished(sid, entry.label, "retried" if again else "error", result.compute_time, wait)
        self._facts(
            TaskFailed(sid, entry.task_id, entry.label, error.type, error.message, error.traceback,
                       result.stdout, result.stderr, again)
        )  # fmt: skip
        return again

    def deliver(self, entry: Entry, result: Result) -> None:
        """Hand ``result`` to its task's listener, and to ``mw.results()`` if the listener says so."""
        if entry.listener.settle(result):
            self.results.append(result)

    def replay(self, entry: Entry) -> bool:
        """Answer a task with a key from the journal, if the journal has its result (then it is not run)."""
        if entry.key is None or self._journal is None:
            return False
        found = self._journal.lookup(entry.key)
        if found is None:
            return False
        replayed = decode(entry, found.slave_id, True, found.value, found.compute_time, journaled=True)
        why = _unusable(found, entry, replayed)
        if why is not None:
            self._facts(JournalEntryUnusable(entry.key, entry.task_id, why))
            return False
        self.deliver(entry, replayed)
        return True

    def park(self, entry: Entry) -> bool:
        """Hold back a keyed task whose slave may be running it for the previous master (mwpy/core/adoption.py),
        counted as pending meanwhile (a program looping while ``mw.pending_tasks()`` waits for it)."""
        if self.adoption is None:
            return False
        hold(self._sched, entry)
        if self.adoption.submitted(entry):
            return True
        hold(self._sched, entry, answered=False)
        return False

    def _requeue(self, entry: Entry) -> None:
        """A parked task runs after all (its slave ended, or kept no result for it): queued as usual."""
        hold(self._sched, entry, answered=False)
        self._sched.add(entry)

    def dispatched(self, whom: tuple[str, int], job: str, batch: list[Entry], now: float) -> dict[int, str] | None:
        """Keyed tasks leave at ``now`` (Unix time) for the slave ``whom`` (host, pid), Condor job ``job`` (or
        ""): noted in the journal first; their keys by task id for the slave (which hands their results over by
        key should this master vanish), or None."""
        if self._journal is None:
            return None
        keys = {t.task_id: t.key for t in batch if t.key is not None}
        if keys:
            self._journal.dispatched([(key, *whom, job, now) for key in keys.values()])
        return keys or None

    def held_in(self, batch: list[Entry], sid: str) -> list[int] | None:
        """The tasks of ``batch``, leaving for ``sid``, whose large values are to stay there (:attr:`hold`; never
        one with a journal key: the journal keeps values), each told so; or None. What their Tasks frame names."""
        hold = self.hold
        held = [t for t in batch if t.task_id in hold and t.key is None]
        for task in held:
            hold[task.task_id](task, sid)
        return [task.task_id for task in held] or None

    def connected(self, whom: tuple[str, int], job: str) -> None:
        """A slave connected (``whom``: its host and pid; ``job``: its Condor job or ""): a slave of the previous
        master that ran as that job has ended if this is another process (mwpy/core/adoption.py)."""
        if self.adoption is not None:
            self.adoption.connected(*whom, job)

    def handover(self, sid: str | None, whom: tuple[str, int] | None, held: list[HeldItem]) -> None:
        """A slave (``whom``: its host and pid) that outlived the previous master hands over what it kept."""
        if sid is None or whom is None:
            return
        self._facts(HandedOver(sid, len(held)))
        if self.adoption is None:  # no journal: nothing waits for them
            log.warning("%s handed over %d results kept from a previous master: dropped (no --mw-journal)", sid,
                        len(held))  # fmt: skip
            return
        self.adoption.handover(sid, whom, held)

    def awaited(self) -> int:
        """Keyed tasks waiting for a slave of the previous master to hand over (0 without a journal)."""
        return 0 if self.adoption is None else self.adoption.waiting

    def end(self) -> None:
        """The computation finishes: results slaves kept that no task asked for are dropped, each with a line."""
        if self.adoption is not None:
            self.adoption.end()
        if self._journal is not None:
            self._journal.nothing_running()

    def _adopted(self, entry: Entry, sid: str, item: HeldItem) -> bool:
        """Answer ``entry`` with the result a slave kept while the master was gone: journaled, delivered once.
        False, and nothing delivered, if it does not decode here (a large value or a file the slave stored on the
        previous master's file service, gone with it): the task runs again, as for an unusable journal entry."""
        _, _, blob, compute_time = item[2]
        result = decode(entry, sid, True, blob, compute_time, received=self.received)
        if result.error is not None:
            log.warning("%s handed over a result for key %r that this master cannot read (%s): the task runs",
                        sid, entry.key, result.error.message)  # fmt: skip
            return False
        self.runs += 1
        self.run_seconds += compute_time
        if entry.key is not None and self._journal is not None:
            self._journal.record(entry.key, entry.algorithm, codec.journal_form(blob, result.value), sid, compute_time)
        self._facts(TaskAdopted(sid, entry.task_id, entry.key or ""))
        hold(self._sched, entry, answered=True)  # counted done, as one run here (never queued here)
        self.deliver(entry, result)
        return True

    def commit(self) -> None:
        """Make what was journaled durable: called after each loop pass, before the algorithm sees the results."""
        if self._journal is not None:
            self._journal.commit()

    def overdue(self, now: float) -> list[tuple[str, str]]:
        """Fail each task past its timeout (and grace); (slave to drop, why) for each. Tasks parked for a slave
        of the previous master that is not back within the lease are queued (mwpy/core/adoption.py)."""
        if self.adoption is not None:
            self.adoption.tick(now)
        sched = self._sched
        dropped = []
        for sid, entry in sched.overdue(now, MASTER_TIMEOUT_GRACE):
            timeout = sched.timeout_of(entry)
            assert timeout is not None
            sched.abandon(sid, entry)
            sched.complete(entry)
            message = f"the task ran past its timeout of {timeout:g} s on {sid}, which stopped answering for it"
            error = TaskError(*codec.failure_of(TaskTimeoutError(message)))
            self.deliver(entry, Result(entry.task_id, entry.label, sid, entry.tag, now - entry.sent_at, error=error))
            self._facts(TaskTimedOut(sid, entry.task_id, timeout))
            dropped.append((sid, f"task {entry.task_id} ran past its timeout of {timeout:g} s"))
        return dropped

    def slave_died(self, death: Death, now: float) -> None:
        """``death.sid`` died (not told to, not handing back): the task it ran is blamed, and may fail.

        Call it before the scheduler applies task policies to what the slave
        held. Which task a slave that held several was running is not known:
        it may have finished the first and kept its result to send with the
        next (slave.RESULT_HOLD). Each of them notes the death and runs again
        alone (Scheduler._take_unordered), so a death while a slave holds one
        task is surely that task's. Only those count against its
        ``allowed_failures``; past them it leaves the scheduler's books and
        fails at :meth:`settle_killed` instead of going to another slave.
        """
        sched = self._sched
        held = sched.held_by(death.sid)
        if len(held) > 1:
            shared = Death(death.sid, death.host, death.pid, death.job, death.at, len(held) - 1, death.silent)
            for entry in held:
                entry.deaths += (shared,)
            return
        if not held:
            return
        entry = held[0]
        entry.deaths += (death,)
        allowed = entry.policy.allowed_failures
        if _alone(entry.deaths) <= (self._allowed_failures if allowed is None else allowed):
            return
        sched.abandon(death.sid, entry)
        self._condemned.append((entry, now + EXIT_WAIT))  # still pending: the master waits for its failure

    def settle_killed(self, now: float) -> None:
        """Fail each task that killed too many slaves, once the back end said how the last one ended."""
        if not self._condemned:
            return
        waiting = []
        for entry, deadline in self._condemned:
            last = entry.deaths[-1]
            if now < deadline and self._how_ended(last) is None:
                waiting.append((entry, deadline))
                continue
            self._fail_killed(entry)
        self._condemned = waiting

    def _fail_killed(self, entry: Entry) -> None:
        function = entry.label  # the user's function, not mwpy's call that carries it
        ends = tuple(
            f"{d.sid} (pid {d.pid} on {d.host}{f', Condor job {d.job}' if d.job else ''}): {self._ended(d)}"
            f"{f' (holding {d.others} other tasks too)' if d.others else ''}"
            for d in entry.deaths
        )
        killed = _alone(entry.deaths)
        message = (
            f"{function} killed {killed} slaves that ran it (allowed failures: {killed - 1}), "
            "so it is not run again: " + "; ".join(ends)
        )
        error = TaskError(*codec.failure_of(KilledSlaveError(message, function, ends)))
        last = entry.deaths[-1].sid
        self._sched.complete(entry)
        self.deliver(entry, Result(entry.task_id, entry.algorithm, last, entry.tag, 0.0, error=error))
        self._facts(TaskFailed(last, entry.task_id, entry.algorithm, error.type, message, "", "", "", False))

    def _ended(self, death: Death) -> str:
        """How a slave that died running a task ended, as the error names it."""
        how = self._how_ended(death)
        if not death.silent:
            return how or "connection lost while running it"
        silent = f"silent for {death.silent:g} s (client timeout)"
        if how is None:
            return f"{silent}, dropped"
        return f"{silent}, killed" if how == KILLED_WHEN_SILENT else f"{silent}, then {how}"

    def too_large(self, sid: str, entry: Entry, max_frame: int, now: float) -> None:
        """A task too big for ``sid``'s frames fails with a clear error instead of being sent."""
        self._sched.finish(sid, entry.task_id, 0.0, now)
        self._sched.complete(entry)
        message = f"{len(entry.payload)} bytes of arguments; {sid} accepts frames of at most {max_frame} bytes"
        error = TaskError("TaskTooLarge", message, "")
        self.deliver(entry, Result(entry.task_id, entry.label, sid, entry.tag, 0.0, error=error))

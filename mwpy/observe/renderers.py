"""The master's facts (mwpy/core/facts.py) rendered three ways: the ``[A]`` audit, the ``mwpy.*`` log, the event log.

Each renderer is an :class:`~mwpy.core.facts.Observer` with one method per
kind of fact it writes: the audit's wording (CL-MW's record of a run, a
public format: tests/test_facts_golden.py pins it byte for byte), the lines a
user watching the log should see, and the event log's records (its format is
docs/observability.md's). :class:`Observers` opens what a master's options
ask for — the event log, its running goodput account and the metrics
exporter only when asked, so a master without them loads none of it — and
ends them with the run.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mwpy import safe_text
from mwpy.core import facts
from mwpy.core.facts import Facts, Observer
from mwpy.observe.audit import Audit
from mwpy.observe.task_output import OutputKeeper
from mwpy.options import Options

if TYPE_CHECKING:  # loaded for real only with --mw-events or --mw-metrics-port
    from mwpy.observe.events import EventWriter
    from mwpy.observe.goodput import Accountant

#: What a user watching the master sees (``--mw-log-level``; mwpy/observe/logs.py).
log = safe_text.logger("mwpy.master")
#: The exit status of a master algorithm stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


class AuditRenderer(Observer):
    """The ``[A]`` audit: one line per fact (per task batch and result batch too with ``--mw-audit-packets``)."""

    def __init__(self, audit: Audit, task_group: int) -> None:
        self._audit = audit
        self._grouping = task_group or "auto"

    def handler(self, kind: str) -> Callable[..., None] | None:
        if kind in ("tasks_dispatched", "results_received") and not self._audit.packets:
            return None
        return super().handler(kind)

    def flush(self) -> None:
        self._audit.flush()

    def master_started(self, fact: facts.MasterStarted) -> None:
        self._audit(f'INIT MASTER "{fact.member_id}"')
        if fact.journal_answers:
            self._audit(f"RESUMED {fact.journal_answers} answers from the journal (their tasks are not run again)")

    def master_ready(self, fact: facts.MasterReady) -> None:
        self._audit(f"MASTER READY {fact.host}:{fact.port}")

    def master_stopped(self, fact: facts.MasterStopped) -> None:
        self._audit(f'FINI SHUTDOWN "{fact.member_id}"')

    def resource_file_not_written(self, fact: facts.ResourceFileNotWritten) -> None:
        self._audit(f"RESOURCE FILE NOT WRITTEN {fact.path}: {fact.error}")

    def accepted(self, fact: facts.Accepted) -> None:
        self._audit(f"NEW-CLIENT -> {fact.address}")

    def accept_failed(self, fact: facts.AcceptFailed) -> None:
        self._audit(f"ACCEPT FAILED {fact.error}")

    def accept_paused(self, fact: facts.AcceptPaused) -> None:
        self._audit(f"ACCEPT PAUSED {fact.seconds:g} s: {fact.why}")

    def refused(self, fact: facts.Refused) -> None:
        self._audit(f"REFUSED {fact.address} [{fact.member_id!r}]: {fact.reason}")

    def connected(self, fact: facts.Connected) -> None:
        in_job = f", Condor job {fact.job}" if fact.job else ""
        self._audit(
            f'{fact.sid} {fact.address} -> ["{fact.member_id}"] connecting [{fact.group}] '
            f"(host {fact.host}, pid {fact.pid}{in_job}, mwpy {fact.version})"
        )

    def peer_dropped(self, fact: facts.PeerDropped) -> None:
        self._audit(f"EOF -> {fact.address} ({fact.reason})")

    def slave_left(self, fact: facts.SlaveLeft) -> None:
        if fact.cause == "expelled":
            self._audit(f"{fact.sid} -> {fact.reason}; {fact.in_flight} tasks in flight go to other slaves")
            return
        held = f", {fact.in_flight} in flight" if fact.in_flight else ""
        self._audit(
            f"{fact.sid} -> disconnected ({fact.reason}; {fact.sent} tasks sent, {fact.returned} results back{held})"
        )

    def handed_back(self, fact: facts.HandedBack) -> None:
        self._audit(f"{fact.sid} -> HANDED BACK {fact.n} tasks unstarted (leaving {fact.why})")

    def cancel_sent(self, fact: facts.CancelSent) -> None:
        self._audit(f"{fact.sid} <- CANCEL {fact.n} tasks")

    def cancelled_back(self, fact: facts.CancelledBack) -> None:
        self._audit(f"{fact.sid} -> CANCELLED {fact.n} tasks unstarted")

    def shutdown_sent(self, fact: facts.ShutdownSent) -> None:
        self._audit(f"{fact.sid} <- SHUTDOWN")

    def stray_result(self, fact: facts.StrayResult) -> None:
        self._audit(f"{fact.sid} -> result for task {fact.task_id} it does not hold (ignored)")

    def task_failed(self, fact: facts.TaskFailed) -> None:
        if fact.retried:
            self._audit(f"{fact.sid} -> task {fact.task_id} failed ({fact.error}); queued to run again")

    def journal_entry_unusable(self, fact: facts.JournalEntryUnusable) -> None:
        self._audit(f"JOURNAL ENTRY {fact.key!r} UNUSABLE ({fact.why}): task {fact.task_id} runs again")

    def journal_off(self, fact: facts.JournalOff) -> None:
        self._audit(f"JOURNAL OFF {fact.why}")

    def task_adopted(self, fact: facts.TaskAdopted) -> None:
        self._audit(f"ADOPTED {fact.key!r} from {fact.sid}: task {fact.task_id} answered, not run")

    def handed_over(self, fact: facts.HandedOver) -> None:
        self._audit(f"{fact.sid} -> HANDOVER of {fact.n} results kept from the previous master")

    def held_result_dropped(self, fact: facts.HeldResultDropped) -> None:
        self._audit(f"HELD RESULT DROPPED {fact.key!r} from {fact.sid}: no task asked for it")

    def tasks_dispatched(self, sid: str, n: int) -> None:
        self._audit(f"{sid} <- {n} tasks ({self._grouping} grouping)")

    def results_received(self, sid: str, n: int) -> None:
        self._audit(f"{sid} -> {n} results")


class LogRenderer(Observer):
    """The ``mwpy.master`` logger: what a user watching should know (a slave dropped with tasks, a stuck task)."""

    def accept_paused(self, fact: facts.AcceptPaused) -> None:
        if fact.first:
            log.warning("cannot accept more slaves: %s; raise the limit (ulimit -n) to serve more", fact.why)

    def connected(self, fact: facts.Connected) -> None:
        in_job = f", Condor job {fact.job}" if fact.job else ""
        log.info("%s connected from %s (host %s, pid %s%s) as %s", fact.sid, fact.address, fact.host, fact.pid,
                 in_job, fact.group)  # fmt: skip

    def slave_left(self, fact: facts.SlaveLeft) -> None:
        """A slave gone with tasks in flight is news while the computation runs; once it ends (finished or
        interrupted: Ctrl-C reaches the slaves too) tasks in flight are moot, and a warning would be noise."""
        if fact.cause != "expelled":
            level = logging.WARNING if fact.in_flight and fact.cause != "shutdown" else logging.INFO
            log.log(level, "%s disconnected (%s); %s", fact.sid, fact.reason, _fates(fact))

    def handed_back(self, fact: facts.HandedBack) -> None:
        log.info("%s is leaving %s and handed back %d tasks unstarted", fact.sid, fact.why, fact.n)

    def task_timed_out(self, fact: facts.TaskTimedOut) -> None:
        log.warning("task %d ran past its timeout of %g s on %s: failed, slave dropped", fact.task_id, fact.timeout,
                    fact.sid)  # fmt: skip

    def journal_off(self, fact: facts.JournalOff) -> None:
        log.error("%s", fact.why)


def _fates(fact: facts.SlaveLeft) -> str:
    """What became of the tasks a slave held, in a few words: the one line a death prints says what follows."""
    if not fact.in_flight:
        return "no task in flight"
    held = "1 task" if fact.in_flight == 1 else f"{fact.in_flight} tasks"
    if fact.requeued == fact.in_flight:
        return f"{held} in flight, queued again"
    if fact.unrunnable == fact.in_flight:
        return f"{held} in flight, unrunnable"
    return f"{held} in flight: {fact.requeued} queued again, {fact.unrunnable} unrunnable"


def forwardable(text: str, *, raw: bool = False) -> str:
    """A task's output made fit for the user's terminal: the one place forwarded text goes through.

    Task text is hostile (it must never drive the terminal): every control but
    the newline is shown, not obeyed, unless ``raw`` (``--mw-raw-task-output``).
    """
    return text if raw else safe_text.terminal(text)


class OutputForwarder(Observer):
    """What tasks print, on the master's stdout and stderr as they print it, as ProcessPoolExecutor's workers
    show it.

    A task's output comes in whole lines (a last line without its newline
    when the task ends), so a line of one task never mixes with another's;
    once a second slave has printed, each line names its slave (``[slave-3] ...``).
    ``--mw-quiet`` leaves this out: the output stays in ``Result.stdout``/``.stderr``
    and the futures.
    """

    def __init__(self, *, raw: bool = False) -> None:
        self._slaves: set[str] = set()
        self._raw = raw

    def task_printed(self, fact: facts.TaskPrinted) -> None:
        self._slaves.add(fact.sid)
        prefix = f"[{safe_text.one_line(fact.sid)}] " if len(self._slaves) > 1 else ""
        for text, stream in ((fact.stdout, sys.stdout), (fact.stderr, sys.stderr)):
            if text and stream is not None:
                lines = forwardable(text, raw=self._raw).splitlines(keepends=True)
                stream.write("".join(f"{prefix}{line.rstrip(chr(10))}\n" for line in lines))
                stream.flush()


class Observers:
    """Whom one master reports to: the audit and the log always; with ``--mw-events`` the event log and its
    goodput account, with ``--mw-metrics-port`` the Prometheus exporter (both fed by one event writer).

    At the end the master prints the goodput summary of its run on stderr,
    Condor MW's end-of-run statistics.
    """

    def __init__(self, options: Options, audit: Audit) -> None:
        """Open what the options ask for; one-line errors (EventLogError, ConfigurationError) otherwise."""
        self.events: EventWriter | None = None
        self._accountant: Accountant | None = None
        self._exporter: Any = None
        #: What each task run printed, for its Result (and past 64 KiB in a file).
        self.printed = OutputKeeper()
        renderers: list[Observer] = [AuditRenderer(audit, options.slave_task_group), LogRenderer(), self.printed]
        if not options.quiet:
            renderers.append(OutputForwarder(raw=options.raw_task_output))
        if options.events is not None or options.metrics_port is not None:
            renderers.append(self._open_events(options))
        self.facts = Facts(renderers)

    def _open_events(self, options: Options) -> Observer:
        from mwpy.observe.event_renderer import EventRenderer  # noqa: PLC0415 (only when asked for)
        from mwpy.observe.events import EventWriter  # noqa: PLC0415 (only when asked for)

        self.events = events = EventWriter(options.events)
        if options.events is not None:
            from mwpy.observe import goodput  # noqa: PLC0415 (the slot-time account only with --mw-events)

            self._accountant = goodput.Accountant()
            events.subscribers.append(self._accountant.add)
        if options.metrics_port is not None:
            from mwpy.observe import metrics  # noqa: PLC0415 (prometheus_client only when asked for)

            try:
                self._exporter = metrics.start(options.metrics_port, ports=options.master_port_range)
            except BaseException:
                events.close()
                raise
            events.subscribers.append(self._exporter)
        return EventRenderer(events)

    @property
    def timed(self) -> bool:
        """Whether tasks need their queue time stamped (only the event log and the exporter read it)."""
        return self.events is not None

    def stop(self, status: int, *, summary: bool = True) -> None:
        """Say why events stopped (if they did), print where the slot time went, release the file and the port.

        ``summary=False``: a program that ends with a line of its own (``mwpy jobs``) prints no goodput table.
        """
        if self.events is not None and self.events.failed is not None:
            print(f"mwpy: {self.events.failed}", file=sys.stderr)
        if summary and self._accountant is not None and status != INTERRUPTED:  # Ctrl-C: one line, nothing more
            from mwpy.observe import goodput  # noqa: PLC0415 (loaded already: an accountant exists)

            account = self._accountant.result()
            if account.slaves or account.tasks_ok or account.tasks_failed:  # a run that never started: no zeros
                print(goodput.summary(account), end="", file=sys.stderr, flush=True)
        self.close()

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
        if self._exporter is not None:
            self._exporter.close()

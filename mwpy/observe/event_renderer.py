"""The event log's observer: which fact of the master (mwpy/core/facts.py) becomes which record of the event
log (mwpy/observe/events.py: the records, their writer and reader).

Apart from the records because it is the one place that knows both sides, as each renderer of
mwpy/observe/renderers.py is for its own output.
"""

from __future__ import annotations

from collections.abc import Callable

from mwpy.core import facts
from mwpy.core.facts import Observer
from mwpy.observe.events import (
    EventWriter,
    SlaveCache,
    SlaveConnected,
    SlaveDisconnected,
    TasksAdopted,
    TasksRequeued,
    TasksUnrunnable,
    ValueMoved,
    resource_file_event,
)


class EventRenderer(Observer):
    """The event log (``--mw-events``): the records of docs/observability.md; per-task facts go straight to the
    writer's own counters (no call of ours in between: the hot path)."""

    def __init__(self, writer: EventWriter) -> None:
        self._writer = writer

    def handler(self, kind: str) -> Callable[..., None] | None:
        if kind == "task_finished":
            return self._writer.task_finished
        if kind == "tasks_dispatched":
            return self._writer.tasks_dispatched
        return super().handler(kind)

    def flush(self) -> None:
        self._writer.flush()  # a clock read, a write at most every FLUSH_INTERVAL

    def master_started(self, fact: facts.MasterStarted) -> None:
        self._writer.master_start(member_id=fact.member_id, host=fact.host, journal_answers=fact.journal_answers)

    def master_stopped(self, fact: facts.MasterStopped) -> None:
        self._writer.master_stop(status=fact.status, tasks_done=fact.tasks_done)

    def resource_file_written(self, fact: facts.ResourceFileWritten) -> None:
        self._writer.emit(resource_file_event(self._writer.now(), fact.record))

    def connected(self, fact: facts.Connected) -> None:
        record = SlaveConnected(
            t=self._writer.now(), slave=fact.sid, host=fact.host, address=fact.address, group=fact.group, job=fact.job
        )
        self._writer.emit(record)

    def slave_left(self, fact: facts.SlaveLeft) -> None:
        writer = self._writer
        now = writer.now()
        writer.emit(
            SlaveDisconnected(t=now, slave=fact.sid, cause=fact.cause, reason=fact.reason, in_flight=fact.in_flight)
        )
        if fact.requeued:
            writer.emit(TasksRequeued(t=now, slave=fact.sid, n=fact.requeued))
        if fact.unrunnable:
            writer.emit(TasksUnrunnable(t=now, n=fact.unrunnable, reason=f"{fact.sid} vanished", slave=fact.sid))

    def slave_cache(self, fact: facts.SlaveCache) -> None:
        self._writer.emit(
            SlaveCache(t=self._writer.now(), slave=fact.sid, hits=fact.hits, misses=fact.misses,
                       bytes_fetched=fact.bytes_fetched, evictions=fact.evictions)
        )  # fmt: skip

    def task_adopted(self, fact: facts.TaskAdopted) -> None:
        self._writer.emit(TasksAdopted(t=self._writer.now(), slave=fact.sid, n=1))

    def value_moved(self, fact: facts.ValueMoved) -> None:
        self._writer.emit(ValueMoved(t=self._writer.now(), task=fact.label, bytes=fact.size, holder=fact.holder,
                                     slave=fact.slave, way=fact.way))  # fmt: skip

    def handed_back(self, fact: facts.HandedBack) -> None:
        if fact.n:
            self._writer.emit(TasksRequeued(t=self._writer.now(), slave=fact.sid, n=fact.n))

    def task_failed(self, fact: facts.TaskFailed) -> None:
        self._writer.task_failed(
            task=fact.task_id,
            slave=fact.sid,
            algorithm=fact.algorithm,
            error=fact.error,
            message=fact.message,
            traceback=fact.traceback,
            retried=fact.retried,
            output=_output(fact.stdout, fact.stderr),
        )


def _output(stdout: str, stderr: str) -> str | None:
    """What a failed task printed, for its event: the one stream it wrote, or both labelled; None for nothing."""
    streams = [(name, text) for name, text in (("stdout", stdout), ("stderr", stderr)) if text]
    if len(streams) == 1:
        return streams[0][1]
    return "".join(f"--- {name}:\n{text}" for name, text in streams) or None

"""Prometheus metrics for a running master (``--mw-metrics-port``), an optional extra: ``mwpy[metrics]``.

The exporter is fed from the same stream as the event log: it subscribes to
the :class:`~mwpy.observe.events.EventWriter` and turns each record into counter and
gauge updates. Per-task events reach it already aggregated (one
``tasks-finished`` record per slave, algorithm and outcome per loop pass), so
it adds a few lock-protected increments per pass, not per task, to the
master's hot path. prometheus_client serves ``/metrics`` from its own daemon
thread; the master stays single-threaded otherwise.

prometheus_client is imported when an exporter is made, never when mwpy is
imported: masters without the option, and slaves, never load it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, ClassVar

from mwpy.errors import ConfigurationError
from mwpy.net.ports import PortRange, first_free
from mwpy.observe import events as ev

#: Where the exporter listens unless told otherwise: metrics are not secret, but nobody asked to publish them.
DEFAULT_HOST = "127.0.0.1"


def _prometheus() -> Any:
    """The prometheus_client module, or one line saying how to get it."""
    try:
        return importlib.import_module("prometheus_client")
    except ImportError:
        raise ConfigurationError(
            "--mw-metrics-port needs the prometheus-client package: pip install 'mwpy[metrics]'"
        ) from None


class MetricsExporter:
    """Counters and gauges of one master, served over HTTP; call it with each event (an EventWriter subscriber)."""

    def __init__(self, port: int, host: str = DEFAULT_HOST, ports: PortRange | None = None) -> None:
        prometheus = _prometheus()
        self.registry = registry = prometheus.CollectorRegistry()
        counter, gauge = prometheus.Counter, prometheus.Gauge

        def c(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return counter(name, text, labels, registry=registry)

        def g(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return gauge(name, text, labels, registry=registry)

        self.run = g("mwpy_master_run", "This master's run number in its event log (1, then 2 after a restart...)")
        self.started = g("mwpy_master_start_time_seconds", "Unix time this master started")
        self.finished = g("mwpy_master_finished", "1 once the master algorithm has returned")
        self.tasks = c("mwpy_tasks", "Task runs answered by slaves", ("algorithm", "outcome"))
        self.run_seconds = c("mwpy_task_run_seconds", "Compute time of answered task runs", ("algorithm", "outcome"))
        self.wait_seconds = c("mwpy_task_wait_seconds", "Time answered tasks sat queued in the master", ("algorithm",))
        self.dispatched = c("mwpy_tasks_dispatched", "Tasks sent to slaves")
        self.failures = c("mwpy_task_failures", "Task runs that raised", ("algorithm", "error"))
        self.requeued = c("mwpy_tasks_requeued", "Tasks queued again because their slave vanished")
        self.unrunnable = c("mwpy_tasks_unrunnable", "Tasks that became unrunnable")
        self.cancelled = c("mwpy_tasks_cancelled", "Queued tasks dropped without running")
        self.connections = c("mwpy_slave_connections", "Slaves that joined")
        self.disconnections = c("mwpy_slave_disconnections", "Slaves that left, by cause", ("cause",))
        self.connected = g("mwpy_slaves_connected", "Slaves connected, per group (as of the resource file)", ("group",))
        self.needed = g("mwpy_slaves_needed", "Slaves the master wants beyond those connected")
        self.done = g("mwpy_tasks_done", "Results handed to the master algorithm")
        self.pending = g("mwpy_tasks_pending", "Tasks queued in the master")
        self.running = g("mwpy_tasks_running", "Tasks sent to slaves and not yet answered")
        self.condor = g("mwpy_condor_jobs", "The computation's slave jobs in the schedd, by state", ("state",))
        serve = functools.partial(prometheus.start_http_server, addr=host, registry=registry)
        self._server, self._thread = serve(port) if ports is None else first_free(ports, serve, "the metrics exporter")

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen by the system when asked for port 0)."""
        return int(self._server.server_port)

    def __call__(self, event: ev.Event) -> None:
        handler = self._HANDLERS.get(event.KIND)  # by kind: a subclass of a kind is handled as that kind
        if handler is not None:
            handler(self, event)

    def _finished(self, event: ev.TasksFinished) -> None:
        self.tasks.labels(event.algorithm, event.outcome).inc(len(event.run_us))
        self.run_seconds.labels(event.algorithm, event.outcome).inc(sum(event.run_us) / 1e6)
        self.wait_seconds.labels(event.algorithm).inc(sum(event.wait_us) / 1e6)

    def _dispatched(self, event: ev.TasksDispatched) -> None:
        self.dispatched.inc(event.n)

    def _resource_file(self, event: ev.ResourceFileWritten) -> None:
        for group, count in event.slaves_connected.items():
            self.connected.labels(group).set(count)
        self.needed.set(event.slaves_needed)
        self.done.set(event.tasks_done)
        self.pending.set(event.tasks_pending)
        self.running.set(event.tasks_running)

    def _connected(self, event: ev.SlaveConnected) -> None:
        self.connections.inc()

    def _disconnected(self, event: ev.SlaveDisconnected) -> None:
        self.disconnections.labels(event.cause).inc()

    def _failed(self, event: ev.TaskFailed) -> None:
        self.failures.labels(event.algorithm, event.error).inc()

    def _requeued(self, event: ev.TasksRequeued) -> None:
        self.requeued.inc(event.n)

    def _unrunnable(self, event: ev.TasksUnrunnable) -> None:
        self.unrunnable.inc(event.n)

    def _cancelled(self, event: ev.TasksCancelled) -> None:
        self.cancelled.inc(event.n)

    def _condor_jobs(self, event: ev.CondorJobs) -> None:
        for state in ("idle", "running", "held"):
            self.condor.labels(state).set(getattr(event, state))

    def _master_start(self, event: ev.MasterStart) -> None:
        self.run.set(event.run)
        self.started.set(event.t)
        self.finished.set(0)

    def _master_stop(self, event: ev.MasterStop) -> None:
        self.finished.set(1)

    #: The metrics each kind of event updates (one method per kind).
    _HANDLERS: ClassVar[dict[str, Callable[[MetricsExporter, Any], None]]] = {
        ev.TasksFinished.KIND: _finished,
        ev.TasksDispatched.KIND: _dispatched,
        ev.ResourceFileWritten.KIND: _resource_file,
        ev.SlaveConnected.KIND: _connected,
        ev.SlaveDisconnected.KIND: _disconnected,
        ev.TaskFailed.KIND: _failed,
        ev.TasksRequeued.KIND: _requeued,
        ev.TasksUnrunnable.KIND: _unrunnable,
        ev.TasksCancelled.KIND: _cancelled,
        ev.CondorJobs.KIND: _condor_jobs,
        ev.MasterStart.KIND: _master_start,
        ev.MasterStop.KIND: _master_stop,
    }

    def close(self) -> None:
        """Stop serving (the port is free again when this returns)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def start(port: int, host: str = DEFAULT_HOST, ports: PortRange | None = None) -> MetricsExporter:
    """An exporter listening on ``host:port`` (port 0 and ``ports``: the first free one of the range);
    :class:`ConfigurationError` (one line) when it cannot be made."""
    try:
        return MetricsExporter(port, host, ports if port == 0 else None)
    except OSError as exc:
        raise ConfigurationError(f"--mw-metrics-port {port}: cannot listen on {host}: {exc.strerror or exc}") from None

"""Prometheus metrics for a running master (``--mw-metrics-port``), an optional extra: ``mwpy[metrics]``.

The exporter is fed from the same stream as the event log: it subscribes to
the :class:`~mwpy.observe.events.EventWriter` and turns each record into counter and
gauge updates. Per-task events reach it already aggregated (one
``tasks-finished`` record per slave, algorithm and outcome per loop pass), so
it adds a few lock-protected increments per pass, not per task, to the
master's hot path. ``/metrics`` is served by prometheus_client's request
handler from a daemon thread of its own (:class:`_BoundedServer`); the master
stays single-threaded otherwise. Whoever can reach the port may be hostile:
at most :data:`MAX_REQUESTS` requests are served at once (a thread each, the
rest turned away), a request whose header has not come :data:`HEADER_DEADLINE`
seconds after it connected is dropped, and so is the oldest of those still
coming when a new request finds every place taken (a scrape's header comes at
once: slow clients cannot keep it out), and a request not done
:data:`REQUEST_DEADLINE` seconds after it connected is cut off.

prometheus_client is imported when an exporter is made, never when mwpy is
imported: masters without the option, and slaves, never load it.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import select
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from mwpy.errors import ConfigurationError
from mwpy.net.ports import PortRange, first_free
from mwpy.observe import events as ev

#: Where the exporter listens unless told otherwise: metrics are not secret, but nobody asked to publish them.
DEFAULT_HOST = "127.0.0.1"
#: Seconds a request may take from connect to the last byte of the answer (a scrape takes milliseconds).
REQUEST_DEADLINE = 10.0
#: Requests served at once at most; each holds a thread until it is done or cut off.
MAX_REQUESTS = 4
#: Seconds a request's header may take to come, from connect to its blank line.
HEADER_DEADLINE = 2.0
#: A header longer than this is the handler's to refuse (http.server reads lines of at most 64 KiB).
MAX_HEADER = 65536
#: Seconds between looks at a header that came in part.
HEADER_LOOK = 0.02


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

    def __init__(
        self, port: int, host: str = DEFAULT_HOST, *, deadline: float = REQUEST_DEADLINE, ports: PortRange | None = None
    ) -> None:
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
        self.cache = {
            name: g(f"mwpy_slave_cache_{name}", f"{text} in a slave's cache of shared objects so far", ("slave",))
            for name, text in (("hits", "Hits"), ("misses", "Misses"), ("fetched_bytes", "Bytes fetched"),
                               ("evictions", "Evictions"))
        }  # fmt: skip
        handler = importlib.import_module("prometheus_client.exposition").MetricsHandler.factory(registry)

        def serve(at: int) -> _BoundedServer:
            return _BoundedServer((host, at), handler, deadline=deadline)

        self._server = serve(port) if ports is None else first_free(ports, serve, "the metrics exporter")
        self._thread = threading.Thread(target=self._server.serve_forever, name="mwpy-metrics", daemon=True)
        self._thread.start()

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

    def _slave_cache(self, event: ev.SlaveCache) -> None:
        for name, value in (
            ("hits", event.hits),
            ("misses", event.misses),
            ("fetched_bytes", event.bytes_fetched),
            ("evictions", event.evictions),
        ):
            self.cache[name].labels(event.slave).set(value)  # fmt: skip

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
        ev.SlaveCache.KIND: _slave_cache,
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


class _BoundedServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """An HTTP server with a thread per request, at most :data:`MAX_REQUESTS` of them, each request cut off
    ``deadline`` seconds after it connected (``serve_forever`` looks twice a second)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # callers past the ones served are turned away at once, not left retrying SYNs

    def __init__(
        self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler], *, deadline: float
    ) -> None:
        self.deadline = deadline
        self._slots = threading.BoundedSemaphore(MAX_REQUESTS)
        self._lock = threading.Lock()
        self._due: dict[socket.socket, float] = {}  # request -> when it is cut off
        self._coming: dict[socket.socket, float] = {}  # requests whose header is still coming -> when connected
        handler.timeout = deadline  # and no single read or write waits longer
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not self._take_over():  # every place held by a whole one
            self.shutdown_request(request)
            return
        with self._lock:
            now = time.monotonic()
            self._due[request] = now + self.deadline
            self._coming[request] = now
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread to be had: this request goes, the server stays
            self._done(request)
            self.shutdown_request(request)

    def _take_over(self) -> bool:
        """Every place is taken: drop the request whose header has been coming longest, if any, and take its place
        (its slot passes to the new request at once: its thread, however late it runs, releases none)."""
        with self._lock:
            slowest = min(self._coming, key=self._coming.__getitem__, default=None)
            if slowest is None:
                return False
            del self._coming[slowest]  # its thread stops looking at its header
            del self._due[slowest]  # and, ending, gives back no slot: the new request holds it
        with contextlib.suppress(OSError):
            slowest.shutdown(socket.SHUT_RDWR)  # its thread sees the hang-up and ends
        return True

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Serve the request once its header has come within :data:`HEADER_DEADLINE`; else drop it."""
        try:
            whole = self._header_came(request)
        finally:
            with self._lock:
                self._coming.pop(request, None)
        if whole:
            super().finish_request(request, client_address)

    def _header_came(self, request: socket.socket) -> bool:
        """Whether the request's header (up to its blank line) came in time, and it was not dropped for a new
        request meanwhile: looked at, not read (the handler reads)."""
        due = time.monotonic() + HEADER_DEADLINE
        while (left := due - time.monotonic()) > 0 and request in self._coming:
            if not select.select([request], [], [], left)[0]:
                return False
            try:
                seen = request.recv(MAX_HEADER, socket.MSG_PEEK)
            except OSError:
                return False
            if not seen:  # hung up
                return False
            if b"\r\n\r\n" in seen or len(seen) >= MAX_HEADER:
                return True
            time.sleep(HEADER_LOOK)  # a part: look again once more may have come
        return False

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: socket.socket) -> None:
        with self._lock:
            self._coming.pop(request, None)
            if self._due.pop(request, None) is not None:
                self._slots.release()

    def service_actions(self) -> None:
        """Cut off the requests past their deadline: their threads' reads and writes fail and they end."""
        now = time.monotonic()
        with self._lock:
            late = [request for request, due in self._due.items() if due <= now]
        for request in late:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that broke (cut off, or garbage) costs only itself: no traceback on the master's stderr."""


def start(port: int, host: str = DEFAULT_HOST, ports: PortRange | None = None) -> MetricsExporter:
    """An exporter listening on ``host:port`` (port 0 and ``ports``: the first free one of the range);
    :class:`ConfigurationError` (one line) when it cannot be made."""
    try:
        return MetricsExporter(port, host, ports=ports if port == 0 else None)
    except OSError as exc:
        raise ConfigurationError(f"--mw-metrics-port {port}: cannot listen on {host}: {exc.strerror or exc}") from None

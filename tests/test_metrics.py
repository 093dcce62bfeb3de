"""The Prometheus exporter (docs/observability.md): fed by the event writer, scraped over HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwpy.errors import ConfigurationError
from mwpy.observe import events as ev
from mwpy.observe import metrics
from tests.obs_support import ONE_OF_EACH
from tests.support import wait_until


@pytest.fixture
def exporter() -> Iterator[metrics.MetricsExporter]:
    made = metrics.start(0)
    yield made
    made.close()


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_writer_feeds_the_exporter_and_prometheus_can_scrape_it(
    tmp_path: Path, exporter: metrics.MetricsExporter
) -> None:
    writer = ev.EventWriter(tmp_path / "events.jsonl", clock=lambda: 2000.0)
    writer.subscribers.append(exporter)
    for record in ONE_OF_EACH:
        writer.emit(record)
    for _ in range(3):
        writer.task_finished("slave-9", "hello", "ok", 0.5, 0.25)
    writer.tasks_dispatched("slave-9", 3)
    writer.flush()
    writer.close()
    got = _scrape(exporter.port)
    assert got[("mwpy_tasks_total", (("algorithm", "hello"), ("outcome", "ok")))] == 5  # 2 + 3
    assert got[("mwpy_tasks_total", (("algorithm", "hello"), ("outcome", "retried")))] == 1
    assert got[("mwpy_task_run_seconds_total", (("algorithm", "hello"), ("outcome", "ok")))] == pytest.approx(2.4)
    assert got[("mwpy_task_wait_seconds_total", (("algorithm", "hello"),))] == pytest.approx(0.75 + 35e-6, abs=1e-9)
    assert got[("mwpy_tasks_dispatched_total", ())] == 6
    assert got[("mwpy_task_failures_total", (("algorithm", "hello"), ("error", "ZeroDivisionError")))] == 1
    assert got[("mwpy_tasks_requeued_total", ())] == 1
    assert got[("mwpy_tasks_unrunnable_total", ())] == 1
    assert got[("mwpy_tasks_cancelled_total", ())] == 2
    assert got[("mwpy_slave_connections_total", ())] == 1
    assert got[("mwpy_slave_disconnections_total", (("cause", "eof"),))] == 1
    assert got[("mwpy_slaves_needed", ())] == 2
    assert got[("mwpy_tasks_pending", ())] == 10
    assert got[("mwpy_slaves_connected", (("group", "unordered"),))] == 0
    assert got[("mwpy_condor_jobs", (("state", "idle"),))] == 2
    assert got[("mwpy_master_run", ())] == 1
    assert got[("mwpy_master_start_time_seconds", ())] == 1000.0
    assert got[("mwpy_master_finished", ())] == 1
    assert got[("mwpy_slave_cache_hits", (("slave", "slave-1"),))] == 19
    assert got[("mwpy_slave_cache_misses", (("slave", "slave-1"),))] == 1
    assert got[("mwpy_slave_cache_fetched_bytes", (("slave", "slave-1"),))] == 16_000_512
    assert got[("mwpy_slave_cache_evictions", (("slave", "slave-1"),))] == 0


def test_a_subclass_of_a_kind_is_counted_as_that_kind(exporter: metrics.MetricsExporter) -> None:
    """The exporter looks events up by kind, not by exact type, so a subclass is never skipped silently."""
    refined = _Dispatched(t=1.0, slave="slave-1", n=7)
    assert refined.KIND == "tasks-dispatched"
    exporter(refined)
    assert _scrape(exporter.port)[("mwpy_tasks_dispatched_total", ())] == 7


@attrs.frozen(kw_only=True)
class _Dispatched(ev.TasksDispatched):
    """A subclass of a kind (a refinement, a test double)."""


def test_it_listens_on_loopback_only_by_default(exporter: metrics.MetricsExporter) -> None:
    assert exporter._server.server_address[0] == "127.0.0.1"


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=rf"^--mw-metrics-port {port}: cannot listen on 127.0.0.1: "):
            metrics.start(port)


def test_without_the_extra_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an absent package looks like to import
    with pytest.raises(ConfigurationError, match=r"pip install 'mwpy\[metrics\]'"):
        metrics.start(0)


def test_metrics_without_an_event_log(exporter: metrics.MetricsExporter) -> None:
    """``--mw-metrics-port`` alone: a writer with no file still feeds its subscribers."""
    writer = ev.EventWriter(None, clock=lambda: 5.0)
    writer.subscribers.append(exporter)
    writer.master_start(member_id="m", host="h")
    writer.task_finished("slave-1", "solo", "ok", 1.5, 0.0)
    writer.close()
    writer.close()
    got = _scrape(exporter.port)
    assert got[("mwpy_tasks_total", (("algorithm", "solo"), ("outcome", "ok")))] == 1
    assert got[("mwpy_master_run", ())] == 1


def test_half_sent_requests_hold_a_bounded_number_of_threads_until_their_deadline() -> None:
    """Guards: whoever reaches the port cannot pile up threads in the master (one per half-sent request, for
    ever, before): at most MAX_REQUESTS are served at once, each cut off its deadline after it connected, and
    scraping works again once they are gone."""
    deadline = 2.0
    exporter = metrics.MetricsExporter(0, deadline=deadline)
    try:
        before = threading.active_count()
        dribblers = [socket.create_connection(("127.0.0.1", exporter.port), timeout=30) for _ in range(40)]
        for sock in dribblers:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line that ends it
        assert threading.active_count() <= before + metrics.MAX_REQUESTS
        for sock in dribblers:  # each is answered with a hang-up: turned away at once, or cut off at its deadline
            assert sock.recv(65536) == b""
            sock.close()
        wait_until(lambda: threading.active_count() == before, 30, "the request threads to end")
        assert _scrape(exporter.port)[("mwpy_master_finished", ())] == 0
    finally:
        exporter.close()


def test_slow_clients_holding_every_place_do_not_keep_scrapes_out() -> None:
    """A local user's four half-sent requests (one per place the server has) and more of them sent again as soon
    as they are dropped: each scrape still gets its answer (0 of 28 scrapes in 30 s before)."""
    exporter = metrics.MetricsExporter(0)
    stop = threading.Event()

    def hold() -> None:  # what the attacker runs: a place taken again as soon as it is lost
        while not stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", exporter.port)) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
                sock.settimeout(30)
                sock.recv(1)

    holders = [threading.Thread(target=hold, daemon=True) for _ in range(metrics.MAX_REQUESTS)]
    try:
        for holder in holders:
            holder.start()
        wait_until(lambda: len(exporter._server._coming) == metrics.MAX_REQUESTS, 30, "every place to be held")
        for _ in range(5):
            assert _scrape(exporter.port)[("mwpy_master_finished", ())] == 0
    finally:
        stop.set()
        exporter.close()

"""Issue 24 item 4: ``--mw-master-port-range LOW-HIGH`` for a master behind a firewall that opens only a range.

The master, its metrics exporter (``--mw-metrics-port 0``) and the file
service beside it (``mwpy jobs``) all listen inside the range; a range that is
malformed is a usage error (exit 2) and one that is full a start-up error
(exit 1), each one line naming the range. Real processes and sockets.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from mwpy.data.server import FileServer
from mwpy.errors import ConfigurationError
from tests.programs import shared_work as work
from tests.support import PROGRAMS, PYTHON, free_port, start_master

GATED = PROGRAMS / "metrics_gated.py"


def free_range(size: int) -> tuple[int, int]:
    """``size`` consecutive loopback ports nobody listens on (below the ephemeral range)."""
    for _ in range(100):
        low = free_port()
        with contextlib.ExitStack() as held:
            try:
                for port in range(low, low + size):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return low, low + size - 1
    raise AssertionError(f"no {size} consecutive free ports found")


@contextlib.contextmanager
def taken(low: int, high: int) -> Iterator[None]:
    """Someone else listens on every port of the range, on every interface."""
    with contextlib.ExitStack() as held:
        for port in range(low, high + 1):
            held.enter_context(socket.create_server(("", port)))
        yield


def master(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(GATED), "--mw-master", "--mw-resource-file", str(tmp_path / "resource.json"), *options, "gate"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_master_and_its_metrics_listen_inside_the_range(tmp_path: Path) -> None:
    low, high = free_range(3)
    computation = start_master(GATED, tmp_path, "--mw-master-port-range", f"{low}-{high}", "--mw-metrics-port", "0",
                               str(tmp_path / "gate"))  # fmt: skip
    try:
        port = computation.resource().master_port
        assert low <= port <= high
        others = [p for p in range(low, high + 1) if p != port]
        scraped = [_scrape(p) for p in others]
        assert any("mwpy_tasks_pending" in text for text in scraped), scraped  # the exporter is in the range too
    finally:
        (tmp_path / "gate").touch()
        computation.stop()


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def test_a_full_range_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    low, high = free_range(2)
    with taken(low, high):
        done = master(tmp_path, "--mw-master-host", "127.0.0.1", "--mw-master-port-range", f"{low}-{high}")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"metrics_gated.py: error: --mw-master-port-range {low}-{high}: no free port left for the master (all 2 in use)"
    ]


@pytest.mark.parametrize("value", ["9-3", "40000", "0-10", "10-70000", "a-b", "-5", "10-"])
def test_a_malformed_range_is_one_line_and_exit_status_2(tmp_path: Path, value: str) -> None:
    done = master(tmp_path, "--mw-master-port-range", value)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "metrics_gated.py: error: --mw-master-port-range: expected a port range LOW-HIGH with "
        f"1 <= LOW <= HIGH <= 65535, got {value!r}"
    ]


def test_a_port_and_a_range_together_are_refused(tmp_path: Path) -> None:
    done = master(tmp_path, "--mw-master-port", "4000", "--mw-master-port-range", "4000-4010")
    assert done.returncode == 2, done.stderr
    assert "--mw-master-port-range: give it or --mw-master-port, not both" in done.stderr


def test_the_file_service_listens_inside_the_range_and_says_when_it_is_full() -> None:
    low, high = free_range(2)
    server = FileServer(b"s" * 32, "m", host="127.0.0.1", ports=(low, high))
    try:
        assert low <= server.port <= high
    finally:
        server.close()
    low, high = free_range(2)
    with taken(low, high), pytest.raises(ConfigurationError, match=r"no free port left for the file service"):
        FileServer(b"s" * 32, "m", host="127.0.0.1", ports=(low, high))


def test_the_file_service_for_results_listens_inside_the_range_or_the_master_goes_on_without_it() -> None:
    """Issue 22: the master's own file service (large results, shared objects) takes a port of the range too;
    with none left, slaves are welcomed without it and results come back in frames, as before."""
    low, high = free_range(2)
    with mwpy.Executor(max_workers=1, options=["--mw-master-port-range", f"{low}-{high}"]) as ex:
        assert len(ex.submit(work.big_array, 20 << 17, 1).result(timeout=120)) == 20 << 17  # 20 MiB of floats
        assert ex.file_counters()["held_fetches"] == 1  # kept on its slave, fetched from there when asked for
    low, high = free_range(1)
    with mwpy.Executor(max_workers=1, options=["--mw-master-port-range", f"{low}-{high}"]) as ex:
        assert len(ex.submit(work.big_array, 20 << 17, 1).result(timeout=120)) == 20 << 17
        assert ex.file_counters()["results_stored"] == 0  # no port left for it: the master fetched it all the same

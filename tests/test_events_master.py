"""The event log a real master writes (``--mw-events``, docs/observability.md), read back strictly.

The format's own tests (tests/test_events.py) build events by hand; these run
real masters and slaves through ``mwpy local`` and check that what the master
writes is every kind it should write, each valid under the versioned schema,
that a restarted master continues the same file as one history, and that the
``mwpy report`` command and the metrics endpoint work on a real run.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from mwpy.observe import events
from mwpy.observe.events import MasterStart, MasterStop, SlaveDisconnected, TaskFailed, TasksFinished
from tests.support import PROGRAMS, free_port, mwpy_command, wait_until

KINDS_PROGRAM = PROGRAMS / "event_kinds.py"
JOURNAL_PROGRAM = PROGRAMS / "trust_journal.py"
#: Kinds a master writes by itself in the event_kinds run (condor-jobs comes from a schedd, tasks-cancelled
#: from cancellation, which the loop API has none of).
MASTER_KINDS = {
    "master-start",
    "master-stop",
    "resource-file",
    "slave-connected",
    "slave-disconnected",
    "tasks-dispatched",
    "tasks-finished",
    "task-failed",
    "tasks-requeued",
    "tasks-unrunnable",
}


def run_kinds(tmp_path: Path) -> list[events.Event]:
    work = tmp_path / "work"
    done = subprocess.run(
        [
            *mwpy_command("local", str(KINDS_PROGRAM), "--slaves", "2", "--no-progress", "--workdir", str(work)),
            "--",
            "--mw-task-attempts",
            "2",
            "kinds",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"values": 12, "errors": 1, "unrunnable": 1}
    # The summary closes the run (mwpy local may first say that a slave died: the program kills two).
    summary = [line for line in done.stderr.splitlines() if line.startswith("goodput: ")]
    assert summary, done.stderr
    assert summary[0].startswith("goodput: 12 tasks ok, 1 failed, 2 retried"), done.stderr
    return events.read_events(work / "events.jsonl")


def test_mwpy_local_keeps_an_event_log_with_every_kind_a_master_writes(tmp_path: Path) -> None:
    """Guards: the master logs connections, dispatches, outcomes, retries, losses and its own start and stop."""
    log = run_kinds(tmp_path)
    assert {type(event).KIND for event in log} == MASTER_KINDS
    assert isinstance(log[0], MasterStart)
    assert log[0].run == 1
    assert isinstance(log[-1], MasterStop)
    assert (log[-1].status, log[-1].tasks_done) == (0, 13)  # 13 answered; the unrunnable task is not done


def test_every_outcome_is_counted_once(tmp_path: Path) -> None:
    """Guards: tasks-finished counts each answered run exactly once, with the outcome the program saw."""
    log = run_kinds(tmp_path)
    outcomes: Counter[tuple[str, str]] = Counter()
    for event in log:
        if isinstance(event, TasksFinished):
            outcomes[(event.algorithm, event.outcome)] += event.n
            assert all(wait >= 0 for wait in event.wait_us)
    assert outcomes == {
        ("square", "ok"): 10,
        ("fails_once", "retried"): 1,
        ("fails_once", "ok"): 1,
        ("always_fails", "retried"): 1,
        ("always_fails", "error"): 1,
        ("kills_its_slave_once", "ok"): 1,
    }
    failed = [event for event in log if isinstance(event, TaskFailed)]
    assert sorted((event.algorithm, event.error, event.retried) for event in failed) == [
        ("always_fails", "KeyError", False),
        ("always_fails", "KeyError", True),
        ("fails_once", "ValueError", True),
    ]
    assert all("Traceback" in event.traceback for event in failed)
    lost = [event for event in log if isinstance(event, SlaveDisconnected) and event.cause == "eof"]
    assert sum(event.in_flight for event in lost) >= 2  # both slave-killing tasks were in flight on a dead slave


def test_a_restarted_master_continues_the_same_history(tmp_path: Path) -> None:
    """Guards: the journal and the event log survive a master restart as one history (run 1, then run 2)."""
    work, folder = tmp_path / "work", tmp_path / "runs"
    folder.mkdir()
    command = [
        *mwpy_command("local", str(JOURNAL_PROGRAM), "--slaves", "2", "--no-progress", "--workdir", str(work)),
        "--",
        "--mw-journal",
        str(tmp_path / "journal.sqlite"),
        "--mw-events",
        str(tmp_path / "events.jsonl"),
        "squares",
        "20",
        str(folder),
    ]
    for _ in range(2):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    log = events.read_events(tmp_path / "events.jsonl")
    starts = [event for event in log if isinstance(event, MasterStart)]
    stops = [event for event in log if isinstance(event, MasterStop)]
    assert [event.run for event in starts] == [1, 2]
    assert [event.run for event in stops] == [1, 2]
    assert log.index(stops[0]) < log.index(starts[1])
    ran = sum(event.n for event in log if isinstance(event, TasksFinished))
    assert ran == 20  # the second run answered every task from the journal


def test_mwpy_report_turns_a_real_event_log_into_html(tmp_path: Path) -> None:
    """Guards: ``mwpy report EVENTS -o FILE`` (docs/observability.md) on what a real master wrote."""
    run_kinds(tmp_path)
    output = tmp_path / "report.html"
    done = subprocess.run(
        mwpy_command("report", str(tmp_path / "work" / "events.jsonl"), "-o", str(output)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    html = output.read_text(encoding="utf-8")
    assert "<html" in html
    assert "always_fails" in html  # the failures table


def test_mwpy_report_on_a_foreign_file_is_one_line_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "events.jsonl"
    bad.write_text(
        '{"v":1,"t":1.0,"kind":"master-start","run":1,"pid":1,"host":"h","version":"x","member_id":"m"}\n'
        "this is not json\n"
    )
    done = subprocess.run(
        mwpy_command("report", str(bad), "-o", str(tmp_path / "r.html")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"{bad}:2:" in lines[0]


def test_metrics_endpoint_of_a_real_master_counts_its_tasks(tmp_path: Path) -> None:
    """Guards: ``--mw-metrics-port`` serves the master's counters over HTTP while it runs."""
    pytest.importorskip("prometheus_client")
    port = free_port()
    gate = tmp_path / "gate"
    program = PROGRAMS / "metrics_gated.py"
    master = subprocess.Popen(
        [
            *mwpy_command("local", str(program), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path / "w")),
            "--",
            "--mw-metrics-port",
            str(port),
            str(gate),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def scraped() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    text: str = response.read().decode()
            except OSError:
                return None
            return text if "mwpy_tasks_total" in text and _finished(text) >= 5 else None

        text = wait_until(scraped, timeout=60, what="the metrics endpoint to count 5 finished tasks")
        assert text is not None
        assert _finished(text) >= 5
    finally:
        gate.touch()
        _, err = master.communicate(timeout=60)
    assert master.returncode == 0, err


def _finished(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mwpy_tasks_total{") and 'outcome="ok"' in line
    )

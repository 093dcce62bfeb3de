"""The live status view (docs/observability.md), driven in a real pseudo-terminal and read off an emulated screen."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mwpy import overseer_state, resource_file
from mwpy.observe import events as ev
from mwpy.observe import statusview
from mwpy.observe.statusview import INTERRUPTED, Extra, Rate, plain
from mwpy.resource_file import ResourceFile
from tests.obs_support import ONE_OF_EACH, Terminal, finished, write_log

DEADLINE = 30.0


def _record(**changes: Any) -> ResourceFile:
    fields: dict[str, Any] = {
        "computation_status": "in-progress",
        "timestamp": time.time(),
        "update_interval": 1.0,
        "member_id": "view-test",
        "master_host": "127.0.0.1",
        "master_port": 4000,
        "slaves_needed": 2,
        "slave_executable": sys.executable,
        "slave_files": [],
        "slave_arguments": [],
        "master_pid": 1,
        "tasks_done": 0,
        "tasks_pending": 50,
        "tasks_running": 3,
        "slaves_connected": {"ordered": 0, "intermingle": 1, "unordered": 3},
    }
    fields.update(changes)
    return ResourceFile(**fields)


@contextlib.contextmanager
def terminal(*args: str) -> Iterator[Terminal]:
    term = Terminal([sys.executable, "-m", "mwpy", "status", *args])
    try:
        yield term
    finally:
        term.close()


def test_the_live_view_follows_the_computation_until_it_finishes(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record(tasks_done=0))
    events = write_log(tmp_path / "events.jsonl", ONE_OF_EACH[:1])
    with terminal(str(rf), "--watch", "--interval", "0.2", "--no-condor", "--events", str(events)) as term:
        first = term.wait_for("mwpy status", "in progress", "0/10 (0 %)")
        assert "slaves 4 connected (intermingle 1, unordered 3) · 2 more needed" in first
        assert "submit.example" not in first, "the master's address comes from the resource file"
        assert "127.0.0.1:4000" in first
        resource_file.write(rf, _record(tasks_done=4))
        with events.open("a", encoding="utf-8") as log:  # the master appends a failure
            log.write(ev.encode(ONE_OF_EACH[6]))
        screen = term.wait_for("4/10 (40 %)", "recent failures", "ZeroDivisionError: division by zero")
        assert "hello on slave-1" in screen
        assert re.search(r"4 tasks done \([\d.,]+/s\) · 3 running · 50 queued", screen), screen
        resource_file.write(rf, _record(tasks_done=6))
        screen = term.wait_for("6/10 (60 %)", "ETA")
        resource_file.write(rf, _record(tasks_done=10, computation_status="finished", slaves_needed=0))
        assert term.wait_exit() == 0
        assert "finished" in term.text()
        assert "10/10 (100 %)" in term.text()


def test_ctrl_c_ends_the_view_with_130(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record(tasks_done=3))
    with terminal(str(rf), "--watch", "--interval", "0.2", "--no-condor") as term:
        term.wait_for("3 tasks done")
        os.write(term.fd, b"\x03")  # the Ctrl-C key, through the terminal's line discipline
        assert term.wait_exit() == INTERRUPTED


def test_the_view_waits_for_a_missing_resource_file(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    with terminal(str(rf), "--watch", "--interval", "0.2", "--no-condor") as term:
        term.wait_for("waiting for the resource file")
        resource_file.write(rf, _record(computation_status="finished", tasks_done=7))
        assert term.wait_exit() == 0
        assert "7 tasks done" in term.text()


def test_without_a_terminal_it_prints_plain_lines(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record(computation_status="finished", tasks_done=12, slaves_connected={"unordered": 2}))
    done = subprocess.run(
        [sys.executable, "-m", "mwpy", "status", str(rf), "--watch", "--no-condor", "--total", "12"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout
    (line,) = done.stdout.splitlines()
    assert line.startswith("[mwpy] finished · 12/12 tasks done (100 %) · 3 running · 50 queued")
    assert "slaves 2 connected (unordered 2) · 2 more needed" in line


def test_a_silent_master_s_status_says_its_slaves_wait_for_a_restart_within_their_lease(tmp_path: Path) -> None:
    """Between a master's death and its restart by Condor, ``mwpy status`` says what the slaves do meanwhile."""
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record(timestamp=time.time() - 120))
    done = subprocess.run([sys.executable, "-m", "mwpy", "status", str(rf), "--no-condor"],
                          capture_output=True, text=True, timeout=DEADLINE, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("status   stale (written 1"), done.stdout
    said = " ".join(done.stdout.split())
    assert (
        "the master is silent: gone or restarting; its slaves keep their tasks and wait for a master of this "
        "member id up to their --mw-master-lease (2400 s by default), then exit 4" in said
    ), done.stdout


def test_an_unusable_resource_file_is_one_line_and_status_1(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    rf.write_text('{"format": "something else"}', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mwpy", "status", str(rf), "--watch", "--no-condor"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == f"mwpy status: error: {rf}: not an mwpy resource file (format is 'something else')\n"


def test_rate_and_plain_line() -> None:
    rate = Rate(window=10)
    assert rate.per_second() is None
    for second in range(30):
        rate.add(1000.0 + second, 5 * second)
    assert rate.per_second() == pytest.approx(5.0)
    rate.add(1029.0, 1000)  # the last write read again: no new sample
    assert rate.per_second() == pytest.approx(5.0)
    rate.add(1031.0, 0)  # a restarted master counts from zero
    assert rate.per_second() is None
    record = _record(tasks_done=50, timestamp=1000.0)
    from mwpy.observe.statusview import Extra  # noqa: PLC0415

    line = plain(record, Extra(total=100), 5.0, now=1000.5)
    assert "50/100 tasks done (50 %, 5.0/s)" in line
    assert "ETA 10.0 s" in line


Answer = statusview.CondorAnswer
WHY = "its Requirements match none of the pool's 2 slots"
CONDOR_CASES: list[tuple[bool | None, Answer, int, str | None]] = [
    (None, (None, None, "no Condor job counts: no schedd"), 1, None),
    (True, (None, None, "no Condor job counts: no schedd"), 2, "no Condor job counts: no schedd"),
    (None, ({"idle": 2, "running": 8, "held": 0}, None, None), 2, "condor 2 idle · 8 running · 0 held"),
    (False, ({"idle": 2, "running": 8, "held": 0}, None, None), 0, None),
    (True, ({"idle": 2, "running": 0, "held": 0}, WHY, None), 2, f"0 held (0 s old) · idle: {WHY}"),
]


@pytest.mark.parametrize(
    "case", CONDOR_CASES, ids=["auto-no-schedd", "insist-no-schedd", "auto-schedd", "never", "idle-and-why"]
)
def test_condor_job_counts_are_asked_for_sparingly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[bool | None, Answer, int, str | None]
) -> None:
    condor, answer, asked, shown = case
    calls: list[str] = []

    def counter(member_id: str) -> Any:
        def ask() -> Answer:
            calls.append(member_id)
            return answer

        return ask

    monkeypatch.setattr(statusview, "condor_counter", counter)
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record())
    now = [1000.0]
    follower = statusview.Follower(rf, condor=condor, clock=lambda: now[0])
    for _ in range(3):  # three samples in the first CONDOR_INTERVAL, then one after it
        assert follower.sample() is None
        now[0] += 1
    now[0] += statusview.CONDOR_INTERVAL
    follower.sample()
    assert calls == ["view-test"] * asked
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(follower.view())
    text = console.export_text()
    if shown is None:
        assert "condor" not in text
    else:
        assert shown in text, text


def test_after_ctrl_c_the_view_says_interrupted_without_an_eta() -> None:
    """Issue 21 item 7: after Ctrl-C ``mwpy local``'s last view said "finished" with an ETA."""
    record = _record(tasks_done=50, timestamp=1000.0, computation_status="finished")
    line = plain(record, Extra(total=100, interrupted=True), 5.0, now=1000.5)
    assert line.startswith("[mwpy] interrupted · 50/100 tasks done")
    assert "ETA" not in line
    assert "ETA" not in plain(record, Extra(total=100), 5.0, now=1000.5)  # nor once finished


def test_the_slaves_needed_are_capped_by_the_slave_limit() -> None:
    """Issue 21 item 7: under ``mwpy local --slaves 3`` the view said "800 more slaves needed"."""
    record = _record(slaves_needed=800, slaves_connected={"unordered": 3})
    assert "slaves 3/3 connected (unordered 3) · 0 more needed (capped by the limit of 3)" in plain(
        record, Extra(slave_limit=3), None, now=time.time()
    )
    assert "· 2 more needed" in plain(record, Extra(slave_limit=5), None, now=time.time())
    assert "· 800 more needed" in plain(record, Extra(), None, now=time.time())  # mwpy status: the master's word


def test_the_live_view_names_the_slowest_slaves(tmp_path: Path) -> None:
    """Issue 21 item 7: the live view could not say which slave is slow (the event log has the data)."""
    log = write_log(
        tmp_path / "events.jsonl",
        [
            finished(1001.0, "slave-0", "ok", *[0.3] * 20),
            finished(1001.0, "slave-1", "ok", *[0.3] * 20),
            finished(1001.0, "slave-2", "ok", *[0.9] * 10),
            finished(1002.0, "slave-2", "error", 0.9),
        ],
    )
    tail = statusview.FailureTail(log)
    tail.poll()
    extra = Extra(slaves=tail.slaves)
    line = plain(_record(), extra, None, now=time.time())
    assert line.endswith("slowest slave-2 11 tasks, mean 0.90 s, p95 ≤ 0.90 s, 1 failed")
    screen = io.StringIO()
    Console(file=screen, width=120, color_system=None).print(statusview.render(_record(), extra, None, now=time.time()))
    view = screen.getvalue()
    assert view.index("slave-2 11 tasks") < view.index("slave-0 20 tasks") < view.index("slave-1 20 tasks")


def test_the_demand_shown_is_bounded_by_the_slave_limit() -> None:
    """Issue 24 item 6: a computation that can use 8 slaves is never shown needing 1,999 more."""
    from mwpy.observe.statusview import Extra  # noqa: PLC0415

    record = _record(slaves_needed=1999, slaves_connected={"ordered": 0, "intermingle": 0, "unordered": 2})
    line = plain(record, Extra(slave_limit=8), None, now=record.timestamp)
    assert "slaves 2/8 connected (unordered 2) · 6 more needed (capped by the limit of 8)" in line
    assert "1,999" not in line
    assert "· 1,999 more needed" in plain(record, Extra(), None, now=record.timestamp)  # no limit: the demand


def test_the_watch_bounds_the_demand_by_the_overseer_s_max_jobs_while_that_overseer_runs(tmp_path: Path) -> None:
    """Issue 24 item 6: ``mwpy status --watch`` reads the running overseer's cap (mwpy/overseer_state.py)."""
    rf = tmp_path / "resource.json"
    resource_file.write(rf, _record(slaves_needed=1999, slaves_connected={"unordered": 2}))
    overseer_state.write(rf, 8, "condor")  # this process stands for the overseer: it runs
    follower = statusview.Follower(rf, condor=False)
    follower.sample()
    assert "slaves 2 connected (unordered 2) · 6 more needed (overseer cap: --max-jobs 8)" in follower.line()
    overseer_state.remove(rf)
    follower.sample()
    assert "· 1,999 more needed" in follower.line()


def test_condor_counts_are_shown_with_their_age() -> None:
    """Issue 24 item 6: the schedd is asked every few seconds; a frame says how old its counts are."""
    from mwpy.observe.statusview import Extra  # noqa: PLC0415

    record = _record()
    extra = Extra(condor={"idle": 0, "running": 8, "held": 0}, condor_at=record.timestamp)
    line = plain(record, extra, None, now=record.timestamp + 7.2)
    assert "condor 0 idle · 8 running · 0 held (7 s old)" in line

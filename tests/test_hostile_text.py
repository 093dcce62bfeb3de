"""Text from tasks, slaves and jobs never drives the user's terminal or browser (issue 25 item 1, security.md).

The attacks run for real: tests/programs/hostile_text.py's task writes a clipboard write (OSC 52), a window
title, a clear screen, a line forged over the previous one and a C1 control into its output, its exception's
message and its exception's class name, under ``mwpy local`` on a real pseudo-terminal read through a
terminal emulator (pyte), which records every byte; ``mwpy status --watch`` shows an event log of such
failures; ``mwpy jobs`` runs a job that creates files with such names; ``mwpy report`` puts a hostile host
name in its plots, opened in headless Chromium. Each test fails if its defence goes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pyte

from mwpy.observe import events as ev
from mwpy.observe import report
from tests.obs_support import Terminal, chromium_or_skip, headless, write_log
from tests.programs.hostile_text import PAYLOAD
from tests.support import PROGRAMS, mwpy_command, write_resource_file

HOSTILE = PROGRAMS / "hostile_text.py"
#: What each attack looks like on the wire; none may reach the terminal (rich draws its view with cursor-up and
#: erase-line of its own, so the forged line is recognised by the text that follows the erase).
DRIVES_THE_TERMINAL = {
    "clipboard write (OSC 52)": b"\x1b]52;",
    "window title": b"\x1b]0;pwned",
    "clear screen": b"\x1b[2J",
    "forged line": b"\x1b[2Kall ",
    "C1 control sequence": "\x9b".encode(),
}
#: What the attack looks like shown safe.
SHOWN = b"\\x1b]52;c;cHduZWQ=\\x07"


def run_in_terminal(argv: list[str], status: int, **options: Any) -> Terminal:
    """``argv`` run to its end on a real pseudo-terminal (``options``: Terminal's), which must exit with ``status``."""
    term = Terminal(argv, **options)
    try:
        assert term.wait_exit() == status, term.text()
    finally:
        term.close()
    return term


def assert_terminal_untouched(term: Terminal) -> None:
    raw = bytes(term.raw)
    reached = [name for name, sequence in DRIVES_THE_TERMINAL.items() if sequence in raw]
    assert reached == [], term.text()
    assert "pwned" not in term.screen.title
    assert SHOWN in raw, "the attack is shown, escaped, not dropped"


def test_mwpy_local_shows_a_hostile_task_s_words_without_obeying_them() -> None:
    """Guards: the master's log of a failed task (its message, exception name, captured output), the uncaught
    exception's traceback and notes, and mwpy local's view: all shown escaped on the terminal."""
    term = run_in_terminal(mwpy_command("local", str(HOSTILE), "--slaves", "1", "--", "raise"), 255, deadline=120)
    assert_terminal_untouched(term)
    raw = bytes(term.raw)
    assert b"BEFORE-THE-FAILURE" in raw
    assert b"Evil\\x1b]0;pwned\\x07Error" in raw  # the exception's class name, shown
    assert b"[task 2 stdout on slave-0]" in raw  # the uncaught exception's notes were printed, safe


def test_mwpy_local_shows_a_failing_slave_s_last_words_without_obeying_them() -> None:
    """Guards: mwpy local's line for each failed slave run, and its line when it gives up, quote the slave."""
    command = mwpy_command("local", str(HOSTILE), "--slaves", "1")
    term = run_in_terminal(command, 1, deadline=120, env={"MWPY_TEST_SLAVE_FAILS": "1"})
    assert_terminal_untouched(term)
    assert b"slave runs failed before any task had a result" in bytes(term.raw)


def hostile_event_log(tmp_path: Path) -> tuple[Path, Path]:
    """A finished computation's resource file and an event log of failures in hostile words."""
    resource = tmp_path / "resource.json"
    write_resource_file(resource, computation_status="finished")
    events = write_log(
        tmp_path / "events.jsonl",
        [
            ev.MasterStart(t=1000.0, run=1, pid=1, host="h", version="0", member_id="m", total=10),
            ev.TaskFailed(
                t=1001.0,
                task=1,
                slave="slave-0",
                algorithm="hostile" + PAYLOAD,
                error="Evil" + PAYLOAD,
                message=PAYLOAD,
                traceback=PAYLOAD,
                retried=False,
                output=PAYLOAD,
            ),
        ],
    )
    return resource, events


def test_mwpy_status_watch_shows_recent_failures_without_obeying_them(tmp_path: Path) -> None:
    """Guards: the live view's recent failures quote the event log's task-failed lines, escaped."""
    resource, events = hostile_event_log(tmp_path)
    term = run_in_terminal(mwpy_command("status", str(resource), "--watch", "--events", str(events), "--no-condor"), 0)
    assert "recent failures" in term.text()
    assert_terminal_untouched(term)


def test_the_plain_progress_line_shows_the_last_failure_without_obeying_it(tmp_path: Path) -> None:
    """Guards: without a terminal, the view's plain line ("last failure: ...") is escaped too."""
    resource, events = hostile_event_log(tmp_path)
    done = subprocess.run(
        mwpy_command("status", str(resource), "--watch", "--events", str(events), "--no-condor"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"last failure: " in done.stdout
    assert b"\x1b" not in done.stdout
    assert SHOWN in done.stdout


def test_mwpy_jobs_names_files_a_job_made_without_obeying_their_names(tmp_path: Path) -> None:
    """Guards: a job's file names with escapes are refused as outputs, and the failure lines that quote them
    (on the terminal, under the live view) are escaped."""
    shutil.copy(PROGRAMS / "jobs" / "evil_names.sh", tmp_path / "evil_names.sh")
    # YES: the outputs come back through the file service (IF_NEEDED would run a local slave's job in place)
    (tmp_path / "jobs.sub").write_text("executable = evil_names.sh\nshould_transfer_files = YES\nqueue\n")
    term = run_in_terminal(mwpy_command("jobs", "jobs.sub", "--slaves", "1"), 1, deadline=120, cwd=tmp_path)
    assert_terminal_untouched(term)
    assert b"mwpy jobs: failed: 1.0 (clip\\x1b]52" in bytes(term.raw)
    assert sorted(os.listdir(tmp_path)) == ["evil_names.sh", "jobs.sub", "jobs.sub.summary.jsonl"]
    (job, _) = [json.loads(line) for line in (tmp_path / "jobs.sub.summary.jsonl").read_text().splitlines()]
    assert any("control characters" in error for error in job["output_errors"])


def test_the_report_is_private_and_host_names_are_never_links(tmp_path: Path) -> None:
    """Guards: the report is written 0600 (it holds tracebacks and output, as the event log, which is 0600);
    a slave's host name and an algorithm's name are plain text in the plots (plotly makes ``<a href>`` in
    labels and hover text a live link), checked in the DOM headless Chromium renders."""
    browser = chromium_or_skip()
    link = '<a href="https://evil.example/">node1</a>'
    events = write_log(
        tmp_path / "events.jsonl",
        [
            ev.MasterStart(t=1000.0, run=1, pid=1, host="h", version="0", member_id="m"),
            ev.SlaveConnected(t=1000.0, slave="slave-0", host=link, address="10.0.0.1:5", group="unordered"),
            ev.TasksFinished(t=1002.0, slave="slave-0", algorithm=link, outcome="ok", run_us=[10**6], wait_us=[0]),
            ev.SlaveDisconnected(t=1003.0, slave="slave-0", cause="eof", reason="EOF"),
        ],
    )
    out = report.build_report(events, tmp_path / "report.html")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    shown = headless(browser, tmp_path / "profile", "--virtual-time-budget=15000", "--dump-dom", out.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    dom = shown.stdout
    assert 'class="main-svg"' in dom, "the plots rendered"
    assert not re.search(r"<a\b[^>]*evil\.example", dom), "a host name became a link"
    assert "&lt;a href=" in dom, "the name is shown as the text it is"


def test_the_emulator_obeys_the_attack_when_it_is_printed_raw() -> None:
    """The checks above would pass vacuously if the emulator ignored these sequences: fed raw, it obeys them."""
    screen = pyte.Screen(80, 5)
    stream = pyte.ByteStream(screen)
    stream.feed(b"BEFORE\r\n" + PAYLOAD.encode())
    assert screen.title == "pwned"
    assert "BEFORE" not in "\n".join(screen.display)  # the screen was cleared

"""Text from tasks, slaves and jobs never drives a terminal or a browser (mwpy/safe_text.py, docs/security.md).

The functions themselves, then the places that use them in-process: every ``mwpy.*`` logger whatever
handler prints its records, the capped log of failed tasks' output, the audit trail, TaskFailedError.
The attacks through a real terminal and a real browser are in tests/test_hostile_text.py.
"""

from __future__ import annotations

import ast
import io
import logging
from collections.abc import Iterator

import pytest

from mwpy import safe_text
from mwpy.core.facts import TaskPrinted
from mwpy.observe.audit import Audit
from mwpy.observe.renderers import OutputForwarder
from mwpy.task_records import Result, TaskError, TaskFailedError
from tests.support import ROOT

#: What a hostile task writes: clipboard write (OSC 52), window title, clear screen, line forgery, a C1 CSI,
#: a right-to-left override, a bell and a lone carriage return.
ATTACKS = {
    "osc52": "\x1b]52;c;cHduZWQ=\x07",
    "title": "\x1b]0;pwned\x07",
    "clear": "\x1b[2J\x1b[H",
    "forge": "\x1b[1A\x1b[2Kall tasks succeeded",
    "c1": "\x9b2J",
    "bidi": "file\u202etxt.exe",
    "bell": "\x07",
    "cr": "progress 10%\rdone",
}
#: Every character no safe text may hold (newline apart).
CONTROLS = {chr(c) for c in [*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, 0x202E]}


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
def test_no_control_survives_and_each_is_shown(attack: str) -> None:
    for shown in (safe_text.terminal(attack), safe_text.one_line(attack)):
        assert not CONTROLS & set(shown), repr(shown)
        assert shown.isprintable()
        assert safe_text.is_plain(shown)
        assert safe_text.one_line(shown) == shown  # already safe: nothing more to do


def test_escapes_are_the_ones_a_programmer_reads() -> None:
    assert safe_text.terminal("\x1b[2J") == "\\x1b[2J"
    assert safe_text.terminal("\x9b") == "\\x9b"
    assert safe_text.terminal("a\rb") == "a\\rb"
    assert safe_text.terminal("\u202e") == "\\u202e"
    assert safe_text.terminal("tab\tkept") == "tab\tkept"


def test_lines_are_kept_in_text_made_of_lines_and_shown_in_one_line_text() -> None:
    assert safe_text.terminal("one\ntwo\r\nthree\n") == "one\ntwo\nthree\n"
    assert safe_text.one_line("one\ntwo") == "one\\ntwo"


def test_plain_text_is_returned_as_it_is() -> None:
    text = "Traceback (most recent call last):\n  ZeroDivisionError: división por cero — 零\n"
    assert safe_text.terminal(text) is text
    assert safe_text.one_line("a name") == "a name"


def test_exactly_the_controls_and_reordering_characters_are_escaped_in_all_of_unicode() -> None:
    """C0 controls but tab and newline, DEL and C1, the line and paragraph separators and the bidi embeddings and
    isolates are shown escaped, and no other character (the patterns that find them are written as ranges)."""
    controls = {*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)}
    unsafe = controls | {*range(0x2028, 0x202F), *range(0x2066, 0x206A)}
    for code in range(0x110000):
        char = chr(code)
        assert (safe_text.terminal(char) != char) == (code in unsafe), hex(code)
        assert safe_text.is_plain(char) == (code not in unsafe and char != "\n"), hex(code)


def test_html_and_plot_text_make_no_markup() -> None:
    link = '<a href="https://evil.example/">node1</a> & <script>x()</script>'
    assert "<" not in safe_text.html(link)
    assert '"' not in safe_text.html(link)
    plotted = safe_text.plot(link + "\x1b[2J")
    assert "<" not in plotted
    assert ">" not in plotted
    assert "\x1b" not in plotted
    assert plotted.startswith("&lt;a href=")


# ---------------------------------------------------------------------- the loggers


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """What Python's own handler prints for the mwpy loggers (a handler mwpy did not install)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    root = logging.getLogger("mwpy")
    saved = (root.level, root.propagate)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])


def test_records_of_mwpy_loggers_are_safe_whatever_handler_prints_them(captured: io.StringIO) -> None:
    log = safe_text.logger("mwpy.net.engine")
    host = "node\n2024-01-01 mwpy.net.engine WARNING: forged" + ATTACKS["title"]
    log.info("%s connected from %s (host %s)", "slave-0", "10.0.0.1:5", host)
    try:
        raise ValueError(ATTACKS["clear"])
    except ValueError:
        log.exception("a task's own words in a traceback")
    printed = captured.getvalue()
    assert "\x1b" not in printed
    assert "\\x1b]0;pwned" in printed
    assert "host node\\n2024-01-01" in printed  # the argument's newline is shown: no second record forged
    assert "ValueError: \\x1b[2J" in printed


def test_every_mwpy_module_takes_its_logger_from_safe_text_logger() -> None:
    """A module that called logging.getLogger itself would print a slave's words raw."""
    offenders = []
    for path in sorted((ROOT / "mwpy").rglob("*.py")):
        if path.name == "logs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "logging.getLogger"
                and node.args
                and ast.unparse(node.args[0]) == "__name__"
            ):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_a_task_s_forwarded_output_is_shown_not_obeyed(capsys: pytest.CaptureFixture[str]) -> None:
    """What a successful task printed reaches the master's stdout (issue 21), every attack shown escaped."""
    forwarder = OutputForwarder()
    forwarder.task_printed(TaskPrinted("slave-1", 1, "".join(ATTACKS.values()) + "\nfine\n", ATTACKS["clear"]))
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "fine\n" in out
    assert "\\x1b[2J" in err  # shown, not dropped


def test_raw_task_output_passes_the_task_s_colours(capsys: pytest.CaptureFixture[str]) -> None:
    forwarder = OutputForwarder(raw=True)
    forwarder.task_printed(TaskPrinted("slave\x1b[31m-1", 1, "\x1b[32mgreen\x1b[0m\n", ""))
    forwarder.task_printed(TaskPrinted("slave-2", 2, "two\n", ""))  # a second slave: lines name their slave
    out = capsys.readouterr().out
    assert "\x1b[32mgreen\x1b[0m" in out  # the task's output as it wrote it
    assert "[slave-2] two" in out


def test_the_audit_trail_quotes_peers_safely() -> None:
    out = io.StringIO()
    audit = Audit()
    audit._out = out
    audit(f"slave-0 10.0.0.1:5 -> connecting (host {ATTACKS['osc52']}\nforged)")
    assert "\x1b" not in out.getvalue()
    assert out.getvalue().count("\n") == 1


def test_task_failed_error_shows_the_slave_s_words_safely_and_keeps_them() -> None:
    error = TaskError("Evil" + ATTACKS["clear"], "boom" + ATTACKS["osc52"], "Traceback\n  line" + ATTACKS["title"])
    result = Result(3, "algo" + ATTACKS["bell"], "slave-1", None, 0.1, error=error)
    failed = TaskFailedError(result)
    assert not CONTROLS & set(str(failed))
    assert "boom\\x1b]52" in str(failed)
    assert failed.result.error is not None
    assert failed.result.error.message == "boom" + ATTACKS["osc52"]  # programs get the text as it was

"""Text written by tasks, slaves and jobs, made safe to show on a terminal and in HTML.

A task's error message and captured output, an exception's or algorithm's
name, a slave's host name, a file name a job created: mwpy shows all of them,
and none is mwpy's own. Printed raw, a few bytes in them drive the reader's
terminal: ``ESC ] 52`` writes the clipboard, ``ESC [ 2 J`` clears the screen,
``ESC ] 0`` retitles the window, ``ESC [ 1 A ESC [ 2 K`` erases the line above
to forge another, a bare carriage return overwrites the start of a line.
Put into HTML, a tag becomes a link. Every place mwpy shows such text passes
it through one of the functions here.

**On a terminal** (:func:`terminal`, :func:`one_line`) every control character
is *shown*, as the Python escape a programmer reads at a glance: the C0
controls but tab (``ESC`` → ``\\x1b``, ``BEL`` → ``\\x07``, a carriage return →
``\\r``), ``DEL``, the C1 controls U+0080 to U+009F (``CSI`` → ``\\x9b``), the
Unicode line and paragraph separators and the bidirectional embeddings,
overrides and isolates that reorder what a line seems to say (``\\u202e``).
Newlines stay only in text made of lines (output, tracebacks; ``\\r\\n`` counts
as a newline there); in one-line text (names, messages in a status line) a
newline is shown as ``\\n``. Backslashes are left alone, so a Windows path
stays readable and a literal ``\\x1b`` in the text looks like an escaped ESC:
neither does anything. Each character is translated on its own, so a stream
may be made safe chunk by chunk (task output forwarded live); only a ``\r\n``
split between two chunks shows its ``\r``.

**In HTML** (:func:`html`) the five special characters are escaped, so no
tag, attribute or link can be made; **in plotly's text** (:func:`plot`: axis
labels, legend names, hover text) ``&``, ``<`` and ``>`` are, because plotly
reads its own small HTML dialect there (``<a href=...>`` is a live link) and
turns entities back into plain characters after it has looked for tags.

Users who want their tasks' colours pass ``--mw-raw-task-output``; only task
output then goes through unchanged (docs/security.md).

**In the log** every mwpy module takes its logger from :func:`logger`, whose
records are made safe before any handler sees them (a log record often quotes
a slave or a task).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

#: Characters shown escaped on a terminal whatever the text (newline handled apart).
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]
#: Unicode format characters that move or reorder text: line/paragraph separators, bidi embeddings and isolates.
_REORDERING = [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]


def _escape(code: int) -> str:
    if code == 0x0D:
        return "\\r"
    if code == 0x0A:
        return "\\n"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _any_of(codes: Iterable[int]) -> re.Pattern[str]:
    """A pattern matching any character of ``codes``, written as ranges: one escape per character took ten times
    as long to compile, at the start of every mwpy process (a slave's on an Executor's first result's path)."""
    spans: list[list[int]] = []
    for code in sorted(codes):
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return re.compile("[" + "".join(f"\\u{first:04x}-\\u{last:04x}" for first, last in spans) + "]")


_LINES = {code: _escape(code) for code in (*_CONTROLS, *_REORDERING)}
_ONE_LINE = {**_LINES, 0x0A: "\\n"}
_UNSAFE_IN_LINES = _any_of(_LINES)
_UNSAFE_IN_ONE_LINE = _any_of(_ONE_LINE)


def terminal(text: str) -> str:
    """``text`` made of lines (output, a traceback), safe to print: its newlines kept, every control shown."""
    if _UNSAFE_IN_LINES.search(text) is None:  # the usual case: nothing to do, no copy
        return text
    return text.replace("\r\n", "\n").translate(_LINES)


def one_line(text: str) -> str:
    """One-line ``text`` (a name, a message in a status line), safe to print: newlines shown as ``\\n`` too."""
    if _UNSAFE_IN_ONE_LINE.search(text) is None:
        return text
    return text.translate(_ONE_LINE)


def is_plain(text: str) -> bool:
    """Whether ``text`` is one line without any character :func:`one_line` would show escaped (a safe name)."""
    return _UNSAFE_IN_ONE_LINE.search(text) is None


def html(text: object) -> str:
    """``text`` as HTML character data or an attribute value: nothing in it is markup."""
    import html as _html  # noqa: PLC0415 (for the HTML views alone: every process imports this module)

    return _html.escape(str(text), quote=True)


def plot(text: str) -> str:
    """``text`` for plotly's labels and hover text: shown as written, never a tag or a link."""
    return one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


#: A record with this attribute true is printed as it is (``--mw-raw-task-output``: the task's colours).
RAW = "mwpy_raw"

_formatter = logging.Formatter()


class _SafeRecords(logging.Filter):
    """Makes a record safe to print: string arguments one line each, then the whole message (and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, RAW, False):
            return True
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(one_line(a) if isinstance(a, str) else a for a in record.args)
        record.msg = terminal(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = terminal(_formatter.formatException(record.exc_info))
        return True


_SAFE_RECORDS = _SafeRecords()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (an mwpy module's ``__name__``), whose records are made safe to print."""
    log = logging.getLogger(name)
    if _SAFE_RECORDS not in log.filters:
        log.addFilter(_SAFE_RECORDS)
    return log

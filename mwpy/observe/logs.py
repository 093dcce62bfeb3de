"""mwpy's ``logging`` loggers (``mwpy.*``) and how a program turns them on.

The ``[A]`` audit trail (mwpy/observe/audit.py) stays what it is: CL-MW's record of a
run, one line per event, for reconstructing what happened. Logging is for
people watching a program: warnings and errors a user should see (a slave
dropped, a task stuck past its timeout, an executor that broke) and, at INFO
or DEBUG, what the executor and the engine are doing. Loggers are named after
modules (``mwpy.net.engine``, ``mwpy.executor``, ``mwpy.slave``), so the usual
``logging`` configuration applies; a program that configures nothing gets
Python's default (warnings and above on stderr, through the last-resort handler).

``--mw-log-level LEVEL`` (or the ``MWPY_LOG_LEVEL`` environment variable, for
``mwpy.Executor`` users who pass no options) sets the level of the ``mwpy``
logger and gives it a stderr handler of its own.

Log records often quote a slave (its host name) or a task (its error, what it
printed): text mwpy does not control. Every mwpy module takes its logger from
:func:`logger`, which makes each record safe to print (mwpy/safe_text.py)
before any handler sees it — mwpy's own, the program's, or Python's last
resort. :class:`FailedOutput` is how a failed task's output reaches the log:
capped per task and per run, the whole of it staying in the event log and on
the task's Result.
"""

from __future__ import annotations

import logging
import os
import sys

from mwpy import safe_text
from mwpy.errors import ConfigurationError

ROOT = "mwpy"
ENVIRONMENT = "MWPY_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: A record with this attribute true is printed as it is (``--mw-raw-task-output``: the task's colours).
RAW = "mwpy_raw"
#: Characters of each stream of one failed task shown in the log; the rest is in the event log and the Result.
TASK_OUTPUT_SHOWN = 4096
#: Characters of failed tasks' output shown in one master's log in all (a million chatty failures stay readable).
RUN_OUTPUT_SHOWN = 256 * 1024
#: What marks a failed task's output lines in the log, so they cannot pass for records of their own.
OUTPUT_MARK = "  | "

_formatter = logging.Formatter()


class _SafeRecords(logging.Filter):
    """Makes a record safe to print: string arguments one line each, then the whole message (and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, RAW, False):
            return True
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(safe_text.one_line(a) if isinstance(a, str) else a for a in record.args)
        record.msg = safe_text.terminal(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = safe_text.terminal(_formatter.formatException(record.exc_info))
        return True


_SAFE_RECORDS = _SafeRecords()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (an mwpy module's ``__name__``), whose records are made safe to print."""
    log = logging.getLogger(name)
    if _SAFE_RECORDS not in log.filters:
        log.addFilter(_SAFE_RECORDS)
    return log


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler mwpy installed, so configuring twice does not print every line twice."""


def level_name(text: str) -> str:
    """``text`` as a logging level name; ValueError when it is none (the option parser's contract)."""
    name = text.strip().upper()
    if name not in LEVELS:
        raise ValueError(text)
    return name


def configure(level: str | None = None) -> None:
    """Set the ``mwpy`` logger's level from ``level`` or ``MWPY_LOG_LEVEL``; nothing when neither is set."""
    chosen = level or os.environ.get(ENVIRONMENT)
    if not chosen:
        return
    try:
        name = level_name(chosen)
    except ValueError:
        raise ConfigurationError(f"{ENVIRONMENT}={chosen!r}: expected one of {', '.join(LEVELS)}") from None
    logger = logging.getLogger(ROOT)
    logger.setLevel(name)
    if not any(isinstance(handler, _Handler) for handler in logger.handlers):
        handler = _Handler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


class FailedOutput:
    """Shows failed tasks' output in the log, within :data:`TASK_OUTPUT_SHOWN` per stream and
    :data:`RUN_OUTPUT_SHOWN` per run; then one line says where the rest is, and nothing more is shown.

    ``raw`` (``--mw-raw-task-output``) prints the output as the task wrote it, escape sequences included;
    the names and the message around it are made safe all the same.
    """

    def __init__(self, log: logging.Logger, *, raw: bool = False) -> None:
        self._log = log
        self._raw = raw
        self._left = RUN_OUTPUT_SHOWN
        self._silenced = 0

    def show(self, *, task: int, algorithm: str, slave: str, error: str, message: str, streams: dict[str, str]) -> None:
        """One WARNING for a failed task: who failed how, then each non-empty stream, indented and capped."""
        if self._left <= 0:
            self._silenced += 1
            if self._silenced == 1:
                self._log.warning(
                    "output of further failed tasks is not shown here (%d characters shown in this run); "
                    "it is on each task's Result, and in the event log (--mw-events)",
                    RUN_OUTPUT_SHOWN,
                )
            return
        head = (
            f"task {task} ({safe_text.one_line(algorithm)}) failed on {safe_text.one_line(slave)} with "
            f"{safe_text.one_line(error)}: {safe_text.one_line(message)[:TASK_OUTPUT_SHOWN]}"
        )
        parts = [head]
        for name, text in streams.items():
            if text:
                parts.append(f"--- its {name}:\n{self._shown(text.rstrip())}")
        self._log.warning("\n".join(parts), extra={RAW: True})

    def _shown(self, text: str) -> str:
        """``text`` cut to what this task and this run may still show, made safe unless raw, each line marked."""
        limit = min(TASK_OUTPUT_SHOWN, self._left)
        cut = len(text) - limit
        shown = text[:limit] if cut > 0 else text
        self._left -= len(shown)
        shown = shown if self._raw else safe_text.terminal(shown)
        lines = OUTPUT_MARK + shown.replace("\n", "\n" + OUTPUT_MARK)
        if cut > 0:
            lines += f"\n{OUTPUT_MARK}... {cut} more characters not shown (the task's Result has them)"
        return lines

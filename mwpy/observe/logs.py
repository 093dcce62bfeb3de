"""mwpy's ``logging`` loggers (``mwpy.*``) and how a program turns them on.

The ``[A]`` audit trail (mwpy/observe/audit.py) stays what it is: CL-MW's record of a
run, one line per event, for reconstructing what happened. Logging is for
people watching a program: warnings and errors a user should see (a slave
dropped, a task stuck past its timeout, an executor that broke) and, at INFO
or DEBUG, what the executor and the master are doing. What a master says of
its slaves and tasks logs under ``mwpy.master`` (the facts of
mwpy/core/facts.py, rendered by mwpy/observe/renderers.py, whichever module
noticed them); other loggers are named after their modules (``mwpy.executor``,
``mwpy.slave``, ``mwpy.pool.slave_pool``), so the usual ``logging``
configuration applies; a program that configures nothing gets Python's
default (warnings and above on stderr, through the last-resort handler).

``--mw-log-level LEVEL`` (or the ``MWPY_LOG_LEVEL`` environment variable, for
``mwpy.Executor`` users who pass no options) sets the level of the ``mwpy``
logger and gives it a stderr handler of its own.

Log records often quote a slave (its host name) or a task (its error, what it
printed): text mwpy does not control. Every mwpy module takes its logger from
:func:`mwpy.safe_text.logger`, which makes each record safe to print before
any handler sees it — mwpy's own, the program's, or Python's last resort
(it lives in mwpy/safe_text.py, the bottom layer, so that every layer may
log). :class:`FailedOutput` is how a failed task's output reaches the log:
capped per task and per run, the whole of it staying in the event log and on
the task's Result.
"""

from __future__ import annotations

import logging
import os
import sys

from mwpy import safe_text
from mwpy.errors import ConfigurationError
from mwpy.names import LOG_LEVEL_VARIABLE
from mwpy.options import LOG_LEVELS, level_name

ROOT = "mwpy"
#: Characters of each stream of one failed task shown in the log; the rest is in the event log and the Result.
TASK_OUTPUT_SHOWN = 4096
#: Characters of failed tasks' output shown in one master's log in all (a million chatty failures stay readable).
RUN_OUTPUT_SHOWN = 256 * 1024
#: What marks a failed task's output lines in the log, so they cannot pass for records of their own.
OUTPUT_MARK = "  | "


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler mwpy installed, so configuring twice does not print every line twice."""


def configure(level: str | None = None) -> None:
    """Set the ``mwpy`` logger's level from ``level`` or ``MWPY_LOG_LEVEL``; nothing when neither is set."""
    chosen = level or os.environ.get(LOG_LEVEL_VARIABLE)
    if not chosen:
        return
    try:
        name = level_name(chosen)
    except ValueError:
        raise ConfigurationError(f"{LOG_LEVEL_VARIABLE}={chosen!r}: expected one of {', '.join(LOG_LEVELS)}") from None
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
        self._log.warning("\n".join(parts), extra={safe_text.RAW: True})

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

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

from mwpy.errors import ConfigurationError
from mwpy.names import LOG_LEVEL_VARIABLE
from mwpy.options import LOG_LEVELS, level_name

ROOT = "mwpy"


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

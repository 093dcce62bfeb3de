"""The ``[A]`` audit trail: one timestamped line per event worth reconstructing a run from.

Lines go to stdout or, with ``--mw-audit-file``, are appended to a file (never
rotated, as in CL-MW). Writes are buffered and flushed by the event loop once
per pass, so a busy master does not pay a system call per line. A line often
quotes a slave (its host name, its member id): each is made one safe line
(mwpy/safe_text.py), since the trail goes to stdout unless told otherwise.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TextIO

from mwpy import safe_text


class Audit:
    """Writes audit lines; ``packets`` says whether per-packet lines are wanted."""

    def __init__(self, path: str | None = None, *, packets: bool = False) -> None:
        self._own = path is not None
        self._out: TextIO = open(path, "a", encoding="utf-8") if path is not None else sys.stdout  # noqa: SIM115
        self.packets = packets
        self._second = -1
        self._stamp = ""
        self._unflushed = False

    def __call__(self, text: str) -> None:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        self._out.write(f"{self._stamp} [A] {safe_text.one_line(text)}\n")
        self._unflushed = True

    def flush(self) -> None:
        """Flush what was written; free when nothing was (the event loop calls this every pass)."""
        if not self._unflushed:
            return
        self._unflushed = False
        # stdout closed under us: auditing must never kill the computation
        with contextlib.suppress(OSError, ValueError):
            self._out.flush()

    def close(self) -> None:
        self.flush()
        if self._own:
            self._out.close()

"""What each task run printed, kept for its Result: each stream's first KEPT_OUTPUT characters in memory, and
past that the whole stream in a file of its own, which the Result's text names.

The output arrives as the task prints it (``TaskPrinted`` facts: whole lines
the slave's output pump sends, mwpy/slaveside/running.py); the files go to one
folder in the temporary folder (``mwpy-task-output-*``), made when a task
first prints past the bound and left for the user: mwpy never removes it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mwpy import safe_text
from mwpy.core import facts
from mwpy.core.facts import Observer

log = safe_text.logger(__name__)

#: Characters of a task's stdout (and as many of its stderr) its Result keeps; the whole goes to a file.
KEPT_OUTPUT = 64 * 1024
#: The folder's name begins so (in the temporary folder).
FOLDER_PREFIX = "mwpy-task-output-"


def _file_safe(sid: str) -> str:
    """A slave id in a file name (the master names them ``slave-N``; nothing else gets through)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in sid)[:64]


class _Stream:
    """One stream of one task run: its first KEPT_OUTPUT characters, and past them the whole in file ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kept: list[str] = []
        self.size = 0
        self.file: TextIO | None = None
        self.path: Path | None = None
        self.trouble: str | None = None  # why the whole could not be kept, if it could not

    def add(self, text: str, folder: Callable[[], Path]) -> None:
        room = KEPT_OUTPUT - self.size
        self.size += len(text)
        if room > 0:
            self.kept.append(text[:room])
        if self.size <= KEPT_OUTPUT or self.trouble is not None:
            return
        try:
            if self.file is None:  # all it printed before is kept: the file begins with it
                self.path = folder() / self.name
                self.file = open(self.path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 (open while it runs)
                self.file.write("".join(self.kept) + text[max(room, 0) :])
            else:
                self.file.write(text)
        except OSError as exc:
            self.trouble = f"cannot write {self.path or 'a file'} for it: {exc.strerror or exc}"
            self.close()

    def text(self) -> str:
        self.close()
        kept = "".join(self.kept)
        more = self.size - len(kept)
        if more <= 0:
            return kept
        if self.trouble is None:
            return kept + f"\n[mwpy: {more} more characters; the whole output is in {self.path}]\n"
        return kept + f"\n[mwpy: {more} more characters not kept: {self.trouble}]\n"

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None


class OutputKeeper(Observer):
    """What running tasks printed so far, by slave and task id; :meth:`take` gives it for the task's Result."""

    def __init__(self) -> None:
        #: The usual case, cheap: all a run printed came in one piece (with its result), within the bound.
        self._whole: dict[tuple[str, int], tuple[str, str]] = {}
        self._runs: dict[tuple[str, int], tuple[_Stream, _Stream]] = {}
        self._folder: Path | None = None

    def task_printed(self, fact: facts.TaskPrinted) -> None:
        key = (fact.sid, fact.task_id)
        run = self._runs.get(key)
        if run is None:
            first = self._whole.pop(key, None)
            if first is None and len(fact.stdout) <= KEPT_OUTPUT and len(fact.stderr) <= KEPT_OUTPUT:
                self._whole[key] = (fact.stdout, fact.stderr)
                return
            name = f"task-{fact.task_id}-{_file_safe(fact.sid)}"
            run = self._runs[key] = (_Stream(f"{name}.stdout"), _Stream(f"{name}.stderr"))
            if first is not None:
                self._add(run, *first)
        self._add(run, fact.stdout, fact.stderr)

    def _add(self, run: tuple[_Stream, _Stream], stdout: str, stderr: str) -> None:
        for stream, text in zip(run, (stdout, stderr), strict=True):
            if text:
                stream.add(text, self.folder)

    def slave_left(self, fact: facts.SlaveLeft) -> None:
        """What the unfinished tasks of a slave gone printed is dropped: a run again prints anew."""
        for key in [key for key in self._whole if key[0] == fact.sid]:
            del self._whole[key]
        for key in [key for key in self._runs if key[0] == fact.sid]:
            for stream in self._runs.pop(key):
                stream.close()

    def take(self, sid: str, task_id: int) -> tuple[str, str] | None:
        """What the task run printed (stdout, stderr), as its Result keeps it; None if it printed nothing."""
        if self._whole and (whole := self._whole.pop((sid, task_id), None)) is not None:
            return whole
        if not self._runs:
            return None
        run = self._runs.pop((sid, task_id), None)
        return None if run is None else (run[0].text(), run[1].text())

    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
            log.info("task output past %d characters a stream is kept in %s", KEPT_OUTPUT, self._folder)
        return self._folder

"""The result journal: a master that is restarted resumes instead of starting over.

Opt-in with ``--mw-journal FILE``. Every successful result of a task submitted
with a ``key`` is stored in SQLite (WAL mode) before the master algorithm sees
it; a task submitted later with a key already in the journal is answered from
it without running. A master killed half-way and run again therefore only runs
what had not finished. Keys are the program's to choose: equal keys must mean
equal work.

The journal holds results the master trusts without rerunning them, so it is
private: created 0600 (SQLite gives its -wal and -shm files the journal's
mode), and an existing journal, -wal or -shm file that another user owns or
that group or others can write is refused, as is anything not a regular file.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import attrs

from mwpy import safe_files
from mwpy.errors import JournalError, UnsafeFileError

#: Files SQLite keeps next to the journal in WAL mode.
SIDE_FILES = ("-wal", "-shm")

_SCHEMA = """
create table if not exists results (
    key text primary key,
    algorithm text not null,
    value blob not null,
    slave_id text not null,
    compute_time real not null,
    recorded real not null
)
"""


@attrs.frozen
class Entry:
    """One journaled result (the value still pickled, as the slave sent it)."""

    algorithm: str
    value: bytes
    slave_id: str
    compute_time: float


class Journal:
    """Results by task key in one SQLite file; writes are committed in batches by the event loop."""

    def __init__(self, path: str | Path) -> None:
        _prepare(Path(path))
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("pragma journal_mode=wal")
            self._db.execute("pragma synchronous=normal")
            self._db.execute(_SCHEMA)
            # another program's table, or damaged pages, would otherwise fail mid-run with a traceback
            self._db.execute("select key, algorithm, value, slave_id, compute_time, recorded from results limit 0")
            problems = self._db.execute("pragma quick_check").fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"{path}: cannot use as a journal ({exc})") from None
        if problems != [("ok",)]:
            raise JournalError(f"{path}: cannot use as a journal (damaged: sqlite's quick_check failed)")
        self._pending = 0
        self._db.execute("begin")

    def lookup(self, key: str) -> Entry | None:
        row = self._db.execute(
            "select algorithm, value, slave_id, compute_time from results where key = ?", (key,)
        ).fetchone()
        return None if row is None else Entry(*row)

    def record(self, key: str, algorithm: str, value: bytes, slave_id: str, compute_time: float) -> None:
        self._db.execute(
            "insert or replace into results values (?, ?, ?, ?, ?, ?)",
            (key, algorithm, value, slave_id, compute_time, time.time()),
        )
        self._pending += 1

    def commit(self) -> None:
        """Make recorded results durable (called before the master algorithm sees them)."""
        if self._pending:
            self._db.execute("commit")
            self._db.execute("begin")
            self._pending = 0

    def __len__(self) -> int:
        return int(self._db.execute("select count(*) from results").fetchone()[0])

    def close(self) -> None:
        self.commit()
        self._db.execute("commit")
        self._db.close()


def _prepare(path: Path) -> None:
    """Create the journal 0600 if it is missing; refuse an existing one (or its side files) that is not private.

    Done before SQLite opens it, which would otherwise create it with the
    umask's mode (usually 0644) and open whatever the path names.
    """
    try:
        os.close(safe_files.open_checked(path, private=True, flags=os.O_RDWR | os.O_CREAT, create_mode=0o600))
        for suffix in SIDE_FILES:
            safe_files.check_existing(f"{path}{suffix}", private=True)
    except UnsafeFileError as exc:
        raise JournalError(f"{exc.path}: cannot use as a journal: {exc.problem}") from None

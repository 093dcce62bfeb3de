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

Two ways a journal fails mid-run, neither of which may cost a result or print
a traceback (docs/reliability.md):

* **A full or read-only disk.** The first write or commit that fails turns
  the journal off for the rest of the run, with one line naming the file and
  the problem (given to ``on_failure``: the master reports it as a
  :class:`~mwpy.core.facts.JournalOff` fact, logged at ERROR; :attr:`Journal.failed`);
  the computation goes on, as it does when the event log cannot be written.
  Results from then on reach the master algorithm without being journaled: a
  restarted master runs those tasks again. Stopping instead would throw away
  every task in flight for what the journal only saves on a restart.
* **A damaged entry.** Each row carries a digest of its key, algorithm and
  value; a row whose digest does not match (a flipped byte) is
  :attr:`Entry.damaged`, and the master treats it as absent (the task runs
  again, the audit says so), as it does a row that does not unpickle or names
  another algorithm (a row written by another mwpy or program).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from mwpy import safe_files
from mwpy.errors import JournalError, UnsafeFileError
from mwpy.names import JOURNAL_SIDE_FILES

_SCHEMA = """
create table if not exists results (
    key text primary key,
    algorithm text not null,
    value blob not null,
    slave_id text not null,
    compute_time real not null,
    recorded real not null,
    digest blob
);
create table if not exists out_on_slaves (
    key text primary key,
    host text not null,
    pid integer not null,
    job text not null,
    since real not null
)
"""


def digest(key: str, algorithm: str, value: bytes) -> bytes:
    """What a row's ``digest`` holds: BLAKE2b over its key, algorithm and value (a checksum, not a MAC)."""
    made = hashlib.blake2b(digest_size=16)
    for part in (key.encode(), algorithm.encode()):
        made.update(len(part).to_bytes(8, "big") + part)
    made.update(value)
    return made.digest()


@attrs.frozen
class Entry:
    """One journaled result (the value still pickled, as the slave sent it)."""

    algorithm: str
    value: bytes
    slave_id: str
    compute_time: float
    #: The row's digest does not match its content (journals of earlier mwpy have no digest: never damaged).
    damaged: bool = False


class Journal:
    """Results by task key in one SQLite file; writes are committed in batches by the event loop."""

    def __init__(self, path: str | Path, *, on_failure: Callable[[str], None] | None = None) -> None:
        """Open (or create) the journal at ``path``; ``on_failure`` hears, once, why it turned itself off."""
        self._on_failure = on_failure
        _prepare(Path(path))
        #: Seconds since a previous master last wrote the journal (its files' times): the restarted master's
        #: wait for its predecessor's slaves counts from there.
        self.idle = time.time() - max(
            (os.stat(name).st_mtime for name in (os.fspath(path), f"{os.fspath(path)}-wal") if os.path.exists(name)),
            default=0.0,
        )
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("pragma journal_mode=wal")
            self._db.execute("pragma synchronous=normal")
            self._db.executescript(_SCHEMA)
            # another program's table, or damaged pages, would otherwise fail mid-run with a traceback
            self._db.execute("select key, algorithm, value, slave_id, compute_time, recorded from results limit 0")
            problems = self._db.execute("pragma quick_check").fetchall()
            columns = {row[1] for row in self._db.execute("pragma table_info(results)")}
            if problems == [("ok",)] and "digest" not in columns:
                self._db.execute("alter table results add column digest blob")  # a journal of an earlier mwpy
        except sqlite3.Error as exc:
            raise JournalError(f"{path}: cannot use as a journal ({exc})") from None
        if problems != [("ok",)]:
            raise JournalError(f"{path}: cannot use as a journal (damaged: sqlite's quick_check failed)")
        self.path = os.fspath(path)
        #: Why the journal turned itself off (one line naming the file), or None while it works.
        self.failed: str | None = None
        self._pending = 0
        self._db.execute("begin")

    def lookup(self, key: str) -> Entry | None:
        """The entry journaled under ``key``, or None (also when the journal cannot be read any more)."""
        try:
            row = self._db.execute(
                "select algorithm, value, slave_id, compute_time, digest from results where key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as exc:
            self._fail(f"cannot read the journal ({exc})")
            return None
        if row is None:
            return None
        algorithm, value, slave_id, compute_time, stored = row
        damaged = stored is not None and stored != digest(key, algorithm, value)
        return Entry(algorithm, value, slave_id, compute_time, damaged=damaged)

    def record(self, key: str, algorithm: str, value: bytes, slave_id: str, compute_time: float) -> None:
        if self.failed is not None:
            return
        try:
            self._db.execute(
                "insert or replace into results values (?, ?, ?, ?, ?, ?, ?)",
                (key, algorithm, value, slave_id, compute_time, time.time(), digest(key, algorithm, value)),
            )
            self._db.execute("delete from out_on_slaves where key = ?", (key,))  # answered: no slave to wait for
        except sqlite3.Error as exc:
            self._fail(f"cannot write the journal ({exc})")
            return
        self._pending += 1

    def dispatched(self, slaves: list[tuple[str, str, int, str, float]]) -> None:
        """Keyed tasks (key, host, pid, Condor job or "", when) went to a slave: made durable at once, before
        they leave, so that a restarted master knows whom to wait for, and how to tell it ended (:meth:`running`)."""
        if self.failed is not None:
            return
        try:
            self._db.executemany("insert or replace into out_on_slaves values (?, ?, ?, ?, ?)", slaves)
        except sqlite3.Error as exc:
            self._fail(f"cannot write the journal ({exc})")
            return
        self._pending += 1
        self.commit()

    def nothing_running(self) -> None:
        """The computation ends (its slaves are told to shut down): no slave keeps anything for a successor."""
        if self.failed is None:
            try:
                self._db.execute("delete from out_on_slaves")
            except sqlite3.Error as exc:
                self._fail(f"cannot write the journal ({exc})")
                return
            self._pending += 1
            self.commit()

    def running(self) -> dict[str, tuple[str, int, str, float]]:
        """The keyed tasks a previous master had out on slaves and got no result for: key -> (host, pid, Condor
        job or "", when it went out)."""
        try:
            rows = self._db.execute("select key, host, pid, job, since from out_on_slaves").fetchall()
        except sqlite3.Error as exc:
            self._fail(f"cannot read the journal ({exc})")
            return {}
        return {key: (host, pid, job, since) for key, host, pid, job, since in rows}

    def commit(self) -> None:
        """Make recorded results durable (called before the master algorithm sees them)."""
        if self._pending and self.failed is None:
            try:
                self._db.execute("commit")
                self._db.execute("begin")
            except sqlite3.Error as exc:
                self._fail(f"cannot write the journal ({exc})")
            self._pending = 0

    def _fail(self, problem: str) -> None:
        """Turn the journal off for the rest of the run, saying so once; the computation goes on without it."""
        if self.failed is not None:
            return
        self.failed = f"{self.path}: {problem}; results from now on are not journaled (a restart runs them again)"
        if self._on_failure is not None:
            self._on_failure(self.failed)
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # nothing more to undo: the journal is off either way
                self._db.execute("rollback")

    def __len__(self) -> int:
        return int(self._db.execute("select count(*) from results").fetchone()[0])

    def close(self) -> None:
        """Commit what was recorded (unless the journal is off) and close; never raises for a full disk."""
        self.commit()
        try:
            if self._db.in_transaction:
                self._db.execute("commit")
        except sqlite3.Error as exc:
            self._fail(f"cannot write the journal ({exc})")
        finally:
            self._db.close()


def _prepare(path: Path) -> None:
    """Create the journal 0600 if it is missing; refuse an existing one (or its side files) that is not private,
    or that is a symbolic link (as the resource file is never written through one).

    Done before SQLite opens it, which would otherwise create it with the
    umask's mode (usually 0644) and open whatever the path names.
    """
    for name in (str(path), *(f"{path}{suffix}" for suffix in JOURNAL_SIDE_FILES)):
        if os.path.islink(name):  # SQLite would write its table into whatever it names, as into another database
            raise JournalError(f"{name}: cannot use as a journal: a symbolic link (give the file's own path)")
    try:
        os.close(safe_files.open_checked(path, private=True, flags=os.O_RDWR | os.O_CREAT, create_mode=0o600))
        for suffix in JOURNAL_SIDE_FILES:
            safe_files.check_existing(f"{path}{suffix}", private=True)
    except UnsafeFileError as exc:
        raise JournalError(f"{exc.path}: cannot use as a journal: {exc.problem}") from None

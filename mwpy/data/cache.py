"""A slave's one content-addressed cache: what it fetched from its masters' file services, by SHA-256.

Shared objects (``mw.share``), ``mwpy.File`` arguments and ``mwpy jobs``'
inputs all land here, so a file that both a job and a task need crosses the
wire once per slave, under one bound (``--mw-cache-size``) and one set of
counters (hits, misses, bytes fetched, evictions: what the slave's heartbeats
carry). A file is named by its hash alone, not by the service it came from:
a restarted master's file service, or ``mwpy jobs``' own beside a program's,
serves the same content, and it is not fetched again.

Condor delivers an input with its permission bits (an executable script stays
executable, a ``0640`` file stays ``0640``); jobs get hard links to the cached
file, so each ``(hash, mode)`` has its own cached copy (made from one already
here, not fetched again). A job that writes to its input or changes its mode
changes the cached file: the next job that needs it sees the size, time or
mode differ and gets a clean copy. Past the bound the least recently used
hash goes (all its copies), never the one just asked for; a job's hard link
or a shared object's memory map keeps its data, and a slave asked for an
evicted hash again fetches it again.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path

from mwpy import safe_files
from mwpy.data.client import FileClient
from mwpy.data.landing import UPLOAD_PREFIX

log = logging.getLogger("mwpy.slave")


class SlaveCache:
    """The slave's cached files by hash, fetched through one :class:`FileClient` per file service (kept open)."""

    def __init__(self, secret: bytes, member_id: str, tls_fingerprint: str | None, max_bytes: int) -> None:
        """``tls_fingerprint``: the master's (its file service has the same certificate); ``max_bytes``: the
        bound on the bytes of distinct files kept (each hash counted once, whatever its copies)."""
        self._secret = secret
        self._member_id = member_id
        self._fingerprint = tls_fingerprint
        self._max_bytes = max_bytes
        self.folder = Path(safe_files.run_folder("mwpy-cache-"))
        self._clients: dict[tuple[str, int], FileClient] = {}
        self._sizes: OrderedDict[str, int] = OrderedDict()  # hash -> its size, least recently used first
        self._copies: dict[str, list[Path]] = {}  # hash -> its cached files (one per mode)
        self._known: dict[Path, tuple[int, int, int]] = {}  # cached file -> (size, mtime, mode) as cached
        self._held = 0  # bytes of the distinct files kept
        self._evicted: list[Callable[[str], None]] = []
        self.counters: Counter[str] = Counter()

    def client(self, address: tuple[str, int]) -> FileClient:
        """The connection to the file service at ``address`` (opened on first use, kept for the slave's life)."""
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = FileClient(*address, self._secret, self._member_id, self._fingerprint)
        return client

    def get(self, digest: str, address: tuple[str, int], mode: int = 0o444) -> Path:
        """The cached file with hash ``digest`` and permission bits ``mode``: fetched from ``address`` unless an
        intact copy (any mode) is here. Counted as a hit or a miss."""
        path = self.folder / f"{digest}.{mode & 0o7777:o}"
        if not self._intact(path):
            with contextlib.suppress(OSError):
                path.unlink()  # a job wrote to its copy: make a clean one
            self._make(digest, address, path)
        else:
            self.counters["hits"] += 1
        path.chmod(mode & 0o7777)
        self._record(digest, path)
        return path

    def admit(self, digest: str, path: Path) -> bool:
        """Take in a file this slave made under its folder (a value it holds, mwpy/data/holding.py), as if
        fetched: bounded and evicted like the rest. Whether ``digest`` is new here."""
        new = digest not in self._sizes
        self._record(digest, path)
        return new

    def _record(self, digest: str, path: Path) -> None:
        info = path.stat()
        self._known[path] = (info.st_size, info.st_mtime_ns, info.st_mode)
        if path not in self._copies.setdefault(digest, []):
            self._copies[digest].append(path)
        self._keep(digest, info.st_size)

    def copy_of(self, digest: str) -> Path | None:
        """An intact cached file with hash ``digest``, if this slave has one (fetched nothing)."""
        return next((copy for copy in self._copies.get(digest, ()) if self._intact(copy)), None)

    def touch(self, digest: str) -> bool:
        """A use of ``digest`` served without its file (a shared object already in memory): a hit, and it
        becomes the most recently used. False if it is no longer cached (it was evicted)."""
        if digest not in self._sizes:
            return False
        self._sizes.move_to_end(digest)
        self.counters["hits"] += 1
        return True

    def on_evict(self, forget: Callable[[str], None]) -> None:
        """Call ``forget(digest)`` for each hash evicted (what holds an object made from its file lets it go)."""
        self._evicted.append(forget)

    def discard(self, digest: str) -> None:
        """Remove ``digest``'s files now, uncounted (a task's spilled arguments: used once)."""
        self._held -= self._sizes.pop(digest, 0)
        for copy in self._copies.pop(digest, []):
            self._known.pop(copy, None)
            copy.unlink(missing_ok=True)

    def counts(self) -> tuple[int, int, int, int]:
        """Hits, misses, bytes fetched, evictions so far (what the slave's heartbeats carry)."""
        c = self.counters
        return c["hits"], c["misses"], c["bytes_fetched"], c["evictions"]

    def remove(self) -> None:
        """The slave ends: say what the cache did, close the connections, remove the files (mapped objects stay
        valid until dropped)."""
        log.info("cache: %d hits, %d misses, %d bytes fetched, %d evicted", *self.counts())
        for client in self._clients.values():
            client.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _make(self, digest: str, address: tuple[str, int], path: Path) -> None:
        other = self.copy_of(digest)
        if other is None:
            self.counters["misses"] += 1
            self.counters["bytes_fetched"] += self.client(address).fetch(digest, path)
            return
        self.counters["hits"] += 1
        with safe_files.replacing(path, mode=None, prefix=UPLOAD_PREFIX) as out, other.open("rb") as source:
            shutil.copyfileobj(source, out)

    def _keep(self, digest: str, size: int) -> None:
        if digest not in self._sizes:
            self._sizes[digest] = size
            self._held += size
        self._sizes.move_to_end(digest)
        while self._held > self._max_bytes and len(self._sizes) > 1:
            oldest = next(iter(self._sizes))
            self.discard(oldest)
            self.counters["evictions"] += 1
            for forget in self._evicted:
                forget(oldest)

    def _intact(self, path: Path) -> bool:
        known = self._known.get(path)
        if known is None:
            return False
        try:
            info = path.stat()
        except OSError:
            return False
        return (info.st_size, info.st_mtime_ns, info.st_mode) == known

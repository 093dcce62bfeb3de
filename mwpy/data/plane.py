"""A slave's data plane: its cache and shared objects, and the explicit steps a task's bytes take through them.

The codec (:mod:`mwpy.wire.codec`) only turns values into bytes and back;
what a task's arguments name by hash (a shared object, a ``mwpy.File``) and
what its value does not carry in a frame (a large value, a returned file) go
through the file service here, and the slave calls these steps with its own
:class:`SlaveData` (:func:`~mwpy.wire.codec.decode_arguments_with`,
:func:`~mwpy.wire.codec.encode_result`): no hook reaches a module global. The
cache and the shared objects load with their first use: a slave given none
imports neither.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from mwpy.wire import codec

if TYPE_CHECKING:
    from mwpy.data.cache import SlaveCache
    from mwpy.data.holding import HeldValues
    from mwpy.data.shares import SlaveShares


class SlaveData:
    """One slave's cache (bounded by ``--mw-cache-size``) and shared objects, made on first use."""

    def __init__(self, secret: bytes, member_id: str, tls_fingerprint: str | None, cache_size: int) -> None:
        self._membership = (secret, member_id, tls_fingerprint, cache_size)
        self._cache: SlaveCache | None = None
        self._shares: SlaveShares | None = None
        self._held: HeldValues | None = None
        #: This slave's address as its master sees it, where it serves the values it holds (start-up sets it
        #: once connected; None: it holds none).
        self.host: str | None = None

    def cache(self) -> SlaveCache:
        """The slave's one cache of fetched files (``mwpy jobs``' inputs use it too)."""
        if self._cache is None:
            from mwpy.data.cache import SlaveCache  # noqa: PLC0415 (only a slave given a file needs it)

            self._cache = SlaveCache(*self._membership)
            atexit.register(self._cache.remove)
        return self._cache

    def _started(self) -> SlaveShares:
        if self._shares is None:
            from mwpy.data.shares import SlaveShares  # noqa: PLC0415 (only a slave given a shared object needs it)

            self._shares = SlaveShares(self.cache())
            atexit.register(self._shares.remove)
        return self._shares

    def member_of(self, secret: bytes, member_id: str, tls_fingerprint: str | None) -> bool:
        """Whether this plane is the computation's these name (a restarted master's, if they are unchanged)."""
        return self._membership[:3] == (secret, member_id, tls_fingerprint)

    def close(self) -> None:
        """Stop offering held values and remove the cache's and shared objects' files now, not at exit: a slave
        that outlives its master and finds it restarted with another secret starts a new plane."""
        ends: list[Callable[[], None]] = [] if self._held is None else [self._held.close]
        ends += [] if self._shares is None else [self._shares.remove]
        ends += [] if self._cache is None else [self._cache.remove]
        for end in ends:
            atexit.unregister(end)
            end()
        self._held = self._shares = self._cache = None

    def counts(self) -> tuple[int, int, int, int]:
        """The cache's counters (hits, misses, bytes fetched, evictions); all 0 before it is used."""
        return (0, 0, 0, 0) if self._cache is None else self._cache.counts()

    # ------------------------------------------------------------------ codec.DataPlane

    def resolve(self, key: bytes) -> Any:
        return self._started().resolve(key)

    def resolve_file(self, handle: codec.Shared, mode: int, name: str) -> codec.File:
        return self._started().resolve_file(handle, mode, name)

    def store(self, address: tuple[str, int], source: IO[bytes], size: int) -> str:
        return self._started().store(address, source, size)

    def store_file(self, address: tuple[str, int], path: str) -> tuple[str, int]:
        with open(path, "rb") as source:
            digest = self.store(address, source, os.fstat(source.fileno()).st_size)
        return digest, os.stat(path).st_mode & 0o7777

    def relay(self, digest: str, address: tuple[str, int]) -> tuple[str, int]:
        """Send the value this slave holds under ``digest`` to the file service at ``address`` (its master's: a
        peer could not fetch it from here), streamed from the cached file; its hash and size."""
        from mwpy.data.service import ValueNotFetchedError  # noqa: PLC0415 (as the cache: only when used)

        path = None if self._cache is None else self._cache.copy_of(digest)
        if path is None:
            raise ValueNotFetchedError(f"value {digest[:12]} is no longer held on this slave")
        with open(path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            return self.store(address, source, size), size

    def hold(self, body: bytes) -> codec.Shared | None:
        secret, member_id, tls_fingerprint, _ = self._membership
        if self.host is None or tls_fingerprint is not None:  # no certificate to serve with: to the master
            return None
        if self._held is None:
            from mwpy.data.holding import HeldValues  # noqa: PLC0415 (only a slave that made a large value needs it)

            self._held = HeldValues(self.cache(), secret, member_id, self.host)
            atexit.register(self._held.close)
        return self._held.hold(body)

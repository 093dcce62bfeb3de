"""A slave's large values that stay where they were made: kept in its cache, served to its peers by hash.

An Executor's call whose value pickles to more than
:data:`~mwpy.wire.codec.SPILL_ABOVE` bytes leaves it here, and so does a
master algorithm's task that its Tasks frame names (its future is another
task's argument: mwpy/held_tasks.py) (:func:`~mwpy.wire.codec.encode_result`
with ``hold``): the file, in the
shared-object format, joins the slave's :class:`~mwpy.data.cache.SlaveCache`
under its SHA-256 (bounded by ``--mw-cache-size`` like everything else there)
and this slave's own :class:`~mwpy.data.server.FileServer` offers it to any
process that proves the computation's secret. The master records only the
handle (hash, size, this service's address). A task run here later that takes
the value as an argument finds it in the cache (no transfer); another slave
fetches it from here; a value evicted from the cache is withdrawn (who needs
it again runs its producer again, mwpy/lineage.py).

With TLS (``--mw-tls-cert``) a slave has no certificate of its own to serve
with, so it holds nothing and its large values go to the master as before.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mwpy.data.cache import SlaveCache
from mwpy.data.landing import UPLOAD_PREFIX
from mwpy.data.server import FileServer
from mwpy.errors import MwpyError
from mwpy.wire import codec


class HeldValues:
    """This slave's held values and the file service that offers them (started with the first)."""

    def __init__(self, cache: SlaveCache, secret: bytes, member_id: str, host: str) -> None:
        """``host``: this slave's address as its master sees it (the one its peers are told)."""
        self._cache = cache
        self._service = (secret, member_id, host)
        self._server: FileServer | None = None
        self._broken = False  # the service could not start: nothing is held, values go to the master
        cache.on_evict(self._withdraw)

    def hold(self, body: bytes) -> codec.Shared | None:
        """Keep ``body`` (a pickled value) and offer it; its handle, or None if this slave cannot serve."""
        server = self._started()
        if server is None:
            return None
        folder = self._cache.folder
        with tempfile.NamedTemporaryFile(dir=folder, prefix=UPLOAD_PREFIX, delete=False) as out:
            try:
                digest, size = codec.write_shared(body, [], out)
            except BaseException:
                os.unlink(out.name)
                raise
        path = Path(folder, f"{digest}.444")
        os.chmod(out.name, 0o444)
        os.replace(out.name, path)
        if self._cache.admit(digest, path):
            server.offer(str(path), digest, size)
        return codec.Shared(digest, size, server.host, server.port)

    def _started(self) -> FileServer | None:
        if self._server is None and not self._broken:
            secret, member_id, host = self._service
            try:
                self._server = FileServer(secret, member_id, host)
            except (MwpyError, OSError):
                self._broken = True
        return self._server

    def _withdraw(self, digest: str) -> None:
        """The cache evicted ``digest``: no longer offered (whoever asks is told it is not here)."""
        if self._server is not None:
            self._server.withdraw(digest)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

"""Objects shared once per slave (``mw.share(obj)``), through the master's file service.

On the master, :class:`SharedObjects` pickles each object once into a file
(:func:`mwpy.wire.codec.encode_shared`: protocol 5, a numpy array's data
written from its own memory) named by its SHA-256, and offers that file on a
:class:`~mwpy.data.server.FileServer`; the handle it returns is what tasks
carry. On a slave, :class:`SlaveShares` resolves a handle the first time a
task's arguments name it: the file is fetched by hash into the slave's
:class:`~mwpy.data.cache.SlaveCache` (checked against its hash), mapped
read-only, unpickled from the mapping (the array's data stays in the map,
not copied) and kept, so every later task on that slave gets the same object
with no transfer and no unpickling. Nothing goes through a shared file
system: a Condor slave fetches exactly as a local one does.

The other way, a task's value above :data:`~mwpy.wire.codec.SPILL_ABOVE`
bytes pickled, and each ``mwpy.File`` in it, is sent by the slave to the same
file service (:meth:`SlaveShares.store`), checked against its hash as it
arrives and kept under it in the master's folder; the result's frame carries
only the hash, and unpickling it on the master takes the value (its file then
removed) or a ``File`` of the copy, kept until the master finishes
(:meth:`SharedObjects.value`, :meth:`SharedObjects.file`, which the master's
:func:`~mwpy.wire.codec.decode_outcome` is given).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from mwpy import safe_files, safe_text
from mwpy.data.service import Counters, FileServiceError, ValueNotFetchedError
from mwpy.errors import ComputationFinishedError, MwpyError, SharedObjectError
from mwpy.options import Options
from mwpy.wire import codec, protocol
from mwpy.wire.codec import Shared

if TYPE_CHECKING:  # the file service starts, and a held value is fetched, on first use: neither is on a start's path
    from mwpy.data.cache import SlaveCache
    from mwpy.data.server import FileServer

log = logging.getLogger("mwpy.slave")
master_log = safe_text.logger("mwpy.master")

#: The longest payload that may name spilled arguments (a pickled handle: well under this).
_REFERENCE_BYTES = 512
#: What a slave may name as a stored result's hash: a SHA-256 in hex, nothing that could be a path.
_DIGEST = re.compile(r"[0-9a-f]{64}")


class SharedObjects:
    """The master's shared objects: one file each, in a private folder, offered until the master finishes.

    The file service starts with the first object shared (a computation that
    shares nothing opens no second port); an Executor's users share from their
    own threads, hence the lock.
    """

    def __init__(self, options: Options, secret: bytes, host: str, bind: str | None) -> None:
        """A file service like the master's own port: TLS when it has TLS (``--mw-tls-cert``), its client timeout."""
        self._service = (options, secret, host, bind)
        self._server: FileServer | None = None
        self._folder: Path | None = None
        self._closed = False
        self._unavailable = False  # the file service could not start for results (address())
        self._fetched: Path | None = None  # where held() lands values it fetches, one at a time
        self._held_fetches = self._held_bytes = 0  # values fetched from the slaves that hold them (held())
        self._spilled: dict[bytes, tuple[str, int]] = {}  # spilled arguments' payload -> (hash, tasks that carry it)
        self._lock = threading.Lock()
        #: Called as arguments are spilled, before the task carrying them is queued: from then on tasks that
        #: leave must :meth:`release` (until then none holds any, and none pays a call for it).
        self.on_spill: Callable[[], object] | None = None

    def share(self, obj: Any) -> Shared:
        """Write ``obj``'s file (identical objects: one file) and offer it; return its handle."""
        return self._offer(*codec.pickled_out_of_band(obj), keep=True)

    def share_large(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``map``'s keyword arguments, each of at least :data:`~mwpy.wire.codec.SHARE_ABOVE` bytes shared:
        what every call gets crosses to each slave once (``ex.map(f, xs, big=arr)``)."""
        shared = dict(kwargs)
        for name, value in kwargs.items():
            if isinstance(value, Shared | codec.File):
                continue
            body, views = codec.pickled_out_of_band(value)
            if len(body) + sum(view.nbytes for view in views) >= codec.SHARE_ABOVE:
                shared[name] = self._offer(body, views, keep=True)
        return shared

    def address(self) -> tuple[str, int]:
        """Where slaves send what a frame does not carry (large values, returned files): the file service,
        started now if no share started it. ``("", 0)`` if it cannot start (no free port in
        ``--mw-master-port-range``, no thread): said once, and such results fail as too large, as before."""
        if self._unavailable or self._closed:
            return "", 0
        try:
            server, _ = self._started()
        except (MwpyError, OSError) as exc:
            self._unavailable = True
            master_log.warning("no file service for large results and returned files: %s", exc)
            return "", 0
        return server.host, server.port

    def publish_file(self, path: str) -> tuple[Shared, int]:
        """Offer the file at ``path`` (hashed once while unchanged) for the rest of the run; its handle and mode."""
        server, _ = self._started()
        digest, size = server.publish(path)
        server.offer(path, digest, size)
        return Shared(digest, size, server.host, server.port), os.stat(path).st_mode & 0o7777

    def spill(self, payload: bytes) -> bytes:
        """A task's pickled arguments too large for a frame, as the small payload that names their file (kept
        until :meth:`release` was called as often with that payload)."""
        handle = self._offer(payload, [], keep=False)
        reference = codec.encode_value(handle)
        with self._lock:
            self._spilled[reference] = (handle.digest, self._spilled.get(reference, ("", 0))[1] + 1)
        if self.on_spill is not None:
            self.on_spill()
        return reference

    def release(self, payload: bytes) -> None:
        """A task with ``payload`` is done: arguments :meth:`spill` stored for it go once no task needs them."""
        if not self._spilled or len(payload) > _REFERENCE_BYTES:  # the hot path: no task's arguments were stored
            return
        with self._lock:
            digest, users = self._spilled.get(payload, ("", 0))
            if not users:
                return
            if users > 1:
                self._spilled[payload] = (digest, users - 1)
            else:
                del self._spilled[payload]
            server, folder = self._server, self._folder
        if server is not None and folder is not None and server.withdraw(digest):  # each spill offered it once
            (folder / digest).unlink(missing_ok=True)

    def _offer(self, body: bytes, views: list[memoryview], *, keep: bool) -> Shared:
        server, folder = self._started()
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".writing-", delete=False) as out:
                try:
                    digest, size = codec.write_shared(body, views, out)
                except BaseException:
                    os.unlink(out.name)
                    raise
        except OSError as exc:  # a full temporary folder: say which, and whose
            raise OSError(exc.errno, f"{exc.strerror}: mwpy's folder of shared objects, {folder}") from exc
        final = folder / digest
        os.replace(out.name, final)
        server.offer(str(final), digest, size)
        return Shared(digest, size, server.host, server.port, keep)

    def _started(self) -> tuple[FileServer, Path]:
        with self._lock:
            if self._closed:
                raise ComputationFinishedError("cannot share an object after the computation finished")
            if self._server is None or self._folder is None:
                from mwpy.data.server import FileServer  # noqa: PLC0415 (see the top of this file)

                options, secret, host, bind = self._service
                tls = None
                if options.tls_cert is not None:
                    tls = protocol.tls_server_context(options.tls_cert, options.tls_key)[0]
                self._folder = Path(safe_files.run_folder("mwpy-shared-"))
                self._server = FileServer(
                    secret, options.member_id, host, bind, options.master_port_range,
                    tls=tls, client_timeout=options.client_timeout,
                )  # fmt: skip
                self._server.results = self._folder / "received"
                self._server.results.mkdir()
            return self._server, self._folder

    # ------------------------------------------------------------------ what slaves stored (codec.Received)

    def value(self, digest: str, size: int) -> Any:
        """The value a slave stored under ``digest``: its file goes once every result stored under that hash was
        read (:meth:`FileService.take_result`), so tasks returning equal values each get theirs."""
        server = self._server
        data = None if server is None or not _DIGEST.fullmatch(digest) else server.take_result(digest)
        if data is None:
            raise SharedObjectError(f"no stored result has hash {digest[:16]!r}")
        if len(data) != size:
            raise SharedObjectError(f"stored result {digest[:12]}: {len(data)} bytes, not {size}")
        return codec.decode_value(data)

    def file(self, digest: str, mode: int, name: str) -> codec.File:
        """A file a task returned, hard-linked under its own base name (``files/HASH.MODE/NAME``) and kept until
        the master finishes."""
        server = self._server
        results = None if server is None else server.results
        if results is None or not _DIGEST.fullmatch(digest) or not (results / digest).is_file():
            raise SharedObjectError(f"no stored result has hash {digest[:16]!r}")
        if name in ("", ".", "..") or "/" in name or not safe_text.is_plain(name):  # a name, not a path or a trap
            raise SharedObjectError(f"a returned file may not be named {safe_text.one_line(name[:80])!r}")
        named = results / "files" / f"{digest}.{mode & 0o7777:o}" / name
        if not named.exists():
            named.parent.mkdir(parents=True, exist_ok=True)
            os.link(results / digest, named)
            named.chmod(mode & 0o7777)
        return codec.File(str(named))

    def held(self, handle: Shared) -> Any:
        """The value a slave holds (a future's ``result()`` asked for it): fetched by hash from the holder's
        file service into this master's folder, unpickled from a map of it, the file then removed."""
        options, secret, _, _ = self._service
        with self._lock:
            if self._closed:
                raise ComputationFinishedError("cannot fetch a value after the computation finished")
            if self._fetched is None:  # its own folder: the file service may have no port (--mw-master-port-range)
                self._fetched = Path(safe_files.run_folder("mwpy-held-"))
            folder = self._fetched
        path = folder / f"{handle.digest}-{threading.get_ident()}"
        from mwpy.data.client import FileClient  # noqa: PLC0415 (see the top of this file)

        client = FileClient(handle.host, handle.port, secret, options.member_id)
        try:
            size = client.fetch(handle.digest, path)
        except OSError as exc:  # this side's disk: mwpy's trouble, said with the folder (not the holder's)
            where = f"mwpy's folder for large results on the master, {folder}"
            raise SharedObjectError(f"fetching a value its slave holds into {where}: {exc.strerror}") from None
        finally:
            client.close()
        try:
            with open(path, "rb") as source:
                mapped = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
            return codec.decode_shared(memoryview(mapped))  # the map goes with the last view of it
        finally:
            path.unlink(missing_ok=True)
            with self._lock:
                self._held_fetches += 1
                self._held_bytes += size

    def offer_relayed(self, digest: str, size: int) -> Shared:
        """A held value its slave sent here (another slave could not fetch it from there): offered to every
        slave from this file service, streamed from disk (never read here), until the master finishes."""
        server, folder = self._started()
        kept = folder / digest
        if not _DIGEST.fullmatch(digest) or not server.claim_result(digest, kept):
            raise SharedObjectError(f"no stored result has hash {digest[:16]!r}")
        server.offer(str(kept), digest, size)
        return Shared(digest, size, server.host, server.port)

    def counters(self) -> dict[str, Any]:
        """What the file service sent: ``fetches`` (per hash), ``bytes_sent`` and the rest, and the values
        fetched from the slaves that hold them (``held_fetches``, ``held_bytes``)."""
        counters = (Counters() if self._server is None else self._server.counters).as_dict()
        return {**counters, "held_fetches": self._held_fetches, "held_bytes": self._held_bytes}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._server is not None:
                self._server.close()
            for folder in (self._folder, self._fetched):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)


class SlaveShares:
    """A slave's resolver of shared objects: each fetched, mapped and unpickled once, kept while it is cached.

    The files come from the slave's one :class:`~mwpy.data.cache.SlaveCache`
    (``mwpy jobs``' inputs use it too), which bounds them (``--mw-cache-size``)
    and counts what happened; an object whose file the cache evicts loses this
    slave's reference, so it is fetched again if a later task names it (a task
    still holding it keeps its mapping).
    """

    def __init__(self, cache: SlaveCache) -> None:
        self._cache = cache
        self._folder = Path(safe_files.run_folder("mwpy-shared-"))  # mwpy.File arguments under their own names
        self._held: dict[bytes, tuple[str, Any]] = {}  # handle's key -> (digest, the object from its cached file)
        cache.on_evict(self._forget)

    def resolve(self, key: bytes) -> Any:
        """The object the handle of ``key`` names: after its first use here, one dictionary lookup (its file
        was checked against its hash when fetched) while it stays in the cache."""
        held = self._held.get(key)
        if held is not None and self._cache.touch(held[0]):
            return held[1]
        handle = Shared.from_key(key)
        try:
            path = self._cache.get(handle.digest, (handle.host, handle.port))
        except FileServiceError as exc:
            raise ValueNotFetchedError(str(exc)) from None
        with open(path, "rb") as source:
            mapped = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
        obj = codec.decode_shared(memoryview(mapped))
        if handle.keep:
            self._held[key] = (handle.digest, obj)
        else:  # one task's arguments: unpickled (copied) out of the map, which goes with the file
            del mapped
            self._cache.discard(handle.digest)
        return obj

    def _forget(self, digest: str) -> None:
        """``digest``'s file was evicted: let its objects go (every handle naming it; a restarted master's file
        service has another address)."""
        for key in [key for key, (named, _) in self._held.items() if named == digest]:
            del self._held[key]

    def resolve_file(self, handle: Shared, mode: int, name: str) -> codec.File:
        """A ``mwpy.File`` argument's local copy: the cached file (fetched once), under its own base name."""
        cached = self._cache.get(handle.digest, (handle.host, handle.port), mode)  # clean if a task changed it
        named = self._folder / "files" / f"{handle.digest}.{mode:o}" / name
        if not (named.exists() and named.samefile(cached)):
            named.parent.mkdir(parents=True, exist_ok=True)
            named.unlink(missing_ok=True)
            os.link(cached, named)
        return codec.File(str(named))

    def store(self, address: tuple[str, int], source: IO[bytes], size: int) -> str:
        """Send ``source`` (a task's large value, a file it returned) to the file service at ``address``."""
        return self._cache.client(address).store(source, size)

    def remove(self) -> None:
        """The slave ends: remove the named links (the cache removes its own files)."""
        shutil.rmtree(self._folder, ignore_errors=True)

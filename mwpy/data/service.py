"""The file service's component: what it offers by hash, what it takes, and how it answers each request.

Any process that holds the computation's secret can run it: the master
(inputs of ``mwpy jobs``, shared objects, large arguments; large results and
returned files come in) or a slave serving what it holds to another slave.
:class:`FileService` knows no socket loop: :class:`~mwpy.data.server.FileServer`
accepts, proves and hands it one authenticated :class:`~mwpy.data.link.Link`
at a time (:meth:`FileService.serve`), and the grammar it follows is the
table of :mod:`mwpy.data.grammar`. What a job's outputs may be, its budget and
whether a running job is stopped are not decided here: a :class:`Outputs`
policy does that (``mwpy jobs``' is :class:`mwpy.jobs.outputs.JobOutputs`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, Protocol

import attrs

from mwpy.data import grammar
from mwpy.data.grammar import CHUNK, END, FETCH, REFUSED, RESULT, SIZE, TAKEN, USAGE
from mwpy.data.landing import UPLOAD_PREFIX, Landing, OutputRefused, place_output
from mwpy.data.link import Link, send_raw
from mwpy.errors import MwpyError

#: How many (path, inode, size, mtime) -> hash entries a service remembers, so shared inputs are hashed once.
HASH_MEMORY: Final = 1024
#: The largest task result a slave may store on the master (a pickled value; frames carry up to 64 MiB).
MAX_RESULT_BYTES: Final = 16 << 30


class FileServiceError(MwpyError):
    """A fetch or an upload failed: the peer refused, the hash did not match, the connection broke."""


class ValueNotFetchedError(FileServiceError):
    """A value another process holds could not be fetched from it (unreachable, gone, or no longer held): a
    task's argument, so its master relays the value or makes it again (mwpy/lineage.py)."""


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Outputs(Protocol):
    """Who decides about uploads named for a job (``mwpy jobs``): where each lands, and its running usage."""

    def landing(self, token: str, name: object, size: object) -> tuple[Landing, int]:
        """Where output ``name`` of ``size`` bytes of job ``token`` lands, and its size, as the upload's header
        says them; raise OutputRefused if nowhere (a malformed header too)."""
        ...  # pragma: no cover

    def usage(self, token: str, usage: dict[str, float]) -> str | None:
        """A running job's usage: ``"hold"``/``"remove"`` stops it, None lets it run."""
        ...  # pragma: no cover

    def forget(self, token: str) -> None:
        """Job ``token`` is over: nothing more of it is taken."""
        ...  # pragma: no cover


@attrs.define
class Counters:
    """What crossed the wire, for the run summary and the tests: fetches and bytes per input hash."""

    fetches: Counter[str] = attrs.field(factory=Counter)
    bytes_sent: int = 0
    uploads: int = 0
    bytes_received: int = 0
    refused: int = 0
    #: Large task results stored by slaves (``results_stored``) and their bytes (also in ``bytes_received``).
    results_stored: int = 0
    result_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "fetches": dict(self.fetches),
            "bytes_sent": self.bytes_sent,
            "uploads": self.uploads,
            "bytes_received": self.bytes_received,
            "refused": self.refused,
            "results_stored": self.results_stored,
            "result_bytes": self.result_bytes,
        }


class FileService:
    """Files offered by hash, results taken by hash, outputs handed to :attr:`outputs`; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._published: dict[str, tuple[str, int]] = {}  # hash -> (path, size)
        self._users: Counter[str] = Counter()  # hash -> offers of it and jobs in flight that read it
        # (path, inode, size, mtime) -> hash, the most recent HASH_MEMORY files: a shared file is hashed once.
        self._hashes: OrderedDict[tuple[str, int, int, int], str] = OrderedDict()
        self._reads: dict[str, tuple[str, ...]] = {}  # job token -> the hashes it reads
        self._run_files: frozenset[str] = frozenset()  # real paths no output may replace, whatever the job
        self._stored: Counter[str] = Counter()  # hash -> results stored under it and not taken yet
        self.counters = Counters()
        #: Decides about job outputs and running jobs (None: no output is taken, no job is stopped).
        self.outputs: Outputs | None = None
        #: Where slaves' large results land, named by their hash once it matched (None: results not taken).
        self.results: Path | None = None

    # ------------------------------------------------------------------ what is offered and kept

    def publish(self, path: str) -> tuple[str, int]:
        """Make ``path`` fetchable; return its hash and size (hashed once while it is unchanged)."""
        info = os.stat(path)
        key = (path, info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            known = self._hashes.get(key)
        digest = known or sha256_of(path)
        with self._lock:
            self._hashes[key] = digest
            self._hashes.move_to_end(key)
            if len(self._hashes) > HASH_MEMORY:
                self._hashes.popitem(last=False)
            self._published[digest] = (path, info.st_size)
        return digest, info.st_size

    def offer(self, path: str, digest: str, size: int) -> None:
        """Make ``path`` fetchable as ``digest`` (hashed by its writer) until :meth:`withdraw` (shared objects)."""
        with self._lock:
            self._published[digest] = (path, size)
            self._users[digest] += 1

    def withdraw(self, digest: str) -> bool:
        """One :meth:`offer` of ``digest`` is over; whether that was the last (then it is no longer fetchable)."""
        with self._lock:
            return self._release(digest)

    def _release(self, digest: str) -> bool:
        self._users[digest] -= 1
        if self._users[digest] > 0:
            return False
        del self._users[digest]
        self._published.pop(digest, None)
        return True

    def protect(self, *paths: str) -> None:
        """No output of any job may replace these files (the run's own: submit file, summary, journal...)."""
        with self._lock:
            self._run_files |= {os.path.realpath(path) for path in paths}

    def expect(self, token: str, reads: tuple[str, ...] = ()) -> None:
        """Keep the files job ``token`` ``reads`` (hashes) published until :meth:`forget`."""
        with self._lock:
            self._reads[token] = reads
            self._users.update(reads)

    def forget(self, token: str) -> None:
        """The job is over: no more outputs, and files no job in flight reads are unpublished (memory stays bounded)."""
        if self.outputs is not None:
            self.outputs.forget(token)
        with self._lock:
            for digest in self._reads.pop(token, ()):
                self._release(digest)

    def claim_result(self, digest: str, target: Path) -> bool:
        """Move one result stored under ``digest`` to ``target``, unread (a value relayed for other slaves,
        offered from there); False if none is stored."""
        with self._lock:
            if self.results is None or not self._stored[digest]:
                return False
            self._stored[digest] -= 1
            path = self.results / digest
            if self._stored[digest]:
                os.link(path, target)
            else:
                del self._stored[digest]
                os.replace(path, target)
        return True

    def take_result(self, digest: str) -> bytes | None:
        """The bytes of a result stored under ``digest`` (None: none is); its file goes once every result stored
        under that hash was taken, so tasks returning equal values each get theirs."""
        with self._lock:
            if self.results is None or not self._stored[digest]:
                return None
            path = self.results / digest
        try:
            return path.read_bytes()
        finally:
            with self._lock:
                self._stored[digest] -= 1
                if not self._stored[digest]:
                    del self._stored[digest]
                    path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ requests

    def serve(self, link: Link) -> None:
        """Answer one request of a proven peer (raise when the peer broke the grammar: drop it)."""
        kind, payload = link.receive()
        header = link.conversation.receive(kind, payload)
        if kind == FETCH:
            self._send_file(link, str(header.get("sha256")))
        elif kind == USAGE:
            link.send_json(TAKEN, {"stop": self._usage(header)})
        elif kind == RESULT:
            self._receive_result(link, header)
        else:
            self._receive_output(link, header)

    def _usage(self, header: dict[str, Any]) -> str | None:
        """A running job's usage, for the policy; numbers only."""
        token, usage = str(header.get("job")), header.get("usage")
        if not isinstance(usage, dict) or self.outputs is None:
            return None
        numbers = {str(k): float(v) for k, v in usage.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        return self.outputs.usage(token, numbers)

    def _send_file(self, link: Link, digest: str) -> None:
        with self._lock:
            entry = self._published.get(digest)
        if entry is None:
            link.send_json(REFUSED, {"error": f"no published file has hash {digest[:16]}"})
            return
        path, size = entry
        try:
            source: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed below, after the header is sent)
        except OSError as exc:
            link.send_json(REFUSED, {"error": f"{path}: {exc.strerror}"})
            return
        with source:
            link.send_json(SIZE, {"size": size})
            sent = send_raw(link.sock, source, size)
            if sent != size:  # changed since it was offered: the peer must not wait for bytes that never come
                raise FileServiceError(f"{path}: {sent} bytes, not {size}")
            # Counted before the end marker: once the slave has the whole file (and may answer its task), the
            # counters say so — a reader right after that answer must not see the fetch missing.
            with self._lock:
                self.counters.fetches[digest] += 1
                self.counters.bytes_sent += sent
            link.send(END)

    def _receive_output(self, link: Link, header: dict[str, Any]) -> None:
        ending: dict[str, Any] = {}
        try:
            landing, size = self._landing(header)
            path = place_output(landing, _checked(_upload_chunks(link, size, ending), ending))
            if header.get("executable"):
                path.chmod(0o755)
        except (OutputRefused, FileServiceError, OSError) as exc:
            self._refuse(link, ending, exc)
            return
        with self._lock:
            self.counters.uploads += 1
            self.counters.bytes_received += size
        link.send_json(TAKEN, {})

    def _landing(self, header: dict[str, Any]) -> tuple[Landing, int]:
        """Where an upload may land (the policy's answer), never over the run's own files."""
        token, name, size = header.get("job"), header.get("name"), header.get("size")
        if self.outputs is None:
            raise OutputRefused(f"job {str(token)[:40]!r} is not expecting outputs")
        landing, size = self.outputs.landing(str(token), name, size)
        with self._lock:
            run_files = self._run_files
        return attrs.evolve(landing, protected=landing.protected | run_files), size

    def _receive_result(self, link: Link, header: dict[str, Any]) -> None:
        """A task's result too large for a frame: written under its hash once the hash matched, then answered."""
        ending: dict[str, Any] = {}
        size = header.get("size")
        try:
            if self.results is None or not isinstance(size, int) or not 0 <= size <= MAX_RESULT_BYTES:
                raise OutputRefused(f"no result of {str(size)[:20]} bytes is taken here")
            temporary = _write_checked(self.results, _upload_chunks(link, size, ending), ending)
        except OSError as exc:  # the master's disk, not the task: say whose folder failed (a full one, mostly)
            where = f"mwpy's folder for large results on the master, {self.results}"
            self._refuse(link, ending, FileServiceError(f"{where}: cannot keep {size} bytes: {exc.strerror or exc}"))
            return
        except (OutputRefused, FileServiceError) as exc:
            self._refuse(link, ending, exc)
            return
        digest = str(ending["sha256"])  # _write_checked matched it to the content
        with self._lock:  # the rename and the count together: take_result() never removes a file just renamed
            os.replace(temporary, self.results / digest)
            self._stored[digest] += 1
            self.counters.results_stored += 1
            self.counters.result_bytes += size
            self.counters.bytes_received += size
        link.send_json(TAKEN, {})

    def _refuse(self, link: Link, ending: dict[str, Any], exc: Exception) -> None:
        """An upload not taken: counted, the rest of it read (the conversation stays in step), the reason sent."""
        with self._lock:
            self.counters.refused += 1
        if not ending:
            _drain(link)
        link.send_json(REFUSED, {"error": str(exc)})


def _upload_chunks(link: Link, size: int, ending: dict[str, Any]) -> Iterator[bytes]:
    """An upload's data frames, up to its end frame (whose header lands in ``ending``)."""
    received = 0
    while True:
        kind, payload = link.receive()
        header = link.conversation.receive(kind, payload)
        if kind == END:
            ending.update(header)
            return
        received += len(payload)
        if received > size:
            raise OutputRefused("an output is longer than announced")
        yield payload


def _checked(chunks: Iterator[bytes], ending: dict[str, Any]) -> Iterator[bytes]:
    """The upload's chunks; after the last, the hash the peer announced must match what arrived."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
    if ending.get("sha256") != digest.hexdigest():
        raise FileServiceError("an output's content does not match its hash")


def _write_checked(folder: Path, chunks: Iterator[bytes], ending: dict[str, Any]) -> str:
    """Write an upload into ``folder`` under a temporary name; that name, once its content matched the hash
    the peer announced (in ``ending``)."""
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=UPLOAD_PREFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in _checked(chunks, ending):
                out.write(chunk)
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def _drain(link: Link) -> None:
    """Read the rest of a refused upload, so the conversation stays in step."""
    while link.conversation.state is grammar.State.BODY:
        kind, payload = link.receive()
        link.conversation.receive(kind, payload)

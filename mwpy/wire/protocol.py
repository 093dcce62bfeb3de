"""The wire vocabulary between master and slaves: constants, messages, framing, proofs.

This module holds the pieces; :mod:`mwpy.wire.session` puts them in order (which
frame is legal when) as sans-IO session objects. Neither does any I/O, and
neither imports the master, the slave or the task layer: ``ExitCode`` and
``PICKLE_PROTOCOL`` live here because both ends of the wire need them.

Every frame is a 4-byte big-endian length and a body. The first three frames
of a connection are a fixed-layout handshake in which master and slave prove
to each other that they know the computation's secret (HMAC-SHA256 over fresh
nonces from both sides); nothing is unpickled before it succeeds. Every later
frame carries a keyed-BLAKE2b tag over a per-direction sequence number and
its body, under keys derived from that handshake, and is checked before its
payload is unpickled: a peer without the secret can neither join nor inject.

Message records are attrs classes; their wire form is the pickled tuple of
their fields (``attrs.astuple`` without recursion), which keeps the hot path
(task and result batches) as cheap as pickling plain tuples. The bytes the
records carry (arguments, values, failures) are :mod:`mwpy.wire.codec`'s.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import operator
import os
import pickle
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import attrs

from mwpy.errors import ConfigurationError, ProtocolError
from mwpy.names import CONDOR_JOB_ID, MAX_PEAK_MEMORY

if TYPE_CHECKING:  # loaded with the first TLS context (below): a run without TLS never imports it
    import ssl

#: 2: a failure carries the pickled exception (mwpy.Executor and futures raise it as itself).
#: 3: Hello carries the slave's Condor job id (a Hello of 2 has one field fewer, which a master of 2 refuses);
#:    HandBack (a slave leaving on a soft-kill signal), and a slave's Heartbeat carries its peak memory.
#: 4: frames are tagged with keyed BLAKE2b instead of truncated HMAC-SHA256 (docs/security.md).
#: 5: Hello carries the slave's shape (cpus, memory MB, disk MB, gpus, requirements) for tasks' resources=.
#: 6: Welcome names the master's file service, where a slave sends a result too large for a frame and the
#:    files a task returns; a slave's Heartbeat carries its cache's counters (issue 22).
#: 7: HandBack says why the slave leaves (a soft-kill signal, its lifetime, its algorithm raised); Hello says when
#:    the slave will leave by plan.
#: 8: the file service sends a fetched file's content unframed after its size (sendfile), checked by its hash.
#: 9: a shared object's handle pickles as copyreg extension code 0x6D77 (codec.shared_object) with one bytes key.
#: 10: Hello carries the slave's slot machine ad (ClassAd text, "" outside Condor): the master evaluates a task's
#:     requirements against it (mwpy/matching.py) instead of comparing them with the slave's as text.
#: 11: Tasks carries the keys of keyed tasks; Handover (a slave that outlived its master hands the results it
#:     held to the restarted master, by key: docs/reliability.md "A master restart").
#: 12: Tasks names the tasks whose large values stay on the slave (a master algorithm's futures that are other
#:     tasks' arguments; an Executor's calls stay there by their algorithm).
PROTOCOL_VERSION = 12
#: Pickle protocol for every payload that crosses the wire.
PICKLE_PROTOCOL = 5
MAGIC = b"MWPY"
NONCE_SIZE = 32
MAC_SIZE = 32
TAG_SIZE = 16
HEADER = struct.Struct("!I")
_SEQ = struct.Struct("!Q")

CHALLENGE_SIZE = len(MAGIC) + 1 + NONCE_SIZE
RESPONSE_SIZE = NONCE_SIZE + MAC_SIZE
CONFIRM_SIZE = MAC_SIZE
#: The largest frame a peer may send before it has proved membership.
MAX_HANDSHAKE_FRAME = max(CHALLENGE_SIZE, RESPONSE_SIZE, CONFIRM_SIZE)


class ExitCode(enum.IntEnum):
    """Why a slave process ended (its exit status); docs/exit-codes.md.

    Part of the protocol layer because the master sends one of these in
    ``Shutdown`` (``TOLD_TO_LEAVE``) and the slave exits with it.
    """

    OK = 0  # orderly shutdown, or the computation is finished
    USAGE = 2  # a wrong --mw-* option
    UNREACHABLE = 3  # no master at the address (or the resource file is stale)
    MASTER_LOST = 4  # the connection ended without an orderly shutdown
    REFUSED = 5  # the master refused us, or failed to prove it is our master
    BAD_RESOURCE_FILE = 6  # missing, unreadable or invalid resource file
    TOLD_TO_LEAVE = 7  # the master sent this slave away (too many failed tasks)
    TASK_STUCK = 8  # a task ignored its timeout for the grace period: the slave exits to be replaced
    EVICTED = 9  # Condor's soft-kill signal (vacate, preemption, condor_rm): tasks handed back, the job stays queued
    ALGORITHM_ERROR = 255  # the slave algorithm raised or returned a non-status


# --------------------------------------------------------------------------
# Messages


@attrs.frozen
class Hello:
    """Slave -> master, first authenticated message: who is asking to work."""

    kind: ClassVar[int] = 1
    member_id: str
    host: str
    pid: int
    mwpy_version: str
    max_frame: int
    #: ``CLUSTER.PROC`` of the Condor job the slave runs as, "" outside Condor: the overseer matches
    #: connected slaves to its jobs with it (docs/condor.md).
    condor_job: str = ""
    #: What the slave offers: (cpus, memory MB, disk MB, gpus, requirements), as mwpy.Resources' fields.
    shape: tuple[Any, ...] = ()
    #: When (Unix time) the slave leaves by plan at the end of its lifetime (mwpy/lifetime.py), 0.0 for never:
    #: the master asks for its replacement ahead of time.
    leave_at: float = 0.0
    #: The slave's slot machine ad as ClassAd text (``_CONDOR_MACHINE_AD``), "" outside Condor: a task's
    #: requirements are evaluated against it (mwpy/matching.py).
    machine_ad: str = ""


@attrs.frozen
class Welcome:
    """Master -> slave: accepted, with the slave's id and how to behave."""

    kind: ClassVar[int] = 2
    slave_id: str
    result_group: int
    heartbeat_interval: float
    max_frame: int
    #: The master's file service (host, port): large results and returned files go there, by hash.
    store_host: str = ""
    store_port: int = 0


@attrs.frozen
class Refuse:
    """Master -> slave: not accepted (e.g. member id mismatch); the slave exits non-zero."""

    kind: ClassVar[int] = 3
    reason: str


#: One task on the wire: (task id, algorithm name, pickled (args, kwargs)).
TaskItem = tuple[int, str, bytes]
#: One result on the wire: (task id, ok, pickled value or TaskError fields, compute time).
ResultItem = tuple[int, bool, bytes, float]


@attrs.frozen
class Tasks:
    """Master -> slave: a group of tasks to queue."""

    kind: ClassVar[int] = 4
    items: list[TaskItem]
    #: Seconds each run may take, by task id, for the tasks that have a timeout (absent from the wire when empty).
    timeouts: dict[int, float] = attrs.field(factory=dict)
    #: The journal key of each keyed task, by task id (absent when none has one): a slave that outlives its
    #: master hands the results of those tasks to the restarted master by key.
    keys: dict[int, str] = attrs.field(factory=dict)
    #: The tasks whose value, if large, stays on this slave (mwpy/data/holding.py; absent when none does).
    hold: list[int] = attrs.field(factory=list)


@attrs.frozen
class Results:
    """Slave -> master: a group of finished tasks."""

    kind: ClassVar[int] = 5
    items: list[ResultItem]
    #: What tasks printed, by task id: (stdout, stderr), for the tasks that printed (absent when none did).
    outputs: dict[int, tuple[str, str]] = attrs.field(factory=dict)


@attrs.frozen
class Heartbeat:
    """Either way: I am alive (sent when nothing else was sent for a while).

    A slave's also says how much memory it has needed so far, and it sends one
    early when that grew: the master publishes it, and the overseer asks
    Condor for that much memory for new slave jobs.
    """

    kind: ClassVar[int] = 6
    #: Bytes: the slave process's peak resident set size so far (0 from the master, or not known).
    peak_memory: int = 0
    #: The slave's cache of shared objects and files so far: hits, misses, bytes fetched, evictions.
    cache: tuple[int, int, int, int] = (0, 0, 0, 0)


@attrs.frozen
class Shutdown:
    """Master -> slave: stop after the current task and exit with ``exit_code``."""

    kind: ClassVar[int] = 7
    exit_code: int = 0


@attrs.frozen
class Cancel:
    """Master -> slave: drop these tasks if they are still queued (their futures were cancelled)."""

    kind: ClassVar[int] = 8
    task_ids: list[int]


@attrs.frozen
class Cancelled:
    """Slave -> master: these tasks were dropped unstarted; the others named in a Cancel ran (or run)."""

    kind: ClassVar[int] = 9
    task_ids: list[int]


@attrs.frozen
class HandBack:
    """Slave -> master, its last message: leaving (``why``, one line); these queued tasks never started.

    The master queues them again at once, as never run (no wait for a
    timeout, no retry spent), and drops the connection: whatever else the
    slave held (the task it was running) is re-queued as for a slave that vanished.
    A slave leaves this way on a soft-kill signal, when its algorithm raised,
    or by plan at the end of its lifetime (mwpy/lifetime.py).
    """

    kind: ClassVar[int] = 10
    task_ids: list[int]
    why: str


#: One result a slave held while its master was gone: (key, algorithm name, the result as it was finished).
HeldItem = tuple[str, str, ResultItem]


@attrs.frozen
class Handover:
    """Slave -> master, right after Welcome: the results of keyed tasks this slave finished while it had no master.

    A slave whose master vanished (no Shutdown) keeps the results of its keyed
    tasks for ``--mw-master-lease`` seconds; the restarted master delivers each
    one whose key it submits (journaled, counted once, never dispatched again),
    and drops, with a log line, any other (mwpy/core/adoption.py).
    """

    kind: ClassVar[int] = 11
    held: list[HeldItem]


def check_handover(msg: Handover) -> None:
    """Reject a Handover whose items are not (key, algorithm, result) with a well-formed successful result."""
    held = msg.held
    if type(held) is not list:
        raise ProtocolError("malformed Handover message")
    for item in held:
        if not (type(item) is tuple and len(item) == 3 and type(item[0]) is str and type(item[1]) is str):
            raise ProtocolError("malformed item in a Handover message")
        check_results(Results([item[2]]))


def check_task_ids(msg: Cancel | Cancelled | HandBack) -> None:
    """Reject a Cancel, Cancelled or HandBack whose task ids are not a list of ints (or whose why is no string)."""
    ids = msg.task_ids
    malformed = isinstance(msg, HandBack) and type(msg.why) is not str
    if malformed or type(ids) is not list or not all(type(task_id) is int for task_id in ids):
        raise ProtocolError(f"malformed {type(msg).__name__} message")


Message = Hello | Welcome | Refuse | Tasks | Results | Heartbeat | Shutdown | Cancel | Cancelled | HandBack | Handover
_BY_KIND: dict[int, type[Any]] = {
    cls.kind: cls
    for cls in (Hello, Welcome, Refuse, Tasks, Results, Heartbeat, Shutdown, Cancel, Cancelled, HandBack, Handover)
}


def _getter(cls: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """``attrs.astuple(msg, recurse=False)`` for one message class, without its per-call overhead."""
    names = [field.name for field in attrs.fields(cls)]
    if len(names) == 1:
        get_one = operator.attrgetter(names[0])
        return lambda msg: (get_one(msg),)
    return operator.attrgetter(*names)


_GETTERS: dict[int, Callable[[Any], tuple[Any, ...]]] = {kind: _getter(cls) for kind, cls in _BY_KIND.items()}


def _fields(msg: Message) -> tuple[Any, ...]:
    return _GETTERS[msg.kind](msg)


def _build(kind: int, fields: Any) -> Message:
    cls = _BY_KIND.get(kind)
    if cls is None or not isinstance(fields, tuple):
        raise ProtocolError(f"unknown message kind {kind}")
    try:
        msg: Message = cls(*fields)
    except TypeError as exc:
        raise ProtocolError(f"malformed {cls.__name__} message: {exc}") from None
    return msg


def check_results(msg: Results) -> None:
    """Reject a Results message whose items are not (int, bool, bytes, float) tuples."""
    items = msg.items
    if type(items) is not list:
        raise ProtocolError("malformed Results message")
    for item in items:
        if (
            type(item) is not tuple
            or len(item) != 4
            or type(item[0]) is not int
            or type(item[1]) is not bool
            or type(item[2]) is not bytes
            or type(item[3]) is not float
            or not item[3] >= 0.0  # NaN would poison the window arithmetic and crash the master
        ):
            raise ProtocolError("malformed result in a Results message")
    outputs = msg.outputs
    if type(outputs) is not dict:
        raise ProtocolError("malformed Results message")
    for task_id, streams in outputs.items():
        if (
            type(task_id) is not int
            or type(streams) is not tuple
            or len(streams) != 2
            or type(streams[0]) is not str
            or type(streams[1]) is not str
        ):
            raise ProtocolError("malformed output in a Results message")


def check_heartbeat(msg: Heartbeat) -> None:
    """Reject a Heartbeat whose peak memory is not a non-negative int a slave could have (see MAX_PEAK_MEMORY)."""
    if type(msg.peak_memory) is not int or msg.peak_memory < 0:
        raise ProtocolError("malformed Heartbeat message")
    cache = msg.cache
    if type(cache) is not tuple or len(cache) != 4 or any(type(n) is not int or n < 0 for n in cache):
        raise ProtocolError("malformed Heartbeat message (its cache counters)")
    if msg.peak_memory > MAX_PEAK_MEMORY:
        raise ProtocolError(f"Heartbeat: a peak memory of {msg.peak_memory} bytes is more than any machine has")


def check_hello(msg: Hello) -> None:
    """Reject a Hello whose fields have the wrong types."""
    if not (
        isinstance(msg.member_id, str)
        and isinstance(msg.host, str)
        and isinstance(msg.pid, int)
        and isinstance(msg.mwpy_version, str)
        and isinstance(msg.max_frame, int)
        and msg.max_frame > 0
        and isinstance(msg.condor_job, str)
        and (msg.condor_job == "" or CONDOR_JOB_ID.fullmatch(msg.condor_job) is not None)
        and _is_shape(msg.shape)
        and type(msg.leave_at) is float
        and 0.0 <= msg.leave_at < float("inf")
    ):
        raise ProtocolError("malformed Hello message")


def _is_shape(shape: object) -> bool:
    """A Hello's shape: four non-negative ints and a string, or () for a slave that does not say."""
    if shape == ():
        return True
    if not isinstance(shape, tuple) or len(shape) != 5 or not isinstance(shape[4], str):
        return False
    return all(type(count) is int and count >= 0 for count in shape[:4])


# --------------------------------------------------------------------------
# Handshake


def new_nonce() -> bytes:
    return os.urandom(NONCE_SIZE)


def challenge(nonce: bytes) -> bytes:
    """Master's first frame: magic, protocol version, master nonce."""
    return frame(MAGIC + bytes([PROTOCOL_VERSION]) + nonce)


def parse_challenge(body: bytes) -> bytes:
    if len(body) != CHALLENGE_SIZE or not body.startswith(MAGIC):
        raise ProtocolError("the peer is not an mwpy master")
    version = body[len(MAGIC)]
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"master speaks protocol {version}, this slave speaks {PROTOCOL_VERSION}")
    return body[len(MAGIC) + 1 :]


def _mac(secret: bytes, label: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return hmac.digest(secret, label + master_nonce + slave_nonce, "sha256")


def slave_proof(secret: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return _mac(secret, b"mwpy slave proof", master_nonce, slave_nonce)


def master_proof(secret: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return _mac(secret, b"mwpy master proof", master_nonce, slave_nonce)


def proofs_match(expected: bytes, given: bytes) -> bool:
    return hmac.compare_digest(expected, given)


def derive_channel(secret: bytes, master_nonce: bytes, slave_nonce: bytes, *, is_master: bool) -> Channel:
    """The authenticated channel both sides derive after a successful handshake."""
    m2s = _mac(secret, b"mwpy key m2s", master_nonce, slave_nonce)
    s2m = _mac(secret, b"mwpy key s2m", master_nonce, slave_nonce)
    return Channel(send_key=m2s, recv_key=s2m) if is_master else Channel(send_key=s2m, recv_key=m2s)


# --------------------------------------------------------------------------
# TLS (optional; the proofs above authenticate, TLS adds confidentiality)


#: The type of a TLS socket: none until the first TLS context is made, which imports :mod:`ssl` (5 to 12 ms a
#: process that a run without TLS does not pay). The sockets' hot paths test ``isinstance(sock,
#: protocol.TLS_SOCKETS)``: read these three names through the module, they change.
TLS_SOCKETS: tuple[type[ssl.SSLSocket], ...] = ()
#: What a non-blocking read raises when nothing can be read now (TLS's "want read" too, once TLS is used).
WANT_READ: tuple[type[OSError], ...] = (BlockingIOError, InterruptedError)
#: What a non-blocking read or write raises when it cannot go on now (TLS's two "want" errors too, once used).
WOULD_BLOCK: tuple[type[OSError], ...] = WANT_READ


def _use_tls() -> None:
    """Import :mod:`ssl` (TLS's first use) and add its types to the names above."""
    global TLS_SOCKETS, WANT_READ, WOULD_BLOCK
    import ssl  # noqa: PLC0415

    TLS_SOCKETS = (ssl.SSLSocket,)
    WANT_READ = (BlockingIOError, InterruptedError, ssl.SSLWantReadError)
    WOULD_BLOCK = (*WANT_READ, ssl.SSLWantWriteError)


def tls_server_context(cert: str, key: str | None) -> tuple[ssl.SSLContext, str]:
    """The master's TLS context and its certificate's SHA-256 fingerprint (hex), for slaves to pin."""
    _use_tls()
    import ssl  # noqa: PLC0415 (loaded now)

    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        with open(cert, encoding="ascii") as pem:
            der = ssl.PEM_cert_to_DER_cert(pem.read())
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise ConfigurationError(f"--mw-tls-cert: cannot use {cert}: {exc}") from None
    return context, hashlib.sha256(der).hexdigest()


def tls_client_context() -> ssl.SSLContext:
    """The slave's TLS context: the certificate is checked by fingerprint, not by a CA."""
    _use_tls()
    import ssl  # noqa: PLC0415 (loaded now)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def certificate_matches(sock: ssl.SSLSocket, fingerprint: str) -> bool:
    der = sock.getpeercert(binary_form=True)
    return der is not None and hmac.compare_digest(hashlib.sha256(der).hexdigest(), fingerprint)


# --------------------------------------------------------------------------
# Frames


def frame(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


#: Bytes a frame adds around the payloads of the items it carries (header, kind,
#: tag, pickle framing); a safe upper bound used to split groups to fit.
FRAME_OVERHEAD = 64
#: Pickle framing per item in a group, also an upper bound.
ITEM_OVERHEAD = 64


def fits(payload_size: int, max_frame: int) -> bool:
    """Whether one item of ``payload_size`` bytes fits in a frame of ``max_frame`` bytes."""
    return payload_size + ITEM_OVERHEAD + FRAME_OVERHEAD <= max_frame


def pack(sizes: list[int], group: int, max_frame: int) -> Iterator[tuple[int, int]]:
    """Split items (by payload size) into runs of at most ``group`` that fit in a frame.

    Yields ``(start, stop)`` index ranges, in order. Every item must ``fits`` alone.
    """
    start = 0
    while start < len(sizes):
        stop = start
        total = FRAME_OVERHEAD
        while stop < len(sizes) and stop - start < group and total + sizes[stop] + ITEM_OVERHEAD <= max_frame:
            total += sizes[stop] + ITEM_OVERHEAD
            stop += 1
        yield start, stop
        start = stop


_TASKS_KIND = bytes([Tasks.kind])
_RESULTS_KIND = bytes([Results.kind])


def tasks_body(
    items: list[TaskItem],
    timeouts: dict[int, float] | None = None,
    keys: dict[int, str] | None = None,
    hold: list[int] | None = None,
) -> bytes:
    """The body of a Tasks message, encoded directly (no record object on the hot path)."""
    if hold:
        fields: tuple[Any, ...] = (items, timeouts or {}, keys or {}, hold)
    else:
        fields = (items, timeouts or {}, keys) if keys else (items, timeouts) if timeouts else (items,)
    return _TASKS_KIND + pickle.dumps(fields, PICKLE_PROTOCOL)


def results_body(items: list[ResultItem], outputs: dict[int, tuple[str, str]] | None = None) -> bytes:
    """The body of a Results message, encoded directly (``outputs`` only when a task printed)."""
    fields = (items, outputs) if outputs else (items,)
    return _RESULTS_KIND + pickle.dumps(fields, PICKLE_PROTOCOL)


class _Mac(Protocol):
    """What a per-frame MAC needs of a keyed hash object (``hashlib.blake2b``'s)."""

    def copy(self) -> _Mac: ...
    def update(self, data: bytes | memoryview, /) -> None: ...
    def digest(self) -> bytes: ...


def _keyed_mac(key: bytes) -> _Mac:
    """BLAKE2b in its keyed (MAC) mode with a ``TAG_SIZE`` digest, keyed once and copied per frame.

    RFC 7693's keyed BLAKE2b is a MAC on its own (no HMAC construction): half
    the cost of OpenSSL's HMAC-SHA256 object on a small frame, and the digest
    needs no truncation.
    """
    return hashlib.blake2b(key=key, digest_size=TAG_SIZE)


#: A frame body as it arrives: bytes, or a view into a reader's buffer.
_Body = TypeVar("_Body", bytes, memoryview)


class Channel:
    """Seals outgoing messages and opens incoming ones for one authenticated connection."""

    __slots__ = ("_send_mac", "_recv_mac", "_send_seq", "_recv_seq")

    def __init__(self, send_key: bytes, recv_key: bytes) -> None:
        # Keyed once and copied per frame: cheaper than keying an HMAC for every frame; same tags.
        self._send_mac = _keyed_mac(send_key)
        self._recv_mac = _keyed_mac(recv_key)
        self._send_seq = 0
        self._recv_seq = 0

    def seal(self, msg: Message) -> bytes:
        """The complete frame (header included) carrying ``msg``."""
        return self.seal_body(bytes([msg.kind]) + pickle.dumps(_fields(msg), PICKLE_PROTOCOL))

    def seal_body(self, body: bytes) -> bytes:
        """The complete frame around an already encoded body (a kind byte and its payload)."""
        mac = self._send_mac.copy()
        mac.update(_SEQ.pack(self._send_seq))
        mac.update(body)
        self._send_seq += 1
        return HEADER.pack(len(body) + TAG_SIZE) + body + mac.digest()

    def open(self, body: bytes | memoryview) -> Message:
        """Check a received frame body and decode its message (tag checked before anything is unpickled)."""
        data = self.verify_body(memoryview(body))  # a view, not a copy: the tag and pickle read the frame in place
        try:
            fields = pickle.loads(data[1:])
        except Exception as exc:
            raise ProtocolError(f"undecodable frame: {exc}") from None
        return _build(data[0], fields)

    def verify_body(self, body: _Body) -> _Body:
        """Check a received frame body's tag and return its data (kind byte and payload), unpickling nothing.

        :meth:`open` starts here; mwpy/data/link.py uses it alone, for a
        conversation with payloads of its own over a handshake's channel.
        """
        if len(body) < 1 + TAG_SIZE:
            raise ProtocolError("frame too short")
        data = body[:-TAG_SIZE]
        mac = self._recv_mac.copy()
        mac.update(_SEQ.pack(self._recv_seq))
        mac.update(data)
        if not hmac.compare_digest(mac.digest(), body[-TAG_SIZE:]):
            raise ProtocolError("frame failed authentication")
        self._recv_seq += 1
        return data


class FrameReader:
    """Splits a byte stream into frame bodies, refusing any frame over ``max_size``.

    ``buffer`` holds the bytes not yet taken (empty: no frame can be complete, no need to ask); ``feed(data)``
    appends to it. Both are the one bytearray's own, not methods of ours: a round trip reads a frame on each side,
    and a Python call less each way is what a one-task round trip is made of (docs/performance.md).
    """

    __slots__ = ("buffer", "feed", "max_size")

    def __init__(self, max_size: int) -> None:
        self.buffer = bytearray()
        self.feed: Callable[[bytes | bytearray | memoryview], None] = self.buffer.extend
        self.max_size = max_size

    def next(self) -> bytes | None:
        """The next complete frame body, or ``None`` until more bytes arrive."""
        buf = self.buffer
        if len(buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(buf)
        if size > self.max_size:
            raise ProtocolError(f"frame of {size} bytes exceeds the limit of {self.max_size}")
        end = HEADER.size + size
        if len(buf) < end:
            return None
        body = bytes(buf[HEADER.size : end])
        del buf[:end]
        return body

"""The resource file: what a running master tells batch systems and its slaves.

It is a public contract (documented key by key in docs/resource-file.md): one
JSON object, written atomically (temporary file in the same folder, fsync,
rename), mode 0600 because it carries the computation's secret. A reader
never sees a torn file, and a name with dots in it works.

Reading trusts nothing at the path (slaves, ``mwpy status`` and the overseer
all read through :func:`read`): only a regular file of at most
``MAX_SIZE`` bytes (mwpy/safe_files.py), strict JSON (no ``NaN``/``Infinity``,
no duplicate keys, at most ``MAX_DEPTH`` levels of nesting) and strict types.
Every problem is one :class:`ResourceFileError` line;
:class:`InvalidResourceFileError` when waiting will not fix it.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from mwpy import safe_files, strict_json
from mwpy.errors import InvalidResourceFileError, ResourceFileError, UnsafeFileError
from mwpy.names import CONDOR_JOB_ID, MAX_PEAK_MEMORY
from mwpy.resources import Resources

if TYPE_CHECKING:
    import cattrs

FORMAT = "mwpy-resource-file"
VERSION = 1
IN_PROGRESS: Final = "in-progress"
FINISHED: Final = "finished"
#: A file is stale once it is older than its update interval plus this share
#: of the interval (and at least ``MIN_STALE_GRACE`` seconds): the master
#: should have rewritten it by then.
STALE_GRACE_FACTOR = 0.5
MIN_STALE_GRACE = 10.0
#: A resource file is a few hundred bytes (a few KiB with many slave files);
#: anything bigger than this is refused unread.
MAX_SIZE = 1 << 20
#: The file is two levels deep; deeper nesting is refused before parsing
#: (the parser would otherwise recurse until RecursionError).
MAX_DEPTH = 32
#: Longer problem texts (a validator quoting a huge value) are cut to this.
MAX_MESSAGE = 400

Status = Literal["in-progress", "finished"]


def _hex(size: int | None) -> Callable[[Any, Any, str | None], None]:
    """A validator: ``None``, or hex digits (exactly ``size`` bytes' worth when given)."""

    def check(_: Any, attribute: Any, value: str | None) -> None:
        if value is None:
            return
        try:
            decoded = bytes.fromhex(value) if value.isascii() else b""
        except ValueError:
            decoded = b""
        if not decoded or (size is not None and len(decoded) != size):
            raise ValueError(f"{attribute.name} must be {f'{2 * size} ' if size else ''}hex digits")

    return check


def _job_id(_: Any, attribute: Any, value: str) -> None:
    """A validator: a Condor job id (``CLUSTER.PROC``)."""
    if CONDOR_JOB_ID.fullmatch(value) is None:
        raise ValueError(f"{attribute.name} must be a Condor job id (CLUSTER.PROC), not {value!r}")


def _job_ids(_: Any, attribute: Any, value: list[str]) -> None:
    """A validator: every item a Condor job id (``CLUSTER.PROC``), each once."""
    bad = next((job for job in value if CONDOR_JOB_ID.fullmatch(job) is None), None)
    if bad is not None:
        raise ValueError(f"{attribute.name} must hold Condor job ids (CLUSTER.PROC), not {bad!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} names a job twice")


_non_empty: Callable[[Any, Any, Any], Any] = attrs.validators.min_len(1)
_not_negative: Callable[[Any, Any, Any], Any] = attrs.validators.ge(0)


def _runs(_: Any, attribute: Any, value: list[int]) -> None:
    """A validator: ``[first, last, first, last, ...]``, task ids from 1 with ``first <= last`` in each pair."""
    pairs = len(value) % 2 == 0 and all(a <= b for a, b in zip(value[::2], value[1::2], strict=True))
    if not pairs or any(task < 1 for task in value):
        raise ValueError(f"{attribute.name} must be pairs of task ids [first, last, ...] with first <= last")


def _learned(_: Any, attribute: Any, value: dict[str, int] | None) -> None:
    """A validator: algorithm names and whole MB above zero (or None)."""
    if value is not None and not all(name and memory > 0 for name, memory in value.items()):
        raise ValueError(f"{attribute.name} must map algorithm names to MB above zero")


def _shape(_: Any, attribute: Any, value: str) -> None:
    """A validator: a need in ``--mw-slave-resources``' form (``cpus=2,memory=16384``)."""
    Resources.parse(value)  # its UsageError is a ValueError: one line, naming what is wrong


@attrs.frozen
class Flight:
    """Tasks one slave holds, in the order it runs them: the first runs now, since ``since`` (Unix time)."""

    slave: str
    since: float
    tasks: list[int]


@attrs.frozen
class Waiting:
    """Queued tasks in the order they will be sent, as runs of consecutive ids.

    ``slave``: the ordered slave whose own queue this is, or "" for the shared queue.
    """

    slave: str
    runs: list[int] = attrs.field(validator=_runs)


@attrs.frozen
class Need:
    """Listed queued tasks that ask a slave for ``resources`` (``--mw-slave-resources``' form), as runs of ids."""

    resources: str = attrs.field(validator=_shape)
    runs: list[int] = attrs.field(validator=_runs)


@attrs.frozen
class TooLong:
    """Listed queued tasks of ``algorithm`` that no connected slave would start: each leaves by plan (its
    lifetime) before the longest run of that algorithm it measured (``seconds``, the longest of them; of any
    algorithm where it ran none), times the slaves' margin, would end (mwpy/lifetime.py's rule)."""

    algorithm: str
    seconds: float = attrs.field(validator=_not_negative)
    runs: list[int] = attrs.field(validator=_runs)


@attrs.frozen
class TaskBoard:
    """Where each task stands, bounded: what ``mwpy status --explain TASK`` reads (docs/resource-file.md).

    ``queued`` lists each queue's first tasks in the order they will be sent; ``queued_beyond`` counts those
    past what is listed, and ``flights_complete`` is False when some slaves' tasks were left out: then a task
    found nowhere may still be queued or running, not done.
    """

    issued: int = attrs.field(validator=_not_negative)
    flights: list[Flight] = attrs.Factory(list)
    flights_complete: bool = True
    queued: list[Waiting] = attrs.Factory(list)
    queued_beyond: int = attrs.field(default=0, validator=_not_negative)
    #: What the listed queued tasks ask of a slave, for those that ask anything.
    needs: list[Need] = attrs.Factory(list)
    #: Listed queued tasks, per algorithm, that every connected slave would refuse for its lifetime.
    too_long: list[TooLong] = attrs.Factory(list)


@attrs.frozen
class ShapeDemand:
    """One need of the computation's tasks: how many tasks have it, how many connected slaves satisfy it."""

    resources: str = attrs.field(validator=_shape)
    tasks: int = attrs.field(validator=_not_negative)
    slaves: int = attrs.field(validator=_not_negative)

    def describe(self) -> str:
        """``memory 16384 MB: 12 tasks, 1 slave`` (what ``mwpy status`` and its live view show)."""
        tasks, slaves = (
            f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((self.tasks, "task"), (self.slaves, "slave"))
        )
        return f"{Resources.parse(self.resources).describe()}: {tasks}, {slaves}"


def describe_learned(learned: dict[str, int]) -> str:
    """``grow 263 MB; fit 4096 MB``: the memory each task algorithm was learned to need (``mwpy status``)."""
    return "; ".join(f"{algorithm} {memory} MB" for algorithm, memory in sorted(learned.items()))


@attrs.frozen
class ResourceFile:
    """Everything in one resource file; see docs/resource-file.md for each key."""

    computation_status: Status = attrs.field(validator=attrs.validators.in_((IN_PROGRESS, FINISHED)))
    timestamp: float
    update_interval: float = attrs.field(validator=attrs.validators.gt(0))
    member_id: str = attrs.field(validator=_non_empty)
    master_host: str = attrs.field(validator=_non_empty)
    master_port: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(65535)])
    slaves_needed: int = attrs.field(validator=_not_negative)
    slave_executable: str
    slave_files: list[str]
    slave_arguments: list[str]
    master_pid: int
    tasks_done: int = attrs.field(default=0, validator=_not_negative)
    tasks_pending: int = attrs.field(default=0, validator=_not_negative)
    tasks_running: int = attrs.field(default=0, validator=_not_negative)
    slaves_connected: dict[str, int] = attrs.Factory(dict)
    secret: str | None = attrs.field(default=None, validator=_hex(None))
    tls_fingerprint: str | None = attrs.field(default=None, validator=_hex(32))
    #: False until the master algorithm has run the loop: before that ``slaves_needed`` is not its word yet
    #: (a restarted master replays its journal first), so an overseer must not shrink on it.
    demand_stated: bool = True
    #: Condor job ids (CLUSTER.PROC) of the connected slaves that run as Condor jobs: the overseer
    #: replaces a running job that never shows up here (docs/condor.md).
    condor_jobs_connected: list[str] = attrs.field(factory=list, validator=_job_ids)
    #: Bytes: the largest peak memory (resident set) a slave of this computation reported; 0 while none did.
    #: The overseer asks Condor for at least this much (with headroom) for new slave jobs.
    slave_peak_memory: int = attrs.field(
        default=0,
        validator=[_not_negative, attrs.validators.le(MAX_PEAK_MEMORY)],  # not what no machine has
    )
    #: Tasks the computation runs in all, when the master knows (a declared total, a sized map); else None.
    tasks_total: int | None = attrs.field(default=None, validator=attrs.validators.optional(_not_negative))
    #: Slaves that ever connected: slaves that fail after that could start (a task killed them), see failing_slaves.
    slaves_greeted: int = attrs.field(default=0, validator=_not_negative)
    #: The master's own Condor job id (CLUSTER.PROC) when it runs as a Condor job (submit/master.sub), else None:
    #: the overseer removes the computation's slave jobs once that job has left the queue (docs/condor.md).
    master_condor_job: str | None = attrs.field(default=None, validator=attrs.validators.optional(_job_id))
    #: Where each task stands (bounded), for ``mwpy status --explain``; None from a master before it wrote one.
    task_board: TaskBoard | None = None
    #: Per need of the tasks (``resources=``): tasks not answered and connected slaves that satisfy it.
    shapes: list[ShapeDemand] = attrs.Factory(list)
    #: MB each task algorithm was learned to need, from Condor slaves lost near their memory limit
    #: (mwpy/core/memory.py); None from a master that does not learn it (the overseer then raises a held
    #: job's whole shape instead).
    learned_memory: dict[str, int] | None = attrs.field(default=None, validator=_learned)
    #: Answers the master found in its journal (--mw-journal) when it started: a restarted master answers tasks
    #: with those keys from it instead of running them again. 0 for a fresh journal, or without one.
    journal_answers: int = attrs.field(default=0, validator=_not_negative)
    #: True when the master's Condor job was removed (condor_rm): the master left for good, and slaves leave the
    #: queue (exit 0) instead of waiting for it. A master Condor starts again (a schedd restart) never says so.
    master_removed: bool = False
    #: Why ``slaves_needed`` is what it is, once task times are measured (mwpy/core/demand.py); "" before.
    demand_reason: str = ""
    #: Keyed tasks a restarted master waits for: their slaves, which outlived its predecessor, have not handed
    #: over yet (docs/reliability.md "A master restart"); the overseer removes or replaces no slave job meanwhile.
    awaited_handovers: int = attrs.field(default=0, validator=_not_negative)
    format: str = FORMAT
    version: int = VERSION

    @property
    def finished(self) -> bool:
        return self.computation_status == FINISHED

    def removal(self) -> str | None:
        """``master job 52.0 removed (its resource file says so)`` when the master said its job was removed."""
        if not self.master_removed:
            return None
        return f"master job {self.master_condor_job} removed (its resource file says so)"

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.timestamp

    def overdue(self, now: float | None = None) -> float:
        """Seconds past the point where the file counts as stale (negative while it is fresh)."""
        grace = max(MIN_STALE_GRACE, STALE_GRACE_FACTOR * self.update_interval)
        return self.age(now) - (self.update_interval + grace)

    def stale(self, now: float | None = None) -> bool:
        """True once the master is overdue for a rewrite (it is probably gone)."""
        return not self.finished and self.overdue(now) > 0

    def abandoned(self, limit: float, now: float | None = None) -> bool:
        """True once the master has been overdue for more than ``limit`` seconds: gone for good."""
        return not self.finished and self.overdue(now) > limit


@functools.cache
def _converter() -> cattrs.Converter:
    """The strict reader's converter, made at the first read: a master only writes the file, and a short
    script waits for its master's start-up (cattrs' import and generated functions, about 0.02 s)."""
    return strict_json.converter(str, int)


def dumps(record: ResourceFile) -> str:
    """The file's text (plain attrs: every value is already JSON's, so no converter is needed to write it)."""
    return json.dumps(attrs.asdict(record), indent=2, sort_keys=True) + "\n"


def _one_line(text: object) -> str:
    """``text`` with line breaks escaped: a file name or a value quoted from the file could hold some."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


def _invalid(source: str, problem: object) -> InvalidResourceFileError:
    """The one-line error for a file that is there but unusable (long problem texts cut short)."""
    text = _one_line(problem)
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "..."
    return InvalidResourceFileError(f"{_one_line(source)}: {text}")


#: A JSON string; an unterminated one runs to the end, so every quote matches and the scan stays linear.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(text: str) -> bool:
    """True if brackets outside strings nest deeper than ``MAX_DEPTH`` (stops at the first such one)."""
    depth = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{text} is out of range")
    return value


def _parse(text: str, source: str) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys, no deep nesting."""
    if _too_deep(text):
        raise _invalid(source, f"not JSON (nested deeper than {MAX_DEPTH} levels)")
    try:
        return json.loads(
            text,
            parse_constant=strict_json.refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=strict_json.unique_keys,
        )
    except RecursionError:  # not expected after _too_deep, but never a traceback
        raise _invalid(source, "not JSON (nested too deep)") from None
    except ValueError as exc:
        raise _invalid(source, f"not JSON ({exc})") from None


def loads(text: str, source: str = "resource file") -> ResourceFile:
    """Parse and validate; every problem becomes one :class:`InvalidResourceFileError` naming ``source``."""
    data = _parse(text, source)
    if not isinstance(data, dict):
        raise _invalid(source, "not a JSON object")
    if data.get("format") != FORMAT:
        raise _invalid(source, f"not an mwpy resource file (format is {data.get('format')!r})")
    if data.get("version") != VERSION or type(data.get("version")) is not int:
        raise _invalid(source, f"resource file version {data.get('version')!r}, this mwpy reads version {VERSION}")
    import cattrs  # noqa: PLC0415 - imported by the first read (see _converter)

    try:
        record = _converter().structure(data, ResourceFile)
    except Exception as exc:
        problems = (
            "; ".join(cattrs.transform_error(exc, format_exception=strict_json.describe))
            if isinstance(exc, cattrs.BaseValidationError)
            else exc
        )
        raise _invalid(source, problems) from None
    return record


def read(path: str | os.PathLike[str]) -> ResourceFile:
    """Read and validate the resource file at ``path``, whatever the path names.

    :class:`ResourceFileError` when the file is missing (or a transient I/O
    error): the master may yet write it. :class:`InvalidResourceFileError`
    for everything else: not a regular file, bigger than ``MAX_SIZE``, a
    symlink loop, no permission, not UTF-8, not a valid resource file.
    """
    try:
        data = safe_files.read_bytes(path, max_size=MAX_SIZE)
    except UnsafeFileError as exc:
        if exc.errno == errno.ENOENT:
            raise ResourceFileError(f"{_one_line(path)}: no such resource file") from None
        error = InvalidResourceFileError if exc.permanent else ResourceFileError
        raise error(f"{_one_line(path)}: cannot read the resource file: {exc.problem}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(
            str(path), f"cannot read the resource file: not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    return loads(text, str(path))


def write(path: str | os.PathLike[str], record: ResourceFile, *, durable: bool = True) -> None:
    """Replace the file atomically (readers see the old or the new file, never a mix), mode 0600, on disk unless
    not ``durable`` (a file in a folder of this process's own, which nobody restarts from)."""
    safe_files.write_atomically(path, dumps(record).encode("utf-8"), durable=durable)

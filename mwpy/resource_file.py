"""The resource file: what a running master tells batch systems and its slaves.

It is a public contract (documented key by key in docs/resource-file.md): one
JSON object, written atomically (temporary file in the same folder, fsync,
rename), mode 0600 because it carries the computation's secret. A reader
never sees a torn file, and a name with dots in it works.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import attrs
import cattrs

from mwpy.errors import ResourceFileError

FORMAT = "mwpy-resource-file"
VERSION = 1
IN_PROGRESS: Final = "in-progress"
FINISHED: Final = "finished"
#: A file is stale once it is older than its update interval plus this share
#: of the interval (and at least ``MIN_STALE_GRACE`` seconds): the master
#: should have rewritten it by then.
STALE_GRACE_FACTOR = 0.5
MIN_STALE_GRACE = 10.0

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


_non_empty: Callable[[Any, Any, Any], Any] = attrs.validators.min_len(1)
_not_negative: Callable[[Any, Any, Any], Any] = attrs.validators.ge(0)


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
    format: str = FORMAT
    version: int = VERSION

    @property
    def finished(self) -> bool:
        return self.computation_status == FINISHED

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.timestamp

    def stale(self, now: float | None = None) -> bool:
        """True once the master is overdue for a rewrite (it is probably gone)."""
        grace = max(MIN_STALE_GRACE, STALE_GRACE_FACTOR * self.update_interval)
        return not self.finished and self.age(now) > self.update_interval + grace


def _strict(*types: type) -> Callable[[Any, Any], Any]:
    """A structure hook that accepts only these JSON types (cattrs would coerce "123" to 123)."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) not in types:
            raise TypeError(f"expected {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")
        return value

    return structure


_converter = cattrs.Converter(forbid_extra_keys=False)
_converter.register_structure_hook(str, _strict(str))
_converter.register_structure_hook(int, _strict(int))
_converter.register_structure_hook(float, _strict(float, int))


def _describe(exc: BaseException, _: Any) -> str:
    """Problem text for cattrs: the validator's own message, not cattrs' generic one."""
    if isinstance(exc, KeyError):
        return "required key missing"
    return str(exc) or type(exc).__name__


def dumps(record: ResourceFile) -> str:
    return json.dumps(_converter.unstructure(record), indent=2, sort_keys=True) + "\n"


def loads(text: str, source: str = "resource file") -> ResourceFile:
    """Parse and validate; every problem becomes one :class:`ResourceFileError` naming ``source``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResourceFileError(f"{source}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResourceFileError(f"{source}: not a JSON object")
    if data.get("format") != FORMAT:
        raise ResourceFileError(f"{source}: not an mwpy resource file (format is {data.get('format')!r})")
    if data.get("version") != VERSION:
        raise ResourceFileError(
            f"{source}: resource file version {data.get('version')!r}, this mwpy reads version {VERSION}"
        )
    try:
        record = _converter.structure(data, ResourceFile)
    except Exception as exc:
        problems = (
            "; ".join(cattrs.transform_error(exc, format_exception=_describe))
            if isinstance(exc, cattrs.BaseValidationError)
            else exc
        )
        raise ResourceFileError(f"{source}: {problems}") from None
    return record


def read(path: str | os.PathLike[str]) -> ResourceFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResourceFileError(f"{path}: no such resource file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResourceFileError(f"{path}: cannot read the resource file ({exc})") from None
    return loads(text, str(path))


def write(path: str | os.PathLike[str], record: ResourceFile) -> None:
    """Replace the file atomically: readers see the old or the new file, never a mix.

    ``mkstemp`` creates the temporary file with mode 0600, which the rename keeps.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(dumps(record))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

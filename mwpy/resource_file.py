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
from pathlib import Path
from typing import Final, Literal

import attrs
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

Status = Literal["in-progress", "finished"]


class ResourceFileError(Exception):
    """The resource file is missing, unreadable or not a valid mwpy resource file."""


@attrs.frozen
class ResourceFile:
    """Everything in one resource file; see docs/resource-file.md for each key."""

    computation_status: Status
    timestamp: float
    update_interval: float
    member_id: str
    master_host: str
    master_port: int
    slaves_needed: int
    slave_executable: str
    slave_files: list[str]
    slave_arguments: list[str]
    master_pid: int
    tasks_done: int = 0
    tasks_pending: int = 0
    tasks_running: int = 0
    slaves_connected: dict[str, int] = attrs.Factory(dict)
    secret: str | None = None
    tls_fingerprint: str | None = None
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


_converter = cattrs.Converter(forbid_extra_keys=False)


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
        problems = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else exc
        raise ResourceFileError(f"{source}: {problems}") from None
    if record.computation_status not in (IN_PROGRESS, FINISHED):
        raise ResourceFileError(f"{source}: unknown computation_status {record.computation_status!r}")
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

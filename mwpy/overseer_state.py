"""What ``mwpy status`` knows of a running overseer: its cap on slave jobs, in a small file beside the resource file.

The master's ``slaves_needed`` is what its queued tasks could use (1,999 for
2,000 queued tasks); an overseer submits at most ``--max-jobs`` slave jobs. So
that status shows the demand that can be met ("8 more needed (overseer cap:
--max-jobs 10)"), ``mwpy overseer`` writes ``RESOURCE.overseer`` when it starts
and removes it when it stops. A file whose overseer no longer runs on this
host (killed) is ignored; one written on another host is believed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from mwpy import safe_files
from mwpy.errors import MwpyError

#: The file's name is the resource file's with this added.
SUFFIX = ".overseer"


def path_of(resource: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(resource)}{SUFFIX}")


def write(resource: str | os.PathLike[str], max_jobs: int, backend: str) -> str | None:
    """Say that this process oversees ``resource`` with at most ``max_jobs`` slave jobs; None, or why it could
    not (a folder it may not write in): the overseer works on without it, status shows the master's demand."""
    state = {"pid": os.getpid(), "host": socket.gethostname(), "max_jobs": max_jobs, "backend": backend}
    try:
        safe_files.write_atomically(path_of(resource), json.dumps(state).encode(), mode=0o644)
    except (OSError, MwpyError) as exc:
        return f"cannot write {path_of(resource)}: {exc}; mwpy status will show the master's demand uncapped"
    return None


def remove(resource: str | os.PathLike[str]) -> None:
    with contextlib.suppress(OSError):
        path_of(resource).unlink(missing_ok=True)


def max_jobs(resource: str | os.PathLike[str]) -> int | None:
    """The running overseer's ``--max-jobs``, or None (no overseer, or its file is unreadable or stale)."""
    try:
        state = json.loads(safe_files.read_bytes(path_of(resource), max_size=4096))
    except (MwpyError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("max_jobs"), int) or isinstance(state["max_jobs"], bool):
        return None
    pid = state.get("pid")
    if state.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
        return None
    return int(state["max_jobs"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return pid > 0


def needed_within(needed: int, connected: int, cap: int | None) -> int:
    """The slaves still to start that a cap on slaves allows: ``needed``, at most ``cap - connected``."""
    return needed if not cap else min(needed, max(0, cap - connected))

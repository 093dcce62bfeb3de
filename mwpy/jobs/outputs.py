"""``mwpy jobs``' say over what a job sends back: which outputs it may produce, its budget, stopping it.

The file service (:mod:`mwpy.data.service`) takes uploads and usage reports
for any job; whether an output is one the job may produce
(``transfer_output_files``, or top-level files that are not hidden), where
its stdout and stderr go, how many bytes and files it may send
(``--max-output-bytes``/``--max-output-files``) and whether a running job is
held or removed (its periodic expressions) are HTCondor's semantics, decided
here by :class:`JobOutputs`, the service's :class:`~mwpy.data.service.Outputs`
policy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

import attrs

from mwpy.data.landing import Landing, OutputRefused, check_output_name, shown
from mwpy.data.service import FileService

#: Default caps on what one job may send back (``mwpy jobs --max-output-bytes/--max-output-files``).
MAX_OUTPUT_BYTES: Final = 16 << 30
MAX_OUTPUT_FILES: Final = 10_000


@attrs.frozen
class Destination:
    """Where one job's outputs may land: below ``initialdir``, never over ``protected`` (real paths).

    ``outputs`` are the upload names ``transfer_output_files`` gives
    (:func:`output_upload_name`): only they and the trees below them are
    taken; None (the command is absent) takes top-level files that are not
    hidden. ``streams`` maps the upload names of the job's stdout and stderr
    to the paths the submit file gave them (the master's choice, not the slave's).
    """

    initialdir: str
    protected: frozenset[str]
    streams: tuple[tuple[str, str], ...] = ()
    max_bytes: int = MAX_OUTPUT_BYTES
    max_files: int = MAX_OUTPUT_FILES
    outputs: tuple[str, ...] | None = None


def output_upload_name(entry: str) -> str:
    """The name a ``transfer_output_files`` entry comes back under: its last component (a file, or a folder's root)."""
    return os.path.basename(os.path.normpath(entry))


def check_output_allowed(dest: Destination, name: str) -> None:
    """Refuse an output the job may not produce: one ``transfer_output_files`` does not name (nor a tree below
    a name), or, without that command, anything but a top-level file that is not hidden."""
    parts = check_output_name(name)
    if dest.outputs is None:
        if len(parts) > 1:
            raise OutputRefused(f"output {shown(name)} is not a top-level file (transfer_output_files names none)")
        if name.startswith("."):
            raise OutputRefused(f"output {shown(name)} is a hidden file transfer_output_files does not name")
        return
    if not any(name == entry or name.startswith(entry + "/") for entry in dest.outputs):
        raise OutputRefused(f"output {shown(name)} is not one transfer_output_files names")


class JobOutputs:
    """The jobs in flight, where their outputs land and what they sent so far; thread-safe (the file service's
    workers ask)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._destinations: dict[str, Destination] = {}  # job token -> where its outputs may land
        self._budget: dict[str, tuple[int, int]] = {}  # job token -> (files, bytes) received so far
        #: Asked with a running job's token and usage (numbers): "hold"/"remove" stops the job (its policy).
        self.checks: Callable[[str, dict[str, float]], str | None] | None = None

    @classmethod
    def of(cls, service: FileService) -> JobOutputs:
        """``service``'s job outputs, made its policy on first use."""
        if not isinstance(service.outputs, cls):
            service.outputs = cls()
        return service.outputs

    def expect(self, token: str, destination: Destination) -> None:
        """Accept outputs for job ``token`` until the file service forgets it."""
        with self._lock:
            self._destinations[token] = destination

    def forget(self, token: str) -> None:
        with self._lock:
            self._destinations.pop(token, None)
            self._budget.pop(token, None)

    def usage(self, token: str, usage: dict[str, float]) -> str | None:
        """Only a job in flight is stopped."""
        with self._lock:
            known = token in self._destinations
        return self.checks(token, usage) if known and self.checks is not None else None

    def landing(self, token: str, name: object, size: object) -> tuple[Landing, int]:
        """Where an upload may land, checked against what the job may produce and its budget; refuse the rest."""
        with self._lock:
            dest = self._destinations.get(token)
        if dest is None:
            raise OutputRefused(f"job {token[:40]!r} is not expecting outputs")
        if not isinstance(name, str) or not isinstance(size, int) or size < 0:
            raise OutputRefused("malformed upload header")
        streams = dict(dest.streams)
        if name not in streams:
            check_output_allowed(dest, name)
        with self._lock:
            if not self._charge(token, size, dest):
                raise OutputRefused(f"job {token} sent more than {dest.max_bytes} bytes or {dest.max_files} files")
        folder = dest.initialdir
        if name in streams:  # stdout, stderr (checked before any job), a remap: its folder made as Condor makes it
            folder, name = os.path.split(streams[name])
            os.makedirs(folder, exist_ok=True)
        return Landing(folder, name, dest.protected), size

    def _charge(self, token: str, size: int, dest: Destination) -> bool:
        """Count one more output of ``size`` bytes against job ``token``'s budget, if it fits (lock held)."""
        files, total = self._budget.get(token, (0, 0))
        if files + 1 > dest.max_files or total + size > dest.max_bytes:
            return False
        self._budget[token] = (files + 1, total + size)
        return True

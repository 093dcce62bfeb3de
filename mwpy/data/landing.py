"""Where an upload lands on the receiving side: below its folder, never through a link, never over what is kept.

Uploads are the part a hostile peer could abuse, so the receiving side
decides where they land (:class:`Landing`, given by the service's
:class:`~mwpy.data.service.Outputs` policy) and :func:`place_output` writes
them: never a name with a control character or a ``..``, only below the
folder, never through a symbolic link, never over a protected path (a job's
inputs, the run's own files), written to a temporary name and renamed into
place once complete.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import attrs

from mwpy import safe_files, safe_text
from mwpy.errors import MwpyError

#: Prefix of the temporary names uploads (and fetched files) are written under before the rename.
UPLOAD_PREFIX: Final = ".mwpy-upload-"


class OutputRefused(MwpyError):
    """A slave asked to write an output where it may not (outside initialdir, over an input, ...)."""


@attrs.frozen
class Landing:
    """Where one upload lands: ``name`` (relative) below ``folder``, never over ``protected`` (real paths)."""

    folder: str
    name: str
    protected: frozenset[str]


def shown(name: str) -> str:
    """An output name quoted in a refusal (which the slave reports, and mwpy jobs may print): one safe line."""
    return "'" + safe_text.one_line(name[:200]) + ("...'" if len(name) > 200 else "'")


def check_output_name(name: str) -> list[str]:
    """The components of a relative output name; refuse absolute paths, ``..``, ``.``, empty parts, controls."""
    if not name or name.startswith("/") or "\\" in name:
        raise OutputRefused(f"output name {shown(name)} is not a relative path")
    if not safe_text.is_plain(name):  # a newline or an ESC in a file name is a trap for whoever lists the folder
        raise OutputRefused(f"output name {shown(name)} has control characters")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OutputRefused(f"output name {shown(name)} may not contain '..', '.' or empty parts")
    if any(part.startswith(UPLOAD_PREFIX) for part in parts):
        raise OutputRefused(f"output name {shown(name)} uses mwpy's temporary prefix")
    return parts


def _open_parent(folder: str, parts: list[str]) -> int:
    """A descriptor of the output's folder below ``folder``, made as needed, never through a symbolic link."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                raise OutputRefused(f"output folder {part!r} is a symbolic link or not a folder") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def place_output(landing: Landing, chunks: Iterator[bytes]) -> Path:
    """Write ``chunks`` as ``folder/name`` (temporary name, then rename); return the final path."""
    name = landing.name
    parts = check_output_name(name)
    final = Path(landing.folder, *parts)
    parent = _open_parent(landing.folder, parts)
    try:
        real = os.path.join(os.path.realpath(f"/proc/self/fd/{parent}"), parts[-1])
        if real in landing.protected or os.path.realpath(final) in landing.protected:
            raise OutputRefused(f"output {shown(name)} would overwrite one of the job's inputs or the run's own files")
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode):
                raise OutputRefused(f"output {shown(name)} is a folder on the submit side")
        with safe_files.replacing(parts[-1], mode=None, dir_fd=parent, prefix=UPLOAD_PREFIX) as out:
            for chunk in chunks:
                out.write(chunk)
    finally:
        os.close(parent)
    return final

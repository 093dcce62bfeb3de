"""Files mwpy reads without trusting what is at the path, and files it replaces atomically.

A path given to mwpy (resource file, secret file, journal) may name anything:
a FIFO that blocks ``open`` and ``read`` for ever, ``/dev/zero`` that never
ends, a directory, a symlink loop, a file another user can rewrite. Every
reader goes through here so that each of these becomes one
:class:`~mwpy.errors.UnsafeFileError` with a one-line message instead of a
hang, a memory blow-up or a traceback.

The rules: open with ``O_NONBLOCK`` (a FIFO or device cannot block the open),
then ``fstat`` *the opened descriptor* (not the path, which could be swapped in
between) and accept only a regular file, no bigger than a cap; optionally only
one owned by this user and not writable by group or others. Symlinks are
followed on purpose: users link their files, and the checks apply to the
target.

Writing is the other half: a file others read while mwpy rewrites it (the
resource file, a report, the slave bundle, ``mwpy jobs``' outputs and
summary) is written under a temporary name beside it and renamed over it
(:func:`replacing`), so a reader sees the old file or the new one, never a
mix, and a failed write leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from mwpy.errors import UnsafeFileError

#: Errors that may clear by themselves (the file may appear, the system may
#: free a descriptor); anything else stays until someone fixes the file.
TRANSIENT_ERRNOS = frozenset(
    {errno.ENOENT, errno.EINTR, errno.EAGAIN, errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ESTALE}
)
#: Mode bits that let someone else change a file mwpy trusts.
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: Mode bits that let someone else read a file: a secret's must be clear of them (as ssh demands of a key).
OTHERS_READ = stat.S_IRGRP | stat.S_IROTH

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "something else")


def _os_error(path: str | os.PathLike[str], exc: OSError) -> UnsafeFileError:
    """One line for an ``OSError`` (its text without the path repeated), transient or not by errno."""
    if exc.errno == errno.ELOOP:
        problem = "a symlink loop (too many levels of symbolic links)"
    else:
        problem = exc.strerror or str(exc)
    return UnsafeFileError(os.fspath(path), problem, permanent=exc.errno not in TRANSIENT_ERRNOS, errno=exc.errno)


def check(
    path: str | os.PathLike[str], info: os.stat_result, *, max_size: int | None, private: bool, secret: bool = False
) -> None:
    """Refuse what ``info`` (an ``fstat`` of the opened file) shows to be unsafe to use as ``path``.

    ``secret``: also refuse a file its group or others can read (whoever reads it is inside the computation).
    """
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(os.fspath(path), f"{_kind(info.st_mode)}, not a regular file")
    if max_size is not None and info.st_size > max_size:
        raise UnsafeFileError(os.fspath(path), f"too big: {info.st_size} bytes, the limit is {max_size}")
    if private:
        if info.st_uid != os.geteuid():
            raise UnsafeFileError(os.fspath(path), f"owned by user id {info.st_uid}, not by this user ({os.geteuid()})")
        if info.st_mode & OTHERS_WRITE:
            who = " and ".join(
                name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if info.st_mode & bit
            )
            raise UnsafeFileError(
                os.fspath(path), f"writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}); chmod go-w it"
            )
    if secret and info.st_mode & OTHERS_READ:
        who = " and ".join(
            name for bit, name in ((stat.S_IRGRP, "its group"), (stat.S_IROTH, "others")) if info.st_mode & bit
        )
        raise UnsafeFileError(
            os.fspath(path), f"readable by {who} (mode {stat.S_IMODE(info.st_mode):04o}); chmod go-rwx it"
        )


def open_checked(
    path: str | os.PathLike[str],
    *,
    max_size: int | None = None,
    private: bool = False,
    secret: bool = False,
    flags: int = os.O_RDONLY,
    create_mode: int = 0o600,
) -> int:
    """A descriptor of ``path`` once :func:`check` accepts it; the caller closes it.

    ``private`` also demands that this user owns the file and nobody else can
    write it (for secrets and journals); ``secret``, that nobody else can read it. With ``os.O_CREAT`` in ``flags`` a
    missing file is created with ``create_mode`` (0600 unless told otherwise).
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, create_mode)
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        check(path, os.fstat(fd), max_size=max_size, private=private or secret, secret=secret)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str], *, max_size: int, private: bool = False, secret: bool = False) -> bytes:
    """The content of a regular file of at most ``max_size`` bytes, whatever the path names.

    Reads at most ``max_size + 1`` bytes, so a file that grows after the
    ``fstat`` (or a file system that reports size 0) still cannot make the
    reader eat memory.
    """
    fd = open_checked(path, max_size=max_size, private=private, secret=secret)
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= max_size:
            chunk = os.read(fd, max_size + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _os_error(path, exc) from None
    finally:
        os.close(fd)
    if size > max_size:
        raise UnsafeFileError(os.fspath(path), f"too big: more than {max_size} bytes, the limit is {max_size}")
    return b"".join(chunks)


def check_existing(path: str | os.PathLike[str], *, private: bool = True) -> bool:
    """Apply the rules to ``path`` if it exists (False if it does not), without reading it.

    For files another library opens by name (SQLite's journal): that library
    opens the path again, so this narrows the window rather than closing it;
    it is meant against mistakes and shared folders, not against someone who
    can already replace files in the folder.
    """
    try:
        fd = open_checked(path, private=private)
    except UnsafeFileError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    os.close(fd)
    return True


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    mode: int | None = 0o600,
    durable: bool = False,
    dir_fd: int | None = None,
    prefix: str | None = None,
) -> Iterator[BinaryIO]:
    """A new file, written in the ``with`` block, that takes ``path``'s place when the block ends.

    An exception in the block (a hash that does not match, a full disk)
    removes the new file and leaves ``path`` as it was. ``mode``: the new
    file's mode, exactly (``None``: as any new file gets it, 0666 less the
    umask). ``durable``: on disk before the rename (the resource file, which
    other machines read). ``dir_fd``: ``path`` is a name in that open folder,
    and the temporary file is made there without following a symbolic link
    (``mwpy jobs``' outputs). ``prefix``: the temporary name's beginning
    (default ``.NAME.``), for a folder whose readers skip such names.
    """
    name = os.fspath(path)
    folder, base = os.path.split(name)
    temporary = os.path.join(folder, f"{prefix or f'.{base}.'}{os.urandom(8).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o666 if mode is None else 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            if durable:
                os.fsync(out.fileno())
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def write_atomically(
    path: str | os.PathLike[str], data: bytes, *, mode: int | None = 0o600, durable: bool = False
) -> None:
    """Replace ``path`` with ``data`` as :func:`replacing` does."""
    with replacing(path, mode=mode, durable=durable) as out:
        out.write(data)


#: The temporary folders a run makes (an executor's work folder, the master's shared objects, a slave's
#: cache), each named ``<prefix><pid>-<random>`` after the process that owns it.
RUN_FOLDER_PREFIXES = ("mwpy-executor-", "mwpy-shared-", "mwpy-cache-")


def run_folder(prefix: str) -> str:
    """A new private temporary folder named after this process: if the process is killed (``kill -9``) before
    it removes the folder, the next run does (:func:`sweep_dead_runs`)."""
    import tempfile  # noqa: PLC0415 (with shutil, 3 ms a slave would pay before its first task for nothing)

    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def sweep_dead_runs() -> None:
    """Remove this user's run folders in the temporary folder whose owner process is gone."""
    import shutil  # noqa: PLC0415 (see run_folder)
    import tempfile  # noqa: PLC0415

    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return
    for entry in entries:
        prefix = next((prefix for prefix in RUN_FOLDER_PREFIXES if entry.name.startswith(prefix)), None)
        pid, _, rest = entry.name[len(prefix or "") :].partition("-")
        if prefix is None or not pid.isdigit() or not rest:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not _alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True

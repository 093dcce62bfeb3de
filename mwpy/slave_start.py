"""How a local slave process starts: in its sandbox, with ``TMPDIR`` there, its output in two files there.

The one home of it for the local back end (mwpy/backends/local.py), which starts and restarts local slave jobs,
and for :class:`mwpy.Executor`, which starts its first local slaves before mwpy's engine is even imported
(mwpy/executor.py) and hands them to the back end. So it imports nothing heavy: the standard library's
``subprocess`` and mwpy's names.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from mwpy.names import SLAVE_STDERR, SLAVE_STDOUT


def job_id(number: int) -> str:
    """The id of the local back end's ``number``-th slave job (its sandbox folder's name too)."""
    return f"local.{number}"


def start_process(command: Sequence[str], sandbox: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
    """Start ``command`` in ``sandbox``; its stdout and stderr are appended to the sandbox's slave.out and slave.err.

    Its temporary files go to the sandbox too (Condor's starter points ``TMPDIR`` there): a slave's caches go
    with its sandbox even when it is killed before it can remove them.
    """
    folder = os.fspath(sandbox)
    with open(os.path.join(folder, SLAVE_STDOUT), "ab") as out, open(os.path.join(folder, SLAVE_STDERR), "ab") as err:
        return subprocess.Popen(
            list(command),
            cwd=folder,
            env={**os.environ, "TMPDIR": folder},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )

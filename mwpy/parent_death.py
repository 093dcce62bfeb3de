"""A child process that does not outlive the process that started it.

Used where a child left alone would wait or run for nothing: ``mwpy local``'s
master when its launcher is killed (no slave would be started again), and a
``mwpy jobs`` job whose slave is gone (Condor's starter kills a job whose
shadow is gone; a local slave that leaves by ``os._exit`` cannot).

Two ways. :func:`ends_with_this_process` is Linux's ``PR_SET_PDEATHSIG``, set
in a ``preexec_fn``: exact, but a ``preexec_fn`` makes :mod:`subprocess` fork
the whole parent and run Python in the child before the exec (3 to 5 ms for a
50 MB slave, against 0.2 ms for the ``vfork`` it uses otherwise), which is paid
per job. :class:`DeathWatch` is a ``/bin/sh`` started once beside the process:
it is told each child's pid and kills the child when the process's end closes
its pipe, however the process ended (``os._exit``, SIGKILL), so the children
are started with nothing before their exec. Elsewhere than Linux
:func:`ends_with_this_process` does not tie the child; a DeathWatch does.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

#: The watcher: the last pid it was told (an empty line: none) gets SIGKILL when its input ends (the owner's
#: end closes the pipe). Signals sent to the owner's group or session do not reach it (its own session) and
#: are ignored anyway, so that it outlives its owner by the time it takes to read the end of its input.
WATCHER = """trap '' HUP INT QUIT TERM PIPE
child=
while read -r line; do child=$line; done
if [ -n "$child" ]; then kill -s KILL "$child" 2>/dev/null; fi
"""

#: prctl(2)'s option: the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Any:
    """libc's prctl(2), looked up once (a job starts per call of ends_with_this_process); None off Linux."""
    return getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform == "linux" else None


def ends_with_this_process(signal_number: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``signal_number`` when this process dies; None off Linux.

    Resolved here, before the fork: the child only makes the call. A parent that died between the fork and
    the call is caught by the parent id, which is then no longer ours. The signal follows the death of the
    *thread* that forked: call this from the thread that lives as long as the process (the main thread).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal_number))
        if os.getppid() != parent:
            os.kill(os.getpid(), signal_number)

    return set_parent_death_signal


class DeathWatch:
    """Kills the child it was last told of when this process dies, however it dies (a ``/bin/sh`` beside it).

    :meth:`guard` the child's pid as soon as it is started and :meth:`release` it once it has been waited
    for; one child at a time. A child started and not yet guarded when this process is killed (the few
    microseconds between its ``Popen`` and :meth:`guard`) is not killed, and a pid released a few
    microseconds after its wait could be another process's only if the system's pids came round in that time.
    """

    def __init__(self) -> None:
        self._pipe = -1
        self._watcher: subprocess.Popen[bytes] | None = None

    def guard(self, pid: int) -> None:
        """SIGKILL ``pid`` if this process dies before :meth:`release`."""
        self._tell(f"{pid}\n".encode())

    def release(self) -> None:
        """The guarded child has ended and was waited for: nothing to kill any more."""
        self._tell(b"\n")

    def _tell(self, line: bytes) -> None:
        if self._watcher is None or self._watcher.poll() is not None:
            self._start()  # the first time, or the watcher died (killed by hand, out of memory)
        try:
            os.write(self._pipe, line)
        except BrokenPipeError:  # it died just now: a new one is told
            self._start()
            os.write(self._pipe, line)

    def _start(self) -> None:
        self._stop()
        read, self._pipe = os.pipe()  # neither end is inherited by a job (close-on-exec)
        try:
            self._watcher = subprocess.Popen(
                ["/bin/sh", "-c", WATCHER],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        finally:
            os.close(read)

    def _stop(self) -> None:
        """Close the pipe of a watcher that is gone (or never started) and reap it."""
        if self._pipe >= 0:
            with contextlib.suppress(OSError):
                os.close(self._pipe)
            self._pipe = -1
        if self._watcher is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watcher.wait(timeout=1)
            self._watcher = None

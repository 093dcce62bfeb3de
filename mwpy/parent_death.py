"""A child process that does not outlive the process that started it (Linux's ``PR_SET_PDEATHSIG``).

Used where a child left alone would wait or run for nothing: ``mwpy local``'s
master when its launcher is killed (no slave would be started again), and a
``mwpy jobs`` job whose slave is gone (Condor's starter kills a job whose
shadow is gone; a local slave that leaves by ``os._exit`` cannot). Elsewhere
than Linux there is no such call and the child is not tied.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

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

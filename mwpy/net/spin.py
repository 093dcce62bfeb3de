"""Poll briefly before sleeping when the answer is likely to come soon (adaptive spinning).

Why: one task's round trip wakes the slave and then the master from a sleep
in ``poll``/``epoll``. On this project's machines (virtual CPUs) a process
woken that way spends about three times longer in its own Python code than
the same code run hot, and the round trip was 3.1 times a bare pickle echo.
Polling without sleeping for a moment first — as MPI libraries spin before
they block — brought it to about twice the echo (docs/performance.md, "Issue 13 at
a3be26d"). The cost is CPU burnt while nothing comes, so the spin is
adaptive, like glibc's adaptive mutexes: it is tried only while waits have
recently ended within the spin time, and one spin that found nothing turns
it off until a sleep again ends that soon. Waits of a task seconds long, or
an idle computation, therefore cost one failed spin, not one per wait.
``--mw-spin-us 0`` turns it off.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sized
from typing import TypeVar

_Ready = TypeVar("_Ready", bound=Sized)


class Spinner:
    """Waits through ``poll(timeout)`` (seconds; ``None``: forever), spinning first when it has paid off lately."""

    __slots__ = ("_spin", "_worth")

    def __init__(self, spin_us: int) -> None:
        self._spin = spin_us / 1e6
        #: Whether the last wait ended within the spin time (then the next one spins first).
        self._worth = spin_us > 0

    def wait(
        self,
        poll: Callable[[float | None], _Ready],
        timeout: float | None,
        quick: Callable[[], _Ready] | None = None,
    ) -> _Ready:
        """What ``poll`` reports, within ``timeout``; a wait of 0 never spins. ``quick()``, when given, is ``poll(0)``
        made cheaper, for the looks of a spin (its poll's own call, with no conversion of units)."""
        spin = self._spin
        if timeout == 0 or not spin:
            return poll(timeout)
        if self._worth:
            clock = time.perf_counter
            end = clock() + (spin if timeout is None else min(spin, timeout))
            look = functools.partial(poll, 0) if quick is None else quick
            while True:
                ready = look()
                if ready:
                    return ready
                if clock() >= end:
                    break
                os.sched_yield()  # another process runnable on this CPU (the peer, on a small machine) goes first
            self._worth = False
            if timeout is not None:
                timeout = max(0.0, timeout - spin)
        started = time.perf_counter()
        ready = poll(timeout)
        self._worth = bool(ready) and time.perf_counter() - started < spin
        return ready

"""A master job removed (``condor_rm``) or one Condor will start again: both get SIGTERM, only one leaves for good.

In the scheduler universe ``condor_rm`` and a schedd that shuts down (a
restart, a reboot: it starts the job again when it comes back) send the
master the same SIGTERM. The master asks its schedd for its own job: removed
(``JobStatus == 3``), it says so in the resource file (``master_removed``) and
tells its slaves to leave, so that their jobs leave the queue; otherwise it
ends as the signal ends it, and its slaves wait for the master Condor brings back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from mwpy.job_ad import own_job_id


class MasterRemoved(KeyboardInterrupt):
    """SIGTERM while the schedd holds this master's job as removed (``condor_rm``): it unwinds the master algorithm
    as Ctrl-C does (code that survives Ctrl-C survives it), and the master tells its slaves to leave."""


@contextlib.contextmanager
def leaving_when_removed() -> Iterator[None]:
    """While the master algorithm runs as a Condor job: a SIGTERM raises :class:`MasterRemoved` when the schedd
    holds the job as removed; any other SIGTERM ends the process as before."""
    job = own_job_id()
    if not job or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during the question ends the process
        from mwpy.backends.htcondor import job_removed  # noqa: PLC0415 (the bindings: only on a SIGTERM)

        if job_removed(job):
            raise MasterRemoved
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

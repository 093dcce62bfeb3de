"""A slave outliving its master: wait, within the lease, for a restarted master to answer, then connect to it.

HTCondor's starter keeps running its job while the shadow or schedd restarts
and reconnects within the job lease (``JobLeaseDuration``); an mwpy slave
does the same for its master (``--mw-master-lease``). The slave's running task
has ended by then (the slave's own thread runs it); what it keeps are the
results of its keyed tasks (:attr:`mwpy.slave.Slave.held`), handed over on
the new connection. The resource file is read again for each attempt: a
restarted master writes its new address, secret and start there.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from mwpy.observe.audit import Audit
from mwpy.slaveside.connection import SlaveExit
from mwpy.wire.protocol import ExitCode

#: Seconds between two attempts to reach a restarted master (each reads the resource file again).
RETRY = 1.0

_Slave = TypeVar("_Slave")


class _Evicted(Exception):
    """Condor's soft-kill signal while waiting: nothing runs and nothing is the master's, so leave."""


def await_master(connect: Callable[[], _Slave], lease: float, audit: Audit) -> _Slave:
    """``connect()`` (which reads the resource file and connects) until it succeeds or ``lease`` seconds pass.

    Raises :class:`SlaveExit`: ``MASTER_LOST`` once the lease ran out, ``EVICTED`` on the soft-kill signal,
    or whatever ``connect`` raised that is not a master still missing (the computation finished: 0; a bad
    resource file: 6).
    """
    deadline = time.monotonic() + lease
    audit(f"MASTER GONE: waiting up to {lease:.0f} s more for a restarted master (--mw-master-lease)")
    audit.flush()

    def evicted(signum: int, frame: FrameType | None) -> None:
        raise _Evicted

    previous = signal.signal(signal.SIGTERM, evicted)
    try:
        while True:
            try:
                return connect()
            except SlaveExit as exc:
                if exc.code not in (ExitCode.UNREACHABLE, ExitCode.REFUSED):  # finished, a bad file: say so
                    raise
                if time.monotonic() + RETRY > deadline:
                    raise SlaveExit(
                        ExitCode.MASTER_LOST, f"no master came back within the lease (--mw-master-lease; {exc.reason})"
                    ) from None
            time.sleep(RETRY)
    except _Evicted:
        raise SlaveExit(ExitCode.EVICTED, "left on a soft-kill signal while waiting for a restarted master") from None
    finally:
        signal.signal(signal.SIGTERM, previous)

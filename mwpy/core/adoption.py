"""A restarted master adopts its predecessor's work in flight: keyed tasks are neither lost nor run twice.

With ``--mw-journal`` the master notes in the journal, before they leave, which
slave (host, pid) each keyed task goes to, and forgets the note once the task's
result is journaled. A master that starts on a journal holding such notes knows
what its predecessor had out when it died. A slave outlives a vanished master
for ``--mw-master-lease`` seconds (mwpy/slaveside/lease.py), finishes its task
and hands the results of its keyed tasks over to the restarted master
(``Handover``). Until then, a task submitted with one of those keys is *parked*:
not dispatched, since its slave may be running it still.

* A held result whose key is submitted answers that task: delivered once,
  journaled, never dispatched. One whose key is never submitted (answered from
  the journal, or the program asks for fewer tasks now) is dropped when the
  computation finishes, with a log line and an audit line per key.
* Once a slave has handed over, the keys it was noted for and did not hold
  (queued there, never started) are dispatched as usual.
* Keys whose slave is known to have ended are dispatched as usual at once, never
  waited for: the same Condor job (or host and pid) connects again as a new process,
  its job's user log says it ran again or ended, or, on this machine, its pid is
  gone. Waiting holds back those keys' tasks only, never other work.
* Keys whose slave has not come back when the lease has passed since the journal
  was last written (the predecessor's death, near enough) are dispatched as usual:
  the slave died during the lease, as HTCondor gives up on a starter after its job lease.

No socket and no clock of its own: the engine calls it with what arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from mwpy import safe_text
from mwpy.core.entry import Entry
from mwpy.wire.protocol import HeldItem

log = safe_text.logger("mwpy.master")

#: Delivers a held result to its task: (entry, slave id, held item); False if it cannot be read here (the task
#: then runs again).
Adopt = Callable[[Entry, str, HeldItem], bool]
#: Hears of a held result no task asked for, dropped: (slave id, key).
Dropped = Callable[[str, str], None]
#: Seconds between two looks at whether the slaves waited for have ended (a look may read a Condor user log).
LOOK_EVERY = 1.0


class Holder(NamedTuple):
    """The slave a predecessor gave a keyed task to: its process, its Condor job ("" outside Condor), and
    when (Unix time) the task went out."""

    host: str
    pid: int
    job: str
    since: float


#: Whether a slave waited for has surely ended (mwpy/slave_exits.py looks).
Gone = Callable[[Holder], bool]


class Adoption:
    """What a restarted master waits for: its predecessor's keyed tasks out on slaves, and what slaves hand over."""

    def __init__(
        self,
        running: dict[str, Holder],
        *,
        left: float,
        queue: Callable[[Entry], None],
        adopt: Adopt,
        gone: Gone,
        dropped: Dropped,
    ) -> None:
        """``running``: key -> the slave the predecessor gave it to; ``left``: seconds from now to wait for
        those slaves; ``queue(entry)``: dispatch as usual; ``adopt``: answer from a held result;
        ``gone(holder)``: whether such a slave has surely ended; ``dropped``: a held result no task asked for."""
        self._expected = running if left > 0 else {}  # past the lease already, or a first run: nobody to wait for
        self._left = left
        self._until: float | None = None  # on the caller's clock, from its first tick
        self._looked = float("-inf")  # when (caller's clock) ``gone`` was last asked
        self._gone = gone
        self._queue = queue
        self._adopt = adopt
        self._dropped = dropped
        #: Tasks submitted with an expected key, waiting for their slave (a program may submit a key twice).
        self._parked: dict[str, list[Entry]] = {}
        #: Results handed over whose key has not been submitted yet: key -> (slave id, item).
        self._held: dict[str, tuple[str, HeldItem]] = {}
        #: Results answered from a slave's hand-over so far (reported by the master).
        self.adopted = 0
        if running:
            log.info("restarted: waiting for the slaves of %d keyed tasks the previous master had out", len(running))

    @property
    def waiting(self) -> int:
        """Keyed tasks whose slave has not handed over yet (the resource file says the master is restarting)."""
        return len(self._expected)

    def submitted(self, entry: Entry) -> bool:
        """A task with a key: answered from a held result, or parked until its slave hands over (then True),
        or to be dispatched as usual (False)."""
        key = entry.key
        assert key is not None
        if key in self._held:
            sid, item = self._held.pop(key)
            self._answer(entry, sid, item)
            return True
        if key in self._expected:
            self._parked.setdefault(key, []).append(entry)
            return True
        return False

    def handover(self, sid: str, whom: tuple[str, int], held: list[HeldItem]) -> None:
        """The slave ``sid`` (``whom``: its host and pid) outlived the previous master and hands over ``held``."""
        log.info("%s (%s:%d) outlived the previous master and hands over %d results", sid, *whom, len(held))
        for item in held:
            key = item[0]
            self._expected.pop(key, None)
            parked = self._parked.pop(key, None)
            if parked is None:
                self._held[key] = (sid, item)  # its task may be submitted later
            for entry in parked or ():  # equal keys, equal work: each task of the key gets the result
                self._answer(entry, sid, item)
        self._release_of(whom)  # queued there, never started (the slave dropped them with its master)

    def connected(self, host: str, pid: int, job: str) -> None:
        """A slave connected: if it runs as the Condor job a slave waited for ran as, but is another process,
        that job was run again, and its former process has ended (Condor runs a job once at a time)."""
        if not job:
            return
        for holder in {holder for holder in self._expected.values() if holder.job == job}:
            if (holder.host, holder.pid) != (host, pid):
                log.warning("%s:%d, a slave of the previous master, has ended: its job %s connected again as %s:%d "
                            "without its tasks, which run again", holder.host, holder.pid, job, host, pid)  # fmt: skip
                self._release_of((holder.host, holder.pid))

    def tick(self, now: float) -> None:
        """Slaves known to have ended, and past the lease all not back, died: their tasks are dispatched as usual."""
        if self._until is None:
            self._until = now + self._left
        if self._expected and now - self._looked >= LOOK_EVERY:
            self._looked = now
            for holder in {holder for holder in self._expected.values() if self._gone(holder)}:
                log.warning("%s:%d, a slave of the previous master, has ended: its keyed tasks run again",
                            holder.host, holder.pid)  # fmt: skip
                self._release_of((holder.host, holder.pid))
        if self._expected and now >= self._until:
            log.warning(
                "%d keyed tasks' slaves did not come back within the lease: they run again", len(self._expected)
            )
            for key in list(self._expected):
                del self._expected[key]
                self._release(key)

    def end(self) -> None:
        """The computation finishes: held results no task asked for are dropped, with a line on the log and one
        per key for ``dropped``."""
        if self._held:
            keys = ", ".join(repr(key) for key in list(self._held)[:5]) + (", ..." if len(self._held) > 5 else "")
            log.warning("dropped %d results slaves kept from the previous master that no task asked for (answered "
                        "from the journal, or not submitted): %s", len(self._held), keys)  # fmt: skip
        for key, (sid, _) in self._held.items():
            self._dropped(sid, key)
        self._held.clear()

    def _release_of(self, whom: tuple[str, int]) -> None:
        """The keys the slave ``whom`` was noted for: waited for no more, their tasks dispatched as usual."""
        for key in [key for key, slave in self._expected.items() if (slave.host, slave.pid) == whom]:
            del self._expected[key]
            self._release(key)

    def _release(self, key: str) -> None:
        for entry in self._parked.pop(key, ()):
            self._queue(entry)

    def _answer(self, entry: Entry, sid: str, item: HeldItem) -> None:
        if item[1] != entry.algorithm or not item[2][1]:  # equal keys must mean equal work: this one runs again
            log.warning("%s handed over a result for key %r of another algorithm: the task runs", sid, entry.key)
            self._queue(entry)
        elif self._adopt(entry, sid, item):
            self.adopted += 1
        else:  # a value this master cannot read (one left on the previous master's file service): it runs again
            self._queue(entry)

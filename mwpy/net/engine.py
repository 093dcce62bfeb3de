"""The master's event loop: every slave connection, tasks out and results in.

Single-threaded and hand-driven: :meth:`Engine.step` is one pass (hand out
tasks → ``select`` → accept, read, write → hand out tasks again → timers →
journal commit → facts flushed); the user-facing :class:`mwpy.master.Master`
runs passes when the master algorithm calls ``loop()``. Why an epoll loop and not
asyncio is explained in docs/design.md.

The sockets are :class:`~mwpy.net.connections.Connections`'; each peer's
:class:`~mwpy.wire.session.MasterSession` decides what its bytes mean and
what may be sent. The engine applies the scheduler's decisions and hands each
Results message to :class:`~mwpy.core.outcomes.Outcomes`, which decides what
a result means. What is said about a connection is reported once, as a fact
(mwpy/core/facts.py), for the audit, the log and the event log to render;
the resource file is a tick callback's. Nothing here knows :class:`~mwpy.master.Master`: a process that is
a slave upstream and a master downstream (docs/scaling.md's sub-master) can drive an engine of its own
(tests/test_engine_reuse.py).
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable, Mapping

from mwpy import safe_text, slave_exits
from mwpy.core import facts
from mwpy.core.entry import WIRE_ITEM, Death, Entry
from mwpy.core.facts import Cause, Facts
from mwpy.core.memory import MemoryLearning
from mwpy.core.outcomes import Outcomes
from mwpy.core.scheduler import Scheduler, timeouts_in
from mwpy.errors import ProtocolError
from mwpy.lifetime import PLANNED_LEAVE
from mwpy.matching import Offer
from mwpy.net.connections import LISTENER, WAKE, Connections, Peer
from mwpy.net.poller import READABLE, WRITABLE
from mwpy.net.spin import Spinner
from mwpy.options import Options
from mwpy.resources import Resources
from mwpy.wire import protocol
from mwpy.wire.protocol import ExitCode, Results
from mwpy.wire.session import HandshakeReply, MasterState, Refused

#: How often timers (client timeouts, task timeouts, resource file) are looked at, in seconds.
TICK = 0.25
#: The soonest a tick asked for by news (a slave came or went) follows the previous one. Ticks cost
#: O(slaves): one per arrival would make a storm of N arrivals cost O(N²) (docs/scaling.md).
SOON_TICK = 0.05
#: How long the master waits for slaves to acknowledge a shutdown.
SHUTDOWN_GRACE = 5.0
log = safe_text.logger("mwpy.master")
#: Characters of a leaving slave's reason (HandBack) kept for the logs.
MAX_WHY = 300


class Engine:
    """Serves one master's slaves: bytes in and out through its connections, decisions from its scheduler."""

    def __init__(
        self,
        options: Options,
        *,
        secret: bytes,
        sched: Scheduler,
        outcomes: Outcomes,
        facts: Facts,
        on_tick: Callable[[float], None],
        listener: socket.socket | None = None,
    ) -> None:
        self._options = options
        self._sched = sched
        self._outcomes = outcomes
        self._facts = facts
        self._on_tick = on_tick
        self._net = Connections(options, secret, facts, on_lost=self._lose, listener=listener)
        self._by_sid: dict[str, Peer] = {}
        self._handlers: dict[type, Callable[..., None]] = {
            protocol.Cancelled: self._take_back, protocol.HandBack: self._handed_back, protocol.Heartbeat: self._heard,
            protocol.Handover: lambda peer, msg: outcomes.handover(peer.sid, self._whom.get(peer.sid or ""), msg.held),
        }  # fmt: skip
        #: Condor job id (CLUSTER.PROC) by slave id, for the connected slaves that reported one.
        self._jobs: dict[str, str] = {}
        #: (host, pid) of each connected slave, as its Hello said: a slave that dies is named by it.
        self._whom: dict[str, tuple[str, int]] = {}
        #: When (Unix time) each connected slave with a lifetime leaves by plan, as its Hello said.
        self._leaving: dict[str, float] = {}
        #: The cache counters each connected slave last reported (hits, misses, bytes fetched, evictions).
        self._caches: dict[str, tuple[int, int, int, int]] = {}
        #: condor_jobs() as last computed, None once a slave with a job came or went (read every tick).
        self._job_list: list[str] | None = None
        self._slave_numbers = itertools.count()
        #: The master's file service (host, port), started when the first slave is welcomed (its large results).
        self.store: Callable[[], tuple[str, int]] = lambda: ("", 0)
        #: Slaves that ever connected (proof that slaves can start: see mwpy/pool/failing_slaves.py).
        self.slaves_greeted = 0
        #: Bytes: the largest peak memory a slave reported (its Heartbeats), 0 while none did.
        self.peak_memory = 0
        self.memory = MemoryLearning(sched)  # what a Condor slave lost near its memory limit teaches
        self._next_tick = 0.0
        self._last_tick = float("-inf")
        self._spinner = Spinner(options.spin_us)
        self._work = slave_exits.work_folder(options.resource_file)  # where a local back end learns of drops
        self.host, self.port, self.bind = self._net.host, self._net.port, self._net.bind
        self.tls_fingerprint = self._net.tls_fingerprint

    # ------------------------------------------------------------------ one pass

    def step(self, wait: float) -> None:
        """One pass of the loop, waiting at most ``wait`` seconds in ``select``; the clock is read twice a pass."""
        net = self._net
        now = time.monotonic()
        self._dispatch(now)
        wait = max(0.0, min(wait, self._next_tick - now))
        # With tasks out a result may be microseconds away: poll a moment before sleeping (mwpy/net/spin.py).
        poller = net.poller
        ready = self._spinner.wait(poller.wait, wait, poller.ready) if self._sched.running_total else poller.wait(wait)
        now = time.monotonic()
        for peer, mask in ready:
            if peer is LISTENER:
                net.accept(now)
            elif peer is WAKE:
                net.drain_wakeups()
            elif peer.handshaking:
                net.tls_handshake(peer)
            else:
                if mask & READABLE and net.receive(peer):
                    if peer.session.state is not MasterState.PROVING:  # unproven peers get one timeout in all
                        peer.last_heard = now
                    self._handle_events(peer, now)
                if mask & WRITABLE and peer.sock is not None:
                    net.send(peer)
        self._dispatch(now)
        if now >= self._next_tick:
            self._tick(now)
        if self._outcomes.journaled:
            self._outcomes.commit()  # durable before the master algorithm sees the results
        self._facts.flush()

    def wake(self) -> None:
        """Cut the current (or next) ``select`` short; the only method safe to call from another thread."""
        self._net.wake()

    def tick_soon(self) -> None:
        """Look at timers (and the resource file) soon: something they report changed."""
        self._next_tick = min(self._next_tick, self._last_tick + SOON_TICK)

    # ------------------------------------------------------------------ messages in

    def _handle_events(self, peer: Peer, now: float) -> None:
        """Act on every complete message the peer sent; a protocol violation drops it."""
        session = peer.session
        try:
            while session.inbox and peer.sock is not None and (event := session.next_event()) is not None:
                if type(event) is Results:  # the hot path first, inline, without an isinstance chain
                    sid, items = peer.sid, event.items
                    assert sid is not None  # a session lets Results through once Welcome gave the slave its id
                    peer.results_in += len(items)
                    if self._facts.results_received is not None and items:  # a message of output alone has none
                        self._facts.results_received(sid, len(items))
                    for hole in self._outcomes.take(sid, items, event.outputs, now):
                        self._expel(hole)
                elif isinstance(event, HandshakeReply):
                    self._net.queue(peer, event.data)
                elif isinstance(event, protocol.Hello):
                    self._greet(peer, event)
                elif isinstance(event, Refused):
                    self._facts(facts.Refused(peer.address, event.hello.member_id, event.reason))
                    self._net.queue(peer, event.data)
                    self._net.close(peer)
                else:  # the rarer messages of a slave with an id
                    self._handlers[type(event)](peer, event)
        except ProtocolError as exc:
            self._lose(peer, "error", f"protocol error: {exc}", blame=False)

    def _heard(self, peer: Peer, beat: protocol.Heartbeat) -> None:
        """A slave's heartbeat: hearing from it (last_heard) was the point; its peak memory and its cache's
        counters, when they changed, are reported."""
        if beat.peak_memory > self.peak_memory:
            self.peak_memory = beat.peak_memory  # the largest any slave needed is published
            self.tick_soon()
        sid = peer.sid
        if sid in self._jobs:
            self.memory.heard(sid, beat.peak_memory)
        if sid is not None and any(beat.cache) and self._caches.get(sid) != beat.cache:
            self._caches[sid] = beat.cache
            self._facts(facts.SlaveCache(sid, *beat.cache))

    def _greet(self, peer: Peer, hello: protocol.Hello) -> None:
        sid = f"slave-{next(self._slave_numbers)}"
        self.slaves_greeted += 1
        options = self._options
        welcome = protocol.Welcome(
            sid, options.slave_result_group, options.client_timeout / 4, options.max_read_buffer_size, *self.store()
        )
        data = peer.session.send(welcome)
        peer.sid = sid
        peer.max_out = peer.session.max_send
        self._by_sid[sid] = peer
        kind = self._sched.join(sid, Offer(Resources(*hello.shape), hello.machine_ad) if hello.shape else None)
        self._whom[sid] = (hello.host, hello.pid)
        self._net.queue(peer, data)
        if hello.leave_at:
            self._leaving[sid] = hello.leave_at
        if hello.condor_job:
            self._jobs[sid], self._job_list = hello.condor_job, None
        self._outcomes.connected((hello.host, hello.pid), hello.condor_job)  # a slave of the previous master's job?
        self._facts(
            facts.Connected(sid, peer.address, hello.member_id, hello.host, hello.pid, hello.mwpy_version,
                            kind.value, hello.condor_job or None)
        )  # fmt: skip
        self.tick_soon()

    def _take_back(self, peer: Peer, msg: protocol.Cancelled) -> None:
        sid = peer.sid
        if sid is not None:
            taken = [task_id for task_id in msg.task_ids if self._sched.withdraw(sid, task_id) is not None]
            self._facts(facts.CancelledBack(sid, len(taken)))

    def _handed_back(self, peer: Peer, msg: protocol.HandBack) -> None:
        """The slave is leaving (a soft-kill signal: vacate, preemption, condor_rm; its lifetime): requeue, drop it.

        Its finished results came before this message; the tasks it names never started and are queued again
        first, at once. Dropping the connection re-queues whatever else it held (the task it was running) as for
        a slave that vanished, without waiting for its EOF or a timeout.
        """
        sid = peer.sid
        if sid is None:
            return
        back = self._sched.hand_back(sid, msg.task_ids)
        why = safe_text.one_line(msg.why[:MAX_WHY])  # the slave's words: shown (one line, cut), never obeyed
        self._facts(facts.HandedBack(sid, back, why))
        # Not the task's fault (a Condor eviction, a vacate, a planned leave): not counted against it.
        planned = msg.why.startswith(PLANNED_LEAVE)  # a lifetime's end, not a memory limit: nothing to learn
        self._lose(peer, "eof", f"left {why}, {back} tasks handed back", blame=False, planned=planned)

    def cancel(self, sid: str, task_ids: list[int]) -> None:
        """Ask ``sid`` to drop these queued tasks (cancelled futures); it answers with Cancelled."""
        peer = self._by_sid.get(sid)
        if peer is None or peer.session.state is not MasterState.READY:
            return  # gone or leaving: whatever comes back is dropped by the cancelled futures
        self._facts(facts.CancelSent(sid, len(task_ids)))
        self._net.queue(peer, peer.session.send(protocol.Cancel(task_ids)))

    @property
    def leave_at(self) -> Mapping[str, float]:
        """When (Unix time) each connected slave with a lifetime leaves by plan, as its Hello said (read only)."""
        return self._leaving

    def condor_jobs(self) -> list[str]:
        """The Condor job ids of the connected slaves (sorted): the resource file publishes them."""
        if self._job_list is None:
            self._job_list = sorted(set(self._jobs.values()), key=lambda job: tuple(map(int, job.split("."))))
        return self._job_list

    # ------------------------------------------------------------------ tasks out

    def _dispatch(self, now: float) -> None:
        if self._net.closed:
            return  # every slave has been told to shut down: its session takes no more Tasks
        sched = self._sched
        for sid in sched.ready():
            tasks = sched.take(sid, now)
            if tasks:
                self._send_tasks(self._by_sid[sid], tasks, now)

    def _send_tasks(self, peer: Peer, tasks: list[Entry], now: float) -> None:
        sid = peer.sid
        assert sid is not None
        limit = peer.max_out
        if len(tasks) == 1 and protocol.fits(len(tasks[0].payload), limit):  # one task in flight: no packing
            self._send_batch(peer, sid, tasks)
            self._net.send(peer)
            return
        sizes = [len(t.payload) for t in tasks]
        if not protocol.fits(max(sizes), limit):  # a task too big for this slave's frames fails instead
            fail = self._outcomes.too_large
            tasks = [t for t in tasks if protocol.fits(len(t.payload), limit) or fail(sid, t, limit, now)]
            if not tasks:
                return
            sizes = [len(t.payload) for t in tasks]
        group = self._sched.task_group
        # Group 0 (the default): the tasks due now share frames (a frame and a MAC per batch), up to the frame size.
        for start, stop in protocol.pack(sizes, group or len(tasks), limit):
            self._send_batch(peer, sid, tasks[start:stop])
        self._net.send(peer)  # one system call for the whole batch, not one per frame

    def _send_batch(self, peer: Peer, sid: str, batch: list[Entry]) -> None:
        """Queue one Tasks frame carrying ``batch`` (which fits in it)."""
        sched = self._sched
        timeouts = timeouts_in(sched, batch) if sched.may_time_out else None  # nothing on the wire otherwise
        hold = self._outcomes.held_in(batch, sid) if self._outcomes.hold else None  # values to stay there
        keys = None  # keyed tasks are noted in the journal before they leave
        if self._outcomes.journaled:
            keys = self._outcomes.dispatched(self._whom[sid], self._jobs.get(sid, ""), batch, time.time())
        peer.out += peer.session.send_tasks(list(map(WIRE_ITEM, batch)), timeouts, keys, hold)
        peer.tasks_out += len(batch)
        if self._facts.tasks_dispatched is not None:
            self._facts.tasks_dispatched(sid, len(batch))

    # ------------------------------------------------------------------ slaves gone

    def _lose(self, peer: Peer, cause: Cause, why: str, *, blame: bool = True, planned: bool = False) -> None:
        """A connection ended: close it and apply task policies to what its slave held.

        A slave that hung up, broke its connection or is stuck (slave_exits.stuck) while the computation runs
        died: its running task is blamed, unless ``blame`` is False (it handed its tasks back, or was dropped
        for a task's timeout).
        ``planned``: it left at the end of its lifetime.
        """
        if peer.sock is None:
            return
        if blame and cause in ("eof", "error", "timeout") and not self._net.closed and peer.sid in self._whom:
            host, pid = self._whom[peer.sid]
            silent = self._options.client_timeout if cause == "timeout" else 0.0
            death = Death(peer.sid, host, pid, self._jobs.get(peer.sid), time.time(), silent=silent)
            if not silent or slave_exits.stuck(self._work, death):
                self._outcomes.slave_died(death, time.monotonic())
        self._net.close(peer)
        sid = peer.sid
        if sid is None:
            self._facts(facts.PeerDropped(peer.address, why))
            return
        del self._by_sid[sid]
        self._leave(sid, "shutdown" if self._net.closed else cause, why, peer, planned=planned)
        self.tick_soon()

    def _expel(self, sid: str) -> None:
        """Send a black-hole slave away with a non-zero status; its tasks go to others."""
        peer = self._by_sid.pop(sid, None)
        if peer is None:
            return
        why = f"told to leave: {self._options.slave_max_failures} of its failed tasks succeeded elsewhere (black hole)"
        self._leave(sid, "expelled", why, peer)
        peer.sid = None
        self._net.queue(peer, peer.session.send(protocol.Shutdown(int(ExitCode.TOLD_TO_LEAVE))))
        self.tick_soon()

    def _leave(self, sid: str, cause: Cause, why: str, peer: Peer, *, planned: bool = False) -> None:
        """``sid`` is no longer this master's slave: its tasks follow their policies, and that is reported.

        ``planned``: it left at the end of its lifetime (its memory taught nothing)."""
        condor = self._jobs.pop(sid, None) is not None
        if condor:
            self._job_list = None
        self._whom.pop(sid, None)
        self._leaving.pop(sid, None)
        self._caches.pop(sid, None)
        dropped_before = self._sched.unrunnable_total
        lost = len(self._sched.leave(sid))
        if learned := self.memory.lost(sid, suspect=condor and cause in ("eof", "error") and not planned):
            log.warning(learned)
        dropped = self._sched.unrunnable_total - dropped_before
        requeued = max(0, lost - dropped)
        self._facts(facts.SlaveLeft(sid, cause, why, peer.tasks_out, peer.results_in, lost, requeued, dropped))

    def _tick(self, now: float) -> None:
        self._next_tick = now + TICK
        self._last_tick = now
        net = self._net
        if net.accept_resumes is not None and now >= net.accept_resumes and not net.closed:
            net.resume_accepting()
        silent_since = now - self._options.client_timeout
        for peer in [p for p in net.peers if p.last_heard < silent_since]:
            self._lose(peer, "timeout", f"silent for {self._options.client_timeout:g} s (client timeout)")
        for sid, why in self._outcomes.overdue(now):
            holder = self._by_sid.get(sid)
            if holder is not None:
                self._lose(holder, "error", why, blame=False)
        self._outcomes.settle_killed(now)
        self._on_tick(now)

    # ------------------------------------------------------------------ the end

    def shutdown(self) -> None:
        """Tell every slave to shut down, wait briefly for them to hang up, then close everything."""
        net = self._net
        net.closed = True
        self._outcomes.end()  # results kept by slaves of a previous master that no task asked for are dropped
        for peer in list(net.peers):
            if peer.session.state is MasterState.READY and peer.sid is not None:
                self._facts(facts.ShutdownSent(peer.sid))
                net.queue(peer, peer.session.send(protocol.Shutdown(0)))
            elif peer.session.state is not MasterState.CLOSING:
                self._lose(peer, "shutdown", "computation finished")
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while net.peers and time.monotonic() < deadline:
            self.step(min(TICK, deadline - time.monotonic()))
        for peer in list(net.peers):
            self._lose(peer, "shutdown", "computation finished")
        net.close_all()

    def close(self) -> None:
        """Stop listening and release the poller (connections must be closed already)."""
        self._net.close_all()

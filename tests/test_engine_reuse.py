"""The transport is reusable: a process that is a slave upstream and a master downstream (docs/scaling.md).

A sub-master of docs/scaling.md's tree takes tasks from its master as a
slave does and hands them to slaves of its own as a master does. This test
builds the smallest one from mwpy's own parts and no :class:`Master`: a
:class:`~mwpy.wire.session.SlaveSession` upstream, and downstream an
:class:`~mwpy.net.engine.Engine` with its own scheduler and outcomes, whose
tasks' listeners relay each result up. A real master sends the tasks, a
real slave (mwpy's, in a thread) runs them, all over real sockets; nothing
of the engine knows it is not serving a Master. It is a test, not a feature.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

import mwpy
from mwpy import options as mwpy_options
from mwpy.core.entry import Entry
from mwpy.core.facts import Facts
from mwpy.core.outcomes import Outcomes
from mwpy.core.scheduler import Scheduler
from mwpy.master import Master
from mwpy.net.engine import Engine
from mwpy.observe.audit import Audit
from mwpy.slave import Endpoint, connect
from mwpy.task_records import DEFAULT_POLICY, Result
from mwpy.wire import codec, protocol
from mwpy.wire.session import HandshakeReply, SlaveSession
from tests.support import PROGRAMS, Quiet

DEADLINE = 60.0


@mwpy.task(name="test_engine_reuse.triple")
def triple(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return 3 * x


class Relay(Quiet):
    """The listener of a downstream task: its result goes up as the result of the upstream task it came from."""

    def __init__(self, sub: SubMaster, upstream_id: int) -> None:
        self._sub = sub
        self._upstream_id = upstream_id

    def settle(self, result: Result) -> bool:
        if result.error is None:
            blob = codec.encode_value(result.value)
        else:
            error = result.error
            blob = codec.encode_failure(error.type, error.message, error.traceback, error.pickled)
        self._sub.send_up((self._upstream_id, result.error is None, blob, result.compute_time))
        return False


class SubMaster:
    """Slave of ``port`` upstream, master of its own slaves downstream."""

    def __init__(self, port: int, secret: bytes, member_id: str, workdir: Path) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        hello = protocol.Hello(member_id, "sub", os.getpid(), mwpy.__version__, 1 << 20, "")
        self.upstream = SlaveSession(secret, hello)
        self.secret = secrets.token_bytes(32)  # its own computation's secret, for its own slaves
        options, _ = mwpy_options.parse(
            ["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", str(workdir / "sub.json")]
        )
        self.member_id = options.member_id
        self.sched = Scheduler()
        facts = Facts([])
        outcomes = Outcomes(self.sched, facts)
        self.engine = Engine(options, secret=self.secret, sched=self.sched, outcomes=outcomes, facts=facts,
                             on_tick=lambda now: None)  # fmt: skip
        self.relayed = 0

    def step(self) -> None:
        """Whatever came from upstream goes to the downstream scheduler; then one pass of the engine."""
        self.sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            data = self.sock.recv(1 << 16)
            assert data, "the upstream master hung up"
            self.upstream.receive_data(data)
        while (event := self.upstream.next_event()) is not None:
            if isinstance(event, HandshakeReply):
                self._send(event.data)
            elif isinstance(event, protocol.Tasks):
                for task_id, name, payload in event.items:  # the payload is passed on as it came
                    entry = Entry(self.sched.new_id(), name, payload, DEFAULT_POLICY, Relay(self, task_id))
                    self.sched.add(entry)
        self.engine.step(0.01)

    def send_up(self, item: protocol.ResultItem) -> None:
        self._send(self.upstream.send_results([item]))
        self.relayed += 1

    def _send(self, data: bytes) -> None:
        self.sock.setblocking(True)
        self.sock.sendall(data)


def test_a_sub_master_built_on_the_engine_relays_tasks_down_and_results_up(tmp_path: Path) -> None:
    options, _ = mwpy_options.parse(
        ["--mw-master", "--mw-master-host", "127.0.0.1", "--mw-resource-file", str(tmp_path / "top.json")]
    )
    secret = secrets.token_bytes(32)
    with (
        contextlib.closing(Audit(str(tmp_path / "top.audit"))) as audit,
        Master(options, audit=audit, secret=secret, program=str(PROGRAMS / "flaky.py")) as top,
    ):
        futures = [triple.submit(x) for x in (1, 2, -3, 4)]
        sub = SubMaster(top.port, secret, options.member_id, tmp_path)
        endpoint = Endpoint("127.0.0.1", sub.engine.port, sub.member_id, sub.secret)
        leaf_audit = Audit(str(tmp_path / "leaf.audit"))
        leaf = threading.Thread(target=_serve, args=(endpoint, leaf_audit), daemon=True)
        leaf.start()
        deadline = time.monotonic() + DEADLINE
        while not all(future.done() for future in futures):
            assert time.monotonic() < deadline, "the results did not come up through the sub-master"
            top.loop_once(0.01)
            sub.step()
        assert [f.result() for f in futures if f.exception() is None] == [3, 6, 12]
        with pytest.raises(ValueError, match="negative: -3"):
            futures[2].result()  # raised on the leaf slave, re-sent by the sub-master, raised as itself here
        assert sub.relayed == 4
        assert sub.sched.done_total == 4  # every task went through the sub-master's own books
        assert len(top.connected_slaves()) == 1  # the top master saw one slave: the sub-master
        sub.engine.shutdown()  # its slave is told to leave, as a master's are
        leaf.join(DEADLINE)
        assert not leaf.is_alive()
        sub.sock.close()
    leaf_audit.close()


def _serve(endpoint: Endpoint, audit: Audit) -> None:
    """A real mwpy slave, in a thread: connects to the sub-master's engine and works until told to stop."""
    slave = connect(endpoint, audit=audit, max_frame=1 << 20, timeout=10.0, patience=DEADLINE)
    try:
        slave.loop_until_shutdown()
    finally:
        slave.close()

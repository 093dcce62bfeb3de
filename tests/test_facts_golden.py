"""Every connection-level fact a master reports, pinned byte for byte: the ``[A]`` audit, the event log, the log.

One scripted run drives a real in-process :class:`~mwpy.master.Master` over real
sockets, with slaves played by the test itself through
:class:`~mwpy.wire.session.SlaveSession` (so the order of everything is the
test's, not the scheduler's or the machine's). It goes through each fact the
master reports about its connections and tasks: a peer that hangs up before
proving anything, a refused slave, connections, results (with
``--mw-audit-packets``), a failure that is retried, a black hole sent away, a
cancelled task pulled back, a task past its timeout, a hand-back, a slave that
vanishes, a protocol error, a result for a task the slave does not hold, and
the shutdown.

The expected texts (``tests/data/facts_golden.*``) were recorded from the
master before the facts were given one home (issue 20), so these tests show
that the audit's wording, the event log's causes and the log lines did not
change. Variable parts (time stamps, ports) are replaced by names.
"""

from __future__ import annotations

import logging
import pickle
import re
import secrets
import socket
import threading
import time
from collections import Counter, deque
from pathlib import Path

import attrs
import pytest

import mwpy
from mwpy import options as mwpy_options
from mwpy.errors import ProtocolError
from mwpy.master import Master
from mwpy.observe import events as ev
from mwpy.observe.audit import Audit
from mwpy.wire import protocol
from mwpy.wire.session import HandshakeReply, SlaveSession
from tests.support import PROGRAMS, ROOT

GOLDEN = ROOT / "tests" / "data"
MEMBER = "golden"
#: Long enough for any pass of a loaded machine; the script waits on conditions, never on time.
DEADLINE = 30.0
PICKLE = 5


@mwpy.task(name="golden.echo")
def echo(x: int) -> int:
    return x


class Script:
    """The master under test, and the clock-free way to run it until something happened."""

    def __init__(self, workdir: Path) -> None:
        self.audit_path = workdir / "master.audit"
        self.events_path = workdir / "events.jsonl"
        argv = [
            "--mw-master",
            "--mw-master-host", "127.0.0.1",
            "--mw-member-id", MEMBER,
            "--mw-resource-file", str(workdir / "resource.json"),
            "--mw-audit-file", str(self.audit_path),
            "--mw-audit-packets",
            "--mw-events", str(self.events_path),
            "--mw-slave-max-failures", "1",
        ]  # fmt: skip
        options, _ = mwpy_options.parse(argv)
        self.secret = secrets.token_bytes(32)
        self.audit = Audit(options.audit_file, packets=True)
        self.mw = Master(options, audit=self.audit, secret=self.secret, program=str(PROGRAMS / "flaky.py"))
        self.mw.__enter__()
        self.ports: dict[int, str] = {}
        self.slaves: list[ScriptedSlave] = []

    def step(self) -> None:
        """One master pass, then every scripted slave reads what came (and answers the handshake)."""
        self.mw.loop_once(0.01)
        self.mw.results()
        for slave in self.slaves:
            slave.read()

    def audit_text(self) -> str:
        self.audit.flush()
        return self.audit_path.read_text(encoding="utf-8")

    def until_audit(self, text: str) -> None:
        """Run passes until the audit holds ``text`` (a fact is reported in the pass that saw it)."""
        deadline = time.monotonic() + DEADLINE
        while text not in self.audit_text():
            assert time.monotonic() < deadline, f"no {text!r} in the audit:\n{self.audit_text()}"
            self.step()

    def connect(self, name: str, member_id: str = MEMBER) -> ScriptedSlave:
        slave = ScriptedSlave(self, member_id, pid=100 + len(self.ports))
        self.ports[slave.port] = name
        self.slaves.append(slave)
        return slave


class ScriptedSlave:
    """A slave played by the test: a socket and a SlaveSession, acting only when told."""

    def __init__(self, script: Script, member_id: str, *, pid: int) -> None:
        self.script = script
        self.sock = socket.create_connection(("127.0.0.1", script.mw.port))
        self.port = self.sock.getsockname()[1]
        hello = protocol.Hello(member_id, f"node-{pid}", pid, "9.9.9", 1 << 20, "")
        self.session = SlaveSession(script.secret, hello)
        self.inbox: deque[object] = deque()
        self.closed = False

    def read(self) -> None:
        if self.closed:
            return
        self.sock.setblocking(False)
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        self.session.receive_data(data)
        try:
            while (event := self.session.next_event()) is not None:
                if isinstance(event, HandshakeReply):
                    self.sock.setblocking(True)
                    self.sock.sendall(event.data)
                else:
                    self.inbox.append(event)
        except ProtocolError:  # refused
            self.closed = True

    def expect(self, kind: type[object]) -> object:
        """Run master passes until a message of ``kind`` arrives (anything else before it is a failure)."""
        deadline = time.monotonic() + DEADLINE
        while not self.inbox:
            assert time.monotonic() < deadline, f"no {kind.__name__} came"
            assert not self.closed, f"the master hung up before a {kind.__name__} came"
            self.script.step()
        message = self.inbox.popleft()
        assert isinstance(message, kind), message
        return message

    def until_closed(self) -> None:
        deadline = time.monotonic() + DEADLINE
        while not self.closed:
            assert time.monotonic() < deadline, "the master did not hang up"
            self.script.step()

    def send(self, message: protocol.Message) -> None:
        self.sock.setblocking(True)
        self.sock.sendall(self.session.send(message))

    def answer(self, task_id: int, value: object = None, *, failed: str | None = None) -> None:
        if failed is None:
            item = (task_id, True, pickle.dumps(value, PICKLE), 0.001)
        else:
            failure = (failed, "boom", "Traceback (most recent call last):\n  ...\n", None)
            item = (task_id, False, pickle.dumps(failure, PICKLE), 0.001)
        self.sock.setblocking(True)
        self.sock.sendall(self.session.send_results([item]))

    def hang_up(self) -> None:
        """End the connection in order (FIN, not a reset: everything the master sent was read or is ignored)."""
        self.sock.shutdown(socket.SHUT_WR)
        self.closed = True


def tasks_of(message: object) -> list[int]:
    assert isinstance(message, protocol.Tasks)
    return [item[0] for item in message.items]


def run_script(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Script:
    """The scripted run; each step waits for the fact it causes, so the order is fixed."""
    monkeypatch.setattr("mwpy.core.outcomes.MASTER_TIMEOUT_GRACE", 0.0)  # a timed-out task counts at once
    script = Script(workdir)
    strangers(script)
    a = black_hole(script)
    cancel_and_time_out(script, a)
    handed = leavers(script)
    the_end(script, handed)
    for slave in script.slaves:
        slave.sock.close()
    return script


def strangers(script: Script) -> None:
    """A peer that hangs up before proving anything, and a slave of another computation."""
    stranger = script.connect("stranger")
    script.until_audit("NEW-CLIENT")
    stranger.hang_up()
    script.until_audit("EOF -> ")
    intruder = script.connect("intruder", member_id="intruder")
    script.until_audit("REFUSED")
    intruder.hang_up()


def black_hole(script: Script) -> ScriptedSlave:
    """Two slaves; a task that fails on one and succeeds on the other makes the first a black hole."""
    a = script.connect("a")
    a.expect(protocol.Welcome)
    first = echo.submit(1)
    assert tasks_of(a.expect(protocol.Tasks)) == [first.task_id]
    b = script.connect("b")
    b.expect(protocol.Welcome)
    flaky = echo.with_policy(retries=1).submit(2)
    assert tasks_of(b.expect(protocol.Tasks)) == [flaky.task_id]
    a.answer(first.task_id, 1)
    assert first.result() == 1
    b.answer(flaky.task_id, failed="ValueError")
    assert tasks_of(a.expect(protocol.Tasks)) == [flaky.task_id]
    a.answer(flaky.task_id, 2)
    assert isinstance(b.expect(protocol.Shutdown), protocol.Shutdown)
    b.hang_up()
    script.until_audit(f"EOF -> 127.0.0.1:{b.port}")
    return a


def cancel_and_time_out(script: Script, a: ScriptedSlave) -> None:
    """A task cancelled in the slave's window comes back unstarted; one past its timeout drops its slave."""
    kept, doomed = echo.submit(3), echo.submit(4)
    assert tasks_of(a.expect(protocol.Tasks)) == [kept.task_id, doomed.task_id]
    assert doomed.cancel()
    cancel = a.expect(protocol.Cancel)
    assert isinstance(cancel, protocol.Cancel)
    a.send(protocol.Cancelled(cancel.task_ids))
    a.answer(kept.task_id, 3)
    assert kept.result() == 3
    late = echo.with_policy(timeout=0.05).submit(5)
    assert tasks_of(a.expect(protocol.Tasks)) == [late.task_id]
    a.until_closed()
    with pytest.raises(mwpy.TaskTimeoutError):
        late.result()


def leavers(script: Script) -> mwpy.TaskFuture[int]:
    """A slave leaving on a soft-kill signal hands its task back; one vanishes; one breaks the protocol."""
    c = script.connect("c")
    c.expect(protocol.Welcome)
    handed = echo.submit(6)
    assert tasks_of(c.expect(protocol.Tasks)) == [handed.task_id]
    c.send(protocol.HandBack([handed.task_id], "on a soft-kill signal"))
    c.until_closed()
    script.until_audit("slave-2 -> disconnected")
    d = script.connect("d")
    d.expect(protocol.Welcome)
    assert tasks_of(d.expect(protocol.Tasks)) == [handed.task_id]
    d.hang_up()
    script.until_audit("slave-3 -> disconnected")
    e = script.connect("e")
    e.expect(protocol.Welcome)
    assert tasks_of(e.expect(protocol.Tasks)) == [handed.task_id]
    e.sock.sendall(protocol.frame(b"\x05" + bytes(40)))  # a frame without a valid tag
    script.until_audit("slave-4 -> disconnected")
    return handed


def the_end(script: Script, handed: mwpy.TaskFuture[int]) -> None:
    """A result for a task the slave does not hold, then the real one, then the shutdown."""
    f = script.connect("f")
    f.expect(protocol.Welcome)
    assert tasks_of(f.expect(protocol.Tasks)) == [handed.task_id]
    f.answer(999, 0)
    script.until_audit("it does not hold")
    f.answer(handed.task_id, 6)
    assert handed.result() == 6
    # The slave's side of the shutdown runs beside finish(), which waits for slaves to hang up.
    leaver = threading.Thread(target=_hang_up_after_shutdown, args=(f,), daemon=True)
    leaver.start()
    script.mw.__exit__(None, None, None)
    leaver.join(DEADLINE)
    script.audit.close()


def _hang_up_after_shutdown(slave: ScriptedSlave) -> None:
    """Read until the master's Shutdown arrives, then hang up (as a real slave does)."""
    slave.sock.setblocking(True)
    slave.sock.settimeout(DEADLINE)
    while True:
        data = slave.sock.recv(1 << 16)
        if not data:
            break
        slave.session.receive_data(data)
        if any(isinstance(event, protocol.Shutdown) for event in iter(slave.session.next_event, None)):
            break
    slave.sock.close()


_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[A\] ", re.MULTILINE)


def normalised_audit(script: Script, text: str) -> str:
    text = _STAMP.sub("<time> [A] ", text)
    text = text.replace(f"127.0.0.1:{script.mw.port}", "<master>")
    for port, name in script.ports.items():
        text = text.replace(f"127.0.0.1:{port}", f"<{name}>")
    return text


def normalised_events(script: Script) -> str:
    """The event log without times (and ports named): kinds, slaves, causes, reasons, counts.

    Per-task records are summed per slave (and outcome) at the end: how many
    share a line depends on how fast the machine ran the passes.
    """
    lines = []
    dispatched: Counter[str] = Counter()
    finished: Counter[tuple[str, str]] = Counter()
    for record in ev.read_events(script.events_path):
        if isinstance(record, ev.MasterStart | ev.MasterStop | ev.ResourceFileWritten):
            continue  # pid, host and version vary; the master's own records are not connection facts
        if isinstance(record, ev.TasksDispatched):
            dispatched[record.slave] += record.n
        elif isinstance(record, ev.TasksFinished):
            finished[record.slave, record.outcome] += record.n
        else:
            fields = {k: v for k, v in attrs.asdict(record).items() if k != "t"}
            lines.append(f"{record.KIND} {sorted(fields.items())}")
    lines += [f"dispatched to {slave}: {n}" for slave, n in sorted(dispatched.items())]
    lines += [f"finished on {slave}, {outcome}: {n}" for (slave, outcome), n in sorted(finished.items())]
    text = "\n".join(lines) + "\n"
    for port, name in script.ports.items():
        text = text.replace(f"127.0.0.1:{port}", f"<{name}>")
    return text


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Script, list[str]]:
    monkeypatch = pytest.MonkeyPatch()
    handler = _Collect()
    logger = logging.getLogger("mwpy")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        script = run_script(tmp_path_factory.mktemp("golden"), monkeypatch)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        monkeypatch.undo()
    return script, handler.lines


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    assert text == path.read_text(encoding="utf-8")


def test_the_audit_reads_as_it_always_did(scripted: tuple[Script, list[str]]) -> None:
    script, _ = scripted
    check_golden("facts_golden.audit", normalised_audit(script, script.audit_text()))


def test_the_event_log_records_each_connection_fact_with_its_cause(scripted: tuple[Script, list[str]]) -> None:
    script, _ = scripted
    check_golden("facts_golden.events", normalised_events(script))


def test_the_log_says_what_a_user_should_see(scripted: tuple[Script, list[str]]) -> None:
    script, lines = scripted
    text = "\n".join(lines) + "\n"
    for port, name in script.ports.items():
        text = text.replace(f"127.0.0.1:{port}", f"<{name}>")
    check_golden("facts_golden.log", text)

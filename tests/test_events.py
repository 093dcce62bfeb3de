"""The event log (docs/observability.md): every kind's schema, the writer's aggregation and restarts, bad logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from mwpy.errors import EventLogError, MwpyError
from mwpy.observe import events as ev
from tests.obs_support import ONE_OF_EACH, write_log


def test_one_of_each_covers_every_kind() -> None:
    assert {type(r).KIND for r in ONE_OF_EACH} == set(ev.KINDS)


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).KIND)
def test_every_kind_round_trips_through_a_real_file(tmp_path: Path, record: ev.Event) -> None:
    path = tmp_path / "events.jsonl"
    with ev.EventWriter(path) as writer:
        writer.emit(record)
    line = path.read_text(encoding="utf-8")
    assert line.endswith("\n")
    assert line.count("\n") == 1
    data = json.loads(line)
    assert list(data)[:3] == ["v", "t", "kind"]
    assert data["v"] == ev.VERSION
    assert data["kind"] == type(record).KIND
    assert set(data) == {"v", "kind"} | {f.name for f in attrs.fields(type(record))}
    assert ev.read_events(path) == [record]


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).KIND)
def test_every_required_field_is_required_and_typed(tmp_path: Path, record: ev.Event) -> None:
    data = json.loads(ev.encode(record))
    for field in attrs.fields(type(record)):
        if field.default is not attrs.NOTHING:
            continue
        missing = {k: v for k, v in data.items() if k != field.name}
        path = write_log(tmp_path / f"missing-{field.name}.jsonl", ONE_OF_EACH[:1])
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(missing) + "\n")
        with pytest.raises(EventLogError, match=rf":2: required key missing @ {type(record).KIND}\.{field.name}$"):
            ev.read_events(path)
        wrong = {**data, field.name: [] if not isinstance(data[field.name], list) else "text"}
        path.write_text(json.dumps(wrong) + "\n", encoding="utf-8")
        with pytest.raises(EventLogError, match=r":1: "):
            ev.read_events(path)


def test_the_writer_aggregates_per_task_events_until_flush(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    seen: list[ev.Event] = []
    writer = ev.EventWriter(path, clock=lambda: 1234.5)
    writer.subscribers.append(seen.append)
    for i in range(5):
        writer.task_finished("slave-1", "hello", "ok", 0.001 * (i + 1), 0.5)
    writer.task_finished("slave-1", "hello", "error", 0.25, 0.0)
    writer.task_finished("slave-2", "hello", "ok", float("nan"), 0.0)
    writer.tasks_dispatched("slave-1", 4)
    writer.tasks_dispatched("slave-1", 3)
    assert path.read_bytes() == b"", "nothing reaches the disk before the loop pass flushes"
    writer.flush()
    got = ev.read_events(path)
    assert got == [
        ev.TasksDispatched(t=1234.5, slave="slave-1", n=7),
        ev.TasksFinished(
            t=1234.5,
            slave="slave-1",
            algorithm="hello",
            outcome="ok",
            run_us=[1000, 2000, 3000, 4000, 5000],
            wait_us=[500000] * 5,
        ),
        ev.TasksFinished(t=1234.5, slave="slave-1", algorithm="hello", outcome="error", run_us=[250000], wait_us=[0]),
        ev.TasksFinished(t=1234.5, slave="slave-2", algorithm="hello", outcome="ok", run_us=[0], wait_us=[0]),
    ]
    assert seen == got
    writer.flush()
    writer.close()
    assert len(ev.read_events(path)) == 4, "an empty flush writes nothing"


def test_a_restarted_master_continues_the_same_history(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with ev.EventWriter(path) as first:
        assert first.run == 1
        first.master_start(member_id="m", host="h")
        first.task_finished("slave-1", "hello", "ok", 0.1, 0.0)
        first.flush()
    with path.open("ab") as out:  # the master was killed half-way through a line
        out.write(b'{"v":1,"t":5.0,"kind":"tasks-fin')
    with ev.EventWriter(path) as second:
        assert second.repaired == len(b'{"v":1,"t":5.0,"kind":"tasks-fin')
        assert second.run == 2
        second.master_start(member_id="m", host="h", total=3)
        second.master_stop(status=0, tasks_done=3)
    kinds = [(type(e).KIND, getattr(e, "run", None)) for e in ev.read_events(path)]
    assert kinds == [("master-start", 1), ("tasks-finished", None), ("master-start", 2), ("master-stop", 2)]
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_text_is_clipped_and_lines_stay_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with ev.EventWriter(path) as writer:
        writer.task_failed(
            task=1,
            slave="slave-1",
            algorithm="a\nb",
            error="E",
            message="m\r\n",
            traceback="x" * (ev.MAX_TEXT + 10),
            retried=False,
            output='\u00e9\n"quoted"',
        )
    assert path.read_text(encoding="utf-8").count("\n") == 1
    (failed,) = ev.read_events(path)
    assert isinstance(failed, ev.TaskFailed)
    assert failed.algorithm == "a\nb"
    assert failed.output == '\u00e9\n"quoted"'
    assert failed.traceback.startswith("x" * ev.MAX_TEXT)
    assert failed.traceback.endswith("[10 characters cut]")


BAD_LOGS: list[tuple[str, bytes, str]] = [
    ("truncated", ev.encode(ONE_OF_EACH[0]).encode() + b'{"v":1,"t":3', ":2: truncated line"),
    ("csv", b"time,kind\n1,start\n", r":1: not JSON"),
    ("json array", b"[1, 2]\n", r":1: not an mwpy event \(a JSON list"),
    ("other json lines", b'{"level": "info", "msg": "hi"}\n', r":1: not an mwpy event \(no 'v' key\)"),
    ("future version", b'{"v":4,"t":1,"kind":"master-start"}\n', ":1: event format version 4, this mwpy reads"),
    ("unknown kind", b'{"v":1,"t":1,"kind":"party"}\n', ":1: unknown event kind 'party'"),
    (
        "bool is not a number",
        b'{"v":1,"t":true,"kind":"condor-jobs","idle":1,"running":1}\n',
        ":1: expected float or int, got bool @ condor-jobs.t$",
    ),
    ("nan", b'{"v":1,"t":NaN,"kind":"condor-jobs","idle":1,"running":1}\n', ":1: not JSON"),
    ("duplicate key", b'{"v":1,"v":1,"t":1,"kind":"condor-jobs","idle":1,"running":1}\n', ":1: not JSON.*duplicate"),
    ("deep", b"[" * 100_000 + b"\n", ":1: not JSON"),
    ("binary", b"\xff\xfe\x00garbage\n", ":1: not UTF-8"),
    ("negative", b'{"v":1,"t":1,"kind":"condor-jobs","idle":-1,"running":1}\n', ":1: 'idle' must be >= 0: -1 @ condor"),
    (
        "mismatched lists",
        b'{"v":1,"t":1,"kind":"tasks-finished","slave":"s","algorithm":"a","outcome":"ok","run_us":[1],"wait_us":[]}\n',
        ":1: run_us has 1 times and wait_us 0; they must match @ tasks-finished",
    ),
    ("empty line", b"\n", ":1: not JSON"),
]


@pytest.mark.parametrize(("name", "content", "problem"), BAD_LOGS, ids=[b[0] for b in BAD_LOGS])
def test_a_bad_log_is_one_line_naming_file_and_line(tmp_path: Path, name: str, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(ev.encode(ONE_OF_EACH[0]).encode() * 2 + content)
    shift = 2  # the two good lines before the bad one
    line = int(problem.split(":")[1]) + shift
    expected = f"^{path}:{line}:" + problem.split(":", 2)[2]
    with pytest.raises(EventLogError, match=expected) as caught:
        for _ in ev.iter_events(path):
            pass
    assert "\n" not in str(caught.value)
    assert caught.value.line == line
    assert isinstance(caught.value, MwpyError)


def test_what_is_not_a_regular_file_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, problem in [
        (fifo, "a FIFO, not a regular file"),
        (tmp_path, "a directory, not a regular file"),
        (tmp_path / "missing", "no such event log"),
    ]:
        with pytest.raises(EventLogError, match=f"^{path}: .*{problem}"):
            ev.read_events(path)
    with pytest.raises(EventLogError, match="cannot write the event log: a FIFO"):
        ev.EventWriter(fifo)


def test_a_huge_line_is_refused_without_reading_it_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "MAX_LINE", 1000)
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"v":1,' + b" " * 5000 + b"}\n")
    with pytest.raises(EventLogError, match=":1: line longer than 1000 bytes"):
        ev.read_events(path)


def test_slaves_and_the_event_log_load_none_of_the_optional_extras() -> None:
    """The slave bundle ships attrs and cattrs only (mwpy/pool/bundle.py): what a slave or the writer imports must not
    pull in rich, plotly or prometheus_client."""
    probe = (
        "import sys, mwpy, mwpy.slave, mwpy.observe.events, mwpy.observe.goodput, mwpy.observe.metrics; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'plotly', 'prometheus_client'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_flushes_within_the_interval_only_read_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    now = [100.0]
    writer = ev.EventWriter(path, clock=lambda: now[0])
    writer.task_finished("slave-1", "a", "ok", 0.1, 0.0)
    writer.flush()
    assert len(ev.read_events(path)) == 1
    writer.task_finished("slave-1", "a", "ok", 0.2, 0.0)
    now[0] += ev.FLUSH_INTERVAL / 2
    writer.flush()
    assert len(ev.read_events(path)) == 1, "too soon: kept for the next write"
    writer.emit(ev.SlaveDisconnected(t=now[0], slave="slave-1", cause="eof", reason="EOF"))
    now[0] += ev.FLUSH_INTERVAL
    writer.flush()
    kinds = [type(e).KIND for e in ev.read_events(path)]
    assert kinds == ["tasks-finished", "tasks-finished", "slave-disconnected"], "in the order things happened"
    writer.task_finished("slave-2", "a", "ok", 0.3, 0.0)
    writer.flush(force=True)
    writer.close()
    assert len(ev.read_events(path)) == 4


def test_a_resource_file_record_becomes_its_event(tmp_path: Path) -> None:
    from mwpy.resource_file import ResourceFile  # noqa: PLC0415

    record = ResourceFile(
        computation_status="finished",
        timestamp=5.0,
        update_interval=1.0,
        member_id="m",
        master_host="h",
        master_port=1,
        slaves_needed=0,
        slave_executable="python3",
        slave_files=[],
        slave_arguments=[],
        master_pid=1,
        tasks_done=9,
        slaves_connected={"unordered": 1},
    )
    event = ev.resource_file_event(6.0, record)
    assert event == ev.ResourceFileWritten(
        t=6.0,
        slaves_needed=0,
        slaves_connected={"unordered": 1},
        tasks_done=9,
        tasks_pending=0,
        tasks_running=0,
        finished=True,
    )

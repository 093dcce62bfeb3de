"""Objects shared once per slave (``ex.share``, ``mw.share``, ``mwpy.share``): real slaves, real file service.

The file service's counters are the master's own record of what it sent, so
"once per slave" is asserted on them: every slave that ran a task fetched the
object exactly once, whatever number of tasks named it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import re
import socket
import tempfile
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwpy
from mwpy import options as mwpy_options
from mwpy import resource_file
from mwpy.data.shares import SharedObjects
from mwpy.executor_setup import master_options as _master_options
from mwpy.jobs.program import run_job
from mwpy.jobs.runner import JobTask
from mwpy.observe import events as ev
from mwpy.observe import report
from mwpy.wire import codec, protocol
from tests.programs import shared_work as work
from tests.support import PROGRAMS, ROOT, free_port, run_local, wait_until


@pytest.fixture(scope="module")
def executor() -> Iterator[mwpy.Executor]:
    with mwpy.Executor(max_workers=2) as ex:
        yield ex


def test_a_shared_array_crosses_once_per_slave(executor: mwpy.Executor) -> None:
    arr = np.arange(2_000_000, dtype=np.float64)  # 16 MB
    handle: Any = executor.share(arr)  # the handle itself, typed as what it stands for
    assert len(pickle.dumps(handle)) < 100  # what each task carries: a code and the handle's key
    answers = list(executor.map(work.describe, [handle] * 60, range(60)))
    total = float(arr.sum())
    assert [value for _, value, _, _ in answers] == [total + i for i in range(60)]
    assert all(read_only and not owns for _, _, read_only, owns in answers)  # mapped from the file, not copied
    slaves = {pid for pid, _, _, _ in answers}
    counters = executor.file_counters()
    assert counters["fetches"] == {handle.digest: len(slaves)}
    assert counters["bytes_sent"] == len(slaves) * handle.size
    assert handle.size >= arr.nbytes


def test_a_handle_resolves_at_any_depth_and_once_per_slave(executor: mwpy.Executor) -> None:
    config = {"data": [{"arr": np.ones(1000)}], "words": ["a", "b", "c"]}
    handle: Any = executor.share(config)  # it stands for the config in the call
    assert executor.submit(work.nested, {"data": [{"arr": np.ones(10)}], "words": []}).result(60) == 10.0
    assert executor.submit(work.nested, handle).result(timeout=60) == 1003.0
    seen = set(executor.map(work.identity, [handle] * 40))
    assert len(seen) == len({pid for pid, _ in seen})  # each slave gave every task the same object


def test_sharing_an_equal_object_again_gives_the_same_file(executor: mwpy.Executor) -> None:
    first = executor.share({"k": list(range(100))})
    second = executor.share({"k": list(range(100))})
    assert first == second


def test_a_handle_used_on_the_master_says_where_it_works() -> None:
    handle = codec.Shared("ab" * 32, 10, "127.0.0.1", 1)
    with pytest.raises(mwpy.SharedObjectError, match="only be used in a task on a slave"):
        pickle.loads(pickle.dumps(handle))


@pytest.mark.parametrize(
    "use",
    [lambda h: h[0], lambda h: h + 1, len, np.asarray, lambda h: h.sum(), list],
    ids=["index", "add", "len", "numpy", "attribute", "iterate"],
)
def test_a_handle_used_as_its_object_outside_a_task_raises_shared_object_error(use: Any) -> None:
    """The README's promise: a TypeError about a handle before, or an AttributeError."""
    handle = codec.Shared("ab" * 32, 10, "127.0.0.1", 1)
    with pytest.raises(mwpy.SharedObjectError, match="only in a task's arguments"):
        use(handle)


def test_writing_to_a_shared_array_says_it_is_shared_and_read_only(executor: mwpy.Executor) -> None:
    error = executor.submit(work.add_in_place, executor.share(np.zeros(4))).exception(timeout=120)
    assert isinstance(error, ValueError)
    assert "read-only" in str(error)  # numpy's words, and mwpy's note about share()
    assert any("share()" in note and "copy" in note for note in getattr(error, "__notes__", ()))


def test_the_same_large_arguments_sent_again_give_one_warning_to_share_them() -> None:
    """dask warns of a large object in a task graph ("Consider scattering"); here from the second call on."""
    data = os.urandom(codec.SPILL_ABOVE + 1)
    with mwpy.Executor(max_workers=1) as ex:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            futures = [ex.submit(work.size_of, data) for _ in range(3)]
        assert [future.result(timeout=120) for future in futures] == [len(data)] * 3
    assert len(caught) == 1
    assert "ex.share(obj)" in str(caught[0].message)
    assert caught[0].filename == __file__  # the user's line


def test_share_outside_a_master_algorithm_is_refused() -> None:
    with pytest.raises(mwpy.NotInMasterError, match="share"):
        mwpy.share([1, 2, 3])


def test_the_file_format_keeps_buffers_aligned_and_unpickles_without_copies(tmp_path: Path) -> None:
    arr = np.arange(1001, dtype=np.int32)
    path = tmp_path / "obj"
    with path.open("wb") as out:
        digest, size = codec.encode_shared({"a": arr, "b": "text"}, out)
    data = path.read_bytes()
    assert size == len(data)
    assert hashlib.sha256(data).hexdigest() == digest
    view = memoryview(data)
    back = codec.decode_shared(view)
    assert back["b"] == "text"
    assert np.array_equal(back["a"], arr)
    assert not back["a"].flags.owndata  # a view of the file's bytes
    address = np.frombuffer(view, dtype=np.uint8).ctypes.data
    assert (back["a"].ctypes.data - address) % codec.SHARED_ALIGN == 0


def test_mwpy_share_inside_a_master_algorithm_under_mwpy_local() -> None:
    done = run_local(PROGRAMS / "shared_master.py", "30", slaves=2)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    total = float(np.arange(500_000, dtype=np.int64).sum())
    assert report["values"] == [total * i for i in range(30)]
    assert report["counters"]["fetches"] == {report["digest"]: report["slaves"]}
    assert report["counters"]["bytes_sent"] == report["slaves"] * report["size"]


# ---------------------------------------------------------------------- issue 22 item 2: large arguments


def test_an_argument_larger_than_a_frame_travels_through_the_file_service(tmp_path: Path) -> None:
    """Before issue 22 such an argument was refused at submit (more than --mw-max-write-buffer-size)."""
    with mwpy.Executor(max_workers=1, options=["--mw-max-write-buffer-size", str(8 << 20)]) as ex:
        data = os.urandom(codec.SPILL_ABOVE + 12345)
        assert ex.submit(work.size_of, data).result(timeout=120) == len(data)
        assert ex.file_counters()["bytes_sent"] > len(data)


def test_a_large_argument_s_file_goes_when_its_task_is_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments over 16 MiB stayed on the master's disk until the run ended; two tasks with the same ones
    share one file, which goes when the second is done."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where this process (the master) puts its folders

    def spilled() -> list[Path]:
        return [path for path in tmp_path.glob("mwpy-shared-*/*") if re.fullmatch("[0-9a-f]{64}", path.name)]

    with mwpy.Executor(max_workers=1) as ex:
        data = os.urandom(codec.SPILL_ABOVE + 12345)
        gate = str(tmp_path / "gate")
        both = [ex.submit(work.length_once_open, data, gate) for _ in range(2)]
        assert len(spilled()) == 1  # both tasks' arguments, one file
        (tmp_path / "gate").touch()
        assert [future.result(timeout=120) for future in both] == [len(data)] * 2
        assert spilled() == []
        other = os.urandom(codec.SPILL_ABOVE + 1)
        assert ex.submit(work.size_of, other).result(timeout=120) == len(other)
        assert spilled() == []


def test_a_large_keyword_argument_of_map_crosses_once_per_slave(executor: mwpy.Executor) -> None:
    before = executor.file_counters()
    big = np.arange(1_000_000, dtype=np.int64)  # 8 MB, given to every call
    answers = list(executor.map(work.plus_sum, range(30), big=big))
    assert [value for _, value in answers] == [int(big.sum()) + x for x in range(30)]
    slaves = len({pid for pid, _ in answers})
    after = executor.file_counters()
    (new,) = set(after["fetches"]) - set(before["fetches"])
    assert after["fetches"][new] == slaves
    assert after["bytes_sent"] - before["bytes_sent"] <= slaves * (big.nbytes + 4096)  # not 30 copies


def test_mw_map_shares_a_large_keyword_argument_once_per_slave() -> None:
    done = run_local(PROGRAMS / "big_arguments.py", "kwargs", slaves=2)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    total = int(np.arange(500_000, dtype=np.int64).sum())
    assert report["values"] == [total + x for x in range(40)]
    (fetched,) = report["counters"]["fetches"].values()
    assert fetched == report["slaves"]
    assert report["counters"]["bytes_sent"] < 2 * report["slaves"] * 4_000_000


def test_a_stream_holds_its_window_in_bytes_too() -> None:
    """1 MiB arguments: at most WINDOW_BYTES of them ahead (plus one), not the 10,000-task window's."""
    done = run_local(PROGRAMS / "big_arguments.py", "window", slaves=1)
    assert done.returncode == 0, done.stderr
    taken = int(done.stdout.split("taken ")[1].split()[0])
    assert taken <= (256 << 20) // (1 << 20) + 1  # the default WINDOW_BYTES: 256 MiB; all 300 before issue 22
    assert "first 1048576" in done.stdout


def test_mw_map_takes_a_bound_in_bytes_of_its_own() -> None:
    """``window_bytes=8 MiB`` with 1 MiB arguments: at most 8 of them ahead (plus one) when the first value comes."""
    done = run_local(PROGRAMS / "big_arguments.py", "window", str(8 << 20), slaves=1)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split("taken ")[1].split()[0]) <= 8 + 1
    assert "first 1048576" in done.stdout


@pytest.mark.parametrize("chunksize", [1, 2])
def test_executor_map_submits_at_once_only_up_to_its_bound_in_bytes(tmp_path: Path, chunksize: int) -> None:
    """As ProcessPoolExecutor.map, inputs are submitted when map() is called; past ``window_bytes`` of pickled
    arguments they wait until values are returned (the default, 256 MiB, held 1 MB inputs down the same way)."""
    taken = 0
    gate = tmp_path / "open"

    def inputs() -> Iterator[bytes]:
        nonlocal taken
        for i in range(40):
            taken += 1
            yield i.to_bytes(4, "big") * (1 << 18)  # 1 MiB each

    with mwpy.Executor(max_workers=1) as ex:
        gated = itertools.repeat(str(gate))
        values = ex.map(work.length_once_open, inputs(), gated, window_bytes=4 << 20, chunksize=chunksize)
        assert taken <= 4 + chunksize  # nothing returned yet: the tasks wait for the gate
        gate.touch()
        assert list(values) == [1 << 20] * 40
    assert taken == 40


def test_the_executor_s_frame_limits_reach_its_slaves() -> None:
    options = _master_options(["--mw-max-write-buffer-size", "200000000"], Path("r.json"), "local", None, "executor-1")
    arguments = options.slave_arguments
    assert arguments[arguments.index("--mw-max-read-buffer-size") + 1] == "200000000"
    assert "--mw-max-write-buffer-size" not in arguments


# ---------------------------------------------------------------------- issue 22 item 4: a bounded cache


def test_a_slave_keeps_at_most_its_cache_size_and_fetches_an_evicted_object_again() -> None:
    with mwpy.Executor(max_workers=1, options=["--mw-cache-size", str(3_000_000)]) as ex:
        first: Any = ex.share(np.zeros(250_000))  # 2 MB each: one fits
        second: Any = ex.share(np.ones(250_000))
        handle: Any
        for handle, expected in ((first, 0.0), (first, 0.0), (second, 250_000.0), (first, 0.0)):
            assert ex.submit(work.describe, handle, 0).result(timeout=60)[1] == expected
        fetches = ex.file_counters()["fetches"]
    assert fetches == {first.digest: 2, second.digest: 1}  # the second evicted the first, which came back


def test_the_master_passes_its_cache_size_to_the_slaves_it_advertises(tmp_path: Path) -> None:
    with mwpy.Executor(max_workers=1, workdir=tmp_path, options=["--mw-cache-size", "123456"]):
        advertised = resource_file.read(str(tmp_path / "resource.json")).slave_arguments
    assert advertised[advertised.index("--mw-cache-size") + 1] == "123456"


# ---------------------------------------------------------------------- issue 22 item 3: files


def test_a_file_argument_arrives_as_a_verified_local_copy_once_per_slave(tmp_path: Path) -> None:
    data = tmp_path / "table.csv"
    data.write_text("a,b\n1,2\n", encoding="utf-8")
    data.chmod(0o640)
    with mwpy.Executor(max_workers=1) as ex:
        answers = [ex.submit(work.read_file, mwpy.File(data)).result(timeout=60) for _ in range(3)]
        counters = ex.file_counters()
    for name, text, mode, path in answers:
        assert (name, text, mode) == ("table.csv", "a,b\n1,2\n", 0o640)
        assert path != str(data)  # the slave's own copy, not the master's file
    assert list(counters["fetches"].values()) == [1]
    assert counters["bytes_sent"] == data.stat().st_size


def test_a_slave_fetches_a_file_once_whether_a_task_or_a_job_needs_it(tmp_path: Path) -> None:
    """Issue 22 item 3: ``mwpy jobs``' inputs come from the slave's one cache, the one that holds shared objects
    and ``mwpy.File`` arguments, under one set of counters: a job that needs files a task already brought to
    its slave fetches nothing, and the master's file service sends each file once."""
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexec test -s data\n", encoding="utf-8")
    script.chmod(0o755)
    with mwpy.Executor(max_workers=1) as ex:
        handle: Any = ex.share(np.arange(100_000))
        pid, first = ex.submit(work.cache_counts, mwpy.File(script), handle).result(timeout=60)
        digest = hashlib.sha256(script.read_bytes()).hexdigest()
        job = JobTask(
            job_id="1.0", token="job-1", service=(handle.host, handle.port), executable="check.sh",
            arguments=(), environment=(), inputs=(("check.sh", digest, 0o755), ("data", handle.digest, 0o444)),
            stdin=None, stdout=False, stderr=False, transfer_outputs=(), transfer=True,
            outputs_on_success_only=False, initialdir=str(tmp_path),
        )  # fmt: skip
        outcome = ex.submit(run_job, job).result(timeout=60)
        again, after = ex.submit(work.cache_counts, mwpy.File(script), handle).result(timeout=60)
        counters = ex.file_counters()
    assert outcome.exit_code == 0, outcome  # the job read the object's file as its input "data"
    assert outcome.fetched_bytes == 0
    assert again == pid
    hits, misses, fetched, evictions = first
    assert (misses, fetched, evictions) == (2, script.stat().st_size + handle.size, 0)
    assert after == (hits + 4, misses, fetched, 0)  # the job's two inputs and the second task's two arguments
    assert counters["fetches"] == {digest: 1, handle.digest: 1}


def test_a_task_that_writes_to_its_file_does_not_change_the_next_task_s(tmp_path: Path) -> None:
    data = tmp_path / "input.txt"
    data.write_text("original\n", encoding="utf-8")
    with mwpy.Executor(max_workers=1) as ex:
        ex.submit(work.spoil, mwpy.File(data)).result(timeout=60)
        assert ex.submit(work.read_file, mwpy.File(data)).result(timeout=60)[1] == "original\n"
        assert list(ex.file_counters()["fetches"].values()) == [2]  # the changed copy was replaced
    assert data.read_text(encoding="utf-8") == "original\n"


def test_a_file_outside_a_task_s_arguments_says_so(tmp_path: Path) -> None:
    with pytest.raises(mwpy.SharedObjectError, match=r"travels only in a task's arguments"):
        pickle.dumps(mwpy.File(tmp_path / "x"))
    assert os.fspath(mwpy.File(tmp_path / "x")) == str(tmp_path / "x")


def test_a_local_slave_keeps_its_temporary_files_in_its_sandbox(tmp_path: Path) -> None:
    """As Condor's starter does (TMPDIR is the scratch folder): a slave killed before its atexit leaves no cache."""
    with mwpy.Executor(max_workers=1, workdir=tmp_path) as ex:
        folder = ex.submit(work.temporary_folder, 0).result(timeout=60)
    assert Path(folder).is_relative_to(tmp_path)


def test_with_tls_the_shared_objects_travel_over_tls_with_the_master_s_certificate(tmp_path: Path) -> None:
    """Issue 22 item 5 holds for shared objects: their file service speaks TLS whenever the master does."""
    cert, key = ROOT / "tests" / "data" / "tls-cert.pem", ROOT / "tests" / "data" / "tls-key.pem"
    options = ["--mw-tls-cert", str(cert), "--mw-tls-key", str(key)]
    with mwpy.Executor(max_workers=1, workdir=tmp_path, options=options) as ex:
        handle: Any = ex.share(np.arange(1000))
        assert ex.submit(work.describe, handle, 1).result(timeout=60)[1] == 499501.0
        fingerprint = resource_file.read(str(tmp_path / "resource.json")).tls_fingerprint
        assert fingerprint is not None
        with (
            socket.create_connection((handle.host, handle.port), timeout=30) as raw,
            protocol.tls_client_context().wrap_socket(raw) as tls,
        ):
            assert protocol.certificate_matches(tls, fingerprint)


# ---------------------------------------------------------------------- issue 22 item 2: large results


def test_a_result_larger_than_a_frame_comes_back_through_the_file_service(executor: mwpy.Executor) -> None:
    """Before, a task returning more than 64 MiB failed with ResultTooLarge; the value stays on its slave and
    ``result()`` fetches it from the slave's file service, checked by hash."""
    before = executor.file_counters()
    n = 100_000_000 // 8  # a 100 MB numpy array, above the 64 MiB frame limit
    value = executor.submit(work.big_array, n, 7).result(timeout=300)
    assert np.array_equal(value, np.random.default_rng(7).random(n))
    assert value.flags.writeable  # the caller's own array, as from any future
    after = executor.file_counters()
    assert after["held_fetches"] - before["held_fetches"] == 1
    assert after["held_bytes"] - before["held_bytes"] >= value.nbytes


def test_tasks_returning_the_same_large_value_all_get_it() -> None:
    """Eight results with one content hash: the stored file stays until the last of them is read (4 of 8
    arrived when the first read removed it)."""
    with mwpy.Executor(max_workers=4) as ex:
        values = list(ex.map(work.same_large_bytes, range(8), timeout=300))
        counters = ex.file_counters()
    assert values == [b"\x5a" * (20 << 20)] * 8
    assert counters["held_fetches"] == 8


def test_a_100_mb_argument_and_result_both_travel_through_the_file_service() -> None:
    data = os.urandom(100_000_000)
    with mwpy.Executor(max_workers=1) as ex:
        assert ex.submit(work.echo_bytes, data).result(timeout=300) == data
        counters = ex.file_counters()
    assert counters["bytes_sent"] >= len(data)  # the argument went out through the service
    assert counters["held_bytes"] >= len(data)  # and came back through its slave's, when asked for


# ---------------------------------------------------------------------- issue 22 item 3: files returned


def test_a_file_a_task_returns_is_a_verified_copy_on_the_master(tmp_path: Path) -> None:
    with mwpy.Executor(max_workers=1, workdir=tmp_path / "work") as ex:
        answer = ex.submit(work.make_file, "out.txt", "made on the slave\n", 0o640).result(timeout=60)
        returned = answer["file"]
        assert isinstance(returned, mwpy.File)
        assert os.path.basename(returned) == "out.txt"
        assert Path(returned).read_text(encoding="utf-8") == "made on the slave\n"
        assert os.stat(returned).st_mode & 0o777 == 0o640
        digest = hashlib.sha256(b"made on the slave\n").hexdigest()
        assert digest in os.fspath(returned)  # kept by its hash, which the master checked
        assert ex.file_counters()["results_stored"] == 1
    assert not os.path.exists(returned)  # kept until the master (here the Executor) finishes


def test_a_stored_result_or_file_a_slave_names_badly_is_a_failure_not_a_path(tmp_path: Path) -> None:
    """What a slave names is a hash, never a path: anything else fails that one result (ResultDecodeError)."""
    options, _ = mwpy_options.parse(["--mw-master", "--mw-resource-file", str(tmp_path / "resource.json")])
    received = SharedObjects(options, b"k" * 32, "127.0.0.1", None)
    assert received.address()[1]  # its file service runs, taking results
    try:
        for digest in ("../" * 20 + "etc/passwd", "0" * 64):
            value, failure = codec.decode_outcome(True, pickle.dumps(codec._Stored(digest, 10)), received)
            assert value is None
            assert failure is not None
            assert failure[0] == "ResultDecodeError"
            assert "no stored result has hash" in failure[1]
    finally:
        received.close()
    _, failure = codec.decode_outcome(True, pickle.dumps(codec._Stored("0" * 64, 1)))
    assert failure is not None
    assert "can only be read by its master" in failure[1]  # decoded with no master's file service


def test_the_journal_keeps_a_stored_result_s_value_not_its_hash() -> None:
    """A replayed journal entry must not name a stored file that went once the result was read."""
    value = np.arange(10)
    kept = codec.journal_form(pickle.dumps(codec._Stored("0" * 64, 10_000)), value)
    replayed, failure = codec.decode_outcome(True, kept)
    assert failure is None
    assert np.array_equal(replayed, value)
    plain = codec.encode_value(value)
    assert codec.journal_form(plain, value) is plain  # every other result is kept as it came


# ---------------------------------------------------------------------- issue 22 item 4: the cache's counters


def test_each_slave_s_cache_counters_reach_the_event_log_the_metrics_and_the_report(tmp_path: Path) -> None:
    events, port = tmp_path / "events.jsonl", free_port()
    options = ["--mw-events", str(events), "--mw-metrics-port", str(port)]
    with mwpy.Executor(max_workers=1, options=options) as ex:
        handle = ex.share(np.ones(500_000))  # 4 MB
        assert [value for _, value, _, _ in ex.map(work.describe, [handle] * 10, range(10))] == [
            500_000.0 + i for i in range(10)
        ]

        def counted() -> list[ev.SlaveCache]:
            found = [e for e in ev.read_events(events) if isinstance(e, ev.SlaveCache)] if events.exists() else []
            return found if found and found[-1].hits == 9 else []

        last = wait_until(counted, 60, "the slave's heartbeat to bring its cache counters")[-1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            scraped = response.read().decode()
    assert f'mwpy_slave_cache_hits{{slave="{last.slave}"}} 9.0' in scraped
    assert f'mwpy_slave_cache_misses{{slave="{last.slave}"}} 1.0' in scraped
    assert (last.hits, last.misses, last.evictions) == (9, 1, 0)
    assert last.bytes_fetched == handle.size  # fetched once, all of it
    page = report.build_report(events, tmp_path / "report.html").read_text(encoding="utf-8")
    table = page[page.index("<h2>Caches of shared objects per slave</h2>") :]
    assert f"<td class=num>9</td><td class=num>1</td><td class=num>{handle.size}</td>" in table


def test_a_large_result_the_master_cannot_keep_names_mwpy_s_folder(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A full disk on the master is mwpy's trouble, not the task's: the error names mwpy's folder and the
    system's reason (a bare "No space left on device" read as the task's own failure before)."""
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))  # the master's private folders land on the 1 MiB disk
    with mwpy.Executor(max_workers=1, workdir=tmp_path / "work") as ex:
        future = ex.submit(work.same_large_bytes, 0)
        with pytest.raises(mwpy.MwpyError, match="mwpy's folder for large results on the master") as raised:
            future.result(timeout=120)
        assert ex.submit(work.echo_bytes, b"small").result(timeout=60) == b"small"  # the executor goes on
    assert str(small_disk) in str(raised.value)
    assert "No space left on device" in str(raised.value)

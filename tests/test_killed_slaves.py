"""Tasks that kill their slave fail once, clearly, and the rest of the computation goes on (issue 21, item 1).

Real processes throughout: a task that segfaults through ctypes, one that
calls ``os._exit``, one killed by the kernel for memory under a cgroup limit
the test sets; under ``mwpy.Executor``, the master API (``mwpy local``), and
``--mw-allowed-failures``. dask's ``KilledWorker`` is the model: after
``allowed_failures`` deaths the task fails and the other tasks finish.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from mwpy import ExitCode, slave_exits
from mwpy.backends.local import MAX_RESTART_DELAY, LocalBackend
from mwpy.core.entry import Death
from mwpy.names import SLAVE_DROPS, SLAVES_LOG
from tests.programs.evictable import gated
from tests.support import PROGRAMS, PYTHON, local_master, run_local

EVICTABLE = PROGRAMS / "evictable.py"

EXECUTOR_SCRIPT = """\
    import ctypes
    import os
    import sys
    from pathlib import Path

    import mwpy


    def crash(how, where):
        if how == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        elif how == "exit":
            os._exit(3)
        elif how == "memory":
            (Path(where) / "cgroup.procs").write_text(str(os.getpid()))
            return len(bytearray(512 * 1024 * 1024))  # over the cgroup's limit: the kernel kills the slave
        return "survived"


    @mwpy.task(allowed_failures=0)
    def crash_once(how, where):
        return crash(how, where)


    def square(x):
        return x * x


    if __name__ == "__main__":
        how, where, which = sys.argv[1], sys.argv[2], sys.argv[3]
        with mwpy.Executor(max_workers=2) as ex:
            bad = ex.submit(crash_once if which == "decorated" else crash, how, where)
            good = [ex.submit(square, i) for i in range(20)]
            try:
                bad.result(timeout=300)
            except mwpy.KilledWorker as exc:
                print("deaths:", len(exc.deaths))
                print("function:", exc.function)
                print("error:", exc)
            print("squares:", [future.result(timeout=300) for future in good])
"""


def run_executor(tmp_path: Path, how: str, where: str = "-", which: str = "plain") -> str:
    script = tmp_path / "crashing.py"
    script.write_text(textwrap.dedent(EXECUTOR_SCRIPT))
    done = subprocess.run(
        [PYTHON, str(script), how, where, which], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"squares: {[i * i for i in range(20)]}" in done.stdout  # the rest of the computation went on
    return done.stdout


def test_a_task_that_segfaults_fails_with_killed_worker_after_four_deaths(tmp_path: Path) -> None:
    out = run_executor(tmp_path, "segfault")
    assert "deaths: 4" in out  # allowed_failures 3 (dask's default): the fourth death fails it
    assert "function: crash" in out  # the user's function, not mwpy's carrier
    assert "error: crash killed 4 slaves" in out
    assert out.count("killed by SIGSEGV") == 4  # how each slave ended, as the local back end saw it


def test_a_task_that_calls_os_exit_names_the_exit_status(tmp_path: Path) -> None:
    out = run_executor(tmp_path, "exit")
    assert "deaths: 4" in out
    assert out.count("exited with status 3 without a result") == 4


def test_allowed_failures_of_a_task_bounds_its_deaths(tmp_path: Path) -> None:
    out = run_executor(tmp_path, "exit", which="decorated")
    assert "deaths: 1" in out  # @mwpy.task(allowed_failures=0): the first death fails it
    assert "function: crash_once" in out


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A cgroup (v1 memory controller) limited to 64 MiB below this process's, or a skip saying why not."""
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.split(":")[1] == "memory")
        group = Path("/sys/fs/cgroup/memory" + line.split(":", 2)[2]) / f"mwpy-test-{uuid.uuid4().hex[:8]}"
        group.mkdir()
    except (OSError, StopIteration, IndexError) as exc:
        pytest.skip(f"no cgroup v1 memory controller to set a limit in: {exc}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(64 * 1024 * 1024))
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():  # killed slaves leave it empty; be sure
            os.kill(int(pid), 9)
        group.rmdir()


def test_a_task_killed_for_memory_fails_and_says_so(tmp_path: Path, memory_cgroup: Path) -> None:
    out = run_executor(tmp_path, "memory", str(memory_cgroup))
    assert "deaths: 4" in out
    assert out.count("killed by SIGKILL (as the kernel does to a process out of memory)") == 4


MASTER_PROGRAM = """\
    import os
    import sys

    import mwpy


    @mwpy.task
    def die(code):
        os._exit(code)


    @mwpy.task
    def double(x):
        return 2 * x


    @mwpy.master
    def main(mw, argv):
        die.with_policy(tag="die", allowed_failures=int(argv[0])).submit(5) if argv else die.submit(5)
        for x in range(10):
            double.with_policy(tag=x).submit(x)
        results = []
        while len(results) < 11:
            mw.loop()
            results += mw.results()
        for result in results:
            if result.error is not None:
                print("failed:", result.tag, result.error.type, result.error.message)
        print("doubled:", sorted(r.value for r in results if r.ok))
        return 0


    if __name__ == "__main__":
        mwpy.run()
"""


def test_the_master_api_hands_the_failure_to_mw_results_under_mwpy_local(tmp_path: Path) -> None:
    program = tmp_path / "dying.py"
    program.write_text(textwrap.dedent(MASTER_PROGRAM))
    done = run_local(program, "1", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "failed: die KilledSlaveError die killed 2 slaves" in done.stdout  # allowed_failures=1: two deaths
    assert done.stdout.count("exited with status 5 without a result") == 2
    assert f"doubled: {[2 * x for x in range(10)]}" in done.stdout


def test_mw_allowed_failures_sets_the_bound_for_every_task(tmp_path: Path) -> None:
    program = tmp_path / "dying.py"
    program.write_text(textwrap.dedent(MASTER_PROGRAM))
    command = [PYTHON, "-m", "mwpy", "local", str(program), "--slaves", "2", "--no-progress"]
    done = subprocess.run(
        [*command, "--", "--mw-allowed-failures", "0"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "failed: None KilledSlaveError die killed 1 slaves" in done.stdout


def test_killed_worker_is_dask_s_name_for_the_mwpy_error() -> None:
    assert mwpy.KilledWorker is mwpy.KilledSlaveError
    assert issubclass(mwpy.KilledSlaveError, mwpy.MwpyError)


def test_slaves_that_die_at_once_are_restarted_later_each_time(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, restart_delay=0.5)
    delays = [backend.restart_delay(n) for n in range(1, 12)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]  # doubled for each death in a row that came at once
    assert max(delays) == MAX_RESTART_DELAY  # and never more than this: a slow fork, never a loop


def test_the_exits_file_is_read_by_host_and_pid(tmp_path: Path) -> None:
    slave_exits.record(tmp_path, 4242, -11)
    slave_exits.record(tmp_path, 4243, 3)
    exits = slave_exits.Exits(tmp_path)
    host = socket.gethostname()
    assert exits(Death("slave-0", host, 4242)) == "killed by SIGSEGV"
    assert exits(Death("slave-1", host, 4243)) == "exited with status 3 without a result"
    assert exits(Death("slave-2", host, 4244)) is None
    assert exits(Death("slave-3", "elsewhere", 4242)) is None


def test_the_drops_file_names_this_host_s_dropped_slaves_once_and_whole(tmp_path: Path) -> None:
    """The local back end kills what the master dropped as silent: its host's pids, each once, whole lines only."""
    host = socket.gethostname()
    slave_exits.dropped(tmp_path, host, 4241)  # an earlier run's (a reused --workdir): not this back end's
    drops = slave_exits.Drops()
    assert drops.new(tmp_path) == []  # the first look only notes where the file ends
    slave_exits.dropped(tmp_path, host, 4242)
    slave_exits.dropped(tmp_path, "elsewhere", 4243)
    with (tmp_path / SLAVE_DROPS).open("a") as file:
        file.write(f"{host} 42")  # a line being written: not read until whole
    assert drops.new(tmp_path) == [4242]
    with (tmp_path / SLAVE_DROPS).open("a") as file:
        file.write("44\n")
    assert drops.new(tmp_path) == [4244]
    assert drops.new(tmp_path) == []
    slave_exits.dropped(None, host, 1)  # no work folder (no resource file): nothing written, no error


#: Events as HTCondor writes them in a job's user log (condor_event.cpp; the HTCondor manual's "Job Event Log
#: Codes"): a slave job killed by SIGSEGV and requeued (004, as on_exit_remove keeps a failed slave), then held
#: for memory (012), each after the slave's connection ended at CONNECTION_END.
CONDOR_LOG = """\
001 (042.003.000) 2026-11-25 10:00:00 Job executing on host: <10.0.0.5:9618?addrs=10.0.0.5-9618>
...
004 (042.003.000) 2026-11-25 10:00:07 Job was evicted.
\t(0) Job terminated and was requeued
\t(0) Abnormal termination (signal 11)
\t(0) No core file
...
004 (042.004.000) 2026-11-25 10:00:08 Job was evicted.
\t(0) Job terminated and was requeued
\t(1) Normal termination (return value 3)
...
012 (042.003.000) 2026-11-25 10:05:09 Job was held.
\tError from slot1_2@node7: Job has gone over cgroup memory limit of 2048 megabytes. Peak usage: 2100 megabytes.
\tCode 34 Subcode 0
...
"""


def test_a_condor_slave_s_end_is_read_from_its_jobs_user_log(tmp_path: Path) -> None:
    (tmp_path / SLAVES_LOG).write_text(CONDOR_LOG)
    exits = slave_exits.Exits(tmp_path)
    first = time.mktime(time.strptime("2026-11-25 10:00:06", "%Y-%m-%d %H:%M:%S"))
    second = time.mktime(time.strptime("2026-11-25 10:05:08", "%Y-%m-%d %H:%M:%S"))
    assert exits(Death("slave-0", "node7", 1, "42.3", first)) == "killed by SIGSEGV (Condor's log)"
    assert exits(Death("slave-1", "node7", 1, "42.4", first)) == "exited with status 3 without a result (Condor's log)"
    assert exits(Death("slave-2", "node7", 1, "42.3", second)) == (
        "held by Condor: Error from slot1_2@node7: Job has gone over cgroup memory limit of 2048 megabytes. "
        "Peak usage: 2100 megabytes."
    )
    assert exits(Death("slave-3", "node7", 1, "42.3", second + 60)) is None  # not logged yet


def test_a_slave_evicted_by_sigterm_is_not_the_task_s_fault_but_one_killed_is(tmp_path: Path) -> None:
    with local_master(EVICTABLE, tmp_path, "--mw-allowed-failures", "0", "--mw-client-timeout", "600") as master:
        evicted = gated.submit(str(tmp_path), 1)
        first = master.start_slave()
        master.drive_until((tmp_path / "started-1").exists, "the slave to start task 1")
        first.popen.send_signal(signal.SIGTERM)  # Condor's soft-kill signal: the slave hands back and leaves
        assert first.wait() == ExitCode.EVICTED
        killed = gated.submit(str(tmp_path), 2)
        second = master.start_slave()
        master.drive_until((tmp_path / "started-1").exists, "task 1 to run again")
        (tmp_path / "release").touch()
        master.drive_until(lambda: len(master.results) == 1, "task 1's result")
        assert evicted.result() == 1  # the eviction did not count against it, though none was allowed
        (tmp_path / "release").unlink()
        master.drive_until((tmp_path / "started-2").exists, "the slave to start task 2")
        second.popen.send_signal(signal.SIGKILL)
        master.drive_until(lambda: len(master.results) == 2, "task 2's failure")
        with pytest.raises(mwpy.KilledSlaveError, match="gated killed 1 slaves"):
            killed.result()


SHUTDOWN_SCRIPT = """\
    import os
    import time

    import mwpy


    def die():
        os._exit(1)


    def nap(x):
        time.sleep(0.2)
        return x


    if __name__ == "__main__":
        with mwpy.Executor(max_workers=2) as ex:
            doomed = ex.submit(die)
            rest = [ex.submit(nap, i) for i in range(50)]
            while not doomed.running():
                time.sleep(0.01)
            ex.shutdown(wait=False, cancel_futures=True)
            print("shutdown returned")
        print("left the with block:", type(doomed.exception()).__name__, sum(f.cancelled() for f in rest) > 0)
"""


def test_shutdown_without_waiting_returns_and_the_with_block_ends_despite_a_task_killing_slaves(
    tmp_path: Path,
) -> None:
    script = tmp_path / "shutdown.py"
    script.write_text(textwrap.dedent(SHUTDOWN_SCRIPT))
    done = subprocess.run([PYTHON, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["shutdown returned", "left the with block: KilledSlaveError True"]


#: A slave job's user log where a run ends and the next begins in one second.
SAME_SECOND_LOG = """\
001 (050.000.000) 2026-11-25 10:00:00 Job executing on host: <10.0.0.5:9618?addrs=10.0.0.5-9618>
...
004 (050.000.000) 2026-11-25 10:00:30 Job was evicted.
\t(0) Job terminated and was requeued
\t(0) Abnormal termination (signal 9)
...
001 (050.000.000) 2026-11-25 10:00:30 Job executing on host: <10.0.0.6:9618?addrs=10.0.0.6-9618>
...
"""


def test_a_run_s_end_logged_in_the_second_of_its_task_counts_as_an_end_whatever_follows(tmp_path: Path) -> None:
    """Guards: a restarted master does not wait for a slave whose job's log ends a run in the second it was
    given its task, even when another run begins after it in that second. The log reads the same whether that
    end was an earlier run's (the task then runs again: wasted work) or the run's own (waiting for it would
    hang the master for the lease): the order of the events cannot tell them apart, so it counts as ended."""
    (tmp_path / SLAVES_LOG).write_text(SAME_SECOND_LOG)
    given = time.mktime(time.strptime("2026-11-25 10:00:30", "%Y-%m-%d %H:%M:%S")) + 0.5
    exits = slave_exits.Exits(tmp_path)
    elsewhere = f"not-{socket.gethostname()}"  # a process this machine cannot look at: only the log tells
    assert exits.ended(elsewhere, 1, "50.0", given)
    assert not exits.ended(elsewhere, 1, "50.0", given + 1)  # the run that began at 10:00:30 has not ended

"""``mwpy local``: the status view on a terminal, silence in a pipe, the master's exit status, clear usage errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import psutil
import pytest

from mwpy import resource_file, slave_start
from mwpy.backends import Launch
from mwpy.backends.local import LocalBackend
from mwpy.errors import BackendError, ResourceFileError
from mwpy.pool.failing_slaves import SETUP_FAILURE_LIMIT, SetupFailures
from tests.obs_support import Terminal
from tests.support import EXAMPLES, PROGRAMS, mwpy_command, run_local, wait_until

PING = EXAMPLES / "ping.py"
TOTALS = PROGRAMS / "totals.py"


def test_on_a_terminal_the_status_view_sits_below_the_program_s_output(tmp_path: Path) -> None:
    """The view of ``mwpy status --watch``, drawn by mwpy local in a real pseudo-terminal, read off an emulated screen:
    it keeps the words of the old progress line ("tasks done", the rate "/s", "slaves 2/2"), stays below what the
    program prints, and ends showing the finished computation, after the goodput summary.

    Half the tasks wait for a release file, so the computation is surely in progress while the test looks (a fast
    run could otherwise finish between two refreshes)."""
    release = tmp_path / "release"
    command = mwpy_command("local", str(TOTALS), "--slaves", "2", "--total", "300", "--", "half", str(release), "300")
    term = Terminal(command, deadline=120)
    try:
        running = term.wait_for("mwpy local", "in progress", "tasks done (", "/s)", "slaves 2/2 connected", "/300")
        assert "╭─ mwpy local" in running, running
        release.touch()
        assert term.wait_exit() == 0, term.text()
    finally:
        term.close()
    screen = term.text()
    lines = screen.splitlines()
    output = next(i for i, line in enumerate(lines) if f"sum {sum(v * v for v in range(300))}" in line)
    summary = next(i for i, line in enumerate(lines) if line.startswith("goodput: 300 tasks ok"))
    view = next(i for i, line in enumerate(lines) if "╭─ mwpy local" in line)
    # Both above the view; stdout and stderr come through two pipes, so their order is not the program's.
    assert max(output, summary) < view, screen
    below = "\n".join(lines[view:])
    assert "finished" in below, screen
    assert "300/300 (100 %)" in below, screen
    assert "300 tasks done" in below, screen


def test_ctrl_c_on_a_terminal_leaves_the_view_and_one_line() -> None:
    term = Terminal(mwpy_command("local", str(PING), "--slaves", "1", "--", "--max-tasks", "0"), deadline=120)
    try:
        term.wait_for("in progress", "slaves 1/1 connected")
        os.write(term.fd, b"\x03")  # the Ctrl-C key: SIGINT to the terminal's foreground process group
        assert term.wait_exit() == 130, term.text()
    finally:
        term.close()
    lines = [line for line in term.text().splitlines() if line.strip()]
    assert lines[-1] == "mwpy local: interrupted", term.text()
    assert lines[-2].startswith("╰"), "the last view stays, closed, just above that line"
    last_view = term.text().rsplit("╭", 1)[1]
    assert "interrupted ·" in last_view, last_view  # not "finished" (the master wrote its file as finished)
    assert "finished" not in last_view
    assert "ETA" not in last_view
    assert "Traceback" not in term.text()


def test_progress_in_a_pipe_prints_plain_lines(tmp_path: Path) -> None:
    command = mwpy_command("local", str(PING), "--slaves", "2", "--progress", "--total", "20000")
    done = subprocess.run(
        [*command, "--", "--max-tasks", "20000"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr
    assert "\r" not in done.stderr
    views = [line for line in done.stderr.splitlines() if line.startswith("[mwpy] ")]
    assert views, done.stderr
    assert views[-1].startswith("[mwpy] finished · 20,000/20,000 tasks done (100 %"), views
    # Before the master's first write (a loaded machine) the view says it waits; then every line counts slaves.
    shown = [line for line in views if not line.startswith("[mwpy] waiting for the resource file")]
    assert all(re.search(r" · slaves [0-2]/2 connected", line) for line in shown), views
    assert done.stdout.strip().splitlines()[-1] == "ping: 20000 pongs, 0 bad"


def test_in_a_pipe_mwpy_local_adds_nothing_to_the_output() -> None:
    done = run_local(PING, "--max-tasks", "20000", slaves=2)
    assert done.returncode == 0, done.stderr
    assert "[mwpy]" not in done.stdout + done.stderr
    assert "\r" not in done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ping: 20000 pongs, 0 bad"


def test_the_master_s_exit_status_is_mwpy_local_s(tmp_path: Path) -> None:
    command = mwpy_command(
        "local", str(PROGRAMS / "workload.py"), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path)
    )
    done = subprocess.run([*command, "--", "exit", "3"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert f"logs in {tmp_path}" in done.stderr
    assert (tmp_path / "master.audit").read_text(encoding="utf-8").count("FINI SHUTDOWN") == 1


def test_a_missing_program_is_one_line_and_status_2(tmp_path: Path) -> None:
    done = subprocess.run(
        mwpy_command("local", str(tmp_path / "nowhere.py")), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"mwpy local: error: {tmp_path / 'nowhere.py'}: no such program file"


def test_a_slave_that_fails_is_reported_once_and_repeated_failures_stop_the_run(tmp_path: Path) -> None:
    """A slave that cannot start is reported once, with its last error line; restarted, it fails again,
    and after SETUP_FAILURE_LIMIT failed runs without a single result mwpy local stops, naming the failure,
    instead of restarting it for ever."""
    program = tmp_path / "broken.py"  # a copy: no other test's process has this path on its command line
    shutil.copy(PROGRAMS / "broken_slaves.py", program)
    work = tmp_path / "work"
    done = subprocess.run(
        mwpy_command("local", str(program), "--slaves", "1", "--no-progress", "--workdir", str(work)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    reports = [line for line in lines if line.startswith("mwpy local: slave local.0 exited with status 1")]
    assert len(reports) == 1, done.stderr  # once, not once per restart
    assert "ImportError: no module named numpy" in reports[0]
    assert str(work / "local.0" / "slave.err") in reports[0]
    [stop] = [line for line in lines if "before any task had a result" in line]
    # At least the limit: a run may fail again between the count reaching it and mwpy local's next look.
    counted = re.match(r"mwpy local: error: (\d+) slave runs failed", stop)
    assert counted is not None, stop
    assert int(counted.group(1)) >= SETUP_FAILURE_LIMIT
    assert "ImportError: no module named numpy" in stop
    assert (work / "local.0" / "slave.err").read_text().count("ImportError") >= SETUP_FAILURE_LIMIT
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(program) in " ".join(p.info["cmdline"] or [])]


def test_slaves_started_from_the_resource_file_get_the_master_s_slave_arguments(tmp_path: Path) -> None:
    log = tmp_path / "slave.log"
    done = run_local(
        PROGRAMS / "slave_variants.py",
        "4",
        "--mw-slave-argument",
        "until_shutdown",
        "--mw-slave-argument",
        str(log),
        slaves=1,
    )
    assert done.returncode == 0, done.stderr
    first = json.loads(log.read_text(encoding="utf-8").splitlines()[0])
    assert first["argv"] == ["until_shutdown", str(log)]


def test_the_resource_file_copies_in_slave_sandboxes_are_private(tmp_path: Path) -> None:
    """They carry the secret: other users of the machine must not read them."""
    work = tmp_path / "work"
    command = mwpy_command("local", str(EXAMPLES / "hello_world.py"), "--slaves", "2", "--workdir", str(work))
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    copies = list(work.glob("local.*/resource.json"))
    assert copies
    assert {oct(copy.stat().st_mode & 0o777) for copy in copies} == {oct(0o600)}
    assert oct((work / "resource.json").stat().st_mode & 0o777) == oct(0o600)


def test_a_program_that_never_starts_a_master_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    program = tmp_path / "forgot.py"
    program.write_text("import mwpy\n\n\n@mwpy.task\ndef f() -> int:\n    return 1\n")  # no mwpy.run()
    done = subprocess.run(
        mwpy_command("local", str(program), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path / "work")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "did you call mwpy.run()" in done.stderr


def _interrupt(command: list[str], ready: Callable[[], object], env: dict[str, str] | None = None) -> list[str]:
    """Run ``command`` in a session of its own, press Ctrl-C once ``ready()``; 130, and its non-blank stderr lines."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        wait_until(ready, 60, "the run to be under way")
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130
    return [line for line in err.splitlines() if line.strip()]


def test_ctrl_c_ends_mwpy_local_with_130_and_one_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    command = mwpy_command(
        "local", str(PING), "--slaves", "1", "--no-progress", "--workdir", str(work), "--", "--max-tasks", "0"
    )
    lines = _interrupt(command, lambda: (work / "resource.json").exists() and any(work.glob("local.*/slave.err")))
    assert lines == [f"mwpy local: interrupted (logs in {work})"]  # a folder given with --workdir is kept


def test_ctrl_c_with_tasks_in_flight_says_one_line_and_leaves_no_temporary_folder(tmp_path: Path) -> None:
    """Issue 21 item 7: an interrupted run printed ``slave-N disconnected (EOF); 128 tasks in flight`` per slave
    (Ctrl-C reaches the slaves too) and left its temporary work folder behind."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    command = mwpy_command("local", str(PING), "--slaves", "2", "--no-progress", "--", "--max-tasks", "0")

    def flowing() -> bool:
        return any(_tasks_done(work / "resource.json") > 0 for work in temp.glob("mwpy-local-*"))

    assert _interrupt(command, flowing, {**os.environ, "TMPDIR": str(temp)}) == ["mwpy local: interrupted"]
    assert not list(temp.glob("mwpy-local-*"))


def _tasks_done(path: Path) -> int:
    try:
        return resource_file.read(path).tasks_done
    except ResourceFileError:
        return 0


def test_slave_runs_that_fail_between_two_looks_all_count(tmp_path: Path) -> None:
    """The overseer's thread polls the local back end (and restarts a failed slave half a second later) more often
    than the set-up watch looks; a slave that fails fast can fail and be running again between two looks. The CI
    run of 753d13a hung on exactly that (the watch saw it running at every look and counted one failure). Here
    the back end restarts at once and the watch looks only after many failed runs: every one is counted."""
    backend = LocalBackend(tmp_path, restart_delay=0.0)
    resource = tmp_path / "resource.json"
    resource.write_text("{}", encoding="utf-8")
    fail = Launch("mwpy:test", str(resource), sys.executable, ["-c", "raise SystemExit('no numpy here')"], [])
    backend.submit(fail, 1)
    try:
        watch = SetupFailures()
        watch.look(backend.jobs())
        failures = SETUP_FAILURE_LIMIT + 1
        wait_until(lambda: (backend.jobs()[0].failed_runs or 0) >= failures, 60, f"{failures} failed runs")
        watch.look(backend.jobs())
        assert watch.count >= failures
        problem = watch.problem(0)
        assert problem is not None
        assert "no numpy here" in problem
        assert watch.problem(1) is None  # a computation that had results never stops this way
        # After a slave connected, a slave that exits 1 may have been killed by a task: not a set-up failure.
        assert watch.problem(0, slaves_connected=1) is None
    finally:
        backend.close()


def test_adopted_slaves_are_the_back_end_s_first_jobs_and_restart_as_launched(tmp_path: Path) -> None:
    """A plain Executor starts its first slaves before its back end exists (mwpy/executor.py) and the back end
    takes them (``LocalBackend.adopt``): they are its jobs local.0 and local.1, one that fails starts again
    from the launch it was given, a job submitted later is numbered after them, and only a back end with no
    job yet adopts."""
    backend = LocalBackend(tmp_path, restart_delay=0.0)
    resource = tmp_path / "resource.json"
    resource.write_text("{}", encoding="utf-8")
    command = [sys.executable, "-c", "raise SystemExit('failed at once')"]
    launch = Launch("mwpy:test", str(resource), command[0], command[1:], [])
    processes = []
    for number in range(2):
        sandbox = tmp_path / slave_start.job_id(number)
        sandbox.mkdir()
        processes.append(slave_start.start_process(command, sandbox))
    backend.adopt(launch, processes)
    try:
        wait_until(lambda: all((job.failed_runs or 0) >= 2 for job in backend.jobs()), 60, "two failed runs each")
        jobs = backend.jobs()
        assert sorted(job.job_id for job in jobs) == ["local.0", "local.1"]
        assert all("failed at once" in (job.reason or "") for job in jobs)
        with pytest.raises(BackendError, match="adopts slaves only before its first job"):
            backend.adopt(launch, [])
        backend.submit(launch, 1)
        assert sorted(job.job_id for job in backend.jobs()) == ["local.0", "local.1", "local.2"]
    finally:
        backend.close()


def test_program_arguments_before_the_double_dash_get_a_hint_and_mwpy_local_s_usage(tmp_path: Path) -> None:
    """Issue 21 item 7: ``mwpy local prog.py out.csv`` gave mwpy's top-level usage and no hint."""
    done = subprocess.run(mwpy_command("local", str(PING), "out.csv"), capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: mwpy local ")
    assert done.stderr.splitlines()[-1] == (
        "mwpy local: error: unrecognized arguments: out.csv (arguments for the program go after --: "
        "mwpy local ... -- out.csv)"
    )


def test_a_misspelt_option_shows_mwpy_local_s_usage(tmp_path: Path) -> None:
    done = subprocess.run(
        mwpy_command("local", "--slavs", "3", str(PING)), capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: mwpy local ")
    assert "unrecognized arguments: --slavs" in done.stderr
    assert list(tmp_path.iterdir()) == []  # a usage error leaves nothing behind


MORE_ORDERED_THAN_SLAVES = """\
import mwpy


@mwpy.task
def where(x):
    return x


@mwpy.master
def main(mw, argv):
    mw.allocate_slaves(3, "ordered")
    while len(mw.connected_slaves()) < 3:  # would wait for ever: only 2 slaves can come
        mw.loop(timeout=1)
    return 0


if __name__ == "__main__":
    mwpy.run()
"""


def test_more_ordered_slaves_than_slaves_is_an_error_not_a_hang_and_no_empty_goodput_table(tmp_path: Path) -> None:
    """Issue 21 item 7: such a program hung silently under ``mwpy local``; a run that never started printed an
    all-zero goodput table."""
    program = tmp_path / "ordered.py"
    program.write_text(MORE_ORDERED_THAN_SLAVES)
    done = run_local(program, slaves=2, timeout=120)
    assert done.returncode == 255
    assert (
        "ConfigurationError: allocate_slaves: 3 ordered and intermingle slaves wanted, but at most 2 slaves can "
        "connect (--slaves 2)"
    ) in done.stderr
    assert "goodput" not in done.stderr


def test_a_slave_algorithm_that_raises_is_a_set_up_failure_even_after_it_connected(tmp_path: Path) -> None:
    """A @mwpy.slave algorithm runs once its slave has connected; when it raises, the slave exits ALGORITHM_ERROR
    (255), which a task never causes (a task's exceptions are caught and reported): those runs still stop a
    computation that has no result, instead of restarting for ever."""
    backend = LocalBackend(tmp_path, restart_delay=0.0)
    resource = tmp_path / "resource.json"
    resource.write_text("{}", encoding="utf-8")
    backend.submit(Launch("mwpy:test", str(resource), sys.executable, ["-c", "raise SystemExit(255)"], []), 1)
    try:
        watch = SetupFailures()
        wait_until(lambda: (backend.jobs()[0].failed_runs or 0) >= SETUP_FAILURE_LIMIT, 60, "failed runs")
        watch.look(backend.jobs())
        assert watch.problem(0, slaves_connected=1) is not None
    finally:
        backend.close()


class _ReportUnread:
    """A fork server that reaped its one slave, whose report the executor has not read yet."""

    def __init__(self, pid: int) -> None:
        self.pids = [pid]
        self.statuses: dict[int, int] = {}
        self.ended = False

    def read(self, timeout: float | None) -> None:
        """Nothing comes: the report is still in the pipe."""


def test_signalling_a_forked_slave_that_has_just_ended_is_no_error() -> None:
    """The local back end's close, at an executor's shutdown, signals the slaves it has: one that left meanwhile
    (reaped by its fork server, the report not read yet) is gone, not an error, as a Popen's is (bpo-40550)."""
    gone = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids are below it: none is this one
    slave = slave_start.ForkedSlave(cast("slave_start.ForkServer", _ReportUnread(gone)), 0)
    slave.send_signal(signal.SIGTERM)
    slave.kill()

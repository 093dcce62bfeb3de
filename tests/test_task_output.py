"""What tasks print is shown as they print it and kept: on the Result and the failed future, past 64 KiB whole
in a file the Result names."""

from __future__ import annotations

import re
import subprocess
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy.core.facts import TaskPrinted
from mwpy.observe.renderers import OutputForwarder
from mwpy.observe.task_output import KEPT_OUTPUT
from tests.programs.output_tasks import chatty_task, noisy_task
from tests.support import PROGRAMS, PYTHON, LocalMaster, local_master, mwpy_command, wait_until

OUTPUT = PROGRAMS / "output_tasks.py"


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    with local_master(OUTPUT, tmp_path) as master:
        master.start_slave()
        yield master


def test_a_result_carries_what_its_task_printed(lm: LocalMaster) -> None:
    future = noisy_task.submit(3)
    assert future.result(timeout=60) == 3
    [result] = lm.mw.results()
    assert result.stdout == "working on 3\n"
    assert result.stderr == "careful with 3\n"


def test_output_past_the_bound_is_kept_whole_in_a_file_the_result_names(
    lm: LocalMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the master's temporary folder: this test's
    chatty_task.submit(KEPT_OUTPUT + 1000).result(timeout=60)
    [result] = lm.mw.results()
    assert result.stdout.startswith("x" * KEPT_OUTPUT)
    found = re.search(r"\[mwpy: 1000 more characters; the whole output is in (\S+)\]", result.stdout)
    assert found is not None, result.stdout[KEPT_OUTPUT:]
    whole = Path(found.group(1))
    assert whole.parent.parent == tmp_path
    assert whole.read_text() == "x" * (KEPT_OUTPUT + 1000)  # nothing dropped


def run_output_program(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = ["local", str(OUTPUT), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path / "w"), *options]
    done = subprocess.run(mwpy_command(*command), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def test_mwpy_local_shows_what_tasks_print(tmp_path: Path) -> None:
    done = run_output_program(tmp_path)
    # Printed on the slave, shown where mwpy local runs, on its stream, as it is printed: the task that fails
    # too (its lines are shown before anyone knows it fails, as under ProcessPoolExecutor).
    assert done.stdout == "working on -5\nworking on 4\n"
    assert "careful with -5\n" in done.stderr
    assert "careful with 4\n" in done.stderr


def test_mwpy_local_quiet_keeps_task_output_off_the_screen(tmp_path: Path) -> None:
    done = run_output_program(tmp_path, "--quiet")
    assert done.stdout == ""
    assert "careful" not in done.stderr


EXECUTOR_SCRIPT = """\
    import sys

    import mwpy


    def shout(x):
        print(f"line one of {x}")
        print(f"line two of {x}")
        print(f"warning {x}", file=sys.stderr)
        return x


    def fail(x):
        print(f"about to fail {x}")
        raise ValueError(x)


    if __name__ == "__main__":
        quiet = sys.argv[1] == "quiet"
        with mwpy.Executor(max_workers=int(sys.argv[2]), quiet=quiet) as ex:
            futures = [ex.submit(shout, x) for x in range(int(sys.argv[3]))]
            caught = ex.submit(fail, 99)
            values = [f.result() for f in futures]
            assert isinstance(caught.exception(), ValueError)
            kept = futures[0].stdout, futures[0].stderr
        print("kept:", repr(kept), values, file=sys.stderr)
"""


def run_executor(tmp_path: Path, quiet: str, workers: int, tasks: int) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "printing.py"
    script.write_text(textwrap.dedent(EXECUTOR_SCRIPT))
    done = subprocess.run(
        [PYTHON, str(script), quiet, str(workers), str(tasks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_executor_shows_what_tasks_print_on_the_caller_s_streams(tmp_path: Path) -> None:
    done = run_executor(tmp_path, "loud", 1, 2)
    # One slave: lines as the tasks printed them, as ProcessPoolExecutor shows them (the failing one's too).
    assert done.stdout == "line one of 0\nline two of 0\nline one of 1\nline two of 1\nabout to fail 99\n"
    assert done.stderr.startswith("warning 0\nwarning 1\n")
    assert "kept: ('line one of 0\\nline two of 0\\n', 'warning 0\\n') [0, 1]" in done.stderr


def test_with_several_slaves_printing_each_line_is_whole_and_names_its_slave(tmp_path: Path) -> None:
    done = run_executor(tmp_path, "loud", 2, 40)
    lines = [line for line in done.stdout.splitlines() if "about to fail" not in line]
    assert len(lines) == 80
    assert all(re.fullmatch(r"(\[slave-\d+\] )?line (one|two) of \d+", line) for line in lines), lines
    assert sorted(line.split("] ")[-1] for line in lines) == sorted(
        f"line {n} of {x}" for x in range(40) for n in ("one", "two")
    )


def test_once_a_second_slave_prints_every_line_names_its_slave(capsys: pytest.CaptureFixture[str]) -> None:
    forward = OutputForwarder()
    forward.task_printed(TaskPrinted("slave-0", 1, "a\nb", ""))
    forward.task_printed(TaskPrinted("slave-1", 2, "c\n", "careful\n"))
    forward.task_printed(TaskPrinted("slave-0", 3, "d\n", ""))
    out, err = capsys.readouterr()
    assert out == "a\nb\n[slave-1] c\n[slave-0] d\n"  # lines kept whole (the last one ended)
    assert err == "[slave-1] careful\n"


def test_quiet_keeps_task_output_in_the_futures_only(tmp_path: Path) -> None:
    done = run_executor(tmp_path, "quiet", 1, 2)
    assert done.stdout == ""
    assert "warning" not in done.stderr.split("kept:")[0]
    assert "kept: ('line one of 0\\nline two of 0\\n', 'warning 0\\n') [0, 1]" in done.stderr


LIVE_SCRIPT = """\
    import os
    import sys
    import time

    import mwpy


    def progress(gate):
        print("step one \\x1b[31mred")
        while not os.path.exists(gate):  # the caller creates the gate once it has seen step one
            time.sleep(0.01)
        print("step two")
        return 7


    if __name__ == "__main__":
        with mwpy.Executor(max_workers=1) as ex:
            print("value", ex.submit(progress, sys.argv[1]).result(), flush=True)
"""


def test_a_task_s_line_reaches_the_caller_while_the_task_still_runs(tmp_path: Path) -> None:
    """ProcessPoolExecutor shows a worker's prints as they happen; so does the Executor: the task waits for a
    gate the test opens only once the task's first line has reached the caller's stdout (a pipe)."""
    script, gate = tmp_path / "live.py", tmp_path / "gate"
    script.write_text(textwrap.dedent(LIVE_SCRIPT))
    with subprocess.Popen(
        [PYTHON, str(script), str(gate)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as caller:
        out = caller.stdout
        assert out is not None
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(iter(out.readline, "")), daemon=True)
        reader.start()
        try:
            wait_until(lambda: bool(seen), 60, "the task's first line on the caller's stdout")
            assert seen[0] == "step one \\x1b[31mred\n"  # while the task runs; its escape shown, not obeyed
        finally:
            gate.touch()
        assert caller.wait(timeout=60) == 0, caller.stderr.read() if caller.stderr else ""
        reader.join(timeout=10)
    assert seen == ["step one \\x1b[31mred\n", "step two\n", "value 7\n"]

"""What tasks print is kept: captured per task on the slave, capped, on the Result and the failed future."""

from __future__ import annotations

import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy.core.facts import TaskPrinted
from mwpy.observe.renderers import OutputForwarder
from mwpy.slaveside.running import MAX_OUTPUT
from tests.programs.output_tasks import chatty_task, noisy_task
from tests.support import PROGRAMS, PYTHON, LocalMaster, local_master, mwpy_command

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


def test_output_is_capped_and_says_so(lm: LocalMaster) -> None:
    chatty_task.submit(MAX_OUTPUT + 1000).result(timeout=60)
    [result] = lm.mw.results()
    assert result.stdout.startswith("x" * MAX_OUTPUT)
    assert "1000 more characters not kept" in result.stdout


def run_output_program(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = ["local", str(OUTPUT), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path / "w"), *options]
    done = subprocess.run(mwpy_command(*command), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def test_mwpy_local_shows_what_a_successful_task_prints_and_nothing_of_a_caught_failure(tmp_path: Path) -> None:
    done = run_output_program(tmp_path)
    assert done.stdout == "working on 4\n"  # printed on the slave, shown where mwpy local runs, on its stream
    assert "careful with 4\n" in done.stderr
    assert "-5" not in done.stdout + done.stderr  # the program caught that failure: nothing is said of it


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
    # One slave: lines as the task printed them, as ProcessPoolExecutor shows them; each task's lines together.
    assert done.stdout == "line one of 0\nline two of 0\nline one of 1\nline two of 1\n"
    assert done.stderr.startswith("warning 0\nwarning 1\n")
    assert "about to fail" not in done.stdout + done.stderr  # the program caught it: nothing said of it
    assert "kept: ('line one of 0\\nline two of 0\\n', 'warning 0\\n') [0, 1]" in done.stderr


def test_with_several_slaves_printing_each_line_is_whole_and_names_its_slave(tmp_path: Path) -> None:
    done = run_executor(tmp_path, "loud", 2, 40)
    lines = done.stdout.splitlines()
    assert len(lines) == 80
    assert all(re.fullmatch(r"(\[slave-\d+\] )?line (one|two) of \d+", line) for line in lines), lines
    for x in range(40):  # a task's two lines come together, whichever slave ran it
        one = next(i for i, line in enumerate(lines) if line.endswith(f"line one of {x}"))
        assert lines[one + 1].endswith(f"line two of {x}")


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

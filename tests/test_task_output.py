"""What tasks print is kept: captured per task on the slave, capped, on the Result and the failed future."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwpy.slave import MAX_OUTPUT
from tests.programs.output_tasks import chatty_task, noisy_task
from tests.support import PROGRAMS, LocalMaster, local_master, mwpy_command

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


def test_mwpy_local_shows_a_failing_task_s_output(tmp_path: Path) -> None:
    done = subprocess.run(
        mwpy_command("local", str(OUTPUT), "--slaves", "1", "--no-progress", "--workdir", str(tmp_path / "w")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "working on -5" in done.stderr  # printed on the slave, shown where mwpy local runs
    assert "careful with -5" in done.stderr

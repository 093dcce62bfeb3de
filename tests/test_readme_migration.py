"""The how-to guides' porting tables (docs/howto/port-from-*.md), checked by running each row's mwpy form.

A row followed literally must work: the dask row once read "ex.map(...) for
client.map(...)", and its users' ``.result()`` on the values gave
AttributeError. Every row's first cell is either run by
tests/programs/migration.py (which prints ``ok`` and the cell) or listed in
``ELSEWHERE`` with where it is tested.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support import PROGRAMS, PYTHON, ROOT, mwpy_command

MIGRATION = PROGRAMS / "migration.py"
#: Rows that need an HTCondor pool: tests/test_condor_executor.py runs mwpy.Executor(backend="condor").
ELSEWHERE = {"Parsl: HighThroughputExecutor + HTCondorProvider"}


#: The guides whose tables tests/programs/migration.py runs; the joblib guide's example runs in tests/test_docs_site.py.
GUIDES = ("port-from-processpool.md", "port-from-dask.md", "port-from-parsl.md")


def readme_rows() -> set[str]:
    """The first cell of each row of the guides' porting tables, without its backquotes."""
    rows = []
    for guide in GUIDES:
        text = (ROOT / "docs" / "howto" / guide).read_text()
        table = text.split("| you wrote | with mwpy |", 1)[1].split("\n\n", 1)[0]
        rows += [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return {re.sub(r"`", "", row.split(" | ")[0][2:]).strip() for row in rows}


def ok_lines(output: str) -> set[str]:
    return {line[3:] for line in output.splitlines() if line.startswith("ok ")}


def test_every_row_of_the_migration_table_runs(tmp_path: Path) -> None:
    executor_runs = tmp_path / "executor"
    executor_runs.mkdir()
    by_executor = subprocess.run(
        [PYTHON, str(MIGRATION), "executor", str(executor_runs)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert by_executor.returncode == 0, by_executor.stderr
    master_runs = tmp_path / "master"
    master_runs.mkdir()
    command = mwpy_command("local", str(MIGRATION), "--slaves", "2", "--no-progress")
    by_master = subprocess.run(
        [*command, "--", "--mw-task-attempts", "3", str(master_runs)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert by_master.returncode == 0, by_master.stderr
    ran = ok_lines(by_executor.stdout) | ok_lines(by_master.stdout)
    assert ran | ELSEWHERE == readme_rows()

"""Functions that slaves cannot import travel by value, as they are at each submit.

cloudpickle's own suite has the cases: ``test_interactively_defined_function``
and ``test_interactively_defined_global_variable`` (tests/cloudpickle_test.py)
redefine a function and change a global in ``__main__`` between two calls in
a worker, which must see the new ones; dask pickles every ``__main__``
function by value. Here they run from a real notebook (nbclient), from a
script read from stdin, and from a script's ``if __name__ == "__main__":``
block, which a slave loading the script does not run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import mwpy

TIMEOUT = 180

#: What a notebook user types: a helper, a function using it and a global, then both changed after a first run.
REDEFINED = [
    "import json\nimport mwpy\nex = mwpy.Executor(max_workers=1)",
    "def inner(x):\n    return -x\ndef outer(x):\n    return inner(x)\nK = 1\ndef f(x):\n    return x * K",
    "before = [ex.submit(outer, 1).result(timeout=120), ex.submit(f, 2).result(timeout=120)]",
    "def inner(x):\n    return x\nK = 10",
    "after = [ex.submit(outer, 1).result(timeout=120), ex.submit(f, 2).result(timeout=120)]\n"
    "mapped = list(ex.map(f, [3]))\n"
    "ex.shutdown()\n"
    "print(json.dumps([before, after, mapped]))",
]


def test_a_notebook_s_redefined_helper_and_changed_global_are_seen(tmp_path: Path) -> None:
    cells = [nbformat.v4.new_code_cell(source) for source in REDEFINED]  # type: ignore[no-untyped-call]
    notebook = nbformat.v4.new_notebook(cells=cells)  # type: ignore[no-untyped-call]
    client = NotebookClient(
        notebook, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except Exception as exc:
        pytest.fail(f"the notebook failed: {exc}")
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs if "text" in output)
    assert json.loads(printed) == [[-1, 2], [1, 20], [30]]


def run(command: list[str], cwd: Path, stdin: str | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


STDIN_JOB = """\
import mwpy

def inner(x):
    return -x

def outer(x):
    return inner(x)

K = 1

def f(x):
    return x * K

with mwpy.Executor(max_workers=1) as ex:
    print(ex.submit(outer, 1).result(timeout=120), ex.submit(f, 2).result(timeout=120))
    def inner(x):
        return x
    K = 10
    print(ex.submit(outer, 1).result(timeout=120), ex.submit(f, 2).result(timeout=120))
"""


def test_a_script_read_from_stdin_runs_its_functions_as_they_are_now(tmp_path: Path) -> None:
    """``python - < job.py``: slaves have no file to load, so every function goes by value, redefined ones too."""
    assert run([sys.executable, "-"], tmp_path, STDIN_JOB).split() == ["-1", "2", "1", "20"]


GUARDED = """\
import sys

import mwpy

if __name__ == "__main__":
    sys.path.insert(0, {library!r})  # what the slaves do not run: they get the caller's sys.path
    import helpers

    def nested(x):
        # Names mwpy itself, and starts an Executor inside the task: its slaves import the caller's modules too.
        with mwpy.Executor(max_workers=1) as inner:
            return inner.submit(helpers.triple, x).result(timeout=120)

    def double(x):
        return 2 * x

    with mwpy.Executor(max_workers=1) as ex:
        print(ex.submit(double, 4).result(timeout=120), ex.submit(nested, 5).result(timeout=120))
"""


def test_functions_defined_under_the_main_guard_run_and_can_start_an_executor(tmp_path: Path) -> None:
    """multiprocessing's spawn fails these (``Can't get attribute ... on <module '__mp_main__'>``)."""
    library = tmp_path / "library"
    library.mkdir()
    (library / "helpers.py").write_text("def triple(x):\n    return 3 * x\n")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(GUARDED.format(library=str(library))))
    assert run([sys.executable, str(script)], tmp_path).split() == ["8", "15"]


def test_a_large_closure_crosses_once_while_unchanged_and_again_when_changed() -> None:
    """A function over a few MiB (a closure over an array) is shared by content: unchanged, its calls carry only
    a handle; a changed one is a new content, sent again."""
    table = np.arange(1 << 19)  # 4 MiB

    def look(i: int) -> int:
        return int(table[i])

    with mwpy.Executor(max_workers=1) as ex:
        assert [ex.submit(look, i).result(timeout=120) for i in (1, 2, 3)] == [1, 2, 3]
        assert len(ex.file_counters()["fetches"]) == 1
        table[2] = -2
        assert ex.submit(look, 2).result(timeout=120) == -2
        assert len(ex.file_counters()["fetches"]) == 2

"""Functions typed into a notebook run on mwpy's slaves: a real Jupyter kernel executes a real notebook (nbclient).

Issue 22 item 6: a notebook's ``__main__`` has no file a slave could load, so
its functions, lambdas and closures travel by value (cloudpickle). The
notebook is what a user would type, cell by cell, in JupyterLab.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

CELLS = [
    "import numpy as np\nimport mwpy",
    "def hypotenuse(a, b):\n    return (a * a + b * b) ** 0.5",
    "offset = 100\ndef shifted(x):\n    return hypotenuse(x, 0) + offset",
    "ex = mwpy.Executor(max_workers=2)",
    "import json\n"
    "arr = ex.share(np.arange(1000))\n"
    "values = {\n"
    "    'map': list(ex.map(hypotenuse, [3, 5], [4, 12])),\n"
    "    'globals': ex.submit(shifted, 1).result(timeout=120),\n"
    "    'lambda': ex.submit(lambda a: int(a.sum()), arr).result(timeout=120),\n"
    "    'chunks': list(ex.map(lambda x: x * x, range(6), chunksize=4)),\n"
    "}\n"
    "print(json.dumps(values))",
    "ex.shutdown()",
]


def test_a_notebook_s_functions_lambdas_and_shared_objects_run_on_slaves(tmp_path: Path) -> None:
    cells = [nbformat.v4.new_code_cell(source) for source in CELLS]  # type: ignore[no-untyped-call]
    notebook = nbformat.v4.new_notebook(cells=cells)  # type: ignore[no-untyped-call]
    client = NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    try:
        client.execute()
    except Exception as exc:  # the cell's error, with its traceback, is what a failing run should show
        pytest.fail(f"the notebook failed: {exc}")
    outputs = notebook.cells[4].outputs
    printed = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert json.loads(printed) == {
        "map": [5.0, 13.0],
        "globals": 101.0,
        "lambda": 499500,
        "chunks": [0, 1, 4, 9, 16, 25],
    }

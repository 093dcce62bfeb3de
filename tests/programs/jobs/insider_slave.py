"""An insider in ``mwpy jobs``: a slave holding the secret that sends back outputs under names of its choosing.

Run as ``python insider_slave.py --mw-slave --mw-resource-file RF``: the real slave of
``mwpy/jobs/program.py`` with its list of outputs replaced by the names in the environment variable
``MWPY_TEST_INSIDER_NAMES`` (a JSON list), each carrying the same payload: the run's own files, hidden
files, a deep tree, names with control characters (tests/test_jobs_hostile.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import mwpy
from mwpy.jobs import program, runner  # noqa: F401 (program declares the task this slave runs)

NAMES: list[str] = json.loads(os.environ.get("MWPY_TEST_INSIDER_NAMES", "[]"))


def _chosen_outputs(folder: Path, task: runner.JobTask, *_: object) -> list[tuple[str, Path]]:
    payload = folder / "payload"
    payload.write_text("planted by an insider\n")
    return [(name, payload) for name in NAMES]


runner._outputs = _chosen_outputs  # type: ignore[assignment]

if __name__ == "__main__":
    mwpy.run()

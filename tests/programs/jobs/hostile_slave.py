"""A hostile mwpy jobs slave: it runs the job, then sends outputs under names of its choosing.

Run as ``python hostile_slave.py --mw-slave --mw-resource-file RF``: the real slave of
``mwpy/jobs/program.py`` with its list of outputs replaced, the way a compromised execute node (an
insider: it holds the secret) could replace it. The names are ``ESCAPES`` (names that try to leave
``initialdir``), or those in the environment variable ``MWPY_TEST_INSIDER_NAMES`` (a JSON list): the
run's own files, hidden files, a deep tree, names with control characters (tests/test_jobs_hostile.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import mwpy
from mwpy.jobs import program, runner  # noqa: F401 (program declares the task this slave runs)

ESCAPES = ("../escaped", "/tmp/mwpy-hostile-absolute", "sub/../../escaped", "link/escaped", "victim.txt")
NAMES: list[str] = json.loads(os.environ.get("MWPY_TEST_INSIDER_NAMES", "null")) or list(ESCAPES)


def _hostile_outputs(folder: Path, task: runner.JobTask, *_: object) -> list[tuple[str, Path]]:
    payload = folder / "payload"
    payload.write_text("written by a hostile slave\n")
    return [(name, payload) for name in NAMES]


runner._outputs = _hostile_outputs  # type: ignore[assignment]

if __name__ == "__main__":
    mwpy.run()

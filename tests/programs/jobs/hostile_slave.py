"""A hostile mwpy jobs slave: it runs the job, then sends outputs under names that try to escape.

Run as ``python hostile_slave.py --mw-slave --mw-resource-file RF``: the real
slave of ``mwpy/jobs/program.py`` with the list of outputs replaced, the way a
compromised execute node could replace it.
"""

from __future__ import annotations

from pathlib import Path

import mwpy
from mwpy.jobs import program, runner  # noqa: F401 (program declares the task this slave runs)

ESCAPES = ("../escaped", "/tmp/mwpy-hostile-absolute", "sub/../../escaped", "link/escaped", "victim.txt")


def _hostile_outputs(folder: Path, task: runner.JobTask, *_: object) -> list[tuple[str, Path]]:
    payload = folder / "payload"
    payload.write_text("written by a hostile slave\n")
    return [(name, payload) for name in ESCAPES]


runner._outputs = _hostile_outputs  # type: ignore[assignment]

if __name__ == "__main__":
    mwpy.run()

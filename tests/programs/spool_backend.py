"""A batch-system back end that lives outside mwpy: each slave job is a JSON file in a spool folder.

It exists to show that a back end plugs into ``mwpy overseer`` without any
change to mwpy: one module (this one) and one way to name it, either
``--backend tests.programs.spool_backend:SpoolBackend`` or an entry point in
the ``mwpy.backends`` group. It declares its own option, ``--spool DIR``.

It starts no processes: a test plays the batch system by reading and editing
the job files (``"state"`` is ``"idle"``, ``"running"`` or ``"held"``). Both
sides write a job file whole (:func:`write_job`): the overseer reads the spool
every fraction of a second, and a file caught half-written is not JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mwpy.backends import Job, JobState, Launch
from mwpy.errors import BackendError, ConfigurationError


def write_job(path: Path, record: dict[str, Any]) -> None:
    """Replace the job file ``path`` at once: a reader sees the old record or the new one, never part of one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(path)


class SpoolBackend:
    """Slave jobs as ``SPOOL/job.N.json`` files that record what the overseer asked for."""

    name = "spool"

    def __init__(self, spool: Path) -> None:
        self._spool = spool
        self._numbers = itertools.count(len(list(spool.glob("job.*.json"))))

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The back end's own option: where its job files go."""
        parser.add_argument("--spool", required=True, help="spool back end: folder of job files")

    @classmethod
    def create(cls, resource_file: str, options: argparse.Namespace) -> SpoolBackend:
        """Refuses a spool folder that does not exist: a configuration mistake, exit status 2."""
        spool = Path(options.spool)
        if not spool.is_dir():
            raise ConfigurationError(f"--spool: {spool} is not a folder")
        return cls(spool)

    def jobs(self) -> list[Job]:
        found = []
        for path in sorted(self._spool.glob("job.*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            found.append(Job(path.stem, JobState(record["state"]), reason=record.get("reason")))
        return found

    def submit(self, launch: Launch, count: int) -> None:
        if (self._spool / "refuse").exists():
            raise BackendError("the spool refuses new jobs")
        for _ in range(count):
            record = {"state": "idle", "member_id": launch.member_id, "arguments": launch.arguments}
            write_job(self._spool / f"job.{next(self._numbers)}.json", record)

    def remove(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            (self._spool / f"{job_id}.json").unlink(missing_ok=True)

    def poll(self) -> None:
        """Nothing runs here: the test changes job states itself."""

    def close(self) -> None:
        """No connection to close."""

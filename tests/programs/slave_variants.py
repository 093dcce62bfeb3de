"""An mwpy program with a slave algorithm, to test the slave loop variants.

The slave algorithm's argv (``--mw-*`` options stripped) is ``VARIANT LOG``:
it appends one JSON line per event to LOG (its argv, every status a loop call
returned, each task it ran, setup and teardown), so a test can check what
happened, in which order. Variants:

    until_shutdown   return slave.loop_until_shutdown()
    loop             call slave.loop() until it reports a shutdown or a lost master
    loop_once        call slave.loop_once() likewise (at most one task per call)
    setup_teardown   create a "database" file before the first task, run tasks with
                     loop_once, note each gap between tasks, delete the file at the end
    return_none      work until shutdown, then return None (not an exit status)

Master argv: ``N`` -- submit note(0..N-1), print one JSON line per result, exit 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs

import mwpy

_log: Path | None = None
_database: Path | None = None


def record(event: dict[str, Any]) -> None:
    assert _log is not None
    with _log.open("a", encoding="utf-8") as out:
        out.write(json.dumps(event) + "\n")


@mwpy.task
def note(i: int) -> dict[str, Any]:
    """Log that task ``i`` ran here; return what the database (if any) holds."""
    record({"event": "task", "i": i})
    content = _database.read_text() if _database is not None else None
    return {"i": i, "pid": os.getpid(), "database": content}


def _status(status: mwpy.SlaveStatus) -> dict[str, Any]:
    return {"event": "status", **attrs.asdict(status)}


def _loop(slave: mwpy.Slave, once: bool) -> mwpy.SlaveStatus:
    while True:
        status = slave.loop_once(timeout=1.0) if once else slave.loop(timeout=1.0)
        record(_status(status))
        if status.explicit_shutdown or status.master_disconnected:
            return status


@mwpy.slave
def work(slave: mwpy.Slave, argv: list[str]) -> Any:
    global _log, _database
    variant, log = argv[0], argv[1]
    _log = Path(log)
    record({"event": "argv", "argv": argv, "slave_id": slave.slave_id})
    if variant == "until_shutdown":
        code = slave.loop_until_shutdown()
        record({"event": "returned", "code": code})
        return code
    if variant in ("loop", "loop_once"):
        return _loop(slave, once=variant == "loop_once").exit_code
    if variant == "setup_teardown":
        _database = Path(f"database-{os.getpid()}.txt")
        _database.write_text("fetched at setup")
        record({"event": "setup", "file": str(_database)})
        while True:
            status = slave.loop_once(timeout=1.0)
            if status.explicit_shutdown or status.master_disconnected:
                break
            record({"event": "between", "results_done": status.results_done})
        _database.unlink()
        record({"event": "teardown", "file": str(_database)})
        return status.exit_code
    if variant == "sys_exit":
        slave.loop_until_shutdown()
        sys.exit(3)
    if variant == "return_none":
        slave.loop_until_shutdown()
        return None
    raise ValueError(f"unknown variant {variant!r}")


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count = int(argv[0])
    for i in range(count):
        note.submit(i)
    received = 0
    while received < count:
        mw.loop()
        for result in mw.results():
            received += 1
            print(json.dumps({"value": result.value, "slave_id": result.slave_id, "ok": result.ok}), flush=True)
    return 0


if __name__ == "__main__":
    mwpy.run()

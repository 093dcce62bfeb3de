"""An mwpy program for tests/test_guarantees_*.py: task algorithms whose every run is countable and gated.

Every run of ``gated_or_broken``, ``ordered_fail`` and ``undecodable`` leaves a file
``attempt-KEY-PID-RANDOM`` in the folder it is given, so a test counts where
and how often a task ran instead of trusting the master's word. Tasks that
wait do so on a release file the test creates, never on a clock.

A slave started with ``GUARANTEES_BROKEN=1`` fails every ``gated_or_broken`` task at
once with an OSError, like a machine with a full disk.

Master usage (after the ``--mw-*`` options)::

    wait STOPFILE      run the event loop until STOPFILE exists, then exit 0
    one-then-wait STOPFILE   run one task, print {"answered": true}, then as wait
    run N              submit echo_value(0..N-1), print one JSON line per result, exit 0
    keyed-failure DIR  submit one failing task with a journal key; print {"ok", "journaled"} of its result
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mwpy

#: A slave started with this variable set fails every ``gated_or_broken`` task.
BROKEN = "GUARANTEES_BROKEN"
#: The longest a task here waits for its release file (a test gone wrong).
WAIT_LIMIT = 120.0


def _attempt(folder: str, key: str) -> None:
    (Path(folder) / f"attempt-{key}-{os.getpid()}-{uuid.uuid4().hex}").touch()


def attempts(folder: Path, key: str) -> list[int]:
    """The process ids of every run of the task named ``key``, one per run."""
    return [int(path.name.split("-")[-2]) for path in folder.glob(f"attempt-{key}-*")]


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def _announce(folder: str, key: str) -> None:
    here = Path(folder)
    partial = here / f".started-{key}.{os.getpid()}"
    partial.write_text(str(os.getpid()))
    partial.replace(here / f"started-{key}")


@mwpy.task
def hold_until_released(folder: str, key: str) -> int:
    """Write ``started-KEY`` (holding this pid), wait for ``release-KEY``; return the pid."""
    _announce(folder, key)
    _wait_for(Path(folder) / f"release-{key}")
    return os.getpid()


@mwpy.task
def gated_or_broken(folder: str, key: str) -> str:
    """Fail at once on a broken slave; elsewhere wait for ``release-KEY`` and succeed."""
    _attempt(folder, key)
    if os.environ.get(BROKEN):
        raise OSError(28, "No space left on device (simulated)")
    _wait_for(Path(folder) / f"release-{key}")
    return key.upper()


@mwpy.task
def ordered_fail(folder: str, key: str) -> None:
    """Fail wherever it runs."""
    _attempt(folder, key)
    raise ValueError(f"{key} fails everywhere")


class Undecodable:
    """Pickles fine on the slave; unpickling it raises, so the master gets a ResultDecodeError."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (int, ("not a number",))


@mwpy.task
def undecodable(folder: str, key: str) -> Undecodable:
    _attempt(folder, key)
    return Undecodable()


@mwpy.task
def echo_value(i: int) -> int:
    return i


def _loop_until(mw: mwpy.Master, stop: Path) -> None:
    while not stop.exists():
        mw.loop(timeout=0.05)


def _wait(mw: mwpy.Master, argv: list[str]) -> int:
    _loop_until(mw, Path(argv[1]))
    return 0


def _one_then_wait(mw: mwpy.Master, argv: list[str]) -> int:
    """One task (so its slave is surely in its loop), then as ``wait``."""
    echo_value.submit(1)
    while not mw.results():
        mw.loop(timeout=0.05)
    print(json.dumps({"answered": True}), flush=True)
    _loop_until(mw, Path(argv[1]))
    return 0


def _run(mw: mwpy.Master, argv: list[str]) -> int:
    count = int(argv[1])
    for i in range(count):
        echo_value.submit(i)
    seen = 0
    while seen < count:
        mw.loop()
        for result in mw.results():
            seen += 1
            print(json.dumps({"value": result.value, "slave_id": result.slave_id}), flush=True)
    return 0


def _keyed_failure(mw: mwpy.Master, argv: list[str]) -> int:
    task_id = ordered_fail.with_policy(key="always-fails").submit(argv[1], "keyed").task_id
    while True:
        mw.loop()
        for result in mw.results():
            assert result.task_id == task_id
            print(json.dumps({"ok": result.ok, "journaled": result.journaled}), flush=True)
            return 0


#: The master's commands (the module docstring says what each does).
_COMMANDS: dict[str, Callable[[mwpy.Master, list[str]], int]] = {
    "wait": _wait,
    "one-then-wait": _one_then_wait,
    "run": _run,
    "keyed-failure": _keyed_failure,
}


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    command = _COMMANDS.get(argv[0])
    if command is None:
        raise ValueError(f"unknown command {argv!r}")
    return command(mw, argv)


if __name__ == "__main__":
    mwpy.run()

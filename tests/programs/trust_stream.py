"""A computation with an exactly checkable answer, for the hostile-input and TLS tests.

Master usage (after the ``--mw-*`` options)::

    stream STOPFILE     keep PENDING ``scrambled(i)`` tasks pending (i = 0, 1, 2, ...) until STOPFILE
                        exists, then drain; print {"done": n} as results arrive (at most every
                        0.1 s), and at the end one {"summary": ...} line
    echo MARKER COUNT   submit ``echoed(MARKER-i)`` for i < COUNT, then print the summary

The summary lists, by task input, every wrong value, duplicate, missing and
failed result; the master exits 0 only when all of them are empty.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import mwpy

PENDING = 40


def expected(i: int) -> int:
    return (i * 2654435761 + 12345) % 2**32


@mwpy.task
def scrambled(i: int) -> int:
    time.sleep(0.002)
    return expected(i)


@mwpy.task
def echoed(text: str) -> str:
    return f"{text}:echoed"


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Tally:
    """What the master algorithm received, checked against what it submitted."""

    def __init__(self) -> None:
        self.inputs: dict[int, Any] = {}  # task id -> input
        self.seen: dict[int, int] = {}  # task id -> results received
        self.wrong: list[Any] = []
        self.failed: list[Any] = []
        self.done = 0

    def take(self, mw: mwpy.Master, check: Any) -> None:
        for result in mw.results():
            self.done += 1
            value = self.inputs.get(result.task_id)
            self.seen[result.task_id] = self.seen.get(result.task_id, 0) + 1
            if result.error is not None:
                self.failed.append([value, result.error.type, result.error.message])
            elif result.value != check(value):
                self.wrong.append([value, result.value])

    def summary(self) -> int:
        report = {
            "submitted": len(self.inputs),
            "received": self.done,
            "wrong": self.wrong,
            "failed": self.failed,
            "duplicates": sorted(self.inputs[t] for t, n in self.seen.items() if n > 1),
            "missing": sorted(self.inputs[t] for t in self.inputs if t not in self.seen),
            "unknown": sorted(t for t in self.seen if t not in self.inputs),
        }
        emit({"summary": report})
        clean = not any(report[k] for k in ("wrong", "failed", "duplicates", "missing", "unknown"))
        return 0 if clean else 1


def stream(mw: mwpy.Master, stop: Path) -> int:
    tally = Tally()
    next_input = 0
    last_emit = 0.0
    while True:
        stopping = stop.exists()
        if not stopping:
            for _ in range(PENDING - mw.pending_tasks()):
                tally.inputs[scrambled.submit(next_input).task_id] = next_input
                next_input += 1
        elif not mw.pending_tasks():
            break
        mw.loop(timeout=0.1)
        tally.take(mw, expected)
        now = time.monotonic()
        if now - last_emit >= 0.1:
            emit({"done": tally.done})
            last_emit = now
    return tally.summary()


def echo_all(mw: mwpy.Master, marker: str, count: int) -> int:
    tally = Tally()
    for i in range(count):
        tally.inputs[echoed.submit(f"{marker}-{i}").task_id] = f"{marker}-{i}"
    while mw.pending_tasks():
        mw.loop()
        tally.take(mw, lambda text: f"{text}:echoed")
    return tally.summary()


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    if argv[0] == "stream":
        return stream(mw, Path(argv[1]))
    if argv[0] == "echo":
        return echo_all(mw, argv[1], int(argv[2]))
    raise ValueError(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    mwpy.run()

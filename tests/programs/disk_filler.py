"""Keyed tasks with large results, to fill the disk under a journal (tests/test_journal.py).

Master usage (after the ``--mw-*`` options)::

    fill N SIZE   run ``block(i, SIZE)`` for i < N with key ``block-i`` through ``mw.as_completed``; print
                  {"i", "ok", "journaled"} per result (ok: the SIZE bytes are the ones block(i) makes), then
                  {"received": count}; exit 0 when every result arrived right
"""

from __future__ import annotations

import hashlib
import json

import mwpy


def content(i: int, size: int) -> bytes:
    """``size`` bytes that only ``i`` makes (incompressible enough to fill a tmpfs page by page)."""
    seed = hashlib.sha256(str(i).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


@mwpy.task
def block(i: int, size: int) -> bytes:
    return content(i, size)


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    _, count, size = argv
    inputs = range(int(count))
    received = 0
    for result in mw.as_completed(block, inputs, [int(size)] * len(inputs), key=lambda i, _: f"block-{i}"):
        ok = result.error is None and result.value == content(result.tag, int(size))
        received += ok
        print(json.dumps({"i": result.tag, "ok": ok, "journaled": result.journaled}), flush=True)
    print(json.dumps({"received": received}), flush=True)
    return 0 if received == len(inputs) else 1


if __name__ == "__main__":
    mwpy.run()

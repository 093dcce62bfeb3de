"""A master algorithm that passes futures as task arguments (tests/test_dataflow.py runs it with ``mwpy local``).

It prints one line per check: a chain, a fan-in through ``mw.map``, a failed input, a cancelled one.
"""

from __future__ import annotations

from typing import Any

import mwpy


@mwpy.task
def inc(x: Any) -> int:  # Any: a future stands for its value
    return int(x) + 1


@mwpy.task
def total(values: Any) -> int:
    return sum(values)


@mwpy.task
def refuse(x: int) -> int:
    raise LookupError(f"no {x}")


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    future = inc.submit(0)
    for _ in range(49):
        future = inc.submit(future)
    print(f"chain {future.result(timeout=120)}")
    firsts = [inc.submit(n) for n in range(10)]
    print(f"fan-in {total.submit(list(mw.map(inc, firsts))).result(timeout=120)}")
    try:
        inc.submit(total.submit([1, refuse.submit(2)])).result(timeout=120)
    except LookupError as exc:
        print(f"failed {type(exc).__name__} {exc} {getattr(exc, '__notes__', [])}")
    try:
        inc.submit(future, {"x": "not a future"}, [])  # type: ignore[call-arg]
    except TypeError as exc:
        print(f"wrong call {type(exc).__name__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(mwpy.run())

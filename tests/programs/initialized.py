"""``mwpy.run(initializer=..., initargs=...)``: state a slave sets up once and keeps between tasks.

Master usage: ``initialized.py COUNT``: COUNT tasks, each returning the slave's state and process id;
prints ``state VALUE`` for each distinct state seen and ``slaves N`` for the distinct slave processes.
With ``MWPY_TEST_INIT_FAIL`` set, the initializer raises.
"""

from __future__ import annotations

import os

import mwpy

#: Set once per slave process by ``load``.
MODEL: str | None = None


def load(name: str) -> None:
    """The initializer: what a real program would load once (a model, a database connection)."""
    global MODEL
    if os.environ.get("MWPY_TEST_INIT_FAIL"):
        raise RuntimeError(f"cannot load {name}")
    MODEL = name


@mwpy.task
def predict(x: int) -> tuple[str | None, int]:
    return MODEL, os.getpid()


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    seen = list(mw.map(predict, range(int(argv[0]))))
    for state in sorted({str(state) for state, _ in seen}):
        print(f"state {state}")
    print(f"slaves {len({pid for _, pid in seen})}")
    return 0


if __name__ == "__main__":
    mwpy.run(initializer=load, initargs=("model-v1",))

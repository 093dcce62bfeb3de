"""Higher order: each task carries code as well as data (CL-MW's higher-order).

The one task algorithm, ``horder``, receives the source text of a function
(a Python expression such as ``"lambda y: (y, y * 3)"``) and the arguments to
apply it to. The slave compiles the source on the spot and applies it, so the
master can make up whatever functions it wants the slaves to run. It answers
``("applied", value)``, or ``("failed-compilation", message)`` when the source
does not compile to a function. (Only run code from masters you trust: a
slave runs whatever its master sends; the computation's secret is what keeps
strangers out.)

It also shows the convenience API: ``mw.map(horder, sources, arguments)``
submits lazily and yields the answers in input order, like the builtin map.

Run it on local slaves:

    mwpy local examples/higher_order.py --slaves 2

Each line reads ``N: horder(SOURCE, ARGS) = OUTCOME``; the last one
``higher_order: T tasks, A applied, F failed compilation``.
"""

import math
from typing import Any

import mwpy

#: What the compiled functions may refer to besides the builtins.
NAMESPACE: dict[str, Any] = {"math": math}


@mwpy.task
def horder(source: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """Compile ``source`` to a function here, on the slave, and apply it to ``args``."""
    try:
        function = eval(compile(source, "<horder>", "eval"), dict(NAMESPACE))
    except Exception as exc:  # a SyntaxError, or an expression that fails to evaluate
        return ("failed-compilation", f"{type(exc).__name__}: {exc}")
    if not callable(function):
        return ("failed-compilation", f"not a function: {type(function).__name__}")
    return ("applied", function(*args))


def tasks() -> list[tuple[str, tuple[Any, ...]]]:
    """The (source, arguments) pairs to run: CL-MW's ten closures, then a few more kinds."""
    jobs: list[tuple[str, tuple[Any, ...]]] = [(f"lambda y: (y, y * {x})", (x,)) for x in range(10)]
    jobs += [
        ("lambda *numbers: sum(numbers)", (1, 2, 3, 4)),
        ("lambda r: round(math.pi * r * r, 6)", (2.0,)),
        ("lambda word, times=2: word * times", ("ab",)),
        ("lambda words: sorted(words, key=len)", (["three", "a", "to"],)),
        ("lambda y: (y,", (1,)),  # a syntax error
        ("6 * 7", ()),  # compiles, but to a number rather than a function
    ]
    return jobs


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    jobs = tasks()
    sources = [source for source, _ in jobs]
    arguments = [args for _, args in jobs]
    applied = failed = 0
    for index, (source, args, outcome) in enumerate(
        zip(sources, arguments, mw.map(horder, sources, arguments), strict=True)
    ):
        print(f"{index}: horder({source!r}, {args!r}) = {outcome!r}")
        if outcome[0] == "applied":
            applied += 1
        else:
            failed += 1
    print(f"higher_order: {len(jobs)} tasks, {applied} applied, {failed} failed compilation")
    return 0


if __name__ == "__main__":
    mwpy.run()

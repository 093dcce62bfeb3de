"""Argument processing: task algorithms with every kind of Python parameter (CL-MW's argument-processing).

CL-MW allowed one lambda-list keyword per task algorithm (``&optional``,
``&key`` or ``&rest``). An mwpy task algorithm is an ordinary function, so
``submit`` takes whatever the function takes: positional-only, positional or
keyword, defaults, ``*args``, keyword-only and ``**kwargs``, in any
combination. Arguments are pickled at submit time and bound on the slave
exactly as a local call would bind them.

The master keeps the task id that ``submit`` returns to name each result.

Run it on local slaves:

    mwpy local examples/argument_processing.py --slaves 2

Each line reads ``LABEL: VALUE``; the last one ``argument_processing: N results, F failed``.
"""

from typing import Any

import mwpy


@mwpy.task
def required(a: int, b: int, c: int) -> tuple[Any, ...]:
    return ("required", a, b, c)


@mwpy.task
def optional(a: int, b: int, c: int, d: int | None = None, e: int = 42) -> tuple[Any, ...]:
    return ("optional", a, b, c, d, e)


@mwpy.task
def keyword_only(
    a: int, b: int, c: int, *, d: int = 100, e: int | None = None, f: int | None = None
) -> tuple[Any, ...]:
    return ("keyword-only", a, b, c, d, e, f)


@mwpy.task
def positional_only(a: int, b: int, /, c: int = 3) -> tuple[Any, ...]:
    return ("positional-only", a, b, c)


@mwpy.task
def rest(a: int, b: int, c: int, *d: int) -> tuple[Any, ...]:
    return ("rest", a, b, c, d)


@mwpy.task
def keywords(a: int, **options: Any) -> tuple[Any, ...]:
    return ("keywords", a, options)


@mwpy.task
def everything(a: int, /, b: int, c: int = 3, *more: int, d: int, e: int = 5, **extra: Any) -> tuple[Any, ...]:
    """All kinds at once: positional-only, either, default, *args, keyword-only, **kwargs."""
    return ("everything", a, b, c, more, d, e, extra)


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    labels = {
        required.submit(1, 2, 3).task_id: "required",
        optional.submit(4, 5, 6, 7).task_id: "optional, d given",
        optional.submit(4, 5, 6).task_id: "optional, defaults",
        optional.submit(4, 5, 6, e=8).task_id: "optional, e by keyword",
        keyword_only.submit(10, 20, 30, f=50, e=40).task_id: "keyword-only",
        keyword_only.submit(a=11, b=21, c=31, d=200).task_id: "keyword-only, all by keyword",
        positional_only.submit(1, 2).task_id: "positional-only, default",
        positional_only.submit(1, 2, c=30).task_id: "positional-only, c by keyword",
        rest.submit(100, 102, 103, 104, 105, 106, 107).task_id: "rest",
        rest.submit(100, 102, 103).task_id: "rest, empty",
        keywords.submit(1, colour="blue", size=3).task_id: "keywords",
        everything.submit(1, 2, d=4).task_id: "everything, minimal",
        everything.submit(1, 2, 30, 31, 32, d=4, e=50, f=60, g=70).task_id: "everything, full",
        everything.submit(1, b=2, d=4, f=6).task_id: "everything, b by keyword",
    }
    answered = failed = 0
    while labels:
        mw.loop()
        for result in mw.results():
            label = labels.pop(result.task_id)
            if result.ok:
                answered += 1
                print(f"{label}: {result.value!r}")
            else:
                failed += 1
                print(f"{label}: FAILED {result.error}")
        for task in mw.unrunnable_tasks():
            failed += 1
            print(f"{labels.pop(task.task_id)}: UNRUNNABLE")
    print(f"argument_processing: {answered} results, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    mwpy.run()

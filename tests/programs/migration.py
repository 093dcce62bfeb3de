"""The how-to guides' porting tables (docs/howto/port-from-*.md), each row's mwpy form run as a user writes it.

tests/test_readme_migration.py runs it.

``migration.py executor FOLDER`` runs the rows written with ``mwpy.Executor``;
``mwpy local migration.py -- --mw-task-attempts 3 FOLDER`` runs the
rows written in a master algorithm. Each row that worked prints ``ok ROW``
(ROW is the row's first cell in its guide); FOLDER holds the flaky task's runs.
"""

from __future__ import annotations

import concurrent.futures
import sys
import uuid
from pathlib import Path

import mwpy


def f(x: int, y: int = 0) -> int:
    return x * x + y


@mwpy.task
def app(x: int) -> int:  # Parsl's @python_app
    return x + 1


def fails_first(folder: str, x: int) -> int:
    """Raises OSError on its first run in ``folder`` (any slave), then returns ``x``."""
    runs = Path(folder)
    first = not any(runs.iterdir())
    (runs / uuid.uuid4().hex).touch()
    if first:
        raise OSError("the first run fails")
    return x


flaky = mwpy.task(retries=2)(fails_first)
#: The same function undecorated for --mw-task-attempts (a task algorithm of its own name).
flaky_default = mwpy.task(name="flaky_default")(fails_first)


def executor_rows(folder: Path) -> None:
    with mwpy.Executor(max_workers=4) as ex:
        print("ok ProcessPoolExecutor(max_workers=4)")
        assert ex.submit(f, 3).result() == 9
        assert list(ex.map(f, range(300), chunksize=100)) == [x * x for x in range(300)]
        assert list(ex.map(f, range(3), y=1)) == [1, 2, 5]
        print("ok pool.submit(f, x) / pool.map(f, xs, chunksize=100)")
        futures = [ex.submit(f, x) for x in range(5)]
        done, _ = concurrent.futures.wait(futures)
        assert (
            {g.result() for g in concurrent.futures.as_completed(futures)}
            == {x * x for x in range(5)}
            == {g.result() for g in done}
        )
        assert futures[0].cancel() is False  # done already: not cancellable, as documented for any Future
        print("ok future.result(), concurrent.futures.wait/as_completed, future.cancel()")
        assert ex.submit(f, 2).result() == 4
        print("ok dask: client = Client(); client.submit(f, x)")
        xs = range(4)
        futures = [ex.submit(f, x, y=1) for x in xs]
        assert [g.result() for g in futures] == [x * x + 1 for x in xs]
        assert list(ex.map(f, xs, y=1)) == [x * x + 1 for x in xs]
        print("ok dask: futures = client.map(f, xs, y=1) (a list of futures)")
        assert [g.result() for g in futures] == [1, 2, 5, 10]
        print("ok dask: client.gather(futures)")
        assert ex.submit(flaky, str(folder), 7).result() == 7
        print("ok dask: client.submit(f, x, retries=2)")
        assert ex.submit(app, 1).result() == 2
        print("ok Parsl: @python_app def f(x): ...; f(1).result()")
        arr = list(range(1000))
        x = ex.share(arr)
        assert ex.submit(sum, x).result() == sum(arr)  # the handle is typed as arr, which it stands for
        print("ok dask: x = client.scatter(arr, broadcast=True); client.submit(f, x); Ray: ray.put(arr)")


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    folder = Path(argv[0])
    retried, defaulted = folder / "retries", folder / "attempts"
    retried.mkdir()
    defaulted.mkdir()
    assert fails_first.__name__ == "fails_first"
    assert flaky.with_policy(retries=2).submit(str(retried), 5).result() == 5
    print("ok dask: client.submit(f, x, retries=2)")
    assert app.submit(1).result() == 2
    print("ok Parsl: @python_app def f(x): ...; f(1).result()")
    assert flaky_default.submit(str(defaulted), 6).result() == 6  # --mw-task-attempts 3 on the command line
    print("ok Parsl: Config(retries=2)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["executor"]:
        executor_rows(Path(sys.argv[2]))
    else:
        mwpy.run()

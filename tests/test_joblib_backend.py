"""``import mwpy.joblib``: joblib's ``Parallel``, and scikit-learn's ``n_jobs=``, on real mwpy slave processes.

Tests marked "joblib 1.6.0" are adapted from joblib's own backend tests
(joblib/test/test_parallel.py of joblib 1.6.0), run with ``backend="mwpy"``;
the functions live in tests/programs/joblib_work.py, which slaves import.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import mwpy.joblib  # noqa: F401  (registers the backend "mwpy")
from mwpy.errors import ConfigurationError, RemoteTraceback
from mwpy.names import RESOURCE_FILE
from mwpy.resource_file import read as read_resource_file
from tests.programs import executor_work
from tests.programs import joblib_work as work
from tests.support import PYTHON, wait_until


def _children() -> set[int]:
    """This process's child processes (Linux: every thread's ``children`` list)."""
    tasks = Path("/proc/self/task")
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The executors' temporary work folders go to a folder of this test's, which can be checked empty."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_parallel_gives_every_value_in_order_from_slave_processes() -> None:
    with parallel_config(backend="mwpy", n_jobs=2):
        assert Parallel()(delayed(work.square)(i) for i in range(100)) == [i * i for i in range(100)]
        pids = set(Parallel(batch_size=1)(delayed(work.pid)(i) for i in range(20)))
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2


def test_an_exception_in_one_call_is_raised_as_itself_with_the_slave_s_traceback() -> None:
    with parallel_config(backend="mwpy", n_jobs=2), pytest.raises(executor_work.Odd, match="7 is odd") as raised:
        Parallel()(delayed(executor_work.fail_on_odd)(i) for i in (0, 2, 4, 7, 8, 10))
    assert type(raised.value) is executor_work.Odd
    assert isinstance(raised.value.__cause__, RemoteTraceback)
    assert "fail_on_odd" in str(raised.value.__cause__)


def test_the_slaves_serve_every_call_of_a_block_and_leave_with_it(private_tmp: Path) -> None:
    before = _children()
    with parallel_config(backend="mwpy", n_jobs=2):
        first = set(Parallel(batch_size=1)(delayed(work.pid)(i) for i in range(20)))
        with pytest.raises(ZeroDivisionError):
            Parallel()(delayed(work.division)(1, y) for y in (1, 0, 2))
        second = set(Parallel(batch_size=1)(delayed(work.pid)(i) for i in range(20)))
        assert len(list(private_tmp.glob("mwpy-executor-*"))) == 1
    assert len(first | second) <= 2  # the same two slaves served both calls, and the failed one between
    wait_until(lambda: not list(private_tmp.iterdir()), 60, "the executor's work folder to go")
    wait_until(lambda: _children() <= before, 60, "the slaves to leave")


def test_scikit_learn_s_grid_search_finds_what_it_finds_serially() -> None:
    """As a user would: ``GridSearchCV(n_jobs=2)`` inside ``parallel_config(backend="mwpy")``."""
    x, y = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1, 10, 100], "gamma": [0.01, 0.1, 1, "scale"]}
    serial = GridSearchCV(SVC(), grid, cv=3).fit(x, y)
    with parallel_config(backend="mwpy"):
        parallel = GridSearchCV(SVC(), grid, cv=3, n_jobs=2).fit(x, y)
    assert parallel.best_params_ == serial.best_params_
    assert parallel.cv_results_["mean_test_score"].tolist() == serial.cv_results_["mean_test_score"].tolist()


def test_n_jobs_1_runs_in_the_caller_as_joblib_s_process_backends_do() -> None:
    with parallel_config(backend="mwpy", n_jobs=1):
        assert Parallel()(delayed(work.pid)(i) for i in range(3)) == [os.getpid()] * 3


def test_a_function_of_a_main_without_a_file_runs_by_value(tmp_path: Path) -> None:
    """``python -c`` has a ``__main__`` without a file, as a notebook: its functions travel by value."""
    code = textwrap.dedent("""\
        from joblib import Parallel, delayed, parallel_config
        import mwpy.joblib
        def triple(x):
            return 3 * x
        with parallel_config(backend="mwpy", n_jobs=2):
            print(Parallel()(delayed(triple)(i) for i in range(5)), Parallel()(delayed(lambda x: -x)(1) for _ in "ab"))
    """)
    done = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[0, 3, 6, 9, 12] [-1, -1]"


def test_the_block_s_keyword_arguments_go_to_the_executor(tmp_path: Path) -> None:
    """``parallel_config(backend="mwpy", workdir=..., options=...)`` are ``mwpy.Executor``'s arguments."""
    work_folder = tmp_path / "work"
    with parallel_config(backend="mwpy", n_jobs=2, workdir=work_folder, options=["--mw-slave-window", "1"]):
        assert Parallel()(delayed(work.square)(i) for i in range(10)) == [i * i for i in range(10)]
    # Dropped with the block, the executor shuts down without waiting: its master then says it finished.
    wait_until(lambda: read_resource_file(work_folder / RESOURCE_FILE).finished, 60, "the master to finish")


def test_without_joblib_the_import_says_what_to_install(tmp_path: Path) -> None:
    code = "import sys\nsys.modules['joblib'] = None  # as if it were not installed\nimport mwpy.joblib\n"
    done = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "ImportError: mwpy.joblib needs joblib: pip install 'mwpy[joblib]'" in done.stderr


def test_executor_options_are_checked_when_the_block_is_made() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        parallel_config(backend="mwpy", no_such_option=1)
    with pytest.raises(ConfigurationError, match="max_workers"):
        parallel_config(backend="mwpy", max_workers=2)
    with (
        pytest.raises(ConfigurationError, match="--mw-no-such-option"),
        parallel_config(backend="mwpy", n_jobs=2, options=["--mw-no-such-option"]),
    ):
        Parallel()(delayed(work.square)(i) for i in range(3))


# ---------------------------------------------------------------------- adapted from joblib 1.6.0's own tests


@pytest.mark.parametrize("n_jobs", [2, 3])
def test_parallel_kwargs(n_jobs: int) -> None:
    """joblib 1.6.0, test_parallel_kwargs."""
    values = range(10)
    assert [work.f(x, y=1) for x in values] == Parallel(n_jobs=n_jobs, backend="mwpy")(
        delayed(work.f)(x, y=1) for x in values
    )


def test_parallel_as_context_manager() -> None:
    """joblib 1.6.0, test_parallel_as_context_manager: a managed Parallel calls its one backend again."""
    expected = [work.f(x, y=1) for x in range(10)]
    with Parallel(n_jobs=2, backend="mwpy") as p:
        managed = p._backend._executor
        assert expected == p(delayed(work.f)(x, y=1) for x in range(10))
        assert expected == p(delayed(work.f)(x, y=1) for x in range(10))
        assert p._backend._executor is managed


def test_error_capture() -> None:
    """joblib 1.6.0, test_error_capture: the task's own exception, and a managed backend works after it."""
    with pytest.raises(ZeroDivisionError):
        Parallel(n_jobs=2, backend="mwpy")([delayed(work.division)(x, y) for x, y in zip((0, 1), (1, 0), strict=True)])
    with Parallel(n_jobs=2, backend="mwpy") as parallel:
        with pytest.raises(ZeroDivisionError):
            parallel([delayed(work.division)(x, y) for x, y in zip((0, 1), (1, 0), strict=True)])
        assert [work.f(x, y=1) for x in range(10)] == parallel(delayed(work.f)(x, y=1) for x in range(10))


def test_error_in_task_iterator() -> None:
    """joblib 1.6.0, test_error_in_task_iterator: the iterator fails before, during and long after dispatch."""
    with Parallel(n_jobs=2, backend="mwpy") as p:
        for raise_at in (0, 5, 19):
            with pytest.raises(ValueError, match="Iterator Raising Error"):
                p(delayed(work.square)(i) for i in work.generated(raise_at))


def test_abort_backend(tmp_path: Path) -> None:
    """joblib 1.6.0, test_abort_backend: the first call fails, the hundred after it are not run (there it is
    timed; here the calls that ran are counted). Every batch is submitted at once (``pre_dispatch="all"``),
    so what does not run was cancelled; the next call of the block would queue behind what was not."""
    marks = tmp_path / "marks"
    marks.mkdir()
    delays = ["a"] + [0.5] * 100
    with parallel_config(backend="mwpy", n_jobs=2):
        with pytest.raises(TypeError):
            Parallel(batch_size=1, pre_dispatch="all")(delayed(work.marked_nap)(delay, str(marks)) for delay in delays)
        assert Parallel()(delayed(work.square)(i) for i in range(4)) == [0, 1, 4, 9]
    assert len(list(marks.iterdir())) < 10  # those running, or in a slave's window, when the error came


def test_nested_loop() -> None:
    """joblib 1.6.0, test_nested_loop: a Parallel call inside a task, on each of joblib's backends."""
    for child in ("sequential", "threading", "loky"):
        assert (
            Parallel(n_jobs=2, backend="mwpy")(delayed(work.nested_loop)(child) for _ in range(2))
            == [[0.0001, 0.0001]] * 2
        )


def test_nested_loop_with_exception() -> None:
    """joblib 1.6.0, test_nested_loop_with_exception_with_loky."""
    with pytest.raises(ValueError, match="raised in a task"), Parallel(n_jobs=2, backend="mwpy") as parallel:
        parallel([delayed(work.nested_loop)("loky"), delayed(work.raise_exception)("loky")])


@pytest.mark.parametrize("return_as", ["generator", "generator_unordered"])
def test_return_as_a_generator(return_as: str) -> None:
    """joblib 1.6.0, test_parallel_return_order_with_return_as_generator_parameter, and the unordered one."""
    values = Parallel(n_jobs=2, backend="mwpy", return_as=return_as)(delayed(work.square)(i) for i in range(20))
    got = list(values)
    assert (sorted(got) if return_as == "generator_unordered" else got) == [i * i for i in range(20)]


def test_batching_auto_subprocesses() -> None:
    """joblib 1.6.0, test_batching_auto_subprocesses: many very fast calls make batches of more than one."""
    with Parallel(n_jobs=2, batch_size="auto", backend="mwpy") as p:
        assert p(delayed(id)(i) for i in range(5000))
        # joblib asserts > 0 only, against clogged CI machines; so does this.
        assert p._backend.compute_batch_size() > 0


@pytest.mark.parametrize("batch_size", [1, 7, 100])
def test_a_given_batch_size_keeps_order(batch_size: int) -> None:
    values = Parallel(n_jobs=2, batch_size=batch_size, backend="mwpy")(delayed(work.square)(i) for i in range(250))
    assert values == [i * i for i in range(250)]

"""Retries that mean what they say: a task that raises is a result unless its policy asks for more runs.

Runs are counted by the tasks themselves (one mark per run in a file), on
real slave processes. A slave that vanishes still has its tasks re-queued
(tests/test_core_policies.py); this file is about tasks that *raise*.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import mwpy
from tests.programs.workload import fail_then_succeed, raise_counted, retried_on_oserror
from tests.support import LocalMaster, local_master
from tests.test_core_tasks import WORKLOAD


@pytest.fixture
def lm(tmp_path: Path) -> Iterator[LocalMaster]:
    with local_master(WORKLOAD, tmp_path) as master:  # mwpy's defaults: no --mw-task-attempts
        master.start_slave()
        master.start_slave()
        yield master


def runs(path: Path) -> int:
    return len(path.read_text())


def test_by_default_a_task_that_raises_runs_once(lm: LocalMaster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    with pytest.raises(ValueError, match="value"):
        raise_counted.submit(str(marks), "ValueError").result(timeout=60)
    assert runs(marks) == 1


def test_retries_declared_on_the_task_run_it_again_until_it_succeeds(lm: LocalMaster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    assert fail_then_succeed.submit(str(marks), 2).result(timeout=60) == 3
    assert runs(marks) == 3


def test_retries_are_a_maximum(lm: LocalMaster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    with pytest.raises(RuntimeError, match="run 3 fails"):
        fail_then_succeed.submit(str(marks), 5).result(timeout=60)
    assert runs(marks) == 3  # retries=2: three runs in all


def test_with_policy_overrides_the_declared_retries(lm: LocalMaster, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    with pytest.raises(RuntimeError, match="run 1 fails"):
        fail_then_succeed.with_policy(retries=0).submit(str(marks), 1).result(timeout=60)
    assert runs(marks) == 1
    more = tmp_path / "more"
    assert raise_counted.with_policy(retries=1).submit(str(more), "OSError").exception(timeout=60) is not None
    assert runs(more) == 2


def test_retry_on_retries_only_those_exception_types(lm: LocalMaster, tmp_path: Path) -> None:
    value_marks, os_marks = tmp_path / "value", tmp_path / "os"
    with pytest.raises(ValueError, match="value"):
        retried_on_oserror.submit(str(value_marks), "ValueError").result(timeout=60)
    assert runs(value_marks) == 1
    with pytest.raises(OSError, match="os"):
        retried_on_oserror.submit(str(os_marks), "OSError").result(timeout=60)
    assert runs(os_marks) == 4


def test_retry_false_means_one_run_even_with_more_attempts_by_default(tmp_path: Path) -> None:
    with local_master(WORKLOAD, tmp_path, "--mw-task-attempts", "3") as lm:
        lm.start_slave()
        lm.start_slave()
        marks, others = tmp_path / "marks", tmp_path / "others"
        assert raise_counted.with_policy(retry=False).submit(str(marks), "OSError").exception(timeout=60)
        assert runs(marks) == 1
        assert raise_counted.submit(str(others), "OSError").exception(timeout=60)  # the option's default
        assert runs(others) == 3


def test_a_nested_function_or_lambda_is_refused_at_decoration() -> None:
    with pytest.raises(mwpy.ConfigurationError, match="module level"):

        @mwpy.task
        def nested(x: int) -> int:
            return x

    with pytest.raises(mwpy.ConfigurationError, match="module level"):
        mwpy.task(lambda x: x)


def test_wrong_retry_settings_are_refused() -> None:
    with pytest.raises(mwpy.ConfigurationError, match="retries"):
        mwpy.task(retries=-1)
    with pytest.raises(mwpy.ConfigurationError, match="retry_on"):
        raise_counted.with_policy(retry_on=("OSError",))  # type: ignore[arg-type]

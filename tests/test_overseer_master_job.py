"""An overseer never waits for ever for a master that is not coming (issue 24 item 5; the last test on the pool).

The overseer may learn the master's job from its command line
(``--master-job``) instead of the resource file: once that job has left the
queue it removes the computation's jobs and stops, whether the file was never
written or is gone. With no master job to watch, a file that never appears is
waited for ``--abandon-after`` seconds, then the overseer says so in one line
and exits 1. A computation seen finished stays finished when its file goes.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from mwpy.backends import JobState, MasterWatch
from mwpy.overseer import Limits, Overseer, Verdict
from tests.condor_support import RESOURCE, Pool
from tests.support import wait_until
from tests.test_overseer import FakeBackend, mwpy_cli, write_resource


@attrs.define
class WatchedBackend(FakeBackend):
    """A queue whose master job the test removes (``departed``): what Condor's back end says then."""

    departed: dict[str, str] = attrs.Factory(dict)
    asked: list[str] = attrs.Factory(list)

    def master_departure(self, job_id: str) -> str | None:
        self.asked.append(job_id)
        return self.departed.get(job_id)

    def master_known(self, job_id: str) -> bool:
        return True


@pytest.fixture
def rf(tmp_path: Path) -> Path:
    return tmp_path / "resource.json"


def test_the_fake_back_end_is_a_master_watch() -> None:
    assert isinstance(WatchedBackend(), MasterWatch)


def test_a_master_job_that_leaves_before_writing_its_file_takes_the_jobs_with_it(rf: Path) -> None:
    backend = WatchedBackend(queue={"7.0": JobState.RUNNING, "7.1": JobState.IDLE})  # a restarted overseer's
    watcher = Overseer(rf, backend, Limits(), master_job="5.0", abandon_after=0.001)
    assert watcher.reconcile().verdict is Verdict.WAITING  # the master job is queued: no time limit applies
    assert watcher.reconcile().verdict is Verdict.WAITING
    backend.departed["5.0"] = "master job 5.0 exited with status 2 at 10:00:00"
    decision = watcher.reconcile()
    assert (decision.verdict, decision.removed) == (Verdict.ABANDONED, 2)
    assert backend.queue == {}
    assert watcher.problem == (
        "master job 5.0 exited with status 2 at 10:00:00: the computation has no master; removed its 2 slave jobs"
    )
    assert set(backend.asked) == {"5.0"}


def test_a_master_that_says_its_job_was_removed_takes_the_jobs_with_it_without_asking_the_schedd(rf: Path) -> None:
    """The master's own word (``master_removed``, written on condor_rm's SIGTERM) is enough: a back end that cannot
    see the master's job (another schedd's, or none) does not keep the slave jobs queued."""
    backend = FakeBackend(queue={"7.0": JobState.RUNNING, "7.1": JobState.IDLE})
    write_resource(rf, needed=0, master_condor_job="5.0", master_removed=True)
    decision = Overseer(rf, backend, Limits()).reconcile()
    assert (decision.verdict, decision.removed, backend.queue) == (Verdict.ABANDONED, 2, {})


def test_the_master_job_named_on_the_command_line_wins_over_the_file_s(rf: Path) -> None:
    backend = WatchedBackend(departed={"3.0": "master job 3.0 removed"})
    write_resource(rf, needed=1, master_condor_job="3.0")  # a previous run's file
    watcher = Overseer(rf, backend, Limits(), master_job="5.0")
    assert watcher.reconcile().verdict is Verdict.RUNNING
    assert backend.asked == ["5.0"]


def test_the_master_job_of_a_file_that_is_gone_is_still_watched(rf: Path) -> None:
    backend = WatchedBackend()
    write_resource(rf, needed=2, master_condor_job="9.0")
    watcher = Overseer(rf, backend, Limits(), abandon_after=0.001)
    assert watcher.reconcile().submitted == 2
    rf.unlink()  # its folder removed, say
    assert watcher.reconcile().verdict is Verdict.WAITING
    backend.departed["9.0"] = "master job 9.0 removed"
    decision = watcher.reconcile()
    assert (decision.verdict, decision.removed) == (Verdict.ABANDONED, 2)
    assert backend.queue == {}


def test_a_file_that_never_appears_is_waited_for_abandon_after_seconds_then_the_overseer_gives_up(rf: Path) -> None:
    lines: list[str] = []
    backend = FakeBackend()
    watcher = Overseer(rf, backend, Limits(), log=lines.append, abandon_after=0.2)
    assert watcher.reconcile().verdict is Verdict.WAITING
    wait_until(lambda: watcher.reconcile().verdict is Verdict.ABANDONED, 10, "the overseer to give up", interval=0.05)
    assert watcher.problem == (
        f"{rf}: no such resource file for 0.2 s (--abandon-after), and no master job to watch (--master-job): "
        "no master is coming; removed its 0 slave jobs"
    )
    assert lines == [f"waiting: {rf}: no such resource file", f"giving up: {watcher.problem}"]


def test_a_computation_seen_finished_stays_finished_when_its_file_goes(rf: Path) -> None:
    backend = FakeBackend(queue={"1.0": JobState.RUNNING, "1.1": JobState.IDLE})
    write_resource(rf, computation_status="finished")
    watcher = Overseer(rf, backend, Limits(), finish_grace=0.0, abandon_after=0.001)
    assert watcher.reconcile().verdict is Verdict.FINISHED  # idle jobs removed; running ones left to end
    rf.unlink()
    backend.queue["1.2"] = JobState.RUNNING  # one the removal missed (a schedd that answered late)
    assert watcher.reconcile().verdict is Verdict.FINISHED
    assert backend.queue == {}
    assert watcher.problem is None


def test_mwpy_overseer_without_a_file_or_a_master_job_exits_1_with_one_line(tmp_path: Path) -> None:
    rf = tmp_path / "resource.json"
    done = mwpy_cli(
        "overseer", str(rf), "--backend", "local", "--workdir", str(tmp_path / "jobs"), "--abandon-after", "1",
        "--interval", "0.2",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"mwpy overseer: error: {rf}: no such resource file for 1 s (--abandon-after), and no master job to watch "
        "(--master-job): no master is coming; removed its 0 slave jobs"
    ]


def test_master_job_is_a_condor_job_id_in_the_help_and_anything_else_is_a_usage_error(tmp_path: Path) -> None:
    shown = mwpy_cli("overseer", "--help").stdout
    assert re.search(r"--master-job CLUSTER\.PROC", shown), shown
    wrong = mwpy_cli("overseer", str(tmp_path / "resource.json"), "--backend", "local", "--master-job", "52")
    assert wrong.returncode == 2, wrong.stderr
    assert "--master-job: invalid condor_job_id value: '52'" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr
    blind = mwpy_cli("overseer", str(tmp_path / "resource.json"), "--backend", "local", "--master-job", "52.0")
    assert (blind.returncode, blind.stderr) == (
        2,
        "mwpy overseer: error: --master-job: the local back end cannot see a master job\n",
    )


@pytest.mark.condor
def test_a_master_job_the_schedd_never_knew_is_one_line_and_status_2(condor_pool: Pool, condor_workdir: Path) -> None:
    """A mistyped ``--master-job`` is in neither the queue nor the history: it would never leave the queue, so the
    overseer would watch it for ever (with no file to wait for). It says so at once instead (docs/exit-codes.md)."""
    done = mwpy_cli(
        "overseer", str(condor_workdir / RESOURCE), "--backend", "condor", "--master-job", "987654.3",
        env=condor_pool.env(),
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (
        2,
        "mwpy overseer: error: --master-job 987654.3: no such master job in the queue or the history of this schedd\n",
    )

"""Slaves that know their lifetime (issue 24 item 2): they leave by plan before the kill, and are replaced.

The end-to-end test runs ``mwpy local --slave-lifetime`` with real slave
processes; the ad tests read ad files written in the format Condor's starter
gives a job (``_CONDOR_JOB_AD``, ``_CONDOR_MACHINE_AD``: one ``Attr = value`` a line).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from mwpy.lifetime import MAX_LEAVE_MARGIN, SAFETY, STAGGER, Lifetime, Retirement, find
from mwpy.names import EVENTS_FILE, JOB_AD_VARIABLE, MACHINE_AD_VARIABLE, SLAVE_EXITS, SLAVE_STDERR
from mwpy.pool.publish import REPLACE_AHEAD
from tests.support import PROGRAMS, mwpy_command, start_master, wait_until

LIFETIMES = PROGRAMS / "lifetimes.py"
#: A job's start as its ad gives it (JobCurrentStartDate), and "now" two minutes later.
START = 1_494_309_813
NOW = START + 120


def test_slaves_with_a_short_lifetime_leave_by_plan_and_every_task_runs_once_to_its_end(tmp_path: Path) -> None:
    """Slaves of a 2 s lifetime run tasks of 0.2-0.4 s: each leaves before its end, exits 0 with the reason on
    its stderr, and a fresh slave takes its place; every result arrives once and no task is started twice (a
    slave killed mid-task would have left a task started and run again)."""
    marks, work, count, slaves = tmp_path / "marks", tmp_path / "work", 40, 2
    marks.mkdir()
    command = mwpy_command("local", str(LIFETIMES), "--slaves", str(slaves), "--slave-lifetime", "2")
    command += ["--workdir", str(work), "--no-progress", "--", str(marks), str(count)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"squares {[v * v for v in range(count)]}" in done.stdout
    assert f"results {count} {list(range(1, count + 1))}" in done.stdout  # each result once
    for value in range(count):  # each task started once, on one slave, and ran to its end there
        lines = (marks / f"ran-{value}").read_text(encoding="utf-8").split()
        assert lines[0::2] == ["start", "end"], (value, lines)
        assert lines[1] == lines[3], (value, lines)
    sandboxes = sorted(path for path in work.iterdir() if path.name.startswith("local."))
    assert len(sandboxes) > slaves, "no slave was replaced"  # each sandbox is one slave job
    retired = [path for path in sandboxes if "leaving by plan" in (path / SLAVE_STDERR).read_text(encoding="utf-8")]
    assert len(retired) >= len(sandboxes) - slaves, [(p / SLAVE_STDERR).read_text(encoding="utf-8") for p in sandboxes]
    for path in retired:
        line = (path / SLAVE_STDERR).read_text(encoding="utf-8").strip()
        assert "its lifetime (--mw-slave-lifetime 2 s;" in line, line
        assert line.endswith("[exit status 0: Condor removes the job; a fresh one takes its place]"), line
    exits = (work / SLAVE_EXITS).read_text(encoding="utf-8").splitlines()  # a line per slave that ended
    assert {line.split()[-1] for line in exits} == {"0"}, exits  # every slave of a run exits 0
    events = [json.loads(line) for line in (work / EVENTS_FILE).read_text(encoding="utf-8").splitlines()]
    kinds = {event["kind"] for event in events}
    assert not kinds & {"task-failed", "tasks-unrunnable"}, kinds
    assert {e["outcome"] for e in events if e["kind"] == "tasks-finished"} == {"ok"}
    left = [e for e in events if e["kind"] == "slave-disconnected" and e["reason"].startswith("left by plan: ")]
    assert len(left) >= len(retired), left  # the master knew each for a planned leave


def test_a_slave_that_leaves_soon_is_replaced_ahead_of_time(tmp_path: Path) -> None:
    """A slave tells the master in its Hello when it will leave by plan; while tasks remain, the master asks for
    its replacement once that is less than REPLACE_AHEAD away (a batch system takes a while to start a job)."""
    release = tmp_path / "release"
    mw = start_master(PROGRAMS / "gated.py", tmp_path, "--mw-slave-window", "1", str(release), "3")
    try:
        mw.start_slave("--mw-slave-lifetime", str(REPLACE_AHEAD * 100))  # leaves far beyond REPLACE_AHEAD

        def counts() -> tuple[int, int]:
            record = mw.resource()
            return record.slaves_connected["unordered"], record.slaves_needed

        # Three tasks, one running: two more slaves wanted, none as a replacement.
        wait_until(lambda: counts() == (1, 2), 60, "one slave connected, two more needed")
        mw.start_slave("--mw-slave-lifetime", str(REPLACE_AHEAD / 2))  # leaves within REPLACE_AHEAD
        # Two running, one queued: one more slave for it, and one to take the place of the one leaving soon.
        wait_until(lambda: counts() == (2, 2), 60, "two slaves connected, one more and a replacement needed")
        release.touch()
        status, out, err = mw.finish()
        assert status == 0, err
        assert "squares [0, 1, 4]" in out
    finally:
        mw.stop()


def test_mwpy_overseer_gives_its_slave_jobs_a_lifetime(tmp_path: Path) -> None:
    """``mwpy overseer --slave-lifetime``: the jobs it submits leave by plan and it replaces them."""
    marks, jobs, count = tmp_path / "marks", tmp_path / "jobs", 12
    marks.mkdir()
    mw = start_master(LIFETIMES, tmp_path, "--mw-resource-file-update-interval", "1", str(marks), str(count))
    overseer = subprocess.Popen(
        [*mwpy_command("overseer", str(mw.resource_path), "--backend", "local", "--workdir", str(jobs)),
         "--max-jobs", "1", "--interval", "0.5", "--slave-lifetime", "1.5"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        status, out, err = mw.finish(timeout=240)
        said, _ = overseer.communicate(timeout=60)
    finally:
        mw.stop()
        if overseer.poll() is None:
            overseer.kill()
            overseer.communicate()
    assert status == 0, err
    assert f"results {count} {list(range(1, count + 1))}" in out
    assert overseer.returncode == 0, said  # the computation finished and no job was left
    errors = [(path / SLAVE_STDERR).read_text(encoding="utf-8") for path in sorted(jobs.iterdir())]
    assert len(errors) > 1, said  # one job at a time: the first was replaced
    assert any("its lifetime (--mw-slave-lifetime 1.5 s;" in text for text in errors), errors


@pytest.fixture
def ads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A job ad and a machine ad that Condor would name to the slave (both empty of lifetimes at first)."""
    job, machine = tmp_path / ".job.ad", tmp_path / ".machine.ad"
    job.write_text(f'ClusterId = 41\nProcId = 3\nOwner = "alice"\nJobCurrentStartDate = {START}\n', encoding="utf-8")
    machine.write_text('Name = "slot1@node"\nMemory = 2048\n', encoding="utf-8")
    monkeypatch.setenv(JOB_AD_VARIABLE, str(job))
    monkeypatch.setenv(MACHINE_AD_VARIABLE, str(machine))
    return job, machine


def _add(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def test_without_an_option_or_a_limit_in_the_ads_a_slave_has_no_lifetime(ads: tuple[Path, Path]) -> None:
    assert find(None, now=NOW) is None


def test_max_runtime_counts_from_the_job_s_start(ads: tuple[Path, Path]) -> None:
    _add(ads[0], "MaxRuntime = 3600")  # CERN's batch service: seconds a job may run
    lifetime = find(None, now=NOW, rng=random.Random(1))
    assert lifetime is not None
    assert lifetime.ends == START + 3600
    assert lifetime.why == "MaxRuntime 3600 s"
    assert START + 3600 * (1 - STAGGER) - MAX_LEAVE_MARGIN <= lifetime.leave_at < START + 3600


@pytest.mark.parametrize(("category", "hours"), [('"Medium"', 20), ('"Long"', 40)])
def test_ospool_job_duration_categories_give_their_maximum(ads: tuple[Path, Path], category: str, hours: int) -> None:
    """https://portal.osg-htc.org/documentation/htc_workloads/workload_planning/jobdurationcategory/:
    Medium jobs may run 20 h at most, Long ones 40 h."""
    _add(ads[0], f"JobDurationCategory = {category}")
    lifetime = find(None, now=NOW)
    assert lifetime is not None
    assert lifetime.ends == START + hours * 3600
    assert lifetime.why == f"JobDurationCategory {category.strip(chr(34))} ({hours} h)"


def test_a_glidein_s_end_comes_from_the_machine_ad_and_the_earliest_end_wins(ads: tuple[Path, Path]) -> None:
    """GLIDEIN_ToDie as glideinWMS publishes it in the startd's ad (STARTD_ATTRS): a Unix time."""
    job, machine = ads
    _add(job, "MaxRuntime = 72000")
    _add(job, 'JobDurationCategory = "Medium"')
    _add(machine, f"GLIDEIN_ToDie = {START + 1800}")
    lifetime = find(7200.0, now=NOW)
    assert lifetime is not None
    assert lifetime.ends == START + 1800
    assert "GLIDEIN_ToDie" in lifetime.why
    _add(machine, f"GLIDEIN_ToDie = {START + 9000}")  # the last line of an attribute counts, as in a ClassAd
    lifetime = find(7200.0, now=NOW)
    assert lifetime is not None
    assert (lifetime.ends, lifetime.why) == (START + 7200, "--mw-slave-lifetime 7200 s")


def test_odd_values_and_expressions_are_no_lifetime(ads: tuple[Path, Path]) -> None:
    job, machine = ads
    _add(job, "MaxRuntime = 2 * 3600")  # an expression: not evaluated, not guessed
    _add(job, "JobDurationCategory = Medium")  # not a string literal
    _add(job, 'JobDurationCategory2 = "Short"')
    _add(machine, "GLIDEIN_ToDie = undefined")
    assert find(None, now=NOW) is None


def test_outside_condor_the_option_counts_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JOB_AD_VARIABLE, raising=False)
    monkeypatch.delenv(MACHINE_AD_VARIABLE, raising=False)
    lifetime = find(100.0, now=NOW, rng=random.Random(7))
    assert lifetime is not None
    assert lifetime.ends == NOW + 100
    assert NOW + 100 * (1 - STAGGER) - 5 <= lifetime.leave_at < NOW + 100


def test_lifetimes_are_staggered() -> None:
    """Slaves started together leave at different times: each gives up a random share of up to STAGGER."""
    leave = {find(1000.0, now=NOW, rng=random.Random(seed)).leave_at for seed in range(20)}  # type: ignore[union-attr]
    assert len(leave) == 20
    assert max(leave) - min(leave) > 1000 * STAGGER / 2


def test_a_task_starts_only_if_its_algorithm_s_longest_run_ends_before_the_slave_leaves() -> None:
    judge = Retirement(Lifetime(ends=NOW + 20, why="test", leave_at=NOW + 10))
    assert judge.fits("slow", now=NOW)  # nothing measured yet: it runs
    judge.ran("slow", 6.0)
    judge.ran("quick", 0.5)
    assert judge.fits("slow", now=NOW + 10 - 6 * SAFETY - 0.01)
    assert not judge.fits("slow", now=NOW + 10 - 6 * SAFETY + 0.01)
    assert judge.fits("quick", now=NOW + 9)
    assert not judge.fits("unseen", now=NOW + 9)  # an algorithm not seen here: the longest run of any
    assert not judge.fits(None, now=NOW + 10)  # the time to leave has come
    assert judge.wait(None, now=NOW) == 10  # an idle slave waits for tasks until it must leave, no longer
    assert judge.wait(0.5, now=NOW) == 0.5
    assert judge.wait(None, now=NOW + 11) == 0

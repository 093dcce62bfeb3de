"""The benchmark harness still starts and measures: ``python -m benchmarks --quick`` end to end.

CI does not run the full benchmark (minutes, and figures on a shared machine
mean little); this makes sure the harness, the mwpy program it drives and the
fan-in load generator keep working as mwpy changes, and that figures are taken
the way issue 13 asks: in rounds, every ratio within one round, reported as a
median with its min-max. Peers that need the ``bench`` extra are left out so
the test runs with the ``test`` extra alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import condor, jobs_condor, overseer_queries, scenarios
from benchmarks.__main__ import table, targets
from benchmarks.common import Check, Row, Series, Settings, Sizes, percentile

REPO = Path(__file__).resolve().parent.parent
#: The whole quick run (two rounds) takes ~45 s here on a busy machine; this is the deadline, not an expectation.
DEADLINE = 400
QUICK_PEERS = "processpool-submit,processpool-1,processpool-100,floor,floor-event-loop,floor-spin,floor-frames"


def _run_harness(out: Path, *args: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--quiet", "--peers", QUICK_PEERS, "--json", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        # Scenario 5 would take minutes on a running pool: point it at none, so it reports "skipped".
        env={**os.environ, "MWPY_CONDOR_BASE": str(out.parent / "no-pool")},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "target" in completed.stdout
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    report["stdout"] = completed.stdout
    return report


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run_harness(tmp_path_factory.mktemp("bench") / "report.json", "--rounds", "2")


def _rows(report: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return [row for row in report["rows"] if row["scenario"].startswith(scenario)]


def _median(row: dict[str, Any], field: str) -> float:
    value: float = row["figures"][field]["median"]
    return value


def test_every_mwpy_measurement_ran_in_every_round(quick_report: dict[str, Any]) -> None:
    # Scenario 5 runs once; scenario 7 times whole scripts (test_a_short_script_is_timed_with_both_executors).
    mwpy_rows = [
        row for row in quick_report["rows"] if row["system"].startswith("mwpy") and row["scenario"][0] not in "57"
    ]
    assert len(mwpy_rows) == 12  # throughput 3, latency 1, streaming 2, fan-in 2, event log 2, executor 2
    for row in mwpy_rows:
        assert row["skipped"] is None, row
        assert [run["round"] for run in row["runs"]] == [0, 1]
        assert _median(row, "peak_rss_mb") > 0


def test_throughput_has_mwpy_and_the_selected_peers(quick_report: dict[str, Any]) -> None:
    rows = {row["system"]: row for row in _rows(quick_report, "1")}
    for system in (
        "mwpy default settings",
        "mwpy task/result group 100",
        "mwpy map(chunksize=100)",
        "ProcessPoolExecutor submit() per task",
        "ProcessPoolExecutor chunksize=100",
    ):
        assert _median(rows[system], "tasks_per_s") > 0
    assert rows["dask.distributed LocalCluster"]["skipped"] == "not selected (--peers)"
    assert len(rows["dask.distributed LocalCluster"]["runs"]) == 1  # not asked again in round 2
    cpu = next(c for c in quick_report["checks"] if c["target"].startswith("1. master CPU per task, mwpy default"))
    assert cpu["bound"] == "≤ 15"
    assert len(cpu["values"]) == 2
    assert all(value > 0 for value in cpu["values"])


def test_latency_is_measured_beside_the_floor(quick_report: dict[str, Any]) -> None:
    rows = {row["system"]: row for row in _rows(quick_report, "2")}
    assert _median(rows["mwpy default"], "p50_us") > 0
    assert _median(rows["bare pickle echo, loopback TCP (floor)"], "p50_us") > 0
    assert _median(rows["same echo waiting in epoll/poll (event-loop floor)"], "p50_us") > 0
    assert _median(rows["same echo, both sides busy-polling (spinning floor)"], "p50_us") > 0
    checks = {c["target"]: c for c in quick_report["checks"]}
    assert checks["2. latency p50, mwpy vs bare pickle echo"]["bound"] == "≤ 2.5"
    assert checks["2. latency p99, mwpy vs bare pickle echo's p99"]["bound"] == "≤ 4"
    assert checks["2. latency p50, mwpy vs spinning echo"]["bound"] == "≤ 3"
    assert checks["2. latency p99, mwpy vs spinning echo's p99"]["bound"] == "≤ 5"


def test_every_ratio_is_a_median_of_per_round_ratios(quick_report: dict[str, Any]) -> None:
    """What issue 13 asks: each check's values are per round, rebuilt here from the raw runs of that round."""
    rows = {(row["scenario"], row["key"]): row for row in quick_report["rows"]}

    def run_in(row: dict[str, Any], number: int) -> dict[str, Any]:
        return next(run for run in row["runs"] if run["round"] == number)

    check = next(c for c in quick_report["checks"] if c["target"].startswith("1. no-op, mwpy default vs ProcessPool"))
    top, bottom = rows[("1 throughput", "default")], rows[("1 throughput", "submit")]
    expected = [run_in(top, n)["tasks_per_s"] / run_in(bottom, n)["tasks_per_s"] for n in (0, 1)]
    assert check["values"] == pytest.approx(expected)
    assert check["rounds"] == [0, 1]
    assert check["measured"] == pytest.approx(statistics.median(expected))
    assert check["spread"]["low"] == pytest.approx(min(expected))
    assert check["spread"]["high"] == pytest.approx(max(expected))
    for check in quick_report["checks"]:
        if check["target"][0] != "5" and check["measured"] is not None:
            assert len(check["values"]) == 2, check
            assert check["measured"] == pytest.approx(statistics.median(check["values"]))


def test_rounds_alternate_the_order(quick_report: dict[str, Any]) -> None:
    rows = [row for row in _rows(quick_report, "2") if not row["skipped"]]
    first = sorted(rows, key=lambda row: run_position(row, 0))
    second = sorted(rows, key=lambda row: run_position(row, 1))
    assert [row["key"] for row in first] == [row["key"] for row in reversed(second)]


def run_position(row: dict[str, Any], number: int) -> int:
    position: int = next(run["position"] for run in row["runs"] if run["round"] == number)
    return position


def test_the_report_prints_median_and_range(quick_report: dict[str, Any]) -> None:
    header = next(line for line in quick_report["stdout"].splitlines() if line.startswith("target"))
    assert header.split()[:5] == ["target", "median", "[min-max]", "rounds", "bound"]
    assert "2 rounds (order reversed every other round)" in quick_report["stdout"]
    assert "\N{EN DASH}" in quick_report["stdout"]  # some figure differed between the rounds and shows its range


def test_the_executor_is_measured_beside_the_master_api(quick_report: dict[str, Any]) -> None:
    rows = _rows(quick_report, "6")
    assert [row["system"].split(",")[0] for row in rows] == ["mwpy.Executor.map", "mwpy master algorithm API (default)"]
    assert all(_median(row, "tasks_per_s") > 0 for row in rows)
    check = next(c for c in quick_report["checks"] if c["target"].startswith("6."))
    assert check["measured"] is not None
    cpu = next(c for c in quick_report["checks"] if c["target"].startswith("6. master CPU per task"))
    assert cpu["measured"] > 0  # the executor's process CPU per task over the master API's, same round


def test_a_short_script_is_timed_with_both_executors(quick_report: dict[str, Any]) -> None:
    """Issues 21 item 4 and 37 item 1: the same short script with mwpy.Executor and ProcessPoolExecutor (the default
    start method and spawn), in the same rounds."""
    rows = {row["key"]: row for row in _rows(quick_report, "7")}
    assert set(rows) == {"pool", "spawn", "mwpy"}
    for row in rows.values():
        assert [run["round"] for run in row["runs"]] == [0, 1]
        first, shutdown, total = (_median(row, field) for field in ("first_result_s", "shutdown_s", "total_s"))
        assert 0 < first < total
        assert 0 <= shutdown < total
    checks = {c["target"]: c for c in quick_report["checks"] if c["target"].startswith("7.")}
    assert checks["7. short script: first result, mwpy.Executor (s)"]["bound"] == "≤ 0.3"
    assert checks["7. short script: whole script, mwpy.Executor / ProcessPool"]["bound"] == "≤ 1.1"
    assert checks["7. short script: first result, mwpy.Executor / ProcessPool(spawn)"]["bound"] == "≤ 1.5"
    assert checks["7. short script: leaving the with block, mwpy.Executor (s)"]["bound"] == "≤ 0.1"
    assert all(len(check["values"]) == 2 for check in checks.values())


def test_fanin_reports_idle_cpu(quick_report: dict[str, Any]) -> None:
    rows = _rows(quick_report, "4")
    assert len(rows) == 2
    assert all("cpu_percent" in row["figures"] and _median(row, "tasks_per_s") > 0 for row in rows)


def test_event_log_cost_is_measured_in_the_same_rounds(quick_report: dict[str, Any]) -> None:
    rows = {row["key"]: row for row in _rows(quick_report, "E")}
    assert _median(rows["with"], "events_bytes") > 0
    assert "events_bytes" not in rows["without"]["figures"]
    check = next(c for c in quick_report["checks"] if c["target"].startswith("E. event log: throughput"))
    assert check["bound"] == "≥ 0.95"
    assert len(check["values"]) == 2


def test_json_describes_the_run(quick_report: dict[str, Any]) -> None:
    assert quick_report["workers"] == 2
    assert quick_report["rounds"] == 2
    assert quick_report["machine"]["cpus"] >= 1
    assert "--quick" in quick_report["command"]
    assert quick_report["checkouts"]["new"]["mwpy"].startswith(str(REPO))
    assert "baseline" not in quick_report["checkouts"]
    assert {c["target"][0] for c in quick_report["checks"]} == {"1", "2", "3", "4", "5", "6", "7", "E"}


def test_dataflow_measures_mwpy_and_dask_in_the_same_rounds(tmp_path: Path) -> None:
    """Scenario 10 runs only when named; each part of mwpy beside dask in one round, dask's rows saying why they
    are missing when the bench extra is not installed; the held intermediate's figures come from mwpy alone."""
    report = _run_harness(tmp_path / "dataflow.json", "--scenario", "dataflow", "--rounds", "1", "--tree-leaves", "150")
    rows = {row["key"]: row for row in report["rows"]}
    assert set(rows) == {f"{part}-{side}" for part in ("chain", "fanin", "tree") for side in ("mwpy", "dask")} | {
        "intermediate"
    }
    for key, row in rows.items():
        if key.endswith("-dask") and importlib.util.find_spec("distributed") is None:
            assert row["skipped"] == "dask.distributed is not installed (the bench extra)"
            continue
        assert row["skipped"] is None, row
        assert _median(row, "seconds") > 0
        assert _median(row, "peak_rss_mb") > 0
    assert rows["tree-mwpy"]["runs"][0]["tasks"] == 150 + 2 + 1  # the leaves, then 2 sums of 100 and 50, then 1
    checks = {c["target"]: c for c in report["checks"]}
    assert checks["10. chain of 50: hops/s, mwpy"]["bound"] == "≥ 1000"
    assert checks["10. chain: hops/s, mwpy / dask"]["bound"] == "≥ 3"
    assert checks["10. 4 MB intermediate: MB through the master"]["measured"] >= 0
    for what in ("independent task", "dependency on a done input", "chain hop"):
        assert checks[f"10. master CPU per {what} (µs)"]["measured"] > 0


def test_baseline_commit_runs_each_checkout_with_its_own_mwpy(tmp_path: Path) -> None:
    """``--baseline COMMIT`` checks the commit out with its own venv and measures both trees in the same rounds."""
    cache = tmp_path / "cache"
    os.environ["XDG_CACHE_HOME"] = str(cache)  # the harness's child reads it; restored below
    try:
        report = _run_harness(tmp_path / "baseline.json", "--rounds", "1", "--baseline", "HEAD")
    finally:
        del os.environ["XDG_CACHE_HOME"]
        for made in (cache / "mwpy-bench-baselines").glob("*"):
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(made)], check=False)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    base = cache / "mwpy-bench-baselines" / head.stdout.strip()
    assert report["checkouts"]["baseline"]["commit"] == head.stdout.strip()
    assert report["checkouts"]["baseline"]["mwpy"].startswith(str(base))
    assert report["checkouts"]["new"]["mwpy"].startswith(str(REPO))
    rows = {row["key"]: row for row in report["rows"]}
    measured = ("default", "group100", "latency", "startup")
    assert set(rows) == {f"{m}-{side}" for m in measured for side in ("new", "base")}
    for key, row in rows.items():
        assert row["skipped"] is None, row
        if not key.startswith("startup"):
            assert row["runs"][0]["extra"]["checkout"] == str(base if key.endswith("-base") else REPO)
    checks = {c["target"]: c for c in report["checks"]}
    for target in ("throughput, default", "latency p50", "master CPU per task, default", "start-up, first result"):
        assert checks[f"B. new / baseline {target}"]["measured"] > 0, target


def test_baseline_that_is_neither_folder_nor_commit_is_one_line() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--baseline", "no-such-commit-or-folder"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 2
    assert "'no-such-commit-or-folder' is neither a folder nor a commit" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_condor_is_skipped_with_a_reason_without_a_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(condor, "POOL_BASE", tmp_path)
    rows, checks = condor.run(Settings(workers=2, sizes=Sizes.quick(), peers=frozenset()))
    assert rows
    assert all(row.skipped and "no HTCondor pool" in row.skipped for row in rows)
    assert all(check.ok is None for check in checks)


def test_overseer_queries_is_skipped_with_a_reason_without_a_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(condor, "POOL_BASE", tmp_path)
    rows, checks = overseer_queries.run(Settings(workers=2, sizes=Sizes.quick(), peers=frozenset()))
    assert [row.system for row in rows] == ["event log", "polling"]
    assert all(row.skipped and "no HTCondor pool" in row.skipped for row in rows)
    assert checks == []


def test_the_quick_run_skips_condor_with_its_reason(quick_report: dict[str, Any]) -> None:
    rows = _rows(quick_report, "5")
    assert len(rows) == 4
    assert all("no HTCondor pool" in row["skipped"] for row in rows)


def test_condor_checks_compare_the_arms_and_the_ideals() -> None:
    mwpy_row = Row(condor.NAME, "mwpy", tasks=1000, seconds=12.5)
    mwpy_row.extra.update(tasks_after_connect=1000, tasks_after_connect_seconds=6.5)
    plain_row = Row(condor.NAME, "plain", tasks=1000, seconds=150.0)
    sleep = condor._checks("sleep", mwpy_row, plain_row, tasks=1000, slots=8, cores=2)
    # plain ÷ mwpy; mwpy ÷ 6.25 s (1000 x 50 ms ÷ 8 slots); after connect ÷ 6.25 s, for information
    assert [c.measured for c in sleep] == pytest.approx([12.0, 2.0, 1.04])
    assert [c.ok for c in sleep] == [True, True, None]
    mwpy_row.seconds = 30.0
    spin = condor._checks("spin", mwpy_row, plain_row, tasks=1000, slots=8, cores=2)
    # plain ÷ mwpy; mwpy ÷ 25 s (2 cores); mwpy ÷ 6.25 s (8 slots, for information); after connect ÷ 25 s
    assert [c.measured for c in spin] == pytest.approx([5.0, 1.2, 4.8, 0.26])
    assert [c.ok for c in spin] == [False, True, None, None]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([3.0], 99) == 3


def test_tables_mark_pass_fail_and_skips() -> None:
    runs = [Row("1 x", "a", tasks=10, tasks_per_s=v, round=n) for n, v in enumerate((5.0, 7.0, 6.0))]
    series = [Series("1 x", "a", "a", runs), Series("1 x", "b", "b", [Row("1 x", "b", skipped="not installed\nmore")])]
    text = table(series)
    assert "6 [5\N{EN DASH}7]" in text
    assert "skipped: not installed" in text
    assert "more" not in text
    verdicts = targets(
        [
            Check("t1", 2.0, "≥ 1", True, values=[1.5, 2.0, 3.0], rounds=[0, 1, 2]),
            Check("t2", 0.5, "≥ 1", False),
            Check("t3", None, "≤ 2", None),
        ]
    )
    assert "[1.5\N{EN DASH}3]" in verdicts
    assert "PASS" in verdicts
    assert "FAIL" in verdicts


def _fake(name: str, values: list[float | None], calls: list[str]) -> scenarios.System:
    left = iter(values)

    def measure() -> Row:
        calls.append(name)
        value = next(left)
        if value is None:
            return Row("1 x", name, skipped="failed: on purpose")
        return Row("1 x", name, tasks_per_s=value)

    return scenarios.System(name, name, measure)


def test_rounds_alternate_and_ratios_stay_within_a_round() -> None:
    calls: list[str] = []
    settings = Settings(workers=2, sizes=Sizes.quick(), peers=frozenset(), rounds=3)
    systems = [_fake("a", [1.0, 3.0, 2.0], calls), _fake("b", [2.0, 2.0, 4.0], calls)]
    series, (check,) = scenarios.run_rounds(
        settings, "1 x", systems, [scenarios.ratio("a / b", "a", "b", "tasks_per_s", 0.6)]
    )
    assert calls == ["a", "b", "b", "a", "a", "b"]
    # Per round 0.5, 1.5, 0.5: the median is 0.5; a best-of-3 over best-of-3 would have said 3 / 4 = 0.75.
    assert check.values == [0.5, 1.5, 0.5]
    assert check.measured == 0.5
    assert check.ok is False
    assert check.spread is not None
    assert (check.spread.low, check.spread.high, check.spread.count) == (0.5, 1.5, 3)
    assert series[0].median("tasks_per_s") == 2.0
    assert [row.position for row in series[0].runs] == [0, 1, 0]


def test_a_round_with_a_failed_side_gives_no_ratio() -> None:
    calls: list[str] = []
    settings = Settings(workers=2, sizes=Sizes.quick(), peers=frozenset(), rounds=3)
    systems = [_fake("a", [1.0, 3.0, 2.0], calls), _fake("b", [2.0, None, 4.0], calls)]
    series, (check,) = scenarios.run_rounds(
        settings, "1 x", systems, [scenarios.ratio("a / b", "a", "b", "tasks_per_s", None)]
    )
    assert check.values == [0.5, 0.5]
    assert check.rounds == [0, 2]
    assert "1 of 3 rounds lack a side" in check.detail
    assert check.ok is None
    assert "failed in 1 of 3 rounds" in series[1].note


def test_a_single_value_check_keeps_its_one_value() -> None:
    check = Check("5. x", 1.5, "≤ 2", True, "one run")
    assert check.values == [1.5]
    assert check.spread is not None
    assert check.spread.count == 1


def test_jobs_on_the_pool_skip_the_common_input_arm_before_htcondor_24() -> None:
    """transfer_common_input is HTCondor 24's: on the default 23.9 root the arm is skipped and the table says
    why; on a 25 pool it runs, and mwpy's speed-up over it is taken within the round."""
    why = jobs_condor.common_input_skipped("23.9.6+dfsg-2.1+b10")
    assert why is not None
    assert "HTCondor 24" in why
    assert "23.9.6" in why
    assert jobs_condor.common_input_skipped("25.14.1+dfsg-1") is None
    mwpy = {"wall_seconds": 10.0, "jobs_span_seconds": 5.0, "after_first_submit": {"first_job_started": 4.0}}
    mwpy |= {"shared_bytes_moved": 2 << 20, "slaves_used": 2}
    base = {"round": 0, "seconds": 0.2, "size_mb": 1.0}
    runs = [
        {**base, "system": "plain", "wall_seconds": 30.0},
        {**base, "system": "common", "skipped": why},
        {**base, "system": "mwpy", **mwpy},
    ]
    facts = {"jobs": 40, "slots": 2, "nodes": 1, "cpus_per_node": 2, "cores": 2, "rounds": 1}
    shown = jobs_condor.table(facts, runs)
    assert f"Skipped, common: {why}" in shown
    assert "| 3.0\N{MULTIPLICATION SIGN}" in shown  # plain ÷ mwpy
    runs[1] = {**base, "system": "common", "wall_seconds": 50.0}
    assert "| 50.0 s | 5.0\N{MULTIPLICATION SIGN}" in jobs_condor.table(facts, runs)


def test_jobs_on_the_pool_attribute_the_span_beyond_the_ideal() -> None:
    """The jobs' span past N·d/slots, from the summary's per-job times: each job's own run past d and the gap
    before the next on its slave (medians), and the slots' start and end spread (means)."""
    d = 0.2
    records = [
        {"slave": "s0", "started": 0.0, "ended": 0.21, "seconds": 0.21},
        {"slave": "s0", "started": 0.215, "ended": 0.425, "seconds": 0.21},
        {"slave": "s1", "started": 0.1, "ended": 0.32, "seconds": 0.22},
        {"slave": "s1", "started": 0.33, "ended": 0.55, "seconds": 0.22},
    ]
    figures = jobs_condor.per_job_time(records, d)
    assert figures["job_overrun_seconds"] == pytest.approx(0.015)
    assert figures["between_jobs_seconds"] == pytest.approx(0.0075)
    assert figures["slot_start_spread_seconds"] == pytest.approx(0.05)  # s0 at 0, s1 0.1 after
    assert figures["slot_end_spread_seconds"] == pytest.approx(0.0625)  # s0 ends 0.125 before s1
    # After start-up, as issue 23 counts it: s0 spans 0.425 s, s1 0.45 s, over 4 jobs.
    assert figures["slot_span_per_job_seconds"] == pytest.approx(0.21875)


def test_jobs_on_the_pool_set_mwpy_span_against_the_floor_of_the_same_round() -> None:
    """The span table gives, for mwpy and for the floor (no framework), the seconds per job after start-up with
    d over it, the first-to-last span over N·d/slots, and mwpy's seconds per job over the floor's within a
    round: round 0 1.1, round 1 1.3."""
    base = {"seconds": 0.2, "size_mb": 50.0, "job_overrun_seconds": 0.01, "between_jobs_seconds": 0.005}
    base |= {"slot_start_spread_seconds": 0.5, "slot_end_spread_seconds": 0.1, "jobs_span_seconds": 12.5}
    runs = [
        {**base, "round": 0, "system": "floor", "slot_span_per_job_seconds": 0.2},
        {**base, "round": 0, "system": "mwpy", "slot_span_per_job_seconds": 0.22},
        {**base, "round": 1, "system": "mwpy", "slot_span_per_job_seconds": 0.26},
        {**base, "round": 1, "system": "floor", "slot_span_per_job_seconds": 0.2},
        {**base, "round": 2, "system": "mwpy", "error": "mwpy: 1 failed"},
    ]
    facts = {"jobs": 400, "slots": 8}
    shown = jobs_condor.span_table(facts, runs).splitlines()
    mwpy = next(line for line in shown if "| mwpy |" in line)
    floor = next(line for line in shown if "| floor |" in line)
    assert "| 0.240 [0.220\N{EN DASH}0.260] s (84 [77\N{EN DASH}91] %) |" in mwpy
    assert "| 80 % |" in mwpy  # 10 s of N·d/slots over 12.5 s
    assert "| 1.200 [1.100\N{EN DASH}1.300] |" in mwpy
    assert "| 0.200 s (100 %) |" in floor
    # A run with more options for the master says so: its rounds are never merged with the default's.
    labelled = jobs_condor.span_table({**facts, "master_options": "--mw-slave-window 2"}, runs)
    assert "| mwpy `--mw-slave-window 2` |" in labelled


def _printed(module: str, *args: str) -> str:
    """What ``python -m module args`` prints; it must exit 0."""
    completed = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def test_the_round_trip_is_split_into_stages_on_both_sides() -> None:
    """``python -m benchmarks.stages`` runs the latency program with its stages marked and prints every stage of
    the master's and the slave's part of a round trip (a method taken off the path fails it: its mark never comes)."""
    lines = _printed("benchmarks.stages", "--round-trips", "300").splitlines()
    stages = {line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("  stage")}
    assert {"submitted", "taken", "framed", "opened", "settled", "queued", "ran", "all"} <= stages
    assert sum(line.startswith(("master (", "slave (")) for line in lines) == 2


def test_a_short_script_s_start_up_is_split_into_the_executor_s_steps() -> None:
    """``python -m benchmarks.startup_stages`` times each step of ``mwpy.Executor``'s start in fresh processes
    (a step whose function is no longer called fails it: the steps would not add up), then the two paths that
    run at once, the slaves' and the caller's, from the fork server's start."""
    lines = _printed("benchmarks.startup_stages", "--runs", "2").splitlines()
    steps = [line.split("  ")[0].strip() for line in lines[1:] if not line.startswith("from ")]
    assert steps == [
        "import mwpy", "mwpy.Executor", "slaves started", "engine imported", "master built", "first result",
        "with block left", "to first result", "slaves' path", "caller's path",
    ]  # fmt: skip
    medians = [re.match(r".+?\s+(\d+\.\d)\s+\d", line) for line in lines[-2:]]
    assert all(median is not None and float(median[1]) > 0 for median in medians)

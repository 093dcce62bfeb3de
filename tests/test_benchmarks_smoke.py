"""The benchmark harness still starts and measures: ``python -m benchmarks --quick`` end to end.

CI does not run the full benchmark (minutes, and figures on a shared machine
mean little); this makes sure the harness, the mwpy program it drives and the
fan-in load generator keep working as mwpy changes. Peers that need the
``bench`` extra are left out so the test runs with the ``test`` extra alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import condor, scenarios
from benchmarks.__main__ import table, targets
from benchmarks.common import Check, Row, Settings, Sizes, percentile

REPO = Path(__file__).resolve().parent.parent
#: The whole quick run takes ~10 s here; this is the deadline, not an expectation.
DEADLINE = 240


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "report.json"
    completed = subprocess.run(
        [
            sys.executable, "-m", "benchmarks", "--quick", "--quiet",
            "--peers", "processpool-1,processpool-100,floor,floor-event-loop",
            "--json", str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        # Scenario 5 would take minutes on a running pool: point it at none, so it reports "skipped".
        env={**os.environ, "MWPY_CONDOR_BASE": str(out.parent / "no-pool")},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "target" in completed.stdout
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    report["stdout"] = completed.stdout
    return report


def _rows(report: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return [row for row in report["rows"] if row["scenario"].startswith(scenario)]


def test_every_mwpy_measurement_ran(quick_report: dict[str, Any]) -> None:
    mwpy_rows = [row for row in quick_report["rows"] if row["system"].startswith("mwpy") and row["scenario"][0] != "5"]
    assert len(mwpy_rows) == 9  # 7 in scenarios 1-4, and scenario 6's two (Executor and master API)
    for row in mwpy_rows:
        assert row["skipped"] is None, row
        assert row["peak_rss_mb"] > 0


def test_throughput_has_mwpy_and_the_selected_peers(quick_report: dict[str, Any]) -> None:
    rows = {row["system"]: row for row in _rows(quick_report, "1")}
    for system in ("mwpy default (group 1)", "mwpy task/result group 100", "ProcessPoolExecutor chunksize=100"):
        assert rows[system]["tasks_per_s"] > 0
    assert rows["dask.distributed LocalCluster"]["skipped"] == "not selected (--peers)"


def test_latency_is_measured_beside_the_floor(quick_report: dict[str, Any]) -> None:
    rows = {row["system"]: row for row in _rows(quick_report, "2")}
    assert rows["mwpy default"]["p50_us"] > 0
    assert rows["bare pickle echo, loopback TCP (floor)"]["p50_us"] > 0
    assert rows["same echo waiting in epoll/poll (event-loop floor)"]["p50_us"] > 0
    check = next(c for c in quick_report["checks"] if c["target"].startswith("2. latency p50"))
    assert check["measured"] is not None


def test_the_executor_is_measured_beside_the_master_api(quick_report: dict[str, Any]) -> None:
    rows = _rows(quick_report, "6")
    assert [row["system"].split(",")[0] for row in rows] == ["mwpy.Executor.map", "mwpy master algorithm API (default)"]
    assert all(row["tasks_per_s"] > 0 for row in rows)
    check = next(c for c in quick_report["checks"] if c["target"].startswith("6."))
    assert check["measured"] is not None


def test_fanin_reports_idle_cpu(quick_report: dict[str, Any]) -> None:
    rows = _rows(quick_report, "4")
    assert len(rows) == 2
    assert all(row["cpu_percent"] is not None and row["tasks_per_s"] > 0 for row in rows)


def test_json_describes_the_run(quick_report: dict[str, Any]) -> None:
    assert quick_report["workers"] == 2
    assert quick_report["machine"]["cpus"] >= 1
    assert "--quick" in quick_report["command"]
    assert {c["target"][0] for c in quick_report["checks"]} == {"1", "2", "3", "4", "5", "6"}


def test_condor_is_skipped_with_a_reason_without_a_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(condor, "POOL_BASE", tmp_path)
    rows, checks = condor.run(Settings(workers=2, sizes=Sizes.quick(), peers=frozenset()))
    assert rows
    assert all(row.skipped and "no HTCondor pool" in row.skipped for row in rows)
    assert all(check.ok is None for check in checks)


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
    rows = [Row("1 x", "a", tasks=10, tasks_per_s=5.0), Row("1 x", "b", skipped="not installed\nmore")]
    text = table(rows)
    assert "skipped: not installed" in text
    assert "more" not in text
    verdicts = targets([Check("t1", 2.0, "≥ 1", True), Check("t2", 0.5, "≥ 1", False), Check("t3", None, "≤ 2", None)])
    assert "PASS" in verdicts
    assert "FAIL" in verdicts


def test_repeats_are_interleaved_and_the_best_run_is_kept() -> None:
    calls: list[str] = []

    def measure(name: str, values: list[float]) -> scenarios.Measurement:
        left = iter(values)

        def run() -> Row:
            calls.append(name)
            return Row("1 x", name, tasks_per_s=next(left))

        return run

    settings = Settings(workers=2, sizes=Sizes.quick(), peers=frozenset(), repeat=3)
    a, b = scenarios._rounds(
        settings, [measure("a", [1.0, 3.0, 2.0]), measure("b", [5.0, 4.0, 6.0])], "tasks_per_s", larger_is_better=True
    )
    assert calls == ["a", "b"] * 3
    assert (a.tasks_per_s, b.tasks_per_s) == (3.0, 6.0)
    assert a.extra["all_runs"] == {"tasks_per_s": [1.0, 3.0, 2.0]}

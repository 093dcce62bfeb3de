"""``mwpy report`` (docs/observability.md): one self-contained HTML file, in a real browser."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwpy.observe import events as ev
from mwpy.observe import report
from tests import obs_support
from tests.obs_support import ONE_OF_EACH, SIMULATOR, chromium_or_skip, console_errors, finished, headless, write_log

PLOTS = ("plot-rate", "plot-slaves", "plot-timeline", "plot-runtimes")
#: What each plot draws once plotly has rendered it: line paths, or the heatmap's image.
DRAWN = {
    "plot-rate": r'<path class="js-line"[^>]* d="M[^"]{20,}"',
    "plot-slaves": r'<path class="js-line"[^>]* d="M[^"]{20,}"',
    "plot-timeline": r'<g class="hm"[^>]*><image[^>]* (?:xlink:)?href="data:image/png;base64,[^"]{100,}"',
    "plot-runtimes": r'<path class="js-line"[^>]* d="M[^"]{20,}"',
}


def _report_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mwpy", "report", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _simulate(path: Path, tasks: int, timeout: float = 300) -> Path:
    subprocess.run([sys.executable, str(SIMULATOR), str(path), "--tasks", str(tasks)], check=True, timeout=timeout)
    return path


def _sections(dom: str) -> dict[str, str]:
    """Each plot's section of the rendered DOM, by its div id."""
    found = {}
    for match in re.finditer(r'<section class="plot" data-plot="([^"]+)">(.*?)</section>', dom, re.DOTALL):
        found[match.group(1)] = match.group(2)
    return found


def test_every_plot_renders_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    browser = chromium_or_skip()
    events = _simulate(tmp_path / "events.jsonl", 5000)
    out = tmp_path / "report.html"
    done = _report_cli(str(events), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", page), "self-contained: no script is loaded from elsewhere"
    shown = headless(
        browser, tmp_path / "profile", "--virtual-time-budget=15000", "--dump-dom", out.as_uri(), timeout=180
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert console_errors(shown.stderr) == []
    sections = _sections(shown.stdout)
    assert sorted(sections) == sorted(PLOTS)
    for plot, drawn in DRAWN.items():
        assert 'class="main-svg"' in sections[plot], f"{plot} did not render"
        assert re.search(drawn, sections[plot]), f"{plot} rendered empty"
    assert "ValueError" in shown.stdout, "the failures table lists the simulated errors"


def test_the_console_error_check_does_catch_errors(tmp_path: Path) -> None:
    """The check above would pass vacuously if Chromium stopped logging console errors: prove it does not."""
    browser = chromium_or_skip()
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>", encoding="utf-8")
    shown = headless(browser, tmp_path / "profile", "--virtual-time-budget=2000", "--dump-dom", page.as_uri())
    assert console_errors(shown.stderr), shown.stderr[-2000:]


def test_failures_are_listed_escaped_with_traceback_and_output(tmp_path: Path) -> None:
    out = report.build_report(write_log(tmp_path / "events.jsonl", ONE_OF_EACH), tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    failures = page[page.index("<table id=failures>") :]
    assert "ZeroDivisionError</b>: division by zero" in failures
    assert "some &lt;b&gt;output&lt;/b&gt;" in failures
    assert "Traceback (most recent call last):" in failures
    assert "slaves gone: eof" in page


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (ev.encode(ONE_OF_EACH[0]) + '{"v":1,"t":2', ":2: truncated line"),
        ("id,name\n1,x\n", ":1: not JSON"),
    ],
    ids=["truncated", "foreign"],
)
def test_a_bad_log_is_one_line_and_status_1(tmp_path: Path, content: str, problem: str) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(content, encoding="utf-8")
    done = _report_cli(str(events), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"mwpy report: error: {events}{problem}")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_a_million_task_report_stays_small(tmp_path: Path) -> None:
    """Aggregated, not plotted per task: a 10^6-task log makes a report well under 20 MB (timing is printed)."""
    started = time.monotonic()
    events = _simulate(tmp_path / "events.jsonl", 1_000_000, timeout=600)
    simulated = time.monotonic() - started
    started = time.monotonic()
    done = _report_cli(str(events), "-o", str(tmp_path / "r.html"), timeout=600)
    built = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    size = (tmp_path / "r.html").stat().st_size
    print(
        f"10^6 tasks: log {events.stat().st_size / 1e6:.1f} MB written in {simulated:.1f} s; "
        f"report {size / 1e6:.1f} MB built in {built:.1f} s"
    )
    assert size < 20_000_000


def test_browser_tests_skip_without_chromium_unless_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(obs_support, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv(obs_support.BROWSER_REQUIRED_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium is missing"):
        obs_support.chromium_or_skip()
    monkeypatch.setenv(obs_support.BROWSER_REQUIRED_ENV, "1")
    with pytest.raises(AssertionError, match="MWPY_BROWSER_REQUIRED is set"):
        obs_support.chromium_or_skip()


def test_a_month_long_run_keeps_bounded_buckets_and_every_task(tmp_path: Path) -> None:
    """Buckets coarsen as the log's span grows: memory stays bounded, no task is lost, bins stay few."""
    day = 86_400.0
    history: list[ev.Event] = [
        ev.MasterStart(t=0.0, run=1, pid=1, host="h", version="0", member_id="m"),
        ev.SlaveConnected(t=1.0, slave="slave-1", host="a", address="a:1", group="unordered"),
    ]
    for hour in range(30 * 24):
        history.append(finished(hour * 3600.0 + 50, "slave-1", "ok", 40.0, 9.0))
    history.append(ev.SlaveDisconnected(t=30 * day, slave="slave-1", cause="shutdown", reason="finished"))
    d = report.digest(write_log(tmp_path / "events.jsonl", history))
    assert len(d.ok) <= report.MAX_STORED
    assert len(d.slaves[0].busy) <= report.MAX_STORED
    assert sum(d.ok.values()) == 2 * 30 * 24
    assert sum(d.slaves[0].busy.values()) == pytest.approx(49.0 * 30 * 24)
    bins = report._bins(d)
    assert bins.count <= report.MAX_BINS
    assert bins.count * bins.width >= 30 * day
    figures = dict(report._figures(d))
    (heatmap,) = figures["plot-timeline"]["data"]
    busy = [v for v in heatmap["z"][0] if v is not None]
    assert sum(busy) / len(busy) == pytest.approx(49.0 / 3600, rel=0.05), "49 s of every hour busy"


def test_busy_time_goes_to_the_seconds_before_the_result() -> None:
    grid = report.Grid()
    grid.index(100.0)
    series = grid.series()
    grid.spread(series, 110.5, 2.0, start=100.0)
    assert dict(series) == {10: pytest.approx(0.5), 9: pytest.approx(1.0), 8: pytest.approx(0.5)}
    grid.spread(series, 101.0, 5.0, start=100.0)
    assert series[0] == pytest.approx(1.0), "never before the slave connected"


SLOW_AND_FAST = [
    finished(1001.0, "slave-0", "ok", *[0.3] * 20),
    finished(1001.0, "slave-1", "ok", *[0.3] * 20),
    finished(1001.0, "slave-2", "ok", *[0.9] * 10),
    finished(1002.0, "slave-2", "error", 0.9),
]


def test_the_report_says_which_slave_is_slow_and_which_fails(tmp_path: Path) -> None:
    """Issue 21 item 7: one slave averaged 0.90 s a task, the other two 0.30 s, and nothing said which."""
    page = report.build_report(write_log(tmp_path / "events.jsonl", SLOW_AND_FAST), tmp_path / "r.html").read_text()
    table = page[page.index("<h2>Run time per slave</h2>") :]
    rows = re.findall(r"<tr><td>(slave-\d)</td><td class=num>(\d+)</td><td class=num>([\d.]+)</td>", table)
    assert rows == [("slave-2", "11", "0.900000"), ("slave-0", "20", "0.300000"), ("slave-1", "20", "0.300000")]
    assert re.search(r"<td>slave-2</td>(<td class=num>[^<]*</td>){4}<td class=num>1</td>", table)


def test_the_report_shows_each_slave_s_cache_as_it_last_reported_it(tmp_path: Path) -> None:
    """Issue 22 item 4: hits, misses, bytes fetched and evictions per slave, the one that fetched most first."""
    records = [
        *ONE_OF_EACH[:4],
        ev.SlaveCache(t=1001.5, slave="slave-1", hits=1, misses=1, bytes_fetched=100, evictions=0),
        ev.SlaveCache(t=1001.6, slave="slave-2", hits=7, misses=3, bytes_fetched=9000, evictions=2),
        ev.SlaveCache(t=1001.7, slave="slave-1", hits=5, misses=1, bytes_fetched=100, evictions=0),
    ]
    page = report.build_report(write_log(tmp_path / "events.jsonl", records), tmp_path / "r.html").read_text()
    table = page[page.index("<h2>Caches of shared objects per slave</h2>") :]
    rows = re.findall(r"<tr><td>run 1: (slave-\d)</td>((?:<td class=num>\d+</td>){4})</tr>", table)
    assert rows == [
        ("slave-2", "<td class=num>7</td><td class=num>3</td><td class=num>9000</td><td class=num>2</td>"),
        ("slave-1", "<td class=num>5</td><td class=num>1</td><td class=num>100</td><td class=num>0</td>"),
    ]

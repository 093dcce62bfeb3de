"""``mwpy report EVENTS -o report.html``: one self-contained HTML file about a computation.

The report is read on a laptop after the run, often offline, often mailed
around: so it is one file with plotly.js inlined (no server, no CDN), and the
plots are of *aggregates* — tasks per time bin, busy fraction per slave and
bin, run-time histograms with logarithmic buckets — never one point per task,
so a 10^6-task run makes a file of a few MB (plotly.js itself is 4.8 MB of
it) built in one streaming pass over the log. docs/observability.md says why
plotly ("Why plotly").

Plots: tasks completed per second; slaves connected against slaves needed
(and Condor jobs idle / running when the log has them); a per-slave timeline
(busy / idle / gone); run-time distribution per algorithm. Tables: goodput
(mwpy/observe/goodput.py), the failures with their tracebacks and output.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from mwpy import safe_files, safe_text
from mwpy.observe import events as ev
from mwpy.observe import goodput
from mwpy.observe.runtimes import BUCKETS_PER_DECADE, RunTimes, slowest

#: Time bins on the x axis at most (bins are whole seconds, at least 1 s wide).
MAX_BINS = 400
#: Slaves shown in the timeline at most (the ones with the most slot time); the rest are counted.
MAX_TIMELINE_SLAVES = 150
#: Failures listed in full at most; the others are counted.
MAX_FAILURES = 200
#: Slaves listed in the run-time table at most (the slowest); the others are counted.
MAX_SLAVE_ROWS = 50
#: Change points of a series (slaves connected...) kept as they are; beyond this they are binned.
MAX_POINTS = 2000
#: Buckets a time series keeps while reading at most; their width doubles when the log's span outgrows them.
MAX_STORED = 8 * MAX_BINS


class Grid:
    """The time buckets every series of one report shares: memory bounded however long the run.

    Buckets start 1 s wide; whenever an event falls beyond ``MAX_STORED``
    buckets from the first one, every series merges pairs of buckets and the
    width doubles. A month-long run thus costs what a short one does, and the
    final bins (at most ``MAX_BINS``) are whole multiples of the stored ones.
    """

    def __init__(self) -> None:
        self.origin: float | None = None
        self.width = 1.0
        self._series: list[dict[int, float]] = []

    def series(self) -> dict[int, float]:
        made: dict[int, float] = defaultdict(float)
        self._series.append(made)
        return made

    def index(self, t: float) -> int:
        """The bucket of time ``t`` (an event before the first one goes into bucket 0)."""
        if self.origin is None:
            self.origin = float(math.floor(t))
        index = int((t - self.origin) // self.width)
        while index >= MAX_STORED:
            self._coarsen()
            index = int((t - self.origin) // self.width)
        return max(0, index)

    def _coarsen(self) -> None:
        self.width *= 2
        for series in self._series:
            merged: dict[int, float] = defaultdict(float)
            for key, value in series.items():
                merged[key // 2] += value
            series.clear()
            series.update(merged)

    def spread(self, series: dict[int, float], end: float, seconds: float, start: float) -> None:
        """Add ``seconds`` of running to the buckets just before ``end``, never before ``start``."""
        index = self.index(end)
        assert self.origin is not None
        floor = self.index(start) if start >= self.origin else 0
        room = end - (self.origin + index * self.width)
        while seconds > 1e-9 and index >= floor:
            take = min(seconds, room)
            series[index] += take
            seconds -= take
            index -= 1
            room = self.width


@attrs.define
class _Slave:
    """What the timeline needs of one slave connection: when it was there, busy seconds per bucket."""

    name: str
    host: str
    start: float
    busy: dict[int, float]
    end: float | None = None


@attrs.define
class Digest:
    """Everything the report shows, aggregated in one pass over the log (memory independent of the task count)."""

    grid: Grid = attrs.Factory(Grid)
    ok: dict[int, float] = attrs.Factory(dict)
    failed: dict[int, float] = attrs.Factory(dict)
    retried: dict[int, float] = attrs.Factory(dict)
    connected: list[tuple[float, int]] = attrs.Factory(list)
    needed: list[tuple[float, int]] = attrs.Factory(list)
    condor: list[tuple[float, int, int]] = attrs.Factory(list)
    slaves: list[_Slave] = attrs.Factory(list)
    algorithms: dict[str, RunTimes] = attrs.Factory(lambda: defaultdict(RunTimes))
    #: Run times and failures per slave id (with several master runs, one id may name a slave of each).
    per_slave: dict[str, RunTimes] = attrs.Factory(lambda: defaultdict(RunTimes))
    failures: list[ev.TaskFailed] = attrs.Factory(list)
    more_failures: int = 0
    #: Each slave's cache of shared objects as it last reported it (by slave id, runs apart).
    caches: dict[str, ev.SlaveCache] = attrs.Factory(dict)
    starts: list[ev.MasterStart] = attrs.Factory(list)
    stops: list[ev.MasterStop] = attrs.Factory(list)
    counts: Counter[str] = attrs.Factory(Counter)
    causes: Counter[str] = attrs.Factory(Counter)
    first: float | None = None
    last: float | None = None
    goodput: goodput.Goodput = attrs.Factory(goodput.Goodput)


class _Digester:
    """Builds a :class:`Digest` from events fed in file order (:meth:`add`): one method per kind of event."""

    def __init__(self) -> None:
        self.digest = d = Digest()
        d.ok, d.failed, d.retried = d.grid.series(), d.grid.series(), d.grid.series()
        self.outcomes = {"ok": d.ok, "error": d.failed, "retried": d.retried}
        self.accountant = goodput.Accountant()
        self.live: dict[str, _Slave] = {}
        #: The last moment a master that died was known alive (the time of the event before the current one).
        self.before: float | None = None

    def add(self, event: ev.Event) -> None:
        self.accountant.add(event)
        d = self.digest
        t = event.t
        self.before = d.last
        if d.first is None:
            d.first = t
        if d.last is None or t > d.last:
            d.last = t
        handler = self._HANDLERS.get(event.KIND)  # by kind: a subclass of a kind is handled as that kind
        if handler is not None:
            handler(self, event)

    def result(self) -> Digest:
        d = self.digest
        d.goodput = self.accountant.result()
        if len(d.starts) > 1:  # slave ids start again with each master run
            for slave in d.slaves:
                run = sum(1 for s in d.starts if s.t <= slave.start)
                slave.name = f"run {run}: {slave.name}"
        return d

    def _finished(self, event: ev.TasksFinished) -> None:
        d, t = self.digest, event.t
        n = len(event.run_us)
        self.outcomes[event.outcome][d.grid.index(t)] += n
        d.algorithms[event.algorithm].add(event)
        d.per_slave[event.slave].add(event)
        slave = self.live.get(event.slave)
        if slave is not None:
            d.grid.spread(slave.busy, t, sum(event.run_us) / 1e6, slave.start)

    def _connected(self, event: ev.SlaveConnected) -> None:
        d, t, live = self.digest, event.t, self.live
        d.grid.index(t)
        slave = _Slave(name=event.slave, host=event.host, start=t, busy=d.grid.series())
        if event.slave in live:  # the same id again without a disconnect: close the old one
            live[event.slave].end = t
        live[event.slave] = slave
        d.slaves.append(slave)
        d.connected.append((t, len(live)))

    def _disconnected(self, event: ev.SlaveDisconnected) -> None:
        d, t = self.digest, event.t
        gone = self.live.pop(event.slave, None)
        if gone is not None:
            gone.end = t
        d.causes[event.cause] += 1
        d.connected.append((t, len(self.live)))

    def _slave_cache(self, event: ev.SlaveCache) -> None:
        self.digest.caches[f"run {len(self.digest.starts)}: {event.slave}"] = event

    def _resource_file(self, event: ev.ResourceFileWritten) -> None:
        self.digest.needed.append((event.t, event.slaves_needed))

    def _condor_jobs(self, event: ev.CondorJobs) -> None:
        self.digest.condor.append((event.t, event.idle, event.running))

    def _failed(self, event: ev.TaskFailed) -> None:
        d = self.digest
        if len(d.failures) < MAX_FAILURES:
            d.failures.append(event)
        else:
            d.more_failures += 1

    def _master_start(self, event: ev.MasterStart) -> None:
        d, t = self.digest, event.t
        for slave in self.live.values():  # slaves of a master that died (or stopped) end with it
            slave.end = self.before if self.before is not None else t
        self.live.clear()
        d.starts.append(event)
        d.connected.append((t, 0))

    def _master_stop(self, event: ev.MasterStop) -> None:
        self.digest.stops.append(event)

    def _count(
        self,
        event: ev.TasksDispatched | ev.TasksRequeued | ev.TasksAdopted | ev.TasksUnrunnable | ev.TasksCancelled,
    ) -> None:
        self.digest.counts[event.KIND] += event.n

    _HANDLERS: ClassVar[dict[str, Callable[[_Digester, Any], None]]] = {
        ev.TasksFinished.KIND: _finished,
        ev.SlaveConnected.KIND: _connected,
        ev.SlaveDisconnected.KIND: _disconnected,
        ev.SlaveCache.KIND: _slave_cache,
        ev.ResourceFileWritten.KIND: _resource_file,
        ev.CondorJobs.KIND: _condor_jobs,
        ev.TaskFailed.KIND: _failed,
        ev.MasterStart.KIND: _master_start,
        ev.MasterStop.KIND: _master_stop,
        ev.TasksDispatched.KIND: _count,
        ev.TasksRequeued.KIND: _count,
        ev.TasksAdopted.KIND: _count,
        ev.TasksUnrunnable.KIND: _count,
        ev.TasksCancelled.KIND: _count,
    }


def digest(path: str | os.PathLike[str]) -> Digest:
    """Read the log once and aggregate it; :class:`EventLogError` at its first bad line."""
    digester = _Digester()
    for event in ev.iter_events(path):
        digester.add(event)
    return digester.result()


# ---------------------------------------------------------------------------------------------- figures


@attrs.frozen
class _Bins:
    """The plotted bins: ``factor`` stored buckets each, ``width`` seconds wide, ``count`` of them."""

    factor: int
    width: float
    count: int

    def x(self) -> list[float]:
        """Bin centres as seconds since the first event's whole second."""
        return [i * self.width + self.width / 2 for i in range(self.count)]

    def sums(self, series: dict[int, float]) -> list[float]:
        out = [0.0] * self.count
        for key, value in series.items():
            index = key // self.factor
            if 0 <= index < self.count:
                out[index] += value
        return out

    def rates(self, series: dict[int, float]) -> list[float]:
        return [value / self.width for value in self.sums(series)]


def _bins(d: Digest) -> _Bins:
    """At most ``MAX_BINS`` bins covering the whole log, each a whole number of the grid's buckets."""
    grid = d.grid
    stored = grid.index(d.last) + 1 if d.last is not None else 1
    factor = max(1, math.ceil(stored / MAX_BINS))
    return _Bins(factor=factor, width=grid.width * factor, count=math.ceil(stored / factor))


def _steps(points: list[tuple[float, int]], origin: float) -> tuple[list[float], list[int]]:
    """A step series as change points; with too many, the maximum per bin (so peaks stay visible)."""
    if len(points) <= MAX_POINTS:
        return [t - origin for t, _ in points], [v for _, v in points]
    end = points[-1][0]
    width = max((end - points[0][0]) / (MAX_POINTS // 2), 1e-9)
    peaks: dict[int, int] = {}
    for t, value in points:
        index = int((t - points[0][0]) / width)
        peaks[index] = max(peaks.get(index, value), value)
    return [points[0][0] - origin + i * width for i in sorted(peaks)], [peaks[i] for i in sorted(peaks)]


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}},
        "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
        "height": 380,
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def _figures(d: Digest) -> list[tuple[str, dict[str, Any]]]:
    """(div id, plotly figure as a dict) for each plot."""
    bins = _bins(d)
    x = bins.x()
    per = "per second" if bins.width == 1 else f"per second ({bins.width:g} s bins)"
    rate = {
        "data": [
            {"type": "scatter", "mode": "lines", "name": "ok", "x": x, "y": bins.rates(d.ok)},
            {"type": "scatter", "mode": "lines", "name": "failed", "x": x, "y": bins.rates(d.failed)},
            {
                "type": "scatter",
                "mode": "lines",
                "name": "retried",
                "x": x,
                "y": bins.rates(d.retried),
            },
        ],
        "layout": _layout(f"Tasks completed {per}", "seconds since the first event", "tasks / s"),
    }
    origin = d.grid.origin or 0.0
    cx, cy = _steps(d.connected, origin)
    nx, ny = _steps(d.needed, origin)
    slave_data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "line": {"shape": "hv"}, "name": "slaves connected", "x": cx, "y": cy},
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv", "dash": "dash"},
            "name": "slaves needed (beyond those connected)",
            "x": nx,
            "y": ny,
        },
    ]
    if d.condor:
        points = d.condor if len(d.condor) <= MAX_POINTS else d.condor[:: len(d.condor) // MAX_POINTS + 1]
        times = [t - origin for t, _, _ in points]
        for index, name in ((1, "Condor jobs idle"), (2, "Condor jobs running")):
            slave_data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "line": {"shape": "hv", "dash": "dot"},
                    "name": name,
                    "x": times,
                    "y": [p[index] for p in points],
                }
            )
    slaves = {"data": slave_data, "layout": _layout("Slaves", "seconds since the first event", "slaves")}
    return [
        ("plot-rate", rate),
        ("plot-slaves", slaves),
        ("plot-timeline", _timeline(d, bins)),
        ("plot-runtimes", _runtimes(d)),
    ]


def _timeline(d: Digest, bins: _Bins) -> dict[str, Any]:
    """Per slave and time bin: busy fraction while connected (0 idle .. 1 busy), blank while gone."""
    end = d.last or 0.0
    chosen = sorted(d.slaves, key=lambda s: (s.end if s.end is not None else end) - s.start, reverse=True)
    hidden = max(0, len(chosen) - MAX_TIMELINE_SLAVES)
    chosen = sorted(chosen[:MAX_TIMELINE_SLAVES], key=lambda s: s.start)
    origin = d.grid.origin or 0.0
    z: list[list[float | None]] = []
    for slave in chosen:
        stop = slave.end if slave.end is not None else end
        busy = bins.sums(slave.busy)
        row: list[float | None] = []
        for index in range(bins.count):
            lo = origin + index * bins.width
            there = min(stop, lo + bins.width) - max(slave.start, lo)
            row.append(None if there <= 0 else round(min(1.0, busy[index] / there), 3))
        z.append(row)
    title = "Per-slave timeline: busy fraction while connected (blank: gone)"
    if hidden:
        title += f" — the {MAX_TIMELINE_SLAVES} longest of {len(d.slaves)} connections"
    return {
        "data": [
            {
                "type": "heatmap",
                "x": bins.x(),
                "y": [safe_text.plot(f"{s.name} ({s.host})") for s in chosen],  # plotly makes <a href> a link
                "z": z,
                "zmin": 0,
                "zmax": 1,
                "colorscale": [[0.0, "#fde68a"], [0.5, "#60a5fa"], [1.0, "#1e3a8a"]],
                "colorbar": {"title": {"text": "busy"}},
                "hoverongaps": False,
            }
        ],
        "layout": _layout(
            title,
            "seconds since the first event",
            "",
            height=max(300, min(1200, 120 + 14 * len(chosen))),
            plot_bgcolor="#e5e7eb",
        ),
    }


def _runtimes(d: Digest) -> dict[str, Any]:
    """Run-time distribution per algorithm: task counts in logarithmic buckets, drawn as filled steps.

    Steps rather than bars: bar widths are linear, so on a log axis bars turn into hairlines.
    """
    data = []
    for name, algorithm in sorted(d.algorithms.items()):
        keys = sorted(algorithm.buckets)
        centres = [0.5e-6 if k < 0 else 10 ** ((k + 0.5) / BUCKETS_PER_DECADE) / 1e6 for k in keys]  # seconds
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hvh"},
                "fill": "tozeroy",
                "name": safe_text.plot(name),
                "x": centres,
                "y": [algorithm.buckets[k] for k in keys],
            }
        )
    return {
        "data": data,
        "layout": _layout(
            "Task run time per algorithm", "run time (s, log scale)", "tasks per bucket", xaxis_type="log"
        ),
    }


# ---------------------------------------------------------------------------------------------- HTML

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #111827; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #d1d5db; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f3f4f6; padding: 0.5em; overflow-x: auto; font-size: 0.85em; max-height: 30em; }
.plot { min-height: 300px; }
.note { color: #4b5563; font-size: 0.9em; }
"""


_e = safe_text.html


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()) -> str:
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i in numeric else ''}>{_e(cell)}</td>" for i, cell in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _per_slave(d: Digest) -> str:
    """Which slave is slow, which one fails: the slowest first."""
    rows = [
        (name, r.count, f"{r.mean:.6f}", f"{r.percentile(0.95):.6f}", f"{r.max_us / 1e6:.6f}", r.failures)
        for name, r in slowest(d.per_slave, MAX_SLAVE_ROWS)
    ]
    table = _table(["slave", "tasks", "mean s", "p95 s ≤", "max s", "failed"], rows, numeric=(1, 2, 3, 4, 5))
    more = len(d.per_slave) - len(rows)
    return table + (f"<p class=note>... and {more} faster slaves (not listed).</p>" if more > 0 else "")


def _caches(d: Digest) -> str:
    """What each slave's cache of shared objects and files did: a slave that fetched much, or evicted, shows."""
    if not d.caches:
        return "<p class=note>No slave used shared objects or files.</p>"
    by_fetched = sorted(d.caches.items(), key=lambda item: -item[1].bytes_fetched)[:MAX_SLAVE_ROWS]
    rows = [(name, c.hits, c.misses, c.bytes_fetched, c.evictions) for name, c in by_fetched]
    table = _table(["slave", "hits", "misses", "bytes fetched", "evictions"], rows, numeric=(1, 2, 3, 4))
    more = len(d.caches) - len(rows)
    return table + (f"<p class=note>... and {more} slaves that fetched less (not listed).</p>" if more > 0 else "")


def _failures(d: Digest, origin: float) -> str:
    if not d.failures:
        return "<p>No task raised.</p>"
    rows = []
    for f in d.failures:
        output = f"<details><summary>output</summary><pre>{_e(f.output)}</pre></details>" if f.output else ""
        rows.append(
            f"<tr><td class=num>{f.t - origin:.1f}</td><td>{_e(f.task)}</td><td>{_e(f.algorithm)}</td>"
            f"<td>{_e(f.slave)}</td><td>{'retried' if f.retried else 'given up'}</td>"
            f"<td><b>{_e(f.error)}</b>: {_e(f.message)}"
            f"<details><summary>traceback</summary><pre>{_e(f.traceback)}</pre></details>{output}</td></tr>"
        )
    more = f"<p class=note>... and {d.more_failures} more failures (not listed).</p>" if d.more_failures else ""
    head = "".join(f"<th>{h}</th>" for h in ("s", "task", "algorithm", "slave", "then", "error"))
    return f"<table id=failures><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def render(d: Digest, source: str, title: str | None = None) -> str:
    """The whole report as one HTML string (plotly imported here: the only place that needs it)."""
    import plotly.io as pio  # noqa: PLC0415 (an optional extra: mwpy[report])
    from plotly.offline import get_plotlyjs  # noqa: PLC0415

    origin = float(int(d.first or 0))
    g = d.goodput
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.first or 0))
    runs = ", ".join(
        f"run {s.run} on {s.host} (pid {s.pid}, mwpy {s.version}, member id {s.member_id})" for s in d.starts
    )
    plots = "".join(
        f'<section class="plot" data-plot="{div}">'
        + pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            div_id=div,
            config={"displaylogo": False, "responsive": True},
        )
        + "</section>"
        for div, fig in _figures(d)
    )
    algorithms = _table(
        ["algorithm", "tasks", "mean s", "p50 s ≤", "p95 s ≤", "max s"],
        [
            (
                name,
                a.count,
                f"{a.mean:.6f}",
                f"{a.percentile(0.5):.6f}",
                f"{a.percentile(0.95):.6f}",
                f"{a.max_us / 1e6:.6f}",
            )
            for name, a in sorted(d.algorithms.items())
        ],
        numeric=(1, 2, 3, 4, 5),
    )
    events = _table(
        ["what", "count"],
        [
            ("tasks ok", g.tasks_ok),
            ("tasks failed", g.tasks_failed),
            ("task runs retried after an error", g.tasks_retried),
            ("tasks sent to slaves", d.counts["tasks-dispatched"]),
            ("tasks queued again after their slave vanished", d.counts["tasks-requeued"]),
            *([("tasks answered by slaves of the previous master", n)] if (n := d.counts["tasks-adopted"]) else []),
            ("tasks unrunnable", d.counts["tasks-unrunnable"]),
            ("tasks cancelled", d.counts["tasks-cancelled"]),
            ("slave connections", g.slaves),
            *((f"slaves gone: {cause}", n) for cause, n in sorted(d.causes.items())),
        ],
        numeric=(1,),
    )
    name = title or f"mwpy report: {Path(source).name}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(name)}</title>
<style>{_STYLE}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>{_e(name)}</h1>
<p class=note>From {_e(source)}: {len(d.starts)} master run(s) — {_e(runs) or "no master-start event"}.
First event {_e(when)}, {goodput.duration(g.wall)} of events.</p>
<h2>Goodput</h2>
<p>Efficiency <b>{100 * g.efficiency:.1f} %</b>: slot time spent running tasks whose results counted.
Slot time runs from a slave's connection to its disconnection; time lost to slaves that timed out or were evicted is
estimated from their last result to their disconnection.</p>
{_table(["", "time", "share of slot time"], goodput.rows(g), numeric=(1, 2))}
{events}
<h2>Plots</h2>
{plots}
<h2>Run time per algorithm</h2>
{algorithms}
<h2>Run time per slave</h2>
{_per_slave(d)}
<h2>Caches of shared objects per slave</h2>
{_caches(d)}
<p class=note>Percentiles are the upper edge of a histogram bucket ({BUCKETS_PER_DECADE} per decade).</p>
<h2>Failures</h2>
{_failures(d, origin)}
<p class=note>Built by mwpy report at {_e(time.strftime("%Y-%m-%d %H:%M:%S"))}.</p>
</body></html>
"""


def build_report(events_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> Path:
    """Read the event log and write the report atomically, mode 0600 as the event log; return its path.

    The report holds what the event log holds (tracebacks, task output, host names): private alike.

    Raises :class:`EventLogError` for a bad log and ``ImportError`` without plotly.
    """
    text = render(digest(events_path), os.fspath(events_path))
    target = Path(output_path)
    safe_files.write_atomically(target, text.encode("utf-8"))  # 0600, as the event log it shows
    return target

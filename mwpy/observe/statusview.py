"""The live status view: ``mwpy status RESOURCE --watch`` (and ``mwpy local``'s progress).

Everything a person watching a computation asks, refreshed about once a
second from the resource file the master rewrites anyway (so watching costs
the master nothing): tasks done against the total with an ETA when the total
is known, the rate, slaves per group and how many more the master wants,
Condor's jobs by state when a schedd answers, and recent failures when the
master writes an event log.

On a terminal it is a rich view redrawn in place; without one (a pipe, a log
file) it prints one plain line whenever something changed, so a log of it
stays readable. ``watch`` returns 0 once the computation finished, 1 when the
resource file is unusable for good, and 130 on Ctrl-C.

Imported only by the commands that show it (never by the master or slaves),
which is why it may import rich at module level.
"""

from __future__ import annotations

import collections
import errno
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import attrs
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from mwpy import overseer_state, resource_file, safe_files, safe_text
from mwpy.errors import InvalidResourceFileError, ResourceFileError, UnsafeFileError
from mwpy.observe import events as ev
from mwpy.observe import runtimes
from mwpy.observe.goodput import duration
from mwpy.observe.runtimes import RunTimes, slowest
from mwpy.resource_file import ResourceFile

#: Seconds of samples the rate is averaged over (long enough to be steady, short enough to follow changes).
RATE_WINDOW = 30.0
#: Recent failures shown at most.
MAX_FAILURES = 5
#: Slaves the terminal view lists, the slowest first (the plain line names the slowest one).
SLOWEST_SLAVES = 3
#: Seconds between two questions to the schedd (a schedd is shared; once a second would be rude).
CONDOR_INTERVAL = 10.0
#: Seconds between two analyses of why idle slave jobs do not match (each asks the collector for every slot).
ANALYSIS_INTERVAL = 60.0
#: Exit status on Ctrl-C, as a shell reports SIGINT.
INTERRUPTED = 130
#: Slave groups in the order slaves fill them (the resource file sorts its keys).
GROUPS = ("ordered", "intermingle", "unordered")


def _groups(record: ResourceFile) -> list[tuple[str, int]]:
    """Slaves connected per group, in fill order, then any group this mwpy does not know."""
    known = [(kind, record.slaves_connected[kind]) for kind in GROUPS if kind in record.slaves_connected]
    return known + sorted((k, v) for k, v in record.slaves_connected.items() if k not in GROUPS)


@attrs.define
class Extra:
    """What the resource file does not say: the total, the slave limit, recent failures, Condor's job counts."""

    total: int | None = None
    #: Slaves that may run at most (``mwpy local --slaves N``), shown as ``slaves 2/N``.
    slave_limit: int | None = None
    #: The running overseer's ``--max-jobs`` (mwpy/overseer_state.py): the demand it can meet.
    overseer_cap: int | None = None
    failures: Sequence[str] = ()
    #: Run times per slave, from the event log (shown when more than one slave has finished tasks).
    slaves: Mapping[str, RunTimes] = attrs.Factory(dict)
    condor: Mapping[str, int] | None = None
    condor_problem: str | None = None
    #: The run was stopped by Ctrl-C (``mwpy local`` says so): the view says "interrupted", with no ETA.
    interrupted: bool = False
    #: When (Unix time) the Condor counts were asked for: they are shown with their age.
    condor_at: float | None = None
    #: Why idle slave jobs do not run, when some are idle (mwpy/backends/condor_match.py).
    condor_idle: str | None = None


class Rate:
    """Tasks per second over the last ``RATE_WINDOW`` seconds of samples of ``tasks_done``.

    Samples are taken at the resource file's own timestamps (when the master
    counted), so reading one file twice adds nothing and the rate does not
    sag between two writes.
    """

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, now: float, done: int) -> None:
        if self._samples and done < self._samples[-1][1]:  # a restarted master counts from 0 again
            self._samples.clear()
        if self._samples and now <= self._samples[-1][0]:  # the same write read again (or a clock step back)
            return
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def per_second(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None


def state_of(record: ResourceFile, now: float, *, interrupted: bool = False) -> str:
    if interrupted:
        return "interrupted"
    return "finished" if record.finished else ("stale" if record.stale(now) else "in progress")


def _eta(record: ResourceFile, total: int | None, rate: float | None, state: str) -> str | None:
    """How long the rest takes at this rate: only while the computation is in progress."""
    if state != "in progress" or total is None or not rate or record.tasks_done >= total:
        return None
    return duration((total - record.tasks_done) / rate)


# The phrases both views are made of, so that the terminal view and the plain line say the same things in the same
# words ("1,234 tasks done (56.7/s)", "slaves 2/2 connected"), words a reader or a script may look for.


def _tasks_phrase(record: ResourceFile, total: int | None, rate: float | None) -> str:
    """``78/300 tasks done (26 %, 15.3/s) · 2 running · 98 queued`` (the total and rate when known)."""
    done = f"{record.tasks_done:,}{f'/{total:,}' if total else ''} tasks done"
    notes = [f"{100 * record.tasks_done / total:.0f} %"] if total else []
    if rate is not None:
        notes.append(f"{rate:,.{1 if rate < 100 else 0}f}/s")
    if notes:
        done += f" ({', '.join(notes)})"
    return f"{done} · {record.tasks_running:,} running · {record.tasks_pending:,} queued"


def _slaves_phrase(record: ResourceFile, limit: int | None, cap: int | None = None) -> str:
    """``slaves 2/8 connected (unordered 2) · 6 more needed``: per group that has any, and the master's demand.

    With a slave limit, or an overseer's cap on slave jobs, the demand shown is what may still be started (a
    computation that can use 8 slaves does not need "1,999 more"), and the line says it was capped.
    """
    connected = sum(record.slaves_connected.values())
    groups = ", ".join(f"{kind} {count}" for kind, count in _groups(record) if count)
    needed = overseer_state.needed_within(record.slaves_needed, connected, limit or cap)
    capped = ""
    if needed < record.slaves_needed:
        capped = f" (capped by the limit of {limit})" if limit else f" (overseer cap: --max-jobs {cap})"
    return safe_text.one_line(  # group names come from the file
        f"slaves {connected}{f'/{limit}' if limit else ''} connected{f' ({groups})' if groups else ''}"
        f" · {needed:,} more needed{capped}"
    )


def _shapes_phrase(record: ResourceFile) -> str:
    """``shapes memory 16384 MB: 12 tasks, 1 slave; ...``: demand and supply per need of the tasks; then
    ``· learned memory grow 263 MB``, what task algorithms were learned to need (mwpy/core/memory.py)."""
    shapes = "; ".join(shape.describe() for shape in record.shapes)
    learned = (
        f" · learned memory {resource_file.describe_learned(record.learned_memory)}" if record.learned_memory else ""
    )
    return safe_text.one_line(f"shapes {shapes}{learned}")


def _condor_phrase(condor: Mapping[str, int], asked_at: float | None, now: float, idle_why: str | None) -> str:
    """``condor 2 idle · 8 running · 0 held (4 s old) · idle: why``: the schedd is asked every few seconds, not
    every frame; why idle jobs do not match comes from the schedd's job ads and may quote them: shown safe."""
    age = "" if asked_at is None else f" ({max(0.0, now - asked_at):.0f} s old)"
    counts = f"{condor.get('idle', 0)} idle · {condor.get('running', 0)} running · {condor.get('held', 0)} held"
    why = f" · idle: {safe_text.one_line(idle_why)[:300]}" if idle_why and condor.get("idle") else ""
    return f"condor {counts}{age}{why}"


def plain(record: ResourceFile | None, extra: Extra, rate: float | None, now: float, problem: str | None = None) -> str:
    """One line: the view for a pipe or a log file."""
    if record is None:
        return (
            f"[mwpy] waiting for the resource file ({problem})" if problem else "[mwpy] waiting for the resource file"
        )
    state = state_of(record, now, interrupted=extra.interrupted)
    eta = _eta(record, extra.total, rate, state)
    parts = [
        f"[mwpy] {state}",
        _tasks_phrase(record, extra.total, rate),
        *([f"ETA {eta}"] if eta else []),
        _slaves_phrase(record, extra.slave_limit, extra.overseer_cap),
        *([_shapes_phrase(record)] if record.shapes else []),
    ]
    if extra.condor is not None:
        parts.append(_condor_phrase(extra.condor, extra.condor_at, now, extra.condor_idle))
    if len(extra.slaves) > 1:
        parts.append("slowest " + runtimes.phrase(*slowest(extra.slaves, 1)[0]))
    if extra.failures:
        parts.append(f"last failure: {extra.failures[-1]}")
    return " · ".join(parts)


def render(
    record: ResourceFile | None,
    extra: Extra,
    rate: float | None,
    now: float,
    problem: str | None = None,
    *,
    title: str = "mwpy status",
) -> RenderableType:
    """The terminal view (a rich renderable): a panel of the plain line's phrases, one a line, and a progress bar."""
    if record is None:
        text = f"waiting for the resource file{f' ({problem})' if problem else ''}"
        return Panel(Text(text, style="yellow"), title=title, title_align="left")
    state = state_of(record, now, interrupted=extra.interrupted)
    colour = {"finished": "green", "stale": "red", "in progress": "cyan", "interrupted": "yellow"}[state]
    lines: list[RenderableType] = [
        Text.assemble(
            (state, f"bold {colour}"),
            safe_text.one_line(f" · master {record.master_host}:{record.master_port} · member id {record.member_id}"),
            (f" · written {record.age(now):.0f} s ago, every {record.update_interval:g} s", "dim"),
        )
    ]
    if extra.total:
        eta = _eta(record, extra.total, rate, state)
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            ProgressBar(total=extra.total, completed=min(record.tasks_done, extra.total), width=40, style="grey42"),
            f"{record.tasks_done:,}/{extra.total:,} ({100 * min(1.0, record.tasks_done / extra.total):.0f} %)"
            + (f" · ETA {eta}" if eta else ""),
        )
        lines.append(bar)
    lines.append(Text(_tasks_phrase(record, None, rate)))
    lines.append(Text(_slaves_phrase(record, extra.slave_limit, extra.overseer_cap)))
    if record.shapes:
        lines.append(Text(_shapes_phrase(record)))
    if extra.condor is not None:
        lines.append(Text(_condor_phrase(extra.condor, extra.condor_at, now, extra.condor_idle)))
    elif extra.condor_problem:
        lines.append(Text(extra.condor_problem, style="dim"))
    if len(extra.slaves) > 1:
        per_slave = Text("slowest slaves", style="bold")
        for name, figures in slowest(extra.slaves, SLOWEST_SLAVES):
            per_slave.append(f"\n  {runtimes.phrase(name, figures)}")
        lines.append(per_slave)
    if extra.failures:
        failures = Text("recent failures", style="bold red")
        for line in extra.failures[-MAX_FAILURES:]:
            failures.append(f"\n  {line}", style="red")
        lines.append(failures)
    return Panel(Group(*lines), title=title, title_align="left", border_style=colour)


class FailureTail:
    """Follows an event log as the master appends to it: recent ``task-failed`` lines, the announced total.

    Reads only what was added since the last call (the log may be large), and
    only complete lines. A line it cannot read stops the tail with one problem
    line instead of stopping the view.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.failures: collections.deque[str] = collections.deque(maxlen=MAX_FAILURES)
        #: Run times and failures per slave id (which slave is slow, which one fails).
        self.slaves: dict[str, RunTimes] = collections.defaultdict(RunTimes)
        self.total: int | None = None
        self.problem: str | None = None
        self._offset = 0
        self._line = 0

    def poll(self) -> None:
        if self.problem is not None:
            return
        try:  # never a plain open(): a FIFO would hang the view, a device would feed it for ever
            fd = safe_files.open_checked(self.path)
        except UnsafeFileError as exc:
            if exc.errno != errno.ENOENT:  # not there yet: the master has not started
                self.problem = f"{self.path}: {exc.problem}"
            return
        try:
            with open(fd, "rb") as stream:
                stream.seek(self._offset)
                data = stream.read(ev.MAX_LINE)
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for raw in data[: end + 1].splitlines():
            self._line += 1
            try:
                event = ev.decode(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                self.problem = f"{self.path}:{self._line}: {exc}"
                return
            self._take(event)

    def _take(self, event: ev.Event) -> None:
        """What the view shows of one event: a slave's run times, a failure, the announced total."""
        if isinstance(event, ev.TasksFinished):
            self.slaves[event.slave].add(event)
        elif isinstance(event, ev.TaskFailed):
            self.failures.append(  # the task's words, made one line that cannot drive the terminal
                safe_text.one_line(
                    f"{time.strftime('%H:%M:%S', time.localtime(event.t))} {event.algorithm} on {event.slave}: "
                    f"{event.error}: {event.message}"
                )[:200]
            )
        elif isinstance(event, ev.MasterStart) and event.total is not None:
            self.total = event.total


#: What one look at the schedd gives: job counts by state, why idle jobs do not match, or why there are none.
CondorAnswer = tuple[dict[str, int] | None, str | None, str | None]


def condor_counter(member_id: str, clock: Callable[[], float] = time.monotonic) -> Callable[[], CondorAnswer]:
    """Ask the local schedd for the computation's jobs (imported lazily: the bindings are slow to load).

    Why idle jobs do not match costs a query of every slot in the pool: asked at most every
    ``ANALYSIS_INTERVAL`` seconds, and the last answer kept in between while jobs stay idle.
    """
    analysed_at, said = float("-inf"), None  # the last analysis: when, and what it said

    def ask() -> CondorAnswer:
        nonlocal analysed_at, said
        now = clock()
        analyse = now - analysed_at >= ANALYSIS_INTERVAL
        try:
            from mwpy.backends.htcondor import job_counts  # noqa: PLC0415 (the bindings: slow, only for Condor runs)

            counts, idle_why = job_counts(member_id, analyse=analyse)
        except (ImportError, RuntimeError) as exc:
            return None, None, f"no Condor job counts: {exc}"[:200]
        if analyse:
            analysed_at, said = now, idle_why
        return counts, said if counts["idle"] else None, None

    return ask


class Follower:
    """Samples a computation (resource file, event log, schedd) and renders it: :func:`watch` and ``mwpy local``.

    ``condor``: True asks the schedd every ``CONDOR_INTERVAL`` s, None asks
    once and keeps asking only if a schedd answered, False never asks.
    """

    def __init__(
        self,
        resource_path: str | os.PathLike[str],
        *,
        total: int | None = None,
        events: str | os.PathLike[str] | None = None,
        condor: bool | None = None,
        slave_limit: int | None = None,
        title: str = "mwpy status",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.resource_path = resource_path
        #: The view's title (``mwpy local`` adds the time it has run).
        self.title = title
        self.clock = clock
        self.condor = condor
        self.rate = Rate()
        self.tail = FailureTail(events) if events is not None else None
        self.extra = Extra(total=total, slave_limit=slave_limit)
        self.record: ResourceFile | None = None
        #: Why there is no record (the resource file's one-line problem), or None.
        self.problem: str | None = None
        self._total = total
        self._ask: Callable[[], CondorAnswer] | None = None
        self._condor_at = 0.0

    def sample(self) -> int | None:
        """Read everything once; the exit status when watching should end (0 finished, 1 unusable), else None."""
        now = self.clock()
        try:
            record = resource_file.read(self.resource_path)
        except InvalidResourceFileError as exc:  # its problem may quote the file: one safe line
            self.record, self.problem = None, safe_text.one_line(str(exc))
            return 1
        except ResourceFileError as exc:
            self.record, self.problem = None, safe_text.one_line(str(exc))
            return None
        self.record, self.problem = record, None
        self.rate.add(record.timestamp, record.tasks_done)
        extra, tail = self.extra, self.tail
        announced = record.tasks_total  # the master's own word; --total (given here) wins over it
        if tail is not None:
            tail.poll()
            problem = [f"event log: {safe_text.one_line(tail.problem)}"] if tail.problem else []
            extra.failures = list(tail.failures) + problem
            extra.slaves = tail.slaves
            if announced is None:
                announced = tail.total
        if self._total is None and announced is not None:
            extra.total = announced
        if extra.slave_limit is None:
            extra.overseer_cap = overseer_state.max_jobs(self.resource_path)
        if self.condor is not False and self._ask is None:
            self._ask = condor_counter(record.member_id)
        if self._ask is not None and now >= self._condor_at:
            extra.condor, extra.condor_idle, extra.condor_problem = self._ask()
            extra.condor_at = now
            self._condor_at = now + CONDOR_INTERVAL
            if extra.condor is None and self.condor is None:  # auto, and no schedd here: stop asking, say nothing
                self._condor_at = float("inf")
                extra.condor_problem = None
        return 0 if record.finished else None

    def line(self) -> str:
        """The plain one-line view of the last sample."""
        return plain(self.record, self.extra, self.rate.per_second(), self.clock(), self.problem)

    def view(self) -> RenderableType:
        """The terminal view of the last sample."""
        return render(self.record, self.extra, self.rate.per_second(), self.clock(), self.problem, title=self.title)


def watch(
    resource_path: str | os.PathLike[str],
    *,
    interval: float = 1.0,
    total: int | None = None,
    events: str | os.PathLike[str] | None = None,
    condor: bool | None = None,
    console: Console | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Show the computation until it finishes (0); 1 for an unusable resource file; 130 on Ctrl-C."""
    console = console or Console()
    follower = Follower(resource_path, total=total, events=events, condor=condor, clock=clock)
    status: int | None = None
    try:
        if console.is_terminal:
            with Live(console=console, auto_refresh=False, transient=False) as live:
                while status is None:
                    status = follower.sample()
                    live.update(follower.view(), refresh=True)
                    if status is None:
                        time.sleep(interval)
        else:
            last_line = ""
            while status is None:
                status = follower.sample()
                line = follower.line()
                if line != last_line:
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
                    last_line = line
                if status is None:
                    time.sleep(interval)
    except KeyboardInterrupt:
        return INTERRUPTED
    if status == 1:
        print(f"mwpy status: error: {follower.problem}", file=sys.stderr)
    return status

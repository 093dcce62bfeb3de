"""A plain HTCondor submit description, read with HTCondor's own parser, as one :class:`JobSpec` per job.

``htcondor2.Submit`` parses the file (each ``queue`` statement with the lines
before it: :mod:`mwpy.jobs.statements`), gives the statement's item data
(``queue N``, ``in``, ``from``, ``matching``, slices) and expands the macros;
``classad2`` evaluates a queue count that is an expression. This module
decides, per command, whether mwpy honours it (:mod:`mwpy.jobs.commands`),
and turns each queued job into a record a slave can run. Jobs are made lazily
(:meth:`SubmitDescription.jobs`), so a file that queues 100,000 jobs is never
100,000 records in memory.

Paths follow ``condor_submit``: ``executable`` and ``initialdir`` are relative
to the folder the command runs in; ``input``, ``output``, ``error``, ``log``
and ``transfer_input_files`` are relative to the job's ``initialdir``.

A command mwpy cannot honour is refused (:class:`SubmitError`, one line naming
it) before any job runs; a name that is no command and that no value uses is
warned about (:meth:`SubmitDescription.warnings`), as ``condor_submit`` warns.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from mwpy.errors import SubmitError
from mwpy.jobs import bindings, commands, jobad, statements
from mwpy.jobs.arguments import parse_arguments, parse_environment


@attrs.frozen
class InputFile:
    """One entry of a job's input: where it is on the submit side, and its name in the scratch folder."""

    source: str  # absolute path on the submit side (a file or a folder)
    name: str  # path relative to the scratch folder (a folder's files go below it)
    #: transfer_common_input: shared by the jobs of an execute node, so HTCondor 25 hands it over read-only
    common: bool = False


@attrs.frozen
class JobSpec:
    """One queued job, fully expanded: what a slave needs to run it as Condor would."""

    cluster: int
    process: int
    executable: str  # absolute path (transferred) or the path on the execute side (transfer_executable=false)
    transfer_executable: bool
    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    initialdir: str  # absolute
    # stdin/stdout/stderr: absolute on the submit side when transferred, else the path as the execute side sees it
    stdin: str | None
    stdout: str | None
    stderr: str | None
    inputs: tuple[InputFile, ...]
    transfer_outputs: tuple[str, ...] | None  # None: every new or changed top-level file
    output_remaps: tuple[tuple[str, str], ...]  # output name -> absolute path (transfer_output_remaps)
    transfer: bool  # should_transfer_files is YES or IF_NEEDED: the job may run in a scratch folder
    outputs_on_success_only: bool  # when_to_transfer_output = ON_SUCCESS
    log: str | None = None  # the user log (absolute), if any
    ad: jobad.JobAd = jobad.DEFAULT_AD  # the job-ad attributes policy and placement are made of
    core_size: int | None = None  # bytes; None: the slave's own limit
    skip_filechecks: bool = False  # missing inputs hold the job when its files are sent, not stop the run
    #: transfer_input/output/error (stdin, stdout, stderr): False uses the path on the execute side
    transfer_streams: tuple[bool, bool, bool] = (True, True, True)
    #: should_transfer_files = IF_NEEDED (Condor's default): a slave that shares the submit side's file system
    #: runs the job in initialdir, as Condor's starter does on a machine of the same FileSystemDomain
    if_needed: bool = False
    #: ``arguments`` as written when it holds ``$$([expression])``: expanded and split again for each run
    arguments_text: str = ""
    #: each run's arguments or environment hold ``$$([expression])`` of the job's ad
    expands: bool = False
    #: the exit code that means success: ``success_exit_code`` (``JobSuccessExitCode``), else 0
    success_code: int = 0

    @property
    def job_id(self) -> str:
        """``cluster.process``, as Condor names a job."""
        return f"{self.cluster}.{self.process}"

    def submit_side_files(self) -> Iterator[tuple[str, str]]:
        """``(what, path)`` of every file the job reads from the submit side (what must exist before it runs)."""
        if self.transfer and self.transfer_executable:
            yield "executable", self.executable
        if self.stdin is not None and self.transfer_streams[0]:
            yield "input", self.stdin
        for item in self.inputs:
            yield "input file", item.source


@attrs.frozen
class _Segment:
    """One ``queue`` statement, read by the bindings: its commands, its count and its items."""

    submit: object  # htcondor2.Submit (untyped bindings)
    count: int
    items: list[dict[str, str]] | None
    spellings: Mapping[str, tuple[str, ...]]  # command name -> the spellings this statement defines, in order

    @property
    def total(self) -> int:
        return self.count * (1 if self.items is None else len(self.items))


#: Values that turn a boolean command on, as condor_submit reads them.
_TRUE = frozenset({"true", "yes", "t", "y", "1"})
_AUTOMATIC = frozenset({"cluster", "clusterid", "process", "procid", "step", "itemindex", "row", "item", "node"})


class SubmitDescription:
    """A parsed submit file: its commands, its queue statements, and its jobs on demand."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cluster: int = 1,
        base: str | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """Read ``path``; ``base`` is the folder relative paths start from (``condor_submit``'s current folder);
        ``environment`` is what ``getenv`` copies from (default: this process's)."""
        self.path = Path(path)
        self.cluster = cluster
        self.base = os.path.realpath(base or os.getcwd())  # a str: pathlib interns every part, per job
        self._environment = dict(os.environ if environment is None else environment)
        try:
            self.text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SubmitError(f"{path}: cannot read: {exc}") from None
        self._segments = [self._read(statement) for statement in self._statements()]
        self._check_trailing_lines()
        self.materialize_limits()  # a wrong value stops the run before any job
        self._placements: set[jobad.Placement] | None = None
        self._check_commands()
        self.total = sum(segment.total for segment in self._segments)
        next(self.jobs(), None)  # the first job's values, checked now: most mistakes show there

    # ------------------------------------------------------------------ the file

    def _statements(self) -> list[statements.QueueStatement]:
        found = statements.queue_statements(self.text)
        if not found:  # condor_submit queues nothing without a queue statement
            raise SubmitError(f"{self.path}: no queue statement: no job to run")
        return found

    def _read(self, statement: statements.QueueStatement) -> _Segment:
        """One queue statement through ``htcondor2.Submit``: its commands, its count, its item data."""
        htcondor2 = bindings.htcondor()
        with contextlib.chdir(self.base):  # `include`, `from FILE`, `matching` read from condor_submit's folder
            try:
                submit = htcondor2.Submit(statement.source)
            except Exception:  # the bindings say only "parse_up_to_q_line() failed": name the line ourselves
                raise SubmitError(self._syntax_error()) from None
            qargs = submit.getQArgs()
            try:
                items = submit.itemdata()
            except Exception as exc:
                raise SubmitError(f"{self.path}, line {statement.number}: queue {qargs.strip()}: {exc}") from None
        if items is None and _KEYWORD.search(qargs) is not None:
            items = []  # the bindings' answer for an empty item list (``from`` an empty file, ``in ()``)
        rows = None if items is None else _sliced(qargs, [_as_dict(item) for item in items])
        variables = tuple(rows[0]) if rows else ()
        # an empty item list queues nothing whatever its count (and its variables, which no row names, are unknown)
        count = 1 if rows == [] else _queue_count(submit, qargs, variables, f"{self.path}, line {statement.number}")
        return _Segment(submit, count, rows, _spellings([*submit.keys(), *variables]))

    def _check_trailing_lines(self) -> None:
        """The lines after the last queue statement, which the bindings never read: condor_submit parses them."""
        wrong = next(
            (line for line in statements.after_last_queue(self.text) if not statements.is_statement(line)), None
        )
        if wrong is not None:
            raise SubmitError(self._not_a_command(wrong))

    def _syntax_error(self) -> str:
        line = statements.syntax_error(self.text)
        if line is not None:
            return self._not_a_command(line)
        return self._include_error() or f"{self.path}: HTCondor cannot parse this submit file"

    def _include_error(self) -> str | None:
        """The first ``include`` whose file or command is not there (condor_submit names its line; the bindings
        do not). A command without a ``/`` is looked for on PATH, as condor_submit runs it."""
        for include in statements.includes(self.text):
            where = f"{self.path}, line {include.line.number}: {include.line.text.strip()!r}"
            words = include.target.split()
            if include.command and words:
                program = words[0]
                found = shutil.which(program) if "/" not in program else shutil.which(os.path.join(self.base, program))
                if found is None:
                    hint = f" (a program beside the submit file is ./{program})" if "/" not in program else ""
                    return f"{where}: no such command: {program}{hint}"
            elif (
                not include.command
                and not include.optional
                and not os.path.exists(os.path.join(self.base, include.target))
            ):
                return f"{where}: no such file: {include.target}"
        return None

    def _not_a_command(self, line: statements.Line) -> str:
        return f"{self.path}, line {line.number}: {line.text.strip()!r} is not a submit command (expected NAME = VALUE)"

    def _check_commands(self) -> None:
        """Refuse by name before any job (the values are checked per job: they may use queue variables).

        The names are those HTCondor's parser read for some queue statement: an included file's commands count,
        a branch of ``if``/``else`` that is not taken does not, as for condor_submit."""
        names = {name: None for segment in self._segments for name in segment.submit}  # type: ignore[attr-defined]
        refused: dict[str, list[str]] = {}  # why -> the commands refused for it, all named at once
        for name in names:
            command = commands.lookup(name)
            if command is not None and not command.honoured:
                refused.setdefault(command.how, []).append(name)
        if refused:
            named = ", ".join(name for group in refused.values() for name in group)
            raise SubmitError(f"{named}: not supported by mwpy jobs: {'; '.join(refused)}")

    def warnings(self) -> list[str]:
        """condor_submit's warnings: a line no job uses (a misspelt command, a macro nothing refers to)."""
        used = statements.used_names(self.text)
        for segment in self._segments:
            used |= {name.lower() for name in (segment.items[0] if segment.items else {})}
        found = []
        late = statements.after_last_queue(self.text)
        after = {line.number for line in late}
        for line, name, value in statements.assignments(self.text):
            unknown = commands.lookup(name) is None and name.lower() not in used | _AUTOMATIC
            if unknown and line.number not in after:
                found.append(f"the line '{name} = {value.strip()}' was unused by mwpy jobs. Is it a typo?")
        if len(self._segments) > 1:
            found.append(
                f"{len(self._segments)} queue statements: condor_submit of HTCondor 23 runs them as one cluster, "
                "as mwpy jobs does; HTCondor 24 and later refuse them"
            )
        for line in late:
            found.append(
                f"line {line.number}: {line.text.strip()!r} comes after the last queue statement: no job uses it"
            )
        return found

    def materialize_limits(self) -> tuple[int | None, int | None]:
        """``max_materialize`` and ``max_idle`` (None when unset): how many jobs may exist, and wait, at once."""
        maker = _JobMaker(self, self._segments[0])
        found = []
        for command in ("max_materialize", "max_idle"):
            value = maker.value(command).strip()
            if value and not (value.isdigit() and int(value) > 0):
                raise SubmitError(f"{command} = {value}: expected a positive integer")
            found.append(int(value) if value else None)
        return found[0], found[1]

    def placements(self) -> set[jobad.Placement]:
        """The different placements the jobs ask for (seen by :meth:`check_inputs`, else every job expanded)."""
        if self._placements is None:
            self._placements = {spec.ad.placement for spec in self.jobs()}
        return self._placements

    # ------------------------------------------------------------------ the jobs

    def jobs(self) -> Iterator[JobSpec]:
        """Every queued job, in process order, expanded one at a time."""
        process = 0
        for segment in self._segments:
            job = _JobMaker(self, segment)
            for index, item in enumerate([{}] if segment.items is None else segment.items):
                for step in range(segment.count):
                    yield job.make(process, step, index, item)
                    process += 1

    def check_inputs(self) -> None:
        """What must hold before anything runs: every file any job reads exists, every folder a job writes into.

        One line names the first problem. Priority must be the same for every job (mwpy runs one cluster).
        """
        seen: set[str] = set()
        priorities: set[str] = set()
        placements: set[jobad.Placement] = set()
        for spec in self.jobs():
            placements.add(spec.ad.placement)
            if not os.path.isdir(spec.initialdir):
                raise SubmitError(f"job {spec.job_id}: initialdir {spec.initialdir} does not exist")
            priorities.add(spec.ad.get("JobPrio", "0"))
            if len(priorities) > 1:
                raise SubmitError(f"job {spec.job_id}: priority differs between jobs; mwpy runs them in queue order")
            for what, path in spec.submit_side_files():
                if path in seen:
                    continue
                _check_input(spec, what, path)
                if len(seen) < 100_000:  # the shared files come first; private ones need not be remembered
                    seen.add(path)
        self._placements = placements


def _check_input(spec: JobSpec, what: str, path: str) -> None:
    """A file a job reads exists (unless ``skip_filechecks``) and is a file or a folder: a FIFO or a device
    (``/dev/zero``) would never end being read, so it stops the run before any job."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        if spec.skip_filechecks:
            return  # the job is held when its inputs are sent, as Condor holds it
        raise SubmitError(f"job {spec.job_id}: {what} {path} does not exist") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
        )
        raise SubmitError(f"job {spec.job_id}: {what} {path} is not a regular file ({kind}): it cannot be sent")


class _JobMaker:
    """Expands one queue statement's commands into :class:`JobSpec` records, job after job."""

    def __init__(self, description: SubmitDescription, segment: _Segment) -> None:
        self.description = description
        self.segment = segment
        self.sub = segment.submit
        self.cluster = description.cluster
        self.base = description.base
        self.environment = description._environment

    def value(self, command: str) -> str:
        """The expanded value of ``command`` (any of its spellings this statement defines), or ``""``."""
        for spelling in self.segment.spellings.get(command, ()):
            try:
                expanded = str(self.sub.expand(spelling))  # type: ignore[attr-defined]
            except KeyError:  # the bindings' way of saying "empty"
                continue
            except Exception as exc:
                raise SubmitError(f"{spelling}: cannot expand: {exc}") from None
            if expanded.strip():
                return expanded
        return ""

    def flag(self, command: str, default: bool) -> bool:
        value = self.value(command).strip().lower()
        return default if not value else value in _TRUE

    def make(self, process: int, step: int, index: int, item: dict[str, str]) -> JobSpec:
        sub = self.sub
        for name, number in (
            ("Cluster", self.cluster),
            ("ClusterId", self.cluster),
            ("Process", process),
            ("ProcId", process),
            ("Step", step),
            ("ItemIndex", index),
            ("Row", index),
        ):
            sub[name] = str(number)  # type: ignore[index]
        for variable, setting in item.items():
            sub[variable] = setting  # type: ignore[index]
        where = f"job {self.cluster}.{process}"
        self._check_values(where)
        initialdir = os.path.normpath(os.path.join(self.base, self.value("initialdir").strip()))
        given = self.value("should_transfer_files").strip().upper() or "IF_NEEDED"
        should = _SHOULD_TRANSFER.get(given)
        if should is None:
            raise SubmitError(f"should_transfer_files = {given}: expected YES, NO or IF_NEEDED")
        transfer = should != "NO"
        given = self.value("when_to_transfer_output").strip().upper() or ("ON_EXIT" if transfer else "NONE")
        when = _WHEN_TO_TRANSFER.get(given)
        if when is None or (when == "NONE") == transfer:  # NONE goes with NO only, as condor_submit checks
            expected = "ON_EXIT, ON_EXIT_OR_EVICT or ON_SUCCESS" if transfer else "NONE with should_transfer_files = NO"
            raise SubmitError(f"when_to_transfer_output = {given}: expected {expected}")
        transfer_executable = self.flag("transfer_executable", True)
        streams = (
            self.flag("transfer_input", True) or not transfer,
            self.flag("transfer_output", True) or not transfer,
            self.flag("transfer_error", True) or not transfer,
        )
        ad = jobad.JobAd.from_commands(self.value, self.segment.spellings, where)
        arguments = self.value("arguments") or self.value("arguments2")
        environment = self.value("environment") or self.value("environment2")
        if "$$(" in arguments + environment:
            jobad.check_job_expressions(arguments + " " + environment, ad, where)
        executable = self.value("executable").strip()
        if transfer_executable:  # on the submit side, from condor_submit's folder; else as the execute side sees it
            executable = os.path.join(self.base, executable)
        return JobSpec(
            cluster=self.cluster,
            process=process,
            executable=executable,
            transfer_executable=transfer_executable,
            arguments=parse_arguments(arguments, where),
            arguments_text=arguments if "$$(" in arguments else "",
            expands="$$([" in arguments + environment,
            success_code=int(ad.get("JobSuccessExitCode", "0")),
            environment=self._environment(where),
            initialdir=initialdir,
            stdin=self._stream(initialdir, "input", streams[0]),
            stdout=self._stream(initialdir, "output", streams[1]),
            stderr=self._stream(initialdir, "error", streams[2]),
            transfer_streams=streams,
            inputs=self._inputs(initialdir) if transfer else (),
            transfer_outputs=self._output_names(),
            output_remaps=_remaps(initialdir, self.value("transfer_output_remaps"), where),
            transfer=transfer,
            outputs_on_success_only=when == "ON_SUCCESS",
            log=self._path_in(initialdir, "log"),
            ad=ad,
            core_size=_core_size(self.value("core_size"), where),
            skip_filechecks=self.flag("skip_filechecks", False),
            if_needed=should == "IF_NEEDED",
        )

    def _check_values(self, where: str) -> None:
        """The commands whose *values* mwpy honours only in part, as this job expands them."""
        universe = self.value("universe").strip().lower() or "vanilla"
        if universe != "vanilla":
            raise SubmitError(f"universe = {universe}: mwpy jobs runs vanilla-universe jobs only")
        if not self.value("executable").strip():
            raise SubmitError(f"{where}: no executable")
        for key in ("transfer_input_files", "transfer_output_files", "transfer_common_input"):
            if "://" in self.value(key):
                raise SubmitError(f"{key}: URLs are not supported by mwpy jobs: only files and folders")
        for command, allowed in _ONLY_VALUES.items():
            value = self.value(command).strip().lower()
            if value and value not in allowed:
                raise SubmitError(f"{command} = {value}: mwpy jobs honours only {' or '.join(sorted(allowed))}")

    def _environment(self, where: str) -> tuple[tuple[str, str], ...]:
        explicit = parse_environment(self.value("environment") or self.value("environment2"), where)
        copied = _getenv(self.value("getenv"), self.environment)
        if not copied:
            return explicit
        named = {name for name, _ in explicit}
        return tuple((name, value) for name, value in copied if name not in named) + explicit

    def _stream(self, initialdir: str, command: str, transferred: bool) -> str | None:
        """A stream's path: below initialdir (transferred, or on a shared file system), else as given."""
        value = self.value(command).strip()
        if not value or value == "/dev/null":
            return None
        return os.path.join(initialdir, value) if transferred else value

    def _path_in(self, initialdir: str, command: str) -> str | None:
        value = self.value(command).strip()
        return os.path.join(initialdir, value) if value else None

    def _inputs(self, initialdir: str) -> tuple[InputFile, ...]:
        keep_paths = self.flag("preserve_relative_paths", False)
        common = [
            _input(initialdir, entry, keep_paths, common=True)
            for entry in _split_list(self.value("transfer_common_input"))
        ]
        own = [_input(initialdir, entry, keep_paths) for entry in _split_list(self.value("transfer_input_files"))]
        return (*common, *own)

    def _output_names(self) -> tuple[str, ...] | None:
        """``transfer_output_files`` as condor_submit reads it: unset or empty, every new or changed top-level
        file (None); ``""``, none (the manual's way of saying so); else the names."""
        value = self.value("transfer_output_files").strip()
        if not value:
            return None
        return () if value == '""' else tuple(_split_list(value))


#: should_transfer_files and when_to_transfer_output as condor_submit reads them (enum_utils.cpp's tables).
_SHOULD_TRANSFER = {
    "YES": "YES",
    "TRUE": "YES",
    "ALWAYS": "YES",
    "NO": "NO",
    "FALSE": "NO",
    "NEVER": "NO",
    "IF_NEEDED": "IF_NEEDED",
    "AUTO": "IF_NEEDED",
}
_WHEN_TO_TRANSFER = {
    "ON_EXIT_OR_EVICT": "ON_EXIT_OR_EVICT",
    "ALWAYS": "ON_EXIT_OR_EVICT",
    "ON_EXIT": "ON_EXIT",
    "ONEXIT": "ON_EXIT",
    "NONE": "NONE",
    "NULL": "NONE",
    "ON_SUCCESS": "ON_SUCCESS",
    "ONSUCCESS": "ON_SUCCESS",
}

#: Commands honoured for some values only (docs/jobs.md says which).
_ONLY_VALUES: dict[str, frozenset[str]] = {
    "erase_output_and_error_on_restart": frozenset({"true", "yes", "1"}),
    "stream_input": frozenset({"false", "no", "0"}),
    "stream_output": frozenset({"false", "no", "0"}),
    "stream_error": frozenset({"false", "no", "0"}),
    "log_xml": frozenset({"false", "no", "0"}),
    "notification": frozenset({"never"}),
}


def _spellings(keys: list[str]) -> dict[str, tuple[str, ...]]:
    """command name -> the spellings of it the statement defines (its own name first, as condor_submit prefers)."""
    found: dict[str, list[str]] = {}
    for key in keys:
        command = commands.lookup(key)
        name = command.name if command is not None and "<" not in command.name else key.lower()
        found.setdefault(name, [])
        if key not in found[name]:
            found[name].append(key)
    ordered = {}
    for name, spelt in found.items():
        spelt.sort(key=lambda key, name=name: key.lower() != name)  # type: ignore[misc]
        ordered[name] = tuple(spelt)
    return ordered


def _as_dict(item: object) -> dict[str, str]:
    """One row of item data: ``queue X in (...)`` gives strings (``Item``), the other forms give dicts."""
    if isinstance(item, dict):
        return {str(k): str(v) for k, v in item.items()}
    return {"Item": str(item)}


_SLICE = re.compile(r"\b(?:in|from|matching)\s+(?:(?:files|dirs|any)\s+)*\[([-\d\s:]*)\]", re.IGNORECASE)


def _sliced(qargs: str, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """``queue ... from [1:] FILE``: the bindings give every item; condor_submit keeps the slice's (Python's rules)."""
    found = _SLICE.search(qargs)
    if found is None:
        return rows
    parts = [int(part) if part.strip() else None for part in found.group(1).split(":")]
    return (
        rows[slice(*parts[:3])] if len(parts) > 1 else rows[slice(parts[0], None if parts[0] is None else parts[0] + 1)]
    )


_KEYWORD = re.compile(r"(?:^|\s)(in|from|matching)(?=\s|\(|$)", re.IGNORECASE)


def _queue_count(submit: object, qargs: str, variables: tuple[str, ...], where: str) -> int:
    """The count of ``queue COUNT [vars] [in|from|matching ...]``: an integer expression, as condor_submit reads it.

    The count is what stands before the variable list: macros are expanded, then HTCondor's ClassAd
    library evaluates it (``queue $(N)+1`` queues N + 1 jobs).
    """
    import classad2  # noqa: PLC0415

    htcondor2 = bindings.htcondor()

    text = qargs.strip()
    keyword = _KEYWORD.search(text)
    if keyword is not None:
        text = text[: keyword.start()].rstrip()
        for variable in reversed(variables):  # the variable list ends the part before the keyword
            text = re.sub(rf"[\s,]*\b{re.escape(variable)}\s*,?\s*$", "", text, flags=re.IGNORECASE)
    if not text:
        return 1
    probe = htcondor2.Submit(dict(submit))  # type: ignore[call-overload]
    probe["MWPY_QUEUE_COUNT"] = text
    expanded = str(probe.expand("MWPY_QUEUE_COUNT")).strip()
    try:
        value = classad2.ExprTree(expanded).eval()
    except Exception:
        value = None
    if isinstance(value, bool | classad2.Value) or not isinstance(value, int) or not 0 <= value < 2**31 - 1:
        raise SubmitError(f"{where}: queue count {text!r} ({expanded!r}) is not a non-negative integer")
    return value


def _getenv(value: str, environment: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``getenv`` as condor_submit reads it: ``true`` (``*``) copies every variable; a list (commas, semicolons
    or spaces) of names and ``*`` patterns, matched without regard to case, copies those, and a ``!`` member
    keeps a variable out (``getenv = !PATH`` copies every variable but PATH)."""
    value = value.strip()
    if not value or value.lower() in ("false", "no", "0", "f", "n"):
        return ()
    members = ["*"] if value.lower() in _TRUE else re.split(r"[\s,;]+", value)
    wanted = [_env_pattern(member) for member in members if member and not member.startswith("!")]
    refused = [_env_pattern(member[1:]) for member in members if member.startswith("!") and member[1:]]
    if not wanted:  # only refusals: everything else
        wanted = [_env_pattern("*")]
    return tuple(
        sorted(
            (name, setting)
            for name, setting in environment.items()
            if any(p.fullmatch(name) for p in wanted) and not any(p.fullmatch(name) for p in refused)
        )
    )


def _env_pattern(member: str) -> re.Pattern[str]:
    """A ``getenv`` member: ``*`` matches anything, nothing else is special; case does not matter."""
    return re.compile(".*".join(map(re.escape, member.split("*"))), re.IGNORECASE)


def _input(initialdir: str, entry: str, keep_paths: bool, *, common: bool = False) -> InputFile:
    """A file lands under its base name (or its relative path with ``preserve_relative_paths``), ``dir`` as
    ``dir/...``, ``dir/`` as its contents."""
    source = os.path.join(initialdir, entry)
    if entry.endswith("/"):
        return InputFile(source, "", common)
    normal = os.path.normpath(entry)
    keep = keep_paths and not os.path.isabs(entry) and not normal.startswith("..")
    return InputFile(source, normal if keep else os.path.basename(normal), common)


def _remaps(initialdir: str, value: str, where: str) -> tuple[tuple[str, str], ...]:
    """``transfer_output_remaps = "name = path; name2 = path2"``: where each named output goes instead."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    pairs = []
    for part in value.split(";"):
        if not part.strip():
            continue
        name, sep, path = part.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SubmitError(f"transfer_output_remaps ({where}): {part.strip()!r} is not NAME = PATH")
        pairs.append((name.strip(), os.path.join(initialdir, path.strip())))
    return tuple(pairs)


def _core_size(value: str, where: str) -> int | None:
    value = value.strip()
    if not value:
        return None
    if not value.isdigit():
        raise SubmitError(f"core_size ({where}): {value!r} is not a number of bytes")
    return int(value)


def _split_list(value: str) -> list[str]:
    return [part.strip() for part in value.replace("\n", ",").split(",") if part.strip()]

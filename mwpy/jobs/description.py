"""A plain HTCondor submit description, read with HTCondor's own parser, as one :class:`JobSpec` per job.

``htcondor2.Submit`` parses the file, gives the queue statement's item data
(``queue N``, ``in (...)``, ``from FILE``, ``matching ...``) and expands the
macros; this module only decides, per command, whether mwpy honours it, and
turns each queued job into a record the slave can run. Jobs are generated
lazily (:meth:`SubmitDescription.jobs`), so a file that queues 100,000 jobs
is never 100,000 records in memory.

Paths follow ``condor_submit``: ``executable`` and ``initialdir`` are relative
to the folder the command runs in; ``input``, ``output``, ``error`` and
``transfer_input_files`` are relative to the job's ``initialdir``.

A command mwpy cannot honour is refused (:class:`SubmitError`, one line naming
it); a command that only concerns the schedd's bookkeeping is accepted and
listed by :meth:`SubmitDescription.notes`, so nothing is silently ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from mwpy.errors import ConfigurationError

#: Commands whose effect mwpy reproduces (docs/jobs.md has the table).
HONOURED = frozenset(
    {
        "universe",
        "executable",
        "arguments",
        "args",
        "environment",
        "env",
        "input",
        "output",
        "error",
        "initialdir",
        "initial_dir",
        "iwd",
        "transfer_input_files",
        "transfer_output_files",
        "transfer_executable",
        "should_transfer_files",
        "when_to_transfer_output",
        "getenv",
    }
)

#: Commands that only concern the schedd's own bookkeeping or the slot size: accepted, with a note.
NOTED = {
    "log": "no Condor user log is written; the run summary (--summary) records every job",
    "log_xml": "no Condor user log is written; the run summary (--summary) records every job",
    "notification": "no e-mail is sent",
    "notify_user": "no e-mail is sent",
    "request_cpus": "each slave runs one job at a time in its own slot (slaves.sub sets the slot's size)",
    "request_memory": "each slave runs one job at a time in its own slot (slaves.sub sets the slot's size)",
    "request_disk": "each slave runs one job at a time in its own slot (slaves.sub sets the slot's size)",
    "stream_output": "output comes back when the job ends",
    "stream_error": "error comes back when the job ends",
    "copy_to_spool": "the executable is sent to each slave once, by content hash",
    "batch_name": "shown by condor_q only",
    "job_batch_name": "shown by condor_q only",
    "accounting_group": "the slaves' jobs carry the accounting",
    "accounting_group_user": "the slaves' jobs carry the accounting",
}

#: Commands mwpy cannot honour, and why; refused rather than ignored.
REFUSED = {
    "requirements": "per-job requirements cannot be enforced on reused slaves (put them in slaves.sub)",
    "rank": "per-job rank cannot be honoured on reused slaves (put it in slaves.sub)",
    "on_exit_remove": "jobs run once; a failed job is reported, not re-queued",
    "on_exit_hold": "mwpy has no hold state",
    "on_exit_hold_reason": "mwpy has no hold state",
    "periodic_remove": "mwpy does not evaluate periodic expressions",
    "periodic_hold": "mwpy does not evaluate periodic expressions",
    "periodic_release": "mwpy does not evaluate periodic expressions",
    "max_retries": "use --mw-task-attempts for jobs that could not start",
    "retry_until": "use --mw-task-attempts for jobs that could not start",
    "success_exit_code": "a job's exit code is reported as it is",
    "transfer_output_remaps": "outputs come back under their own names",
    "output_destination": "outputs come back to initialdir",
    "docker_image": "mwpy runs vanilla-universe jobs only",
    "container_image": "mwpy runs vanilla-universe jobs only",
    "request_gpus": "GPUs cannot be assigned per job on reused slaves",
    "hold": "mwpy has no hold state",
    "deferral_time": "jobs start as soon as a slave is free",
    "cron_minute": "jobs start as soon as a slave is free",
    "allowed_execute_duration": "use --mw-task-timeout",
    "allowed_job_duration": "use --mw-task-timeout",
    "job_max_vacate_time": "mwpy does not vacate jobs",
    "kill_sig": "mwpy does not vacate jobs",
    "transfer_plugins": "inputs move through mwpy's file service only",
    "encrypt_input_files": "inputs move through mwpy's file service only",
    "encrypt_output_files": "inputs move through mwpy's file service only",
    "run_as_owner": "jobs run as the slave's user",
    "load_profile": "jobs run as the slave's user",
    "coresize": "no core-file limit is set",
    "nice_user": "the slaves' jobs carry the priority",
    "priority": "jobs run in queue order",
    "want_io_proxy": "no Condor I/O proxy on mwpy slaves",
    "+wantiopro": "no Condor I/O proxy on mwpy slaves",
}

_QUEUE_LINE = re.compile(r"^\s*queue(\s|$)", re.IGNORECASE)


class SubmitError(ConfigurationError):
    """The submit description cannot be run by mwpy: a refused command, a bad value, a missing input file."""


@attrs.frozen
class InputFile:
    """One entry of a job's input: where it is on the submit side, and its name in the scratch folder."""

    source: str  # absolute path on the submit side (a file or a folder)
    name: str  # path relative to the scratch folder (a folder's files go below it)


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
    stdin: str | None  # absolute path on the submit side
    stdout: str | None  # absolute path in initialdir's tree
    stderr: str | None
    inputs: tuple[InputFile, ...]
    transfer_outputs: tuple[str, ...] | None  # None: every new or changed top-level file
    transfer: bool  # should_transfer_files is not NO: the job runs in a scratch folder
    outputs_on_success_only: bool  # when_to_transfer_output = ON_SUCCESS

    @property
    def job_id(self) -> str:
        """``cluster.process``, as Condor names a job."""
        return f"{self.cluster}.{self.process}"

    def submit_side_files(self) -> Iterator[str]:
        """Every file the job reads from the submit side (what must exist before anything runs)."""
        if self.transfer_executable:
            yield self.executable
        if self.stdin is not None:
            yield self.stdin
        for item in self.inputs:
            yield item.source


class SubmitDescription:
    """A parsed submit file: its accepted commands, its queue statement, and its jobs on demand."""

    def __init__(self, path: str | os.PathLike[str], *, cluster: int = 1, base: str | None = None) -> None:
        """Read ``path``; ``base`` is the folder relative paths start from (``condor_submit``'s current folder)."""
        import htcondor2  # noqa: PLC0415 (slow to import; only this command needs it)

        self.path = Path(path)
        self.cluster = cluster
        self.base = os.path.realpath(base or os.getcwd())  # a str: pathlib interns every part, per job
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SubmitError(f"{path}: cannot read: {exc}") from None
        _check_one_queue_statement(text, str(path))
        try:
            self._submit = htcondor2.Submit(text)
        except Exception as exc:  # the bindings raise plain ValueError/RuntimeError with Condor's message
            raise SubmitError(f"{path}: {exc}") from None
        self._keys = {key.lower(): key for key in self._submit}
        self._check_commands()
        self.count = self._queue_count()
        old = os.getcwd()
        os.chdir(self.base)  # `from FILE` and `matching` read relative to condor_submit's folder
        try:
            items = self._submit.itemdata()
        except Exception as exc:
            raise SubmitError(f"{path}: queue {self._submit.getQArgs()}: {exc}") from None
        finally:
            os.chdir(old)
        # The bindings hand the item data over as one list; it holds short strings, not job records.
        self._items: list[dict[str, str]] | None = None if items is None else [_as_dict(i) for i in items]
        next(self.jobs(), None)  # the first job's values, checked now: most mistakes show there

    def notes(self) -> list[str]:
        """One line per accepted command that has no effect under mwpy, saying why."""
        return [f"{self._keys[key]}: {why}" for key, why in NOTED.items() if key in self._keys]

    @property
    def total(self) -> int:
        """How many jobs the queue statement queues."""
        return self.count * (1 if self._items is None else len(self._items))

    def jobs(self) -> Iterator[JobSpec]:
        """Every queued job, in process order, expanded one at a time."""
        items: list[dict[str, str]] = [{}] if self._items is None else self._items
        process = 0
        for index, item in enumerate(items):
            for step in range(self.count):
                yield self._job(process, step, index, item)
                process += 1

    def check_inputs(self) -> None:
        """Every file every job reads must exist before anything runs: one line names the first missing one."""
        seen: set[str] = set()
        for spec in self.jobs():
            if not os.path.isdir(spec.initialdir):
                raise SubmitError(f"job {spec.job_id}: initialdir {spec.initialdir} does not exist")
            for path in spec.submit_side_files():
                if path in seen:
                    continue
                if not os.path.exists(path):
                    raise SubmitError(f"job {spec.job_id}: input file {path} does not exist")
                if len(seen) < 100_000:  # the shared files come first; private ones need not be remembered
                    seen.add(path)

    # ------------------------------------------------------------------ reading the commands

    def _check_commands(self) -> None:
        """Refuse by name, before any job: the values are checked per job (they may use queue variables)."""
        for key, original in self._keys.items():
            if key in REFUSED:
                raise SubmitError(f"{original}: not supported by mwpy jobs: {REFUSED[key]}")
        if "executable" not in self._keys:
            raise SubmitError(f"{self.path}: no executable")

    def _check_values(self, where: str) -> None:
        """The commands whose *values* mwpy cannot honour, as this job expands them."""
        universe = self._expand("universe").strip().lower() or "vanilla"
        if universe != "vanilla":
            raise SubmitError(f"universe = {universe}: mwpy jobs runs vanilla-universe jobs only")
        if not self._expand("executable").strip():
            raise SubmitError(f"{where}: executable is empty")
        if self._expand("getenv").strip().lower() not in ("", "false", "no", "0"):
            raise SubmitError("getenv: not supported by mwpy jobs: name the variables in environment")
        for key in ("transfer_input_files", "transfer_output_files"):
            if "://" in self._expand(key):
                raise SubmitError(f"{key}: URLs are not supported by mwpy jobs: only files and folders")

    def _queue_count(self) -> int:
        qargs = self._submit.getQArgs().strip()
        first = qargs.split(None, 1)[0] if qargs else "1"
        if "$(" in first:
            self._submit["MWPY_QUEUE_COUNT"] = first
            self._keys["mwpy_queue_count"] = "MWPY_QUEUE_COUNT"
            first = self._expand("mwpy_queue_count").strip()
        return int(first) if first.isdigit() else 1

    def _expand(self, key: str) -> str:
        original = self._keys.get(key)
        if original is None:
            return ""
        try:
            return str(self._submit.expand(original))
        except Exception as exc:  # the bindings raise KeyError for a macro that is not defined, ValueError...
            raise SubmitError(f"{original} = {self._submit[original]}: cannot expand: {exc}") from None

    def _first(self, *keys: str) -> str:
        for key in keys:
            value = self._expand(key).strip()
            if value:
                return value
        return ""

    # ------------------------------------------------------------------ one job

    def _job(self, process: int, step: int, index: int, item: dict[str, str]) -> JobSpec:
        sub = self._submit
        for name, value in (
            ("Cluster", self.cluster),
            ("ClusterId", self.cluster),
            ("Process", process),
            ("ProcId", process),
            ("Step", step),
            ("ItemIndex", index),
            ("Row", index),
        ):
            sub[name] = str(value)
        for variable, setting in item.items():
            sub[variable] = setting
        where = f"job {self.cluster}.{process}"
        self._check_values(where)
        initialdir = os.path.normpath(os.path.join(self.base, self._first("initialdir", "initial_dir", "iwd")))
        transfer = self._expand("should_transfer_files").strip().upper() != "NO"
        when = self._expand("when_to_transfer_output").strip().upper() or "ON_EXIT"
        if when not in ("ON_EXIT", "ON_EXIT_OR_EVICT", "ON_SUCCESS"):
            raise SubmitError(f"when_to_transfer_output = {when}: expected ON_EXIT, ON_EXIT_OR_EVICT or ON_SUCCESS")
        transfer_executable = self._expand("transfer_executable").strip().lower() not in ("false", "no", "0")
        executable = self._expand("executable").strip()
        if transfer_executable:
            executable = os.path.join(self.base, executable)
        return JobSpec(
            cluster=self.cluster,
            process=process,
            executable=executable,
            transfer_executable=transfer_executable,
            arguments=parse_arguments(self._first("arguments", "args"), where),
            environment=parse_environment(self._first("environment", "env"), where),
            initialdir=initialdir,
            stdin=self._path_in(initialdir, "input"),
            stdout=self._path_in(initialdir, "output"),
            stderr=self._path_in(initialdir, "error"),
            inputs=tuple(_inputs(initialdir, self._expand("transfer_input_files"))) if transfer else (),
            transfer_outputs=_output_names(self._keys, self._expand("transfer_output_files")),
            transfer=transfer,
            outputs_on_success_only=when == "ON_SUCCESS",
        )

    def _path_in(self, initialdir: str, key: str) -> str | None:
        value = self._expand(key).strip()
        if not value or value == "/dev/null":
            return None
        return os.path.join(initialdir, value)


def _as_dict(item: object) -> dict[str, str]:
    """One row of item data: ``queue X in (...)`` gives strings (``Item``), the other forms give dicts."""
    if isinstance(item, dict):
        return {str(k): str(v) for k, v in item.items()}
    return {"Item": str(item)}


def _check_one_queue_statement(text: str, path: str) -> None:
    """The bindings read the first queue statement and drop the rest of the file: refuse what they would drop."""
    lines = text.splitlines()
    queue_lines = [n for n, line in enumerate(lines) if _QUEUE_LINE.match(line)]
    if not queue_lines:
        return
    if len(queue_lines) > 1:
        raise SubmitError(f"{path}: {len(queue_lines)} queue statements: mwpy jobs runs one (split the file)")
    after = lines[queue_lines[0] + 1 :]
    if "(" in lines[queue_lines[0]] and ")" not in lines[queue_lines[0]]:
        closing = next((n for n, line in enumerate(after) if line.strip().startswith(")")), len(after) - 1)
        after = after[closing + 1 :]
    for line in after:
        if line.strip() and not line.lstrip().startswith("#"):
            raise SubmitError(f"{path}: {line.strip()!r} after the queue statement: put every command before it")


def _inputs(initialdir: str, value: str) -> Iterator[InputFile]:
    """``transfer_input_files``: a file lands under its base name, ``dir`` as ``dir/...``, ``dir/`` as its contents."""
    for entry in _split_list(value):
        source = os.path.join(initialdir, entry)
        name = "" if entry.endswith("/") else os.path.basename(os.path.normpath(entry))
        yield InputFile(source, name)


def _output_names(keys: dict[str, str], value: str) -> tuple[str, ...] | None:
    if "transfer_output_files" not in keys:
        return None
    return tuple(_split_list(value))


def _split_list(value: str) -> list[str]:
    return [part.strip() for part in value.replace("\n", ",").split(",") if part.strip()]


# ---------------------------------------------------------------------- arguments and environment


def parse_arguments(value: str, where: str = "") -> tuple[str, ...]:
    """``arguments`` in either syntax: the new one (in double quotes, ``'...'`` groups) or the old (spaces)."""
    value = value.strip()
    if not value:
        return ()
    if not (value.startswith('"') and value.endswith('"') and len(value) >= 2):
        if '"' in value.replace('\\"', ""):
            raise SubmitError(f'arguments ({where}): a double quote in the old syntax must be written \\"')
        return tuple(part.replace('\\"', '"') for part in value.split())
    return tuple(_new_syntax(value[1:-1].replace('""', '"'), "arguments", where))


def parse_environment(value: str, where: str = "") -> tuple[tuple[str, str], ...]:
    """``environment`` in either syntax: the new one (in double quotes, spaces) or the old (``A=1;B=2``)."""
    value = value.strip()
    if not value:
        return ()
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        words = _new_syntax(value[1:-1].replace('""', '"'), "environment", where)
    else:
        words = [part for part in value.split(";") if part.strip()]
    pairs = []
    for word in words:
        name, sep, setting = word.partition("=")
        if not sep or not name.strip():
            raise SubmitError(f"environment ({where}): {word!r} is not NAME=VALUE")
        pairs.append((name.strip(), setting))
    return tuple(pairs)


def _new_syntax(text: str, key: str, where: str) -> list[str]:
    """Words split on white space; ``'...'`` keeps spaces, ``''`` inside it is one single quote."""
    words: list[str] = []
    word: list[str] = []
    started = False
    i = 0
    while i < len(text):
        char = text[i]
        if char == "'":
            end = i + 1
            while True:
                end = text.find("'", end)
                if end < 0:
                    raise SubmitError(f"{key} ({where}): unbalanced single quote")
                if text[end + 1 : end + 2] == "'":
                    end += 2
                    continue
                break
            word.append(text[i + 1 : end].replace("''", "'"))
            started = True
            i = end + 1
        elif char.isspace():
            if started:
                words.append("".join(word))
                word, started = [], False
            i += 1
        else:
            word.append(char)
            started = True
            i += 1
    if started:
        words.append("".join(word))
    return words

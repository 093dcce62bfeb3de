"""The ``--mw-*`` command-line options: parsed out of argv before the user sees it.

Names and meanings follow CL-MW; mwpy adds a few (marked "mwpy:" in the help).
Every option takes ``--mw-name value`` or ``--mw-name=value``. Anything that
is not an ``--mw-`` option stays in argv, in order, for the master or slave
algorithm. A wrong or missing value raises :class:`UsageError` naming the
option; the program turns it into a one-line message and exit status 2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from mwpy.errors import UsageError
from mwpy.names import CONDOR_JOB_ID
from mwpy.resources import Resources

#: Microseconds of polling before a sleep (``--mw-spin-us``; mwpy/net/spin.py says why): a little more than a
#: slave's or master's share of a no-op round trip on a woken, cold CPU, so an answer on its way is caught.
DEFAULT_SPIN_US = 200
#: Bytes a slave's one cache keeps at most (``--mw-cache-size``): shared objects (memory maps of files on its disk),
#: ``mwpy.File`` arguments and ``mwpy jobs``' inputs.
DEFAULT_CACHE_SIZE = 4 << 30
#: The levels ``--mw-log-level`` (and ``MWPY_LOG_LEVEL``) accept.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def level_name(text: str) -> str:
    """``text`` as a logging level name; ValueError when it is none (the option parser's contract)."""
    name = text.strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(text)
    return name


Role = Literal["master", "slave"]

DEFAULT_MEMBER_ID = "default-member-id"
#: Seconds a slave outlives a master that vanished, waiting for it to restart (HTCondor's JobLeaseDuration default).
DEFAULT_MASTER_LEASE = 2400.0
#: Seconds past the stale point after which a slave takes its master for gone for good (``--mw-abandon-after``).
#: Short, unlike the overseer's --abandon-after: a master the schedd restarts writes a fresh file within
#: seconds, so a stale file means a master that is gone, and a pilot must not hold its slot or restart for long.
SLAVE_ABANDON_AFTER = 300.0
MIB = 1024 * 1024


@attrs.frozen
class Options:
    """Every ``--mw-*`` setting of one process (master or slave)."""

    role: Role | None = None
    master_host: str | None = None
    master_port: int | None = None
    #: Ports (both ends included) every listening socket of the master takes its port from.
    master_port_range: tuple[int, int] | None = None
    max_write_buffer_size: int = 64 * MIB
    max_read_buffer_size: int = 64 * MIB
    cache_size: int = DEFAULT_CACHE_SIZE
    client_timeout: float = 60.0
    spin_us: int = DEFAULT_SPIN_US
    audit_file: str | None = None
    audit_packets: bool = False
    resource_file: str | None = None
    resource_file_update_interval: float = 300.0
    slave_task_group: int = 0
    slave_result_group: int = 64
    slave_window: int = 0
    member_id: str = DEFAULT_MEMBER_ID
    slave_executable: str | None = None
    slave_files: tuple[str, ...] = ()
    slave_arguments: tuple[str, ...] = ()
    slave_bundle: bool = False
    #: A slave: what it offers (the last one given); a master: the slave shapes on offer (mwpy/core/shapes.py).
    slave_resources: tuple[Resources, ...] = ()
    secret_file: str | None = None
    task_attempts: int = 1
    max_slaves: int | None = None
    quiet: bool = False
    allowed_failures: int = 3
    task_timeout: float | None = None
    log_level: str | None = None
    connect_timeout: float = 10.0
    journal: str | None = None
    abandon_after: float = SLAVE_ABANDON_AFTER
    slave_lifetime: float | None = None
    master_lease: float = DEFAULT_MASTER_LEASE
    events: str | None = None
    metrics_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_fingerprint: str | None = None
    slave_max_failures: int = 5
    raw_task_output: bool = False
    #: Slave only: which of host/port/member-id came *after* --mw-resource-file
    #: (those win over the file's values; earlier ones lose to it).
    after_resource_file: frozenset[str] = frozenset()
    show_help: bool = False
    show_version: bool = False


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError
    return value


def _port_range(text: str) -> tuple[int, int]:
    low, dash, high = text.partition("-")
    first, last = int(low), int(high)
    if not dash or not 1 <= first <= last <= 65535:
        raise ValueError
    return first, last


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError
    return value


def condor_job_id(text: str) -> str:
    """``CLUSTER.PROC``, as condor_q shows a job."""
    if CONDOR_JOB_ID.fullmatch(text) is None:
        raise ValueError
    return text


def _fingerprint(text: str) -> str:
    value = text.replace(":", "").lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError
    return value


def _non_empty(text: str) -> str:
    if not text:
        raise ValueError
    return text


@attrs.frozen
class _Spec:
    field: str
    metavar: str
    help: str
    convert: Callable[[str], Any] | None  # None: a flag without a value
    expected: str = ""
    repeat: bool = False


_SPECS: dict[str, _Spec] = {
    "--mw-help": _Spec("show_help", "", "Print this usage and exit.", None),
    "--mw-version-string": _Spec("show_version", "", "Print the mwpy version and exit.", None),
    "--mw-master": _Spec("role", "", "Run as the master.", None),
    "--mw-slave": _Spec("role", "", "Run as a slave.", None),
    "--mw-master-host": _Spec(
        "master_host",
        "HOST",
        "Master: interface to bind and name to advertise (default: all interfaces, "
        "advertised as this host's name). Slave: where to connect.",
        _non_empty,
        "a host name or address",
    ),
    "--mw-master-port": _Spec(
        "master_port",
        "PORT",
        "Slave: port to connect to. Master: port to bind (default: any free port).",
        _port,
        "a port number from 0 to 65535",
    ),
    "--mw-master-port-range": _Spec(
        "master_port_range",
        "LOW-HIGH",
        "Master: listen on the first free port from LOW to HIGH (both included), and put the file service "
        "and a --mw-metrics-port 0 exporter there too: for a firewall that opens only this range.",
        _port_range,
        "a port range LOW-HIGH with 1 <= LOW <= HIGH <= 65535",
    ),
    "--mw-max-write-buffer-size": _Spec(
        "max_write_buffer_size",
        "BYTES",
        "Largest frame this process sends; a bigger task or result fails with a clear error.",
        positive_int,
        "a positive number of bytes",
    ),
    "--mw-max-read-buffer-size": _Spec(
        "max_read_buffer_size",
        "BYTES",
        "Largest frame this process accepts; a peer announcing more is cut off.",
        positive_int,
        "a positive number of bytes",
    ),
    "--mw-cache-size": _Spec(
        "cache_size",
        "BYTES",
        "mwpy: most bytes a slave's one cache keeps (shared objects, mwpy.File arguments, mwpy jobs' inputs), on "
        "its disk; past it the least recently used go, and are fetched again if named again (the newest is always "
        "kept). Default 4 GiB.",
        positive_int,
        "a positive number of bytes",
    ),
    "--mw-client-timeout": _Spec(
        "client_timeout",
        "SECONDS",
        "Drop a peer silent for this long (slaves send heartbeats, so busy ones stay). Default 60.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-spin-us": _Spec(
        "spin_us",
        "MICROSECONDS",
        "mwpy: how long a master with tasks out, or a slave that just answered, polls before it sleeps "
        "(only while recent waits were that short); 0 never. Default 200.",
        _non_negative_int,
        "a non-negative integer",
    ),
    "--mw-audit-file": _Spec(
        "audit_file", "FILE", "Append the [A] audit trail here instead of stdout.", _non_empty, "a file name"
    ),
    "--mw-max-slaves": _Spec(
        "max_slaves",
        "N",
        "mwpy: at most N slaves can ever connect (mwpy local passes its --slaves): asking for more "
        "ordered or intermingle slaves than that is an error instead of a wait for ever. Default: no limit.",
        positive_int,
        "a positive integer",
    ),
    "--mw-quiet": _Spec(
        "quiet",
        "",
        "mwpy: do not show what tasks print. By default a successful task's output is written "
        "on the master's stdout and stderr when its result comes (a failed task's goes with its "
        "exception); either way it is kept in Result.stdout/.stderr.",
        None,
    ),
    "--mw-audit-packets": _Spec(
        "audit_packets",
        "",
        "mwpy: also audit every packet and idle/busy change (verbose; slows a fast master).",
        None,
    ),
    "--mw-connect-timeout": _Spec(
        "connect_timeout",
        "SECONDS",
        "mwpy: how long a slave waits for its resource file to appear and then for the master to "
        "answer before it exits (status 6 or 3). Default 10.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-log-level": _Spec(
        "log_level",
        "LEVEL",
        "mwpy: level of the mwpy.* loggers on stderr (DEBUG, INFO, WARNING, ERROR, CRITICAL); "
        "the MWPY_LOG_LEVEL environment variable does the same. The [A] audit is not affected.",
        level_name,
        "one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
    ),
    "--mw-resource-file": _Spec(
        "resource_file",
        "FILE",
        "Master: write the resource file here. Slave: read where to connect from it "
        "(its position relative to --mw-master-host/-port/--mw-member-id decides which wins).",
        _non_empty,
        "a file name",
    ),
    "--mw-resource-file-update-interval": _Spec(
        "resource_file_update_interval",
        "SECONDS",
        "How often the master rewrites the resource file. Default 300.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-slave-task-group": _Spec(
        "slave_task_group",
        "N",
        "Tasks per packet sent to a slave; 0 (default): the tasks due at once share one packet.",
        _non_negative_int,
        "a non-negative integer",
    ),
    "--mw-slave-result-group": _Spec(
        "slave_result_group",
        "N",
        "Results per packet sent back by a slave, at most (held up to 2 ms while tasks run short). Default 64.",
        positive_int,
        "a positive integer",
    ),
    "--mw-slave-window": _Spec(
        "slave_window",
        "N",
        "mwpy: tasks queued ahead on each slave; 0 (default) adapts it to task length.",
        _non_negative_int,
        "a non-negative integer",
    ),
    "--mw-member-id": _Spec(
        "member_id",
        "ID",
        f"Token that must match between master and slaves. Default {DEFAULT_MEMBER_ID!r}.",
        _non_empty,
        "a non-empty string",
    ),
    "--mw-slave-executable": _Spec(
        "slave_executable",
        "PATH",
        "Interpreter that runs slaves, written to the resource file. Default: this Python.",
        _non_empty,
        "a path",
    ),
    "--mw-slave-file": _Spec(
        "slave_files",
        "PATH",
        "mwpy: one more file slaves need (repeatable); written to the resource file.",
        _non_empty,
        "a path",
        repeat=True,
    ),
    "--mw-slave-argument": _Spec(
        "slave_arguments",
        "ARG",
        "mwpy: one more argument for the slave algorithm's argv (repeatable); written to the resource "
        "file, so slaves started from it (mwpy local, the overseer) get it.",
        str,
        "an argument",
        repeat=True,
    ),
    "--mw-slave-bundle": _Spec(
        "slave_bundle",
        "",
        "mwpy: build mwpy.pyz (mwpy and its dependencies) next to the resource file and start "
        "slaves through it, so execute nodes need only a Python (default /usr/bin/python3).",
        None,
    ),
    "--mw-slave-resources": _Spec(
        "slave_resources",
        "SHAPE",
        "mwpy: a slave's shape, e.g. cpus=4,memory=16GB,gpus=1 (memory and disk in MB or with a unit; "
        "requirements=EXPR last): it runs only tasks whose resources= it satisfies. Default: its Condor "
        "slot's Cpus/Memory/Disk/GPUs, else this machine's cpus and memory. On a master (repeatable): the "
        "shapes its slaves will have; a task none of them satisfies fails at once with mwpy.NoMatchingSlaveError.",
        Resources.parse,
        "KEY=VALUE,... with keys cpus, memory, disk, gpus, requirements",
        repeat=True,
    ),
    "--mw-task-timeout": _Spec(
        "task_timeout",
        "SECONDS",
        "mwpy: the timeout of tasks without a timeout= of their own. A task past it fails with "
        "mwpy.TaskTimeoutError; the slave interrupts it, and exits (status 8, to be replaced) if "
        "it does not stop within 5 s. Default: none.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-task-attempts": _Spec(
        "task_attempts",
        "N",
        "mwpy: runs a task that raised gets (on other slaves where possible) before its failure "
        "is handed to the master algorithm, for tasks without retries= of their own. Default 1: "
        "a task that raises is a result, not retried.",
        positive_int,
        "a positive integer",
    ),
    "--mw-allowed-failures": _Spec(
        "allowed_failures",
        "N",
        "mwpy: how many slaves may die while running one task alone (a segfault, os._exit, a "
        "kill for memory) before the task fails with mwpy.KilledSlaveError (dask's KilledWorker) "
        "instead of running again, for tasks without allowed_failures= of their own. A slave "
        "that leaves on a soft-kill signal (a Condor eviction) is not counted. Default 3.",
        _non_negative_int,
        "a non-negative integer",
    ),
    "--mw-slave-max-failures": _Spec(
        "slave_max_failures",
        "N",
        "mwpy: a slave whose N failed tasks in a row then succeed on other slaves is a black "
        "hole and is told to exit non-zero (status 7), so the batch system runs it elsewhere. "
        "Default 5; 0 never.",
        _non_negative_int,
        "a non-negative integer",
    ),
    "--mw-raw-task-output": _Spec(
        "raw_task_output",
        "",
        "mwpy: forward what tasks print to the master's stdout and stderr as the tasks wrote it, colours "
        "and other escape sequences included (by default they are shown escaped, e.g. \\x1b: a task must not "
        "drive your terminal).",
        None,
    ),
    "--mw-journal": _Spec(
        "journal",
        "FILE",
        "mwpy: SQLite result journal; a task submitted with a key already journaled is answered "
        "from it without running, so a restarted master resumes.",
        _non_empty,
        "a file name",
    ),
    "--mw-abandon-after": _Spec(
        "abandon_after",
        "SECONDS",
        "mwpy: a slave that starts on a stale resource file waits for its master (no restarts) until the "
        "file has been stale for this long (beyond its update interval and grace), then takes the master for "
        "gone for good and exits 0 with one line, so Condor's on_exit_remove takes its job out of the queue. "
        "Default 300.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-slave-lifetime": _Spec(
        "slave_lifetime",
        "SECONDS",
        "mwpy: a slave leaves by plan before this many seconds from its job's start: it stops taking tasks "
        "that would not finish in time (judged by their algorithm's longest run on it), hands back the ones "
        "queued on it, finishes the one running and exits 0, so its job leaves the queue and a fresh one takes "
        "its place. Condor's MaxRuntime, JobDurationCategory and GLIDEIN_ToDie also set it; the earliest wins, "
        "shortened at random by up to 10 %. Given to a master, its slaves get it. Default: none.",
        positive_float,
        "a positive number of seconds",
    ),
    "--mw-master-lease": _Spec(
        "master_lease",
        "SECONDS",
        "mwpy: how long a slave started from a resource file, whose master (with --mw-journal) gave it keyed "
        "tasks and vanished without a shutdown, finishes its task, keeps their results and waits for a "
        "restarted master in that file, to hand them over; then it exits 4. Given to a master: how long, "
        "restarted, it waits for such slaves of its predecessor before it runs their tasks again. 0: a slave "
        "exits 4 at once, as before. Default 2400 (HTCondor's JobLeaseDuration).",
        _non_negative_float,
        "a non-negative number of seconds",
    ),
    "--mw-events": _Spec(
        "events",
        "FILE",
        "mwpy: append the event log (docs/observability.md) to FILE, one JSON object a line; "
        "a restarted master continues it. `mwpy report FILE` turns it into a report.",
        _non_empty,
        "a file name",
    ),
    "--mw-metrics-port": _Spec(
        "metrics_port",
        "PORT",
        "mwpy: serve Prometheus metrics on 127.0.0.1:PORT (needs the mwpy[metrics] extra).",
        _port,
        "a port number from 0 to 65535",
    ),
    "--mw-tls-cert": _Spec(
        "tls_cert",
        "FILE",
        "mwpy: master: encrypt connections with TLS using this PEM certificate; its SHA-256 "
        "fingerprint goes to the resource file and slaves pin it.",
        _non_empty,
        "a PEM file",
    ),
    "--mw-tls-key": _Spec(
        "tls_key",
        "FILE",
        "mwpy: master: the private key of --mw-tls-cert (if not in the same file).",
        _non_empty,
        "a PEM file",
    ),
    "--mw-tls-fingerprint": _Spec(
        "tls_fingerprint",
        "HEX",
        "mwpy: slave without a resource file: use TLS and accept only a master certificate with "
        "this SHA-256 fingerprint.",
        _fingerprint,
        "64 hexadecimal digits",
    ),
    "--mw-secret-file": _Spec(
        "secret_file",
        "FILE",
        "mwpy: file holding the computation's secret (created by the master if missing). "
        "Default: the secret travels in the resource file.",
        _non_empty,
        "a file name",
    ),
}

_OVERRIDABLE = {"master_host", "master_port", "member_id"}


def parse(argv: Sequence[str]) -> tuple[Options, list[str]]:
    """Split ``argv`` (without the program name) into options and the user's own arguments."""
    parser = _Parser()
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        name, eq, inline = arg.partition("=")
        spec = _SPECS.get(name)
        if spec is None:
            if arg.startswith("--mw-"):
                raise UsageError(f"{name}: unknown option (see --mw-help)")
            rest.append(arg)
        elif spec.convert is None:
            if eq:
                raise UsageError(f"{name}: takes no value")
            parser.flag(name, spec)
        else:
            parser.value(name, spec, inline if eq else next(args, None))
    options = parser.options()
    if not (options.show_help or options.show_version):
        _check(options)
    return options, rest


class _Parser:
    """The values gathered so far, and which overridable ones came after --mw-resource-file."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.repeated: dict[str, list[Any]] = {}
        self.after_file: set[str] = set()
        self.seen_file = False

    def flag(self, name: str, spec: _Spec) -> None:
        if spec.field != "role":
            self.values[spec.field] = True
            return
        role = name.removeprefix("--mw-")
        if self.values.get("role", role) != role:
            raise UsageError("--mw-master and --mw-slave: give only one")
        self.values["role"] = role

    def value(self, name: str, spec: _Spec, text: str | None) -> None:
        assert spec.convert is not None
        if text is None:
            raise UsageError(f"{name}: missing value ({spec.expected})")
        try:
            value = spec.convert(text)
        except ValueError:
            raise UsageError(f"{name}: expected {spec.expected}, got {text!r}") from None
        if spec.repeat:
            self.repeated.setdefault(spec.field, []).append(value)
        else:
            self.values[spec.field] = value
        if spec.field == "resource_file":
            self.seen_file = True
            self.after_file.clear()
        elif spec.field in _OVERRIDABLE and self.seen_file:
            self.after_file.add(spec.field)

    def options(self) -> Options:
        values: dict[str, Any] = {field: tuple(items) for field, items in self.repeated.items()}
        values.update(self.values)
        return Options(**values, after_resource_file=frozenset(self.after_file))


def _check(options: Options) -> None:
    if options.role is None:
        raise UsageError("--mw-master or --mw-slave: one of them is required")
    if options.role == "slave" and options.resource_file is None:
        if options.master_host is None:
            raise UsageError("--mw-master-host: required for a slave without --mw-resource-file")
        if options.master_port is None:
            raise UsageError("--mw-master-port: required for a slave without --mw-resource-file")
    if options.master_port_range is not None and options.master_port is not None and options.role == "master":
        raise UsageError("--mw-master-port-range: give it or --mw-master-port, not both")
    if options.tls_key is not None and options.tls_cert is None:
        raise UsageError("--mw-tls-key: needs --mw-tls-cert")
    if options.role == "master" and options.resource_file is None and options.secret_file is None:
        raise UsageError(
            "--mw-resource-file: a master needs it (or --mw-secret-file) so that slaves "
            "can learn the computation's secret"
        )


def usage() -> str:
    """The ``--mw-help`` text, generated from the option table so it never drifts."""
    lines = ["mwpy options (removed from argv before the master or slave algorithm sees it):"]
    for name, spec in _SPECS.items():
        lines.append(f"  {name} {spec.metavar}".rstrip())
        lines.append(f"      {spec.help}")
    return "\n".join(lines) + "\n"

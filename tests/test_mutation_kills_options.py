"""``mwpy.options.parse`` in this process: every option's accepted values, its refusals and their messages.

tests/test_core_options.py checks the same rules through real programs
(argv, stderr, exit 2); mutation testing (docs/mutation.md) cannot see into
those processes, so the rules are pinned here too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwpy.errors import UsageError
from mwpy.options import DEFAULT_MEMBER_ID, MIB, Options, parse, usage

HELP_FILE = Path(__file__).parent / "data" / "mw-help.txt"
MASTER = ["--mw-master", "--mw-resource-file", "r.json"]
FINGERPRINT = "ab" * 32


def opts(*args: str) -> Options:
    options, _ = parse([*MASTER, *args])
    return options


def refusal(*args: str) -> str:
    with pytest.raises(UsageError) as raised:
        parse(list(args))
    return str(raised.value)


def test_the_mw_help_text_is_the_reviewed_one() -> None:
    """``--mw-help`` is the user's reference: a change to it is a change to tests/data/mw-help.txt too."""
    assert usage() == HELP_FILE.read_text()


def test_defaults_are_the_documented_ones() -> None:
    options = opts()
    assert options.client_timeout == 60.0
    assert options.spin_us == 200
    assert options.resource_file_update_interval == 300.0
    assert (options.slave_task_group, options.slave_result_group, options.slave_window) == (0, 64, 0)
    assert (options.task_attempts, options.slave_max_failures) == (1, 5)  # 1: issue 9, no retry unless asked
    assert options.member_id == DEFAULT_MEMBER_ID == "default-member-id"
    assert options.max_write_buffer_size == options.max_read_buffer_size == 64 * 1024 * 1024 == 64 * MIB
    assert (options.slave_files, options.slave_arguments, options.after_resource_file) == ((), (), frozenset())
    assert (options.audit_packets, options.slave_bundle, options.show_help, options.show_version) == (False,) * 4


def test_both_forms_are_taken_and_other_arguments_keep_their_order() -> None:
    options, rest = parse(["a", "--mw-master", "--mw-resource-file=r=1.json", "--other=1", "-mw-x", "b"])
    assert (options.role, options.resource_file) == ("master", "r=1.json")
    assert rest == ["a", "--other=1", "-mw-x", "b"]


@pytest.mark.parametrize(
    ("option", "good", "value"),
    [
        ("--mw-master-port", "0", 0),
        ("--mw-master-port", "65535", 65535),
        ("--mw-max-write-buffer-size", "1", 1),
        ("--mw-max-read-buffer-size", "7", 7),
        ("--mw-client-timeout", "0.001", 0.001),
        ("--mw-resource-file-update-interval", "1e3", 1000.0),
        ("--mw-slave-task-group", "1", 1),
        ("--mw-slave-result-group", "2", 2),
        ("--mw-slave-window", "0", 0),
        ("--mw-spin-us", "0", 0),
        ("--mw-spin-us", "50", 50),
        ("--mw-task-attempts", "1", 1),
        ("--mw-slave-max-failures", "0", 0),
        ("--mw-tls-fingerprint", ":".join(["AB"] * 32), FINGERPRINT),
        ("--mw-tls-fingerprint", "0123456789abcdef" * 4, "0123456789abcdef" * 4),
        ("--mw-member-id", "x", "x"),
        ("--mw-master-host", "h", "h"),
        ("--mw-audit-file", "a", "a"),
        ("--mw-slave-executable", "/py", "/py"),
        ("--mw-journal", "j", "j"),
        ("--mw-secret-file", "s", "s"),
        ("--mw-tls-cert", "c", "c"),
    ],
)
def test_each_option_takes_its_values(option: str, good: str, value: object) -> None:
    field = option.removeprefix("--mw-").replace("-", "_")
    assert getattr(opts(option, good), field) == value
    assert getattr(opts(f"{option}={good}"), field) == value


@pytest.mark.parametrize(
    ("option", "bad", "expected"),
    [
        ("--mw-master-host", "", "a host name or address"),
        ("--mw-master-port", "-1", "a port number from 0 to 65535"),
        ("--mw-master-port", "65536", "a port number from 0 to 65535"),
        ("--mw-master-port", "http", "a port number from 0 to 65535"),
        ("--mw-max-write-buffer-size", "0", "a positive number of bytes"),
        ("--mw-max-read-buffer-size", "-1", "a positive number of bytes"),
        ("--mw-client-timeout", "0", "a positive number of seconds"),
        ("--mw-client-timeout", "-1", "a positive number of seconds"),
        ("--mw-client-timeout", "inf", "a positive number of seconds"),
        ("--mw-client-timeout", "nan", "a positive number of seconds"),
        ("--mw-audit-file", "", "a file name"),
        ("--mw-resource-file", "", "a file name"),
        ("--mw-resource-file-update-interval", "0", "a positive number of seconds"),
        ("--mw-slave-task-group", "-1", "a non-negative integer"),
        ("--mw-slave-result-group", "0", "a positive integer"),
        ("--mw-slave-window", "-1", "a non-negative integer"),
        ("--mw-spin-us", "-1", "a non-negative integer"),
        ("--mw-spin-us", "0.5", "a non-negative integer"),
        ("--mw-member-id", "", "a non-empty string"),
        ("--mw-slave-executable", "", "a path"),
        ("--mw-slave-file", "", "a path"),
        ("--mw-task-attempts", "0", "a positive integer"),
        ("--mw-slave-max-failures", "-1", "a non-negative integer"),
        ("--mw-journal", "", "a file name"),
        ("--mw-tls-cert", "", "a PEM file"),
        ("--mw-tls-key", "", "a PEM file"),
        ("--mw-tls-fingerprint", "ab" * 31, "64 hexadecimal digits"),
        ("--mw-tls-fingerprint", "ag" * 32, "64 hexadecimal digits"),
        ("--mw-secret-file", "", "a file name"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_option_what_it_expects_and_what_it_got(
    option: str, bad: str, expected: str
) -> None:
    assert refusal(*MASTER, option, bad) == f"{option}: expected {expected}, got {bad!r}"
    assert refusal(*MASTER, f"{option}={bad}") == f"{option}: expected {expected}, got {bad!r}"
    assert refusal(*MASTER, option) == f"{option}: missing value ({expected})"


def test_flags_take_no_value_and_unknown_options_are_refused() -> None:
    assert refusal(*MASTER, "--mw-audit-packets=yes") == "--mw-audit-packets: takes no value"
    assert refusal(*MASTER, "--mw-bogus=1") == "--mw-bogus: unknown option (see --mw-help)"
    options = opts("--mw-audit-packets", "--mw-slave-bundle", "--mw-slave-argument", "", "--mw-slave-argument", "-x")
    assert (options.audit_packets, options.slave_bundle, options.slave_arguments) == (True, True, ("", "-x"))
    assert opts("--mw-slave-file", "a", "--mw-slave-file", "b").slave_files == ("a", "b")


def test_one_role_only_and_help_or_version_need_none() -> None:
    assert refusal("--mw-master", "--mw-slave") == "--mw-master and --mw-slave: give only one"
    assert refusal("--mw-slave", "--mw-master") == "--mw-master and --mw-slave: give only one"
    assert opts("--mw-master").role == "master"
    slave, _ = parse(["--mw-slave", "--mw-resource-file", "r"])
    assert slave.role == "slave"
    assert parse(["--mw-help"])[0].show_help
    assert parse(["--mw-version-string"])[0].show_version
    assert refusal("x") == "--mw-master or --mw-slave: one of them is required"


def test_what_each_role_needs() -> None:
    assert refusal("--mw-slave") == "--mw-master-host: required for a slave without --mw-resource-file"
    assert refusal("--mw-slave", "--mw-master-port", "1") == (
        "--mw-master-host: required for a slave without --mw-resource-file"
    )
    assert refusal("--mw-slave", "--mw-master-host", "h") == (
        "--mw-master-port: required for a slave without --mw-resource-file"
    )
    slave, _ = parse(["--mw-slave", "--mw-master-host", "h", "--mw-master-port", "1"])
    assert (slave.master_host, slave.master_port) == ("h", 1)
    assert refusal(*MASTER, "--mw-tls-key", "k") == "--mw-tls-key: needs --mw-tls-cert"
    assert opts("--mw-tls-key", "k", "--mw-tls-cert", "c").tls_key == "k"
    assert refusal("--mw-master") == (
        "--mw-resource-file: a master needs it (or --mw-secret-file) so that slaves can learn the computation's secret"
    )
    assert parse(["--mw-master", "--mw-secret-file", "s"])[0].secret_file == "s"


def test_host_port_and_member_id_after_the_resource_file_win_over_it() -> None:
    before, _ = parse(["--mw-slave", "--mw-master-host", "h", "--mw-resource-file", "r", "--mw-master-port", "1"])
    assert before.after_resource_file == {"master_port"}
    again, _ = parse(["--mw-slave", "--mw-resource-file", "r", "--mw-member-id", "m", "--mw-resource-file", "s"])
    assert again.after_resource_file == frozenset()  # the last file resets what came after the first
    after, _ = parse(
        ["--mw-slave", "--mw-resource-file", "r", "--mw-member-id", "m", "--mw-master-host", "h", "--mw-journal", "j"]
    )
    assert after.after_resource_file == {"member_id", "master_host"}
    none, _ = parse(["--mw-slave", "--mw-member-id", "m", "--mw-master-host", "h", "--mw-master-port", "2"])
    assert none.after_resource_file == frozenset()

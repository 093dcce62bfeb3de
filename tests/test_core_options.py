"""The ``--mw-*`` options as a user meets them: stripped from argv, checked, and CL-MW's ordering rule.

Real processes of tests/programs/workload.py (whose master prints the argv it
was given) and tests/programs/slave_variants.py (whose slave algorithm logs it).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import mwpy
from mwpy import ExitCode
from mwpy.options import usage
from tests.support import PROGRAMS, PYTHON, audit_lines, run_program, spawn, spawn_master, spawn_slave

WORKLOAD = PROGRAMS / "workload.py"
VARIANTS = PROGRAMS / "slave_variants.py"


CL_MW_OPTIONS = [
    "--mw-help",
    "--mw-version-string",
    "--mw-master",
    "--mw-slave",
    "--mw-master-host",
    "--mw-master-port",
    "--mw-max-write-buffer-size",
    "--mw-max-read-buffer-size",
    "--mw-client-timeout",
    "--mw-audit-file",
    "--mw-resource-file",
    "--mw-resource-file-update-interval",
    "--mw-slave-task-group",
    "--mw-slave-result-group",
    "--mw-member-id",
    "--mw-slave-executable",
]


def test_master_algorithm_sees_argv_without_any_mw_option_in_either_form(tmp_path: Path) -> None:
    done = run_program(
        WORKLOAD,
        tmp_path,
        "--mw-master",
        "argv",
        "--mw-member-id=joined-form",
        "first",
        "--mw-slave-task-group",
        "3",
        "-n",
        "3",
        "--mw-resource-file",
        str(tmp_path / "rf.json"),
        "--keep-me",
        "--mw-audit-packets",
        "mw-not-an-option",
        "--mw-client-timeout=9.5",
        "--mw-master-host",
        "127.0.0.1",
        "last",
    )
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert line == {"argv": ["first", "-n", "3", "--keep-me", "mw-not-an-option", "last"]}
    assert 'INIT MASTER "joined-form"' in audit_lines(done.stdout)  # the options did take effect


def test_slave_algorithm_sees_argv_without_any_mw_option(tmp_path: Path) -> None:
    log = tmp_path / "slave.log"
    master = spawn_master(VARIANTS, tmp_path, "1")
    slave = spawn_slave(
        VARIANTS,
        tmp_path,
        "until_shutdown",
        "--mw-audit-file=slave.audit",
        str(log),
        "--mw-client-timeout",
        "30",
        "extra",
    )
    assert master.wait() == 0
    assert slave.wait() == 0
    first = json.loads(log.read_text().splitlines()[0])
    assert first["argv"] == ["until_shutdown", str(log), "extra"]
    assert "INIT SLAVE" in (tmp_path / "slave.audit").read_text()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--mw-master", "--mw-slave-task-group", "-1"], "--mw-slave-task-group: expected a non-negative integer"),
        (["--mw-master", "--mw-master-port", "abc"], "--mw-master-port: expected a port number"),
        (["--mw-master", "--mw-master-port=70000"], "--mw-master-port: expected a port number"),
        (["--mw-master", "--mw-client-timeout=-1"], "--mw-client-timeout: expected a positive number of seconds"),
        (["--mw-master", "--mw-resource-file", "rf", "--mw-client-timeout"], "--mw-client-timeout: missing value"),
        (["--mw-master", "--mw-resource-file="], "--mw-resource-file: expected a file name"),
        (["--mw-master", "--mw-audit-packets=yes"], "--mw-audit-packets: takes no value"),
        (["--mw-master", "--mw-bogus", "1"], "--mw-bogus: unknown option"),
        (["--mw-master", "--mw-slave"], "--mw-master and --mw-slave"),
        (["just", "arguments"], "--mw-master or --mw-slave"),
        (["--mw-slave"], "--mw-master-host: required"),
        (["--mw-slave", "--mw-master-host", "h"], "--mw-master-port: required"),
        (["--mw-master"], "--mw-resource-file"),
    ],
)
def test_wrong_or_missing_option_value_is_one_line_naming_the_option_and_exit_2(
    tmp_path: Path, args: list[str], named: str
) -> None:
    done = run_program(WORKLOAD, tmp_path, *args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("workload.py: error: ")
    assert named in lines[0]
    assert "Traceback" not in done.stderr


def test_mw_help_lists_every_option_and_exits_0(tmp_path: Path) -> None:
    done = run_program(WORKLOAD, tmp_path, "--mw-help", "whatever", "--mw-master-port", "1")
    assert done.returncode == 0
    assert done.stdout == usage()
    for option in CL_MW_OPTIONS:
        assert f"  {option}" in done.stdout


def test_mw_version_string_prints_the_version_and_exits_0(tmp_path: Path) -> None:
    done = run_program(WORKLOAD, tmp_path, "--mw-version-string")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"mwpy {mwpy.__version__}\n", "")


def test_options_before_the_resource_file_lose_to_it_and_options_after_it_win(tmp_path: Path) -> None:
    master = spawn_master(WORKLOAD, tmp_path, "--mw-member-id", "right", "run", "3")
    rf = str(tmp_path / "resource.json")

    later_wins = spawn_slave(WORKLOAD, tmp_path, "--mw-member-id", "wrong", resource=Path(rf))
    assert later_wins.wait() == ExitCode.REFUSED
    assert "member id 'wrong'" in later_wins.err()

    with socket.create_server(("127.0.0.1", 0)) as impostor:
        impostor.settimeout(30)
        port = impostor.getsockname()[1]
        to_impostor = spawn_slave(WORKLOAD, tmp_path, "--mw-master-port", str(port), resource=Path(rf))
        connection, _ = impostor.accept()  # the slave came here, not to the file's port
        connection.close()
        assert to_impostor.wait() == ExitCode.REFUSED
        assert f"127.0.0.1:{port}" in to_impostor.err()

    # given before the file, every one of these loses to it: the slave reaches the real master
    file_wins = spawn(
        [
            PYTHON,
            str(WORKLOAD),
            "--mw-slave",
            "--mw-master-host",
            "nowhere.invalid",
            "--mw-master-port",
            "1",
            "--mw-member-id",
            "wrong",
            "--mw-resource-file",
            rf,
        ],
        tmp_path,
        "slave",
    )
    assert master.wait() == 0
    assert file_wins.wait() == 0
    assert sorted(line["value"] for line in master.json_lines()) == [0, 1, 4]

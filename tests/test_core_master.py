"""The master as a process: exit status, audit trail, task/result grouping, bounded memory.

Every test runs tests/programs/workload.py as a real master (and real slaves)
and looks only at what a user sees: exit status, stdout, audit lines, the
resource file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mwpy import resource_file
from tests.support import PROGRAMS, audit_lines, run_program, spawn_master, spawn_slave, wait_until

WORKLOAD = PROGRAMS / "workload.py"


STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[A\] \S")


@pytest.mark.parametrize(
    ("returned", "status"),
    [
        ("0", 0),
        ("7", 7),
        ("255", 255),
        ("None", 255),
        ("256", 255),
        ("300", 255),
        ("-1", 255),
        ("'x'", 255),
        ("True", 255),
        ("3.0", 255),
        ("raise", 255),
    ],
)
def test_master_algorithm_return_value_becomes_the_exit_status(tmp_path: Path, returned: str, status: int) -> None:
    rf = tmp_path / "resource.json"
    done = run_program(
        WORKLOAD,
        tmp_path,
        "--mw-master",
        "--mw-master-host",
        "127.0.0.1",
        "--mw-resource-file",
        str(rf),
        "exit",
        returned,
    )
    assert done.returncode == status, done.stderr
    assert resource_file.read(rf).finished
    if returned == "raise":
        assert "RuntimeError: the master algorithm gave up" in done.stderr
        assert "MASTER ALGORITHM RAISED: exit status 255" in done.stdout
    elif status == 255 and returned != "255":
        assert f"MASTER ALGORITHM RETURNED {returned}: exit status 255" in done.stdout


def in_order(lines: list[str], *patterns: str) -> list[str]:
    """The first line matching each regex, each after the previous one; fails if one is missing."""
    found = []
    start = 0
    for pattern in patterns:
        for index in range(start, len(lines)):
            if re.search(pattern, lines[index]):
                found.append(lines[index])
                start = index + 1
                break
        else:
            raise AssertionError(f"no line matching {pattern!r} after {found[-1:]} in:\n" + "\n".join(lines))
    return found


def test_audit_trail_of_master_and_slave_on_stdout(tmp_path: Path) -> None:
    master = spawn_master(WORKLOAD, tmp_path, "--mw-member-id", "audited", "run", "3")
    port = resource_file.read(tmp_path / "resource.json").master_port
    slave = spawn_slave(WORKLOAD, tmp_path)
    assert master.wait() == 0
    assert slave.wait() == 0

    text = master.out()
    assert all(STAMPED.match(line) for line in text.splitlines() if "[A]" in line)
    in_order(
        audit_lines(text),
        r'^INIT MASTER "audited"$',
        rf"^MASTER READY 127\.0\.0\.1:{port}$",
        r"^NEW-CLIENT -> 127\.0\.0\.1:\d+$",
        r'^slave-0 127\.0\.0\.1:\d+ -> \["audited"\] connecting \[unordered\]',
        r"^slave-0 <- SHUTDOWN$",
        r"^slave-0 -> disconnected",
        r'^FINI SHUTDOWN "audited"$',
    )
    in_order(
        audit_lines(slave.out()),
        r'^INIT SLAVE "audited"$',
        rf"^MASTER <- CONNECTED TO 127\.0\.0\.1:{port} FROM 127\.0\.0\.1:\d+$",
        r"^MASTER -> ID slave-0$",
        r"^MASTER -> SHUTDOWN$",
        r'^FINI SHUTDOWN "audited"$',
    )


def test_audit_file_is_appended_to_and_keeps_stdout_clean(tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    audit.write_text("an older line\n")
    for _ in range(2):
        master = spawn_master(WORKLOAD, tmp_path, "--mw-audit-file", str(audit), "exit", "0")
        assert master.wait() == 0
        assert "[A]" not in master.out()
    lines = audit.read_text().splitlines()
    assert lines[0] == "an older line"
    assert all(STAMPED.match(line) for line in lines[1:])
    events = audit_lines("\n".join(lines))
    assert sum(line.startswith("INIT MASTER") for line in events) == 2
    assert sum(line.startswith("FINI SHUTDOWN") for line in events) == 2


def packet_sizes(lines: list[str], pattern: str) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.search(pattern, line))]


@pytest.mark.parametrize("group", [1, 10])
def test_tasks_and_results_travel_in_groups(tmp_path: Path, group: int) -> None:
    count = 100
    master_audit = tmp_path / "master.audit"
    slave_audit = tmp_path / "slave.audit"
    master = spawn_master(
        WORKLOAD,
        tmp_path,
        "--mw-slave-task-group",
        str(group),
        "--mw-slave-result-group",
        str(group),
        "--mw-audit-packets",
        "--mw-audit-file",
        str(master_audit),
        "run",
        str(count),
    )
    slave = spawn_slave(WORKLOAD, tmp_path, "--mw-audit-packets", "--mw-audit-file", str(slave_audit))
    assert master.wait() == 0
    assert slave.wait() == 0
    assert sorted(line["value"] for line in master.json_lines()) == [i * i for i in range(count)]

    on_master = audit_lines(master_audit.read_text())
    on_slave = audit_lines(slave_audit.read_text())
    for sizes in (
        packet_sizes(on_master, rf"^slave-0 <- (\d+) tasks \({group} grouping\)$"),
        packet_sizes(on_master, r"^slave-0 -> (\d+) results$"),
        packet_sizes(on_slave, r"^MASTER -> (\d+) tasks$"),
        packet_sizes(on_slave, r"^MASTER <- (\d+) results$"),
    ):
        assert sum(sizes) == count
        assert max(sizes) == group  # packets are filled up to the group size, never beyond
    if group > 1:
        assert len(packet_sizes(on_master, r"^slave-0 <- (\d+) tasks")) < count


def test_by_default_tasks_due_at_once_and_results_ready_together_share_packets(tmp_path: Path) -> None:
    """Default settings group on their own: no option gives one packet (and one MAC) per task."""
    count = 300
    master_audit = tmp_path / "master.audit"
    master = spawn_master(
        WORKLOAD, tmp_path, "--mw-audit-packets", "--mw-audit-file", str(master_audit), "run", str(count)
    )
    slave = spawn_slave(WORKLOAD, tmp_path)
    assert master.wait() == 0
    assert slave.wait() == 0
    assert sorted(line["value"] for line in master.json_lines()) == [i * i for i in range(count)]
    on_master = audit_lines(master_audit.read_text())
    tasks = packet_sizes(on_master, r"^slave-0 <- (\d+) tasks \(auto grouping\)$")
    results = packet_sizes(on_master, r"^slave-0 -> (\d+) results$")
    assert sum(tasks) == sum(results) == count
    assert len(tasks) < count
    assert len(results) < count
    assert max(results) <= 64  # the default result group bounds a packet


def stream(workdir: Path, count: int, target: int) -> dict[str, Any]:
    """``count`` tasks streamed through a general target number by a master process with 2 slaves; its report."""
    workdir.mkdir()
    master = spawn_master(
        WORKLOAD,
        workdir,
        "--mw-slave-task-group",
        "20",
        "--mw-slave-result-group",
        "20",
        "--mw-audit-file",
        str(workdir / "master.audit"),
        "stream",
        str(count),
        str(target),
    )
    slaves = [spawn_slave(WORKLOAD, workdir, "--mw-audit-file", str(workdir / "slave.audit")) for _ in range(2)]
    assert master.wait(300) == 0, master.err()
    assert [s.wait() for s in slaves] == [0, 0]
    [report] = master.json_lines()
    assert report["received"] == count
    assert report["sum"] == count * (count - 1) // 2
    assert report["most_pending"] <= target
    return report


def test_master_memory_stays_flat_when_streaming_through_the_target_number(tmp_path: Path) -> None:
    """Streaming through a target number of 1000, the master's peak RSS does not grow with the task count.

    Relative, not absolute: the growth of the peak over the start is compared
    between 10^4 and 10^5 tasks, so the interpreter's own size and allocator
    noise cancel out. Keeping every task (submitting all at once costs about
    280 bytes a task) would add some 24 MiB for the 90 000 extra tasks; the
    bound is a third of that.
    """
    mib = 1024
    small = stream(tmp_path / "small", 10_000, 1000)
    big = stream(tmp_path / "big", 100_000, 1000)
    growth_small = small["peak_rss_kib"] - small["rss_kib_at_start"]
    growth_big = big["peak_rss_kib"] - big["rss_kib_at_start"]
    assert growth_big - growth_small < 8 * mib, (small, big)
    assert big["rss_kib_at_end"] - big["rss_kib_at_quarter"] < 8 * mib, big  # flat from 25k to 100k tasks


def test_slave_started_after_the_computation_finished_exits_0_at_once(tmp_path: Path) -> None:
    master = spawn_master(WORKLOAD, tmp_path, "exit", "0")
    assert master.wait() == 0
    assert resource_file.read(tmp_path / "resource.json").finished
    late = spawn_slave(WORKLOAD, tmp_path)
    assert late.wait(10) == 0
    assert "finished" in late.out()
    assert late.err() == ""


def test_slave_exits_non_zero_when_the_master_is_killed(tmp_path: Path) -> None:
    master = spawn_master(WORKLOAD, tmp_path, "--mw-audit-file", str(tmp_path / "master.audit"), "serve", "60")
    slave = spawn_slave(WORKLOAD, tmp_path)
    wait_connected(tmp_path / "master.audit")
    master.kill()
    assert slave.wait() == 4  # ExitCode.MASTER_LOST
    assert any(line.startswith("MASTER LOST") for line in audit_lines(slave.out()))
    assert "FINI EXIT 4" in slave.out()


def wait_connected(audit: Path, count: int = 1) -> None:
    wait_until(lambda: audit.read_text().count("connecting [") >= count, 30, f"{count} slave(s) to connect")

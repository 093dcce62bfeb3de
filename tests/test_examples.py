"""Every example runs as a user runs it (``mwpy local``) and prints its real answer."""

from __future__ import annotations

import ast
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.support import EXAMPLES, mwpy_command, run_local

#: Seconds any one example may take before the test fails (they take one or two).
DEADLINE = 60


def run_example(name: str, *args: str, slaves: int = 2) -> list[str]:
    """Run ``examples/NAME.py`` on local slaves; its stdout lines (exit status 0 asserted)."""
    done = run_local(EXAMPLES / f"{name}.py", *args, slaves=slaves, timeout=DEADLINE)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def test_hello_world_greets_every_string_exactly_once() -> None:
    lines = run_example("hello_world", "--tasks", "25")
    greetings = [m[1] for line in lines if (m := re.fullmatch(r"Got result from slave-\d+: '(.*)'", line))]
    assert sorted(greetings) == sorted(f"Hello World: Task {i}" for i in range(25))
    assert lines[-1] == "hello_world: 25 greetings"


def test_ping_streams_an_exact_count_bounded_by_the_target_number() -> None:
    lines = run_example("ping", "--max-tasks", "20000", "--target", "3000")
    assert lines[-1] == "ping: 20000 pongs, 0 bad"
    sent = re.fullmatch(r"(\d+) pings sent, (\d+) answered in .*", lines[-3])
    assert sent is not None, lines[-3]
    assert (int(sent[1]), int(sent[2])) == (20000, 20000)  # never submitted past --max-tasks
    pending = re.fullmatch(r"at most (\d+) pings were pending at once \(target 3000\)", lines[-2])
    assert pending is not None, lines[-2]
    assert 0 < int(pending[1]) <= 3000  # the general target number kept the stream bounded


def test_ping_reports_a_bad_option_with_usage_and_status_2(tmp_path: Path) -> None:
    command = mwpy_command("local", str(EXAMPLES / "ping.py"), "--workdir", str(tmp_path), "--no-progress")
    done = subprocess.run(
        [*command, "--", "--max-taks", "5"], capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --max-taks" in done.stderr
    assert "Traceback" not in done.stderr


PI_RUN = ("--seed", "2024", "--max-trial-sets", "60", "--trials-per-set", "50000", "--target", "7")


def _pi_estimate(lines: list[str]) -> tuple[float, int]:
    answer = re.fullmatch(r"pi ≈ (\d+\.\d+) ± \d+\.\d+ from (\d+) points", lines[-1])
    assert answer is not None, lines[-1]
    return float(answer[1]), int(answer[2])


def test_monte_carlo_pi_is_within_four_standard_errors() -> None:
    estimate, points = _pi_estimate(run_example("monte_carlo_pi", *PI_RUN))
    assert points == 60 * 50000
    # Each point lands inside with probability pi/4; the estimate 4 * inside / points
    # has standard error 4 * sqrt(p (1 - p) / points), about 0.00095 here.
    p = math.pi / 4
    standard_error = 4 * math.sqrt(p * (1 - p) / points)
    assert abs(estimate - math.pi) < 4 * standard_error


def test_monte_carlo_pi_with_a_seed_is_reproducible_whatever_the_slaves() -> None:
    two = run_example("monte_carlo_pi", *PI_RUN, slaves=2)
    one = run_example("monte_carlo_pi", *PI_RUN, slaves=1)
    assert two[-2:] == one[-2:]


def test_higher_order_compiles_and_applies_the_sent_source() -> None:
    lines = run_example("higher_order")
    outcomes: dict[int, Any] = {}
    for line in lines[:-1]:
        match = re.fullmatch(r"(\d+): horder\(.*\) = (\('(?:applied|failed-compilation)', .*\))", line)
        assert match is not None, line
        outcomes[int(match[1])] = ast.literal_eval(match[2])
    expected: dict[int, Any] = {x: ("applied", (x, x * x)) for x in range(10)}
    expected |= {
        10: ("applied", 10),
        11: ("applied", 12.566371),
        12: ("applied", "abab"),
        13: ("applied", ["a", "to", "three"]),
        15: ("failed-compilation", "not a function: int"),
    }
    syntax_error = outcomes.pop(14)
    assert syntax_error[0] == "failed-compilation"
    assert syntax_error[1].startswith("SyntaxError: ")
    assert outcomes == expected
    assert lines[-1] == "higher_order: 16 tasks, 14 applied, 2 failed compilation"


def test_argument_processing_binds_every_kind_of_parameter() -> None:
    lines = run_example("argument_processing")
    values = {label: ast.literal_eval(value) for label, value in (line.split(": ", 1) for line in lines[:-1])}
    assert values == {
        "required": ("required", 1, 2, 3),
        "optional, d given": ("optional", 4, 5, 6, 7, 42),
        "optional, defaults": ("optional", 4, 5, 6, None, 42),
        "optional, e by keyword": ("optional", 4, 5, 6, None, 8),
        "keyword-only": ("keyword-only", 10, 20, 30, 100, 40, 50),
        "keyword-only, all by keyword": ("keyword-only", 11, 21, 31, 200, None, None),
        "positional-only, default": ("positional-only", 1, 2, 3),
        "positional-only, c by keyword": ("positional-only", 1, 2, 30),
        "rest": ("rest", 100, 102, 103, (104, 105, 106, 107)),
        "rest, empty": ("rest", 100, 102, 103, ()),
        "keywords": ("keywords", 1, {"colour": "blue", "size": 3}),
        "everything, minimal": ("everything", 1, 2, 3, (), 4, 5, {}),
        "everything, full": ("everything", 1, 2, 30, (31, 32), 4, 50, {"f": 60, "g": 70}),
        "everything, b by keyword": ("everything", 1, 2, 3, (), 4, 5, {"f": 6}),
    }
    assert len(lines) == 15  # no label twice
    assert lines[-1] == "argument_processing: 14 results, 0 failed"


def test_with_task_policy_tags_every_result() -> None:
    lines = run_example("with_task_policy")
    results = [line for line in lines if line.startswith("Got ")]
    values = [int(m[1]) for line in results if (m := re.fullmatch(r"Got (\d+) tagged 'a-times10-task' from \S+", line))]
    assert len(values) == len(results) == 100  # every result carries the tag
    assert sorted(values) == [10 * i for i in range(1, 101)]
    assert lines[-1] == "with_task_policy: 100 results, 100 tagged 'a-times10-task'"

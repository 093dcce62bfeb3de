"""mwpy logs through ``logging`` under ``mwpy.*``; ``--mw-log-level`` and ``MWPY_LOG_LEVEL`` turn it on."""

from __future__ import annotations

import logging
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import mwpy
from mwpy.observe import logs
from tests.support import EXAMPLES, PYTHON


def test_the_option_is_listed_and_a_wrong_level_is_one_line_and_status_2(tmp_path: Path) -> None:
    shown = subprocess.run(
        [PYTHON, str(EXAMPLES / "hello_world.py"), "--mw-help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert "--mw-log-level" in shown.stdout
    wrong = subprocess.run(
        [PYTHON, str(EXAMPLES / "hello_world.py"), "--mw-master", "--mw-log-level", "LOUD"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert wrong.returncode == 2
    assert len(wrong.stderr.strip().splitlines()) == 1
    assert "--mw-log-level" in wrong.stderr


def test_mwpy_log_level_shows_the_executor_and_the_master_at_work(tmp_path: Path) -> None:
    script = tmp_path / "logged.py"
    script.write_text(
        textwrap.dedent("""\
            import mwpy

            def one():
                return 1

            if __name__ == "__main__":
                with mwpy.Executor(max_workers=1) as ex:
                    print(ex.submit(one).result())
        """)
    )
    done = subprocess.run(
        [PYTHON, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MWPY_LOG_LEVEL": "info"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert "mwpy.executor INFO: executor" in done.stderr
    assert "mwpy.master INFO: slave-0 connected" in done.stderr
    assert "[A]" not in done.stderr  # the audit trail is its own thing


def test_a_wrong_environment_level_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWPY_LOG_LEVEL", "chatty")
    with pytest.raises(mwpy.ConfigurationError, match="MWPY_LOG_LEVEL"):
        logs.configure()


def test_configuring_twice_installs_one_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("mwpy")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    try:
        logs.configure("DEBUG")
        logs.configure("WARNING")
        assert logger.level == logging.WARNING
        assert sum(isinstance(h, logs._Handler) for h in logger.handlers) == 1
    finally:
        logger.setLevel(saved[0])
        logger.handlers[:] = saved[1]
        logger.propagate = saved[2]

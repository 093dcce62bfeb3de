#!/usr/bin/env python3
"""Take docs/observability.md's screenshots from a real run: the status view and the report.

Why this exists: the pictures in the docs should show what a user's own
commands show, and be easy to take again when the view or the report change.
It runs ``mwpy local examples/monte_carlo_pi.py`` on a real pseudo-terminal
(100 x 30) read through the pyte terminal emulator — the same way
tests/test_local.py checks the view — copies the screen once the computation
is about half done (colours included) into an SVG with rich's own exporter,
then writes the run's report with ``mwpy report`` from the event log that
``mwpy local`` kept, and has headless Chromium turn both into PNGs.

    python tools/screenshots.py docs/   # writes observability-status.png and observability-report.png

Needs the test extras (pyte) and Debian's Chromium (/usr/bin/chromium).
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyte
from rich.console import Console
from rich.style import Style
from rich.text import Text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.obs_support: the pty + pyte driver the tests use

from tests.obs_support import CHROMIUM, COLUMNS, Terminal, headless  # noqa: E402

#: The run shown: long enough to catch it mid-way, short enough to wait for (half a minute on 2 cores).
TASKS = 300
TRIALS = 1_000_000
#: Share of the tasks done when the screen is copied.
SNAPSHOT_AT = 0.4
#: The report is screenshot at this width; tall enough for every plot and the failures table.
REPORT_WINDOW = (1240, 2450)


def _colour(name: str) -> str | None:
    """A pyte colour (``red``, ``brightcyan``, ``brown`` for yellow, ``ff8700``) as rich names it."""
    if name == "default":
        return None
    if re.fullmatch(r"[0-9a-fA-F]{6}", name):
        return f"#{name}"
    name = name.replace("brown", "yellow")
    return f"bright_{name.removeprefix('bright')}" if name.startswith("bright") else name


def screen_text(screen: pyte.Screen) -> Text:
    """The emulated screen as rich text, colours and bold kept, trailing blank lines dropped."""
    rows = [screen.buffer[y] for y in range(screen.lines)]
    while rows and not "".join(rows[-1][x].data for x in range(screen.columns)).strip():
        rows.pop()
    text = Text()
    for row in rows:
        for x in range(screen.columns):
            char = row[x]
            fg, bg = _colour(char.fg), _colour(char.bg)
            if char.reverse:
                fg, bg = bg or "black", fg or "white"
            text.append(char.data, Style(color=fg, bgcolor=bg, bold=char.bold))
        text.append("\n")
    text.rstrip()
    return text


def save_svg(text: Text, path: Path, title: str) -> tuple[int, int]:
    """Write ``text`` as a terminal picture (rich's exporter); its size in pixels."""
    console = Console(record=True, width=COLUMNS, file=io.StringIO(), force_terminal=True)
    console.print(text, soft_wrap=True)
    console.save_svg(str(path), title=title)
    match = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', path.read_text(encoding="utf-8"))
    assert match is not None, "rich's SVG has a viewBox"
    return round(float(match.group(1))), round(float(match.group(2)))


def screenshot(page: Path, png: Path, size: tuple[int, int], profile: Path) -> None:
    """Headless Chromium's picture of ``page`` at ``size``."""
    done = headless(
        CHROMIUM,
        profile,
        "--hide-scrollbars",
        f"--window-size={size[0]},{size[1]}",
        "--virtual-time-budget=10000",
        f"--screenshot={png}",
        page.as_uri(),
    )
    if done.returncode != 0 or not png.exists():
        sys.exit(f"screenshots: chromium failed on {page}: {done.stderr.strip()[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="folder for the PNGs (docs/)")
    options = parser.parse_args(argv)
    if not CHROMIUM.exists():
        sys.exit(f"screenshots: {CHROMIUM} is missing (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="mwpy-screenshots-") as folder:
        tmp = Path(folder)
        work = tmp / "work"
        command = [sys.executable, "-m", "mwpy", "local", str(ROOT / "examples" / "monte_carlo_pi.py")]
        command += ["--slaves", "2", "--workdir", str(work), "--"]
        command += ["--max-trial-sets", str(TASKS), "--trials-per-set", str(TRIALS), "--seed", "1"]
        print("$", " ".join(command[1:]).replace(str(ROOT) + "/", ""), file=sys.stderr)
        term = Terminal(command, deadline=600)
        try:
            term.wait_for(f"/{TASKS}")
            deadline = time.monotonic() + term.deadline
            while _done_share(term.text()) < SNAPSHOT_AT:
                if time.monotonic() > deadline:
                    sys.exit(f"screenshots: the run did not get {SNAPSHOT_AT:.0%} done:\n{term.text()}")
                term.pump(0.2)
            status_svg = tmp / "status.svg"
            size = save_svg(screen_text(term.screen), status_svg, "mwpy local examples/monte_carlo_pi.py")
            if term.wait_exit() != 0:
                sys.exit(f"screenshots: mwpy local failed:\n{term.text()}")
        finally:
            term.close()
        report = tmp / "report.html"
        report_command = [sys.executable, "-m", "mwpy", "report", str(work / "events.jsonl"), "-o", str(report)]
        print("$", " ".join(report_command[1:]), file=sys.stderr)
        subprocess.run(report_command, check=True)
        options.output.mkdir(parents=True, exist_ok=True)
        screenshot(status_svg, options.output / "observability-status.png", size, tmp / "profile")
        screenshot(report, options.output / "observability-report.png", REPORT_WINDOW, tmp / "profile")
    for name in ("observability-status.png", "observability-report.png"):
        print(options.output / name)
    return 0


def _done_share(screen: str) -> float:
    """The share of tasks done the view's progress bar shows (0 before it shows one)."""
    match = re.search(rf"([\d,]+)/{TASKS} \(", screen)
    return int(match.group(1).replace(",", "")) / TASKS if match else 0.0


if __name__ == "__main__":
    sys.exit(main())

"""The documentation site (mkdocs.yml, docs/): what a reader follows must work, and say nothing of our machines.

Every code block of the tutorial and the how-to guides runs here as a reader would run it, page by page in
a fresh folder: a ``python title="NAME.py"`` block is saved as NAME.py, a ``python`` block without a title
is run with the interpreter, and each line of a ``sh`` block is run by bash with this mwpy's ``mwpy`` and
``python`` first on PATH. A block may be left out only by an ``<!-- not run: REASON -->`` line right before
it (those that need an HTCondor pool: the pool's tests run the same commands). The build itself is
``make docs`` (``mkdocs build --strict``), which ``make test`` runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import PYTHON, ROOT

DOCS = ROOT / "docs"
#: The pages whose code blocks a reader runs as written.
RUNNABLE = sorted([*(DOCS / "tutorial").glob("*.md"), *(DOCS / "howto").glob("*.md")])
#: A fenced block with what precedes it: the optional "not run" comment, the language, the title, the code.
BLOCK = re.compile(
    r"(?:<!-- not run: (?P<reason>[^>]+?) -->\n)?```(?P<lang>\w+)(?: title=\"(?P<title>[^\"]+)\")?\n(?P<code>.*?)```",
    re.DOTALL,
)
#: Issue numbers ("issue 21", "issues 21-25", "#23") and paths of a development machine.
PRIVATE = re.compile(
    r"\b[Ii]ssues? \d+|(?<![\w/.&])#\d+\b(?!-)|/tmp/|/work/|/root/|/home/(?!me/)|\bworktree", re.MULTILINE
)


def user_documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("page", user_documents(), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_documentation_names_no_issue_and_no_path_of_a_development_machine(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group()!r}" for match in PRIVATE.finditer(text)]
    assert not found, found


def test_the_private_pattern_catches_what_it_is_for() -> None:
    caught = "issue 21 item 8; issues 21\N{EN DASH}25; fixed in #23; /tmp/span.json; /work/wt/arch-base; a worktree of"
    kept = "[section 13](condor.md#13-slave-shapes) &#123; /home/me/run/resource.json; 4 issues"
    assert len(PRIVATE.findall(caught)) == 6
    assert PRIVATE.findall(kept) == []


def test_every_page_is_in_the_site_s_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    missing = [str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md") if f" {page.relative_to(DOCS)}\n" not in nav]
    assert not missing, missing


def _hook() -> ModuleType:
    """tools/docs_reference.py, loaded from its file as MkDocs loads a hook (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "tools" / "docs_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_references_hold_every_command_and_every_mw_option() -> None:
    docs_reference = _hook()
    commands = docs_reference.commands_reference()
    for name in ("local", "overseer", "bundle", "status", "jobs", "report"):
        assert f"## `mwpy {name}`" in commands
    assert "### `mwpy overseer --backend condor`" in commands
    assert "`--submit-file SUBMIT_FILE`" in commands  # the condor back end's own option
    options = docs_reference.mw_options_reference()
    names = re.findall(r"^\| `(--mw-[\w-]+)", options, re.MULTILINE)
    assert names == list(docs_reference.options._SPECS)


def _run(command: list[str], folder: Path, what: str) -> None:
    env = {**os.environ, "PATH": f"{Path(PYTHON).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: str(page.relative_to(DOCS)))
def test_every_code_block_of_the_tutorial_and_the_how_to_guides_runs(page: Path, tmp_path: Path) -> None:
    ran = 0
    for number, block in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8")), start=1):
        if block["reason"]:
            continue
        what = f"{page.name}, block {number}"
        if block["lang"] == "python" and block["title"]:
            (tmp_path / block["title"]).write_text(block["code"], encoding="utf-8")
            continue
        if block["lang"] == "python":
            script = tmp_path / f"block{number}.py"
            script.write_text(block["code"], encoding="utf-8")
            _run([PYTHON, str(script)], tmp_path, what)
        elif block["lang"] == "sh":
            for line in block["code"].splitlines():
                command = line.split("  #", 1)[0].strip()
                if command and not command.startswith("#"):
                    _run(["bash", "-c", command], tmp_path, f"{what}: {command}")
        else:
            pytest.fail(f"{what}: a {block['lang']} block is neither run nor marked <!-- not run: ... -->")
        ran += 1
    if not ran:
        pytest.skip(f"{page.name} has no code block to run")

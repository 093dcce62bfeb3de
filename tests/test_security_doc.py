"""docs/security.md's threat table names, for each threat, the tests that attack it: every one must exist.

A renamed or deleted test would otherwise leave the table claiming a defence nothing checks.
"""

from __future__ import annotations

import ast
import re

from tests.support import ROOT

DOC = ROOT / "docs" / "security.md"


def cited() -> dict[str, set[str]]:
    """Test functions by file, as the third column of the threat table cites them."""
    table = DOC.read_text(encoding="utf-8").split("## What is protected", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[str]] = {}
    for row in table.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[2].startswith("test_"):
            continue
        for cell in cells[2].split(";"):
            group = re.sub(r"\([^)]*\)", "", cell).strip()  # "(a real tmpfs)": a note, not a test
            name, _, tests = group.partition("::") if "::" in group else group.partition(":")
            found.setdefault(name.strip(), set()).update(t.strip() for t in tests.split(",") if t.strip())
    return found


def defined(path: str) -> set[str]:
    tree = ast.parse((ROOT / "tests" / path).read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def test_every_test_the_threat_table_names_exists() -> None:
    tables = cited()
    assert len(tables) >= 10, tables  # the parser read the table
    missing = {path: sorted(tests - defined(path)) for path, tests in tables.items()}
    assert {path: tests for path, tests in missing.items() if tests} == {}

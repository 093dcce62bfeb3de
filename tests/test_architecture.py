"""The module map of docs/design.md holds: no import cycle, layers point one way.

These read mwpy's own source with :mod:`ast`, so they fail the moment a
module gains an import the map does not allow, before any behaviour breaks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "mwpy"
#: Imports only for type annotations that docs/design.md explains (importer -> imported).
EXPLAINED_TYPE_CHECKING = {("mwpy.task", "mwpy.master")}
#: Pairs the restructuring of issue 8 removed on purpose; neither may come back.
FORBIDDEN = {("mwpy.master", "mwpy.slave"), ("mwpy.wire.protocol", "mwpy.task"), ("mwpy.net.engine", "mwpy.slave")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def targets(node: ast.AST, modules: set[str]) -> set[str]:
    """The mwpy modules an import statement binds (``from mwpy import x`` names submodule x when there is one)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "mwpy"}
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mwpy" and node.level == 0:
        for alias in node.names:
            sub = f"{node.module}.{alias.name}"
            found.add(sub if sub in modules else node.module)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(run-time imports at module level, imports under ``if TYPE_CHECKING:``) of every mwpy module."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    runtime: dict[str, set[str]] = {}
    typing_only: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        runtime[name], typing_only[name] = set(), set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for inner in ast.walk(node):
                    typing_only[name] |= targets(inner, modules)
            else:
                runtime[name] |= targets(node, modules)
        runtime[name].discard(name)
    return runtime, typing_only


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules (the package's own imports of its submodules excluded), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == "mwpy" and node.startswith("mwpy."):
                return [*stack, nxt]  # a submodule importing the package re-enters its __init__
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_no_import_cycle_at_run_time() -> None:
    runtime, _ = import_graph()
    found = cycle({name: deps for name, deps in runtime.items() if name != "mwpy"})
    assert found is None, " -> ".join(found or [])


def test_every_type_checking_import_is_one_the_map_explains() -> None:
    _, typing_only = import_graph()
    pairs = {(name, dep) for name, deps in typing_only.items() for dep in deps}
    assert pairs <= EXPLAINED_TYPE_CHECKING


@pytest.mark.parametrize(("importer", "imported"), sorted(FORBIDDEN))
def test_layers_point_one_way(importer: str, imported: str) -> None:
    runtime, typing_only = import_graph()
    assert imported not in runtime[importer] | typing_only[importer]


def test_errors_is_the_root_of_the_map() -> None:
    """errors.py imports no other mwpy module, so every module can import it."""
    runtime, typing_only = import_graph()
    assert runtime["mwpy.errors"] | typing_only["mwpy.errors"] == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted cycle is reported."""
    assert cycle({"mwpy.a": {"mwpy.b"}, "mwpy.b": {"mwpy.a"}}) == ["mwpy.a", "mwpy.b", "mwpy.a"]
    assert cycle({"mwpy.a": {"mwpy"}}) == ["mwpy.a", "mwpy"]

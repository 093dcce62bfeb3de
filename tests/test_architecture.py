"""docs/design.md's architecture holds: the layers it lists, no import cycle, no private attribute borrowed unsaid.

These read mwpy's own source with :mod:`ast` (and the layer list from
docs/design.md itself), so they fail the moment a module gains an import or
a borrowing the design does not allow, before any behaviour breaks. Each
checker is tested on planted examples too, so that it can fail.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "mwpy"
DESIGN = ROOT / "docs" / "design.md"
#: Imports only for type annotations (importer -> imported), each explained in docs/design.md.
EXPLAINED_TYPE_CHECKING = {
    ("mwpy.task", "mwpy.futures"),  # submit()'s return type; the master makes the future, above
    ("mwpy.futures", "mwpy.intake"),  # a TaskFuture waits through its master's intake (loaded by the master)
    ("mwpy.streams", "mwpy.intake"),  # the streams are the master's own, made by mw.map with its intake
    ("mwpy.program", "mwpy.master"),  # loaded for real only in a master (a slave never needs it)
    ("mwpy.slaveside.startup", "mwpy.data.cache"),  # a slave's cache and shared objects load with their first use
    ("mwpy.data.plane", "mwpy.data.cache"),
    ("mwpy.data.plane", "mwpy.data.shares"),
    ("mwpy.data.plane", "mwpy.data.holding"),
    ("mwpy.slaveside.startup", "mwpy.resource_file"),  # read by a slave given one (an Executor's early slaves not)
    ("mwpy.core.outcomes", "mwpy.core.journal"),  # sqlite3 only with --mw-journal
    ("mwpy.observe.renderers", "mwpy.observe.events"),  # the event log only with --mw-events
    ("mwpy.observe.renderers", "mwpy.observe.goodput"),
    ("mwpy.executor", "mwpy.executor_core"),  # loaded by the constructor, after a plain executor's slaves start
    ("mwpy.executor", "mwpy.wire.codec"),
    ("mwpy.executor", "mwpy.executor_setup"),
    ("mwpy.pool.slave_pool", "mwpy.overseer"),  # made by the pool's thread at its first look, after the greeting
    ("mwpy.data.shares", "mwpy.data.server"),  # the master's file service starts with the first object shared
    ("mwpy.data.shares", "mwpy.data.cache"),  # a slave's, which the master's engine never makes
}
#: Pairs the restructuring of issue 8 removed on purpose; neither may come back (they share a layer now).
FORBIDDEN = {("mwpy.master", "mwpy.slave"), ("mwpy.wire.protocol", "mwpy.task"), ("mwpy.net.engine", "mwpy.slave")}
#: The package's names for its lazily loaded public API (mwpy/__init__.py, PEP 562): for type checkers only.
LAZY_PACKAGE = "mwpy"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))}


def targets(node: ast.AST, known: set[str]) -> set[str]:
    """The mwpy modules an import statement binds (``from mwpy import x`` names submodule x when there is one)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "mwpy"}
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mwpy" and node.level == 0:
        for alias in node.names:
            sub = f"{node.module}.{alias.name}"
            found.add(sub if sub in known else node.module)
    return found


def _type_checking_blocks(tree: ast.Module) -> list[ast.If]:
    return [node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]


def import_graph(*, anywhere: bool = False) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(run-time imports, imports under ``if TYPE_CHECKING:``) of every mwpy module.

    Run-time imports are those at module level, or with ``anywhere`` also those inside functions (the
    lazy ones: run-time imports all the same, only later).
    """
    trees = modules()
    known = set(trees)
    runtime: dict[str, set[str]] = {}
    typing_only: dict[str, set[str]] = {}
    for name, tree in trees.items():
        hidden = _type_checking_blocks(tree)
        typing_only[name] = {
            target for block in hidden for inner in ast.walk(block) for target in targets(inner, known)
        }
        skipped = {id(inner) for block in hidden for inner in ast.walk(block)}
        nodes = ast.walk(tree) if anywhere else iter(tree.body)
        runtime[name] = {target for node in nodes if id(node) not in skipped for target in targets(node, known)}
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


# ---------------------------------------------------------------------- layers, read from docs/design.md


def design_layers(text: str) -> list[list[str]]:
    """The layer list between ``<!-- layers -->`` and ``<!-- /layers -->``: one numbered line per layer,
    bottom up, its modules in backticks (``mwpy.wire.*`` also names the package ``mwpy.wire``)."""
    match = re.search(r"<!-- layers -->\n(.*?)<!-- /layers -->", text, re.DOTALL)
    assert match is not None, "docs/design.md has no <!-- layers --> list"
    return [re.findall(r"`(mwpy[\w.*]*)`", line) for line in match.group(1).splitlines() if re.match(r"\d+\. ", line)]


def layer_of(module: str, layers: list[list[str]]) -> list[int]:
    """The layers whose patterns name ``module`` (a well-placed module is in exactly one)."""
    return [
        index
        for index, patterns in enumerate(layers)
        if any(fnmatch.fnmatchcase(module, p) or (p.endswith(".*") and module == p[:-2]) for p in patterns)
    ]


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> Iterator[str]:
    """Each run-time import that points up the layer list, and each module the list does not place once."""
    for module in sorted(graph):
        placed = layer_of(module, layers)
        if len(placed) != 1:
            yield f"{module} is in {len(placed)} layers of docs/design.md, not one"
            continue
        for imported in sorted(graph[module]):
            above = layer_of(imported, layers)
            if above and above[0] > placed[0]:
                yield f"{module} (layer {placed[0] + 1}) imports {imported} (layer {above[0] + 1})"


def test_every_run_time_import_points_down_the_layers_of_design_md() -> None:
    runtime, _ = import_graph(anywhere=True)
    runtime.pop(LAZY_PACKAGE)  # the package itself imports nothing at run time but its leaves
    assert list(upward_imports(runtime, design_layers(DESIGN.read_text(encoding="utf-8")))) == []


def test_the_layer_checker_finds_an_upward_import_and_an_unplaced_module() -> None:
    layers = design_layers(
        "<!-- layers -->\n1. **base**: `mwpy.errors`\n2. **wire**: `mwpy.wire.*`\n<!-- /layers -->\n"
    )
    assert layers == [["mwpy.errors"], ["mwpy.wire.*"]]
    graph = {"mwpy.errors": {"mwpy.wire.protocol"}, "mwpy.wire": set(), "mwpy.wire.protocol": {"mwpy.errors"}}
    assert list(upward_imports(graph, layers)) == ["mwpy.errors (layer 1) imports mwpy.wire.protocol (layer 2)"]
    assert list(upward_imports({"mwpy.stray": set()}, layers)) == [
        "mwpy.stray is in 0 layers of docs/design.md, not one"
    ]


def test_the_lazy_imports_are_caught_as_run_time_imports() -> None:
    """A function-level import is an import all the same: the layer test sees it."""
    runtime, _ = import_graph(anywhere=True)
    assert "mwpy.master" in runtime["mwpy.program"]  # imported in _run_master, not at the top
    assert "mwpy.master" not in import_graph()[0]["mwpy.program"]


# ---------------------------------------------------------------------- cycles and type-checking imports


def test_no_import_cycle_at_run_time() -> None:
    runtime, _ = import_graph()
    found = cycle({name: deps for name, deps in runtime.items() if name != LAZY_PACKAGE})
    assert found is None, " -> ".join(found or [])


def all_imports() -> dict[str, set[str]]:
    """Every import of every module: at module level, inside functions, and under ``if TYPE_CHECKING:``."""
    runtime, typing_only = import_graph(anywhere=True)
    return {name: deps | typing_only[name] for name, deps in runtime.items() if name != LAZY_PACKAGE}


def test_no_import_cycle_counting_function_level_and_type_checking_imports() -> None:
    """A cycle through a lazy or a type-checking import is a knot all the same: the modules cannot be read,
    tested or moved apart (round 2 left one of 12 modules through task.py; executor <-> executor_core)."""
    found = cycle(all_imports())
    assert found is None, " -> ".join(found or [])


def test_the_whole_graph_holds_the_lazy_and_the_type_checking_imports() -> None:
    """The graph the test above reads sees both kinds the run-time graph leaves out."""
    graph = all_imports()
    assert "mwpy.executor_core" in graph["mwpy.executor"]  # imported in the constructor, and for annotations
    assert "mwpy.futures" in graph["mwpy.task"]  # for annotations only
    assert "mwpy.futures" not in import_graph(anywhere=True)[0]["mwpy.task"]


def test_every_type_checking_import_is_one_the_map_explains() -> None:
    _, typing_only = import_graph()
    pairs = {(name, dep) for name, deps in typing_only.items() for dep in deps if name != LAZY_PACKAGE}
    assert pairs <= EXPLAINED_TYPE_CHECKING


@pytest.mark.parametrize(("importer", "imported"), sorted(FORBIDDEN))
def test_what_was_taken_apart_stays_apart(importer: str, imported: str) -> None:
    runtime, typing_only = import_graph(anywhere=True)
    assert imported not in runtime[importer] | typing_only[importer]


def test_errors_is_the_root_of_the_map() -> None:
    """errors.py imports no other mwpy module, so every module can import it."""
    runtime, typing_only = import_graph(anywhere=True)
    assert runtime["mwpy.errors"] | typing_only["mwpy.errors"] == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted cycle is reported."""
    assert cycle({"mwpy.a": {"mwpy.b"}, "mwpy.b": {"mwpy.a"}}) == ["mwpy.a", "mwpy.b", "mwpy.a"]
    assert cycle({"mwpy.a": {"mwpy"}}) == ["mwpy.a", "mwpy"]


# ---------------------------------------------------------------------- private attributes


def shared_with(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Private attribute name -> modules allowed to use it, from every class's ``_SHARED_WITH`` mapping."""
    allowed: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign | ast.Assign) and "_SHARED_WITH" in ast.unparse(node).split("=")[0]:
                mapping = ast.literal_eval(node.value) if node.value is not None else {}
                for name, users in mapping.items():
                    allowed.setdefault(name, set()).update(users)
    return allowed


def own_names(tree: ast.Module) -> set[str]:
    """Private names the module's own classes define: in a class body, in ``__slots__``, or as ``self._x``."""
    names: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__ entries
    return {name for name in names if name.startswith("_")}


def foreign_modules(tree: ast.Module) -> set[str]:
    """Local names bound to modules of other projects (``os``, ``argparse``): their private API is theirs."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("mwpy")}
    return bound


def borrowings(module: str, tree: ast.Module, allowed: dict[str, set[str]]) -> Iterator[str]:
    """Each ``x._name`` (x not ``self``/``cls``) this module uses that it neither owns nor was lent."""
    own, foreign = own_names(tree), foreign_modules(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and re.fullmatch(r"_[a-zA-Z]\w*", node.attr)):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls", *foreign):
            continue
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "super":
            continue
        if node.attr in own or module in allowed.get(node.attr, ()):
            continue
        yield f"{module}:{node.lineno}: {ast.unparse(node)}"


def test_no_module_uses_a_private_attribute_of_another_class_that_the_class_did_not_declare() -> None:
    trees = modules()
    allowed = shared_with(trees)
    assert [line for name, tree in trees.items() for line in borrowings(name, tree, allowed)] == []


def test_the_borrowing_checker_finds_an_undeclared_borrowing_and_accepts_a_declared_one() -> None:
    lender = ast.parse(
        "from typing import ClassVar\n"
        "class Lender:\n"
        "    _SHARED_WITH: ClassVar = {'_lent': ('mwpy.user',)}\n"
        "    def __init__(self):\n"
        "        self._lent = 1\n"
        "        self._kept = 2\n"
    )
    user = ast.parse(
        "import os\n"
        "def use(lender, self):\n"
        "    os._exit(0)\n"  # another project's module: its own business
        "    return self._anything, lender._lent, lender._kept, super()._also\n"
    )
    allowed = shared_with({"mwpy.lender": lender})
    assert allowed == {"_lent": {"mwpy.user"}}
    assert list(borrowings("mwpy.user", user, allowed)) == ["mwpy.user:4: lender._kept"]
    assert list(borrowings("mwpy.other", user, allowed)) == ["mwpy.other:4: lender._lent", "mwpy.other:4: lender._kept"]
    assert list(borrowings("mwpy.lender", lender, allowed)) == []


@pytest.mark.parametrize("name", ["mwpy.master", "mwpy.net.engine"])
def test_the_engine_and_the_master_stay_short_enough_to_read(name: str) -> None:
    """Issue 20: the modules of Engine and Master under 400 lines each (they grew past 600 before)."""
    path = PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")
    assert len(path.read_text(encoding="utf-8").splitlines()) < 400


def test_no_class_in_mwpy_is_longer_than_500_lines() -> None:
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, tree in modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None and node.end_lineno - node.lineno >= 500
    ]
    assert long == []


def test_no_module_of_mwpy_is_longer_than_700_lines() -> None:
    """Modules are cut along their responsibilities (docs/design.md names each cut) before they grow past a
    newcomer's reading: a module over 700 lines holds more than one concern."""
    lines = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for path in sorted(PACKAGE.rglob("*.py"))}  # fmt: skip
    assert {path: n for path, n in lines.items() if n > 700} == {}


# ---------------------------------------------------------------------- the user's design card


@pytest.mark.parametrize(
    ("path", "defines"),
    [
        ("mwpy/master.py", "class Master"),
        ("mwpy/slave.py", "class Slave"),
        ("mwpy/resource_file.py", "class ResourceFile"),
        ("mwpy/overseer.py", "class Overseer"),
    ],
)
def test_the_modules_the_design_card_names_hold_what_it_names_them_for(path: str, defines: str) -> None:
    """The card names these files: each holds its subject itself, not a re-export of a module elsewhere."""
    assert re.search(rf"^{defines}\b", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE)


@pytest.mark.parametrize("name", ["master.sub", "slaves.sub"])
def test_the_submit_files_the_card_names_are_at_the_top_level(name: str) -> None:
    """``submit/NAME``, as the card writes it: a submit file with its queue statement."""
    assert re.search(r"^\s*queue\b", (ROOT / "submit" / name).read_text(encoding="utf-8"), re.IGNORECASE | re.MULTILINE)

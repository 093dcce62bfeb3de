"""Which functions slaves can import by their module and name, and which must travel by value.

A slave imports a function's module as ``pickle`` does, and loads the user's script as ``__mp_main__``
(mwpy/_spawn.py), so a function of ``__main__`` reaches it only if loading the script defines it. This module
decides; :mod:`mwpy.wire.codec` pickles accordingly. Kept apart from the codec because it reads the script's
source (a file) and remembers it, where the codec does no I/O and keeps no state.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable
from typing import Any

#: Scripts read by :func:`_script_names`: their modification time and the names loading them binds.
_SCRIPTS: dict[str, tuple[int, frozenset[str]]] = {}


def by_value(fn: Callable[..., Any]) -> bool:
    """Whether slaves cannot import ``fn`` by its module and name: a lambda, a closure, or a function of
    ``__main__`` that loading its script does not define (a notebook's, a REPL's, a script read from stdin,
    one defined under ``if __name__ == "__main__":``)."""
    qualname = getattr(fn, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        return True
    if getattr(fn, "__module__", None) != "__main__":
        return False
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return not isinstance(path, str) or qualname.partition(".")[0] not in _script_names(path)


def _script_names(path: str) -> frozenset[str]:
    """The names a slave's loading of the script at ``path`` binds (mwpy/_spawn.py runs it as ``__mp_main__``):
    its top-level statements' names, except under ``if __name__ == "__main__":``; none if it is no file."""
    try:
        stamp = os.stat(path).st_mtime_ns
        known = _SCRIPTS.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        with open(path, "rb") as source:
            tree = ast.parse(source.read(), path)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, ast.If) and "__main__" in ast.unparse(statement.test):
            statements.extend(statement.orelse)  # the guard's body runs only in the master
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
        elif isinstance(statement, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for part in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(getattr(statement, part, ()))
        elif isinstance(statement, ast.ExceptHandler):
            statements.extend(statement.body)
        else:
            names.update(node.id for node in ast.walk(statement) if isinstance(node, ast.Name))
            names.update((alias.asname or alias.name).partition(".")[0] for alias in getattr(statement, "names", ()))
    _SCRIPTS[path] = (stamp, frozenset(names))
    return _SCRIPTS[path][1]

"""How an algorithm's end becomes the process's exit status, for both roles (docs/exit-codes.md)."""

from __future__ import annotations

import os
import sys


def exit_status(value: object) -> int:
    """An algorithm's return value as an exit status: an int 0..255 as is, anything else 255."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return value
    return 255


def status_of(exc: SystemExit) -> int:
    """The exit status ``sys.exit(code)`` asks for, as Python itself would exit with it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exit_status(exc.code)
    print(exc.code, file=sys.stderr)
    return 1


def program_name() -> str:
    """The name a process's one-line messages start with."""
    return os.path.basename(sys.argv[0]) or "mwpy"

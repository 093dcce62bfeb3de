"""The no-op task the peers run, in its own module so that worker processes can import it by name."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def echo(x: T) -> T:
    """Return the argument: the task does no work, so only the framework's cost is measured."""
    return x

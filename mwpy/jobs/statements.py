"""The lines of a submit file: where its ``queue`` statements are, and what each one sees.

``htcondor2.Submit`` reads a description up to its first ``queue`` statement
and drops the rest. ``condor_submit`` goes on: the commands after a ``queue``
change what the next ``queue`` queues, and every job joins one cluster with
process numbers that keep counting. This module cuts the file into one text
per ``queue`` statement, each holding every line before that statement (the
earlier statements blanked, so line numbers stay) and the statement itself,
so that ``htcondor2.Submit`` reads each exactly as ``condor_submit`` reads
the file at that point.

It also finds the line of a syntax error (the bindings only say
``parse_up_to_q_line() failed``), and the ``NAME = VALUE`` lines whose name
is neither a command nor used by any value (``condor_submit`` warns about
those: "... was unused by condor_submit. Is it a typo?").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

_QUEUE = re.compile(r"queue(\s|$)", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^\s*([+A-Za-z_][\w.+-]*)\s*(=|@=)\s*(.*)$", re.DOTALL)
_CONTROL = re.compile(r"^\s*(if|elif|else|endif|error|warning|include)\b", re.IGNORECASE)
#: ``$(name)``, ``$(name:default)``, ``$Fnx(name)``, ``$INT(name,...)``: the names a value uses.
_REFERENCE = re.compile(r"\$[A-Za-z_]*\(\s*([A-Za-z_][\w.]*)")
_BLOCK = re.compile(r"^\s*[+A-Za-z_][\w.+-]*\s*@=\s*(\S+)\s*$")
_DEFINED = re.compile(r"\bdefined\s+([A-Za-z_][\w.]*)", re.IGNORECASE)
#: ``include : FILE``, ``include : COMMAND ARGS |``, ``include command : COMMAND ARGS``, ``include ifexist : FILE``.
_INCLUDE = re.compile(r"^\s*include\s*(command|ifexist)?\s*:\s*(.*?)\s*$", re.IGNORECASE)


@attrs.frozen
class Line:
    """One logical line: its first physical line number (1-based), and its text with continuations joined."""

    number: int
    last: int  # the last physical line it spans
    text: str


@attrs.frozen
class QueueStatement:
    """A ``queue`` statement: where it is, and the text ``htcondor2.Submit`` must read for it."""

    number: int  # its line
    source: str  # every line before it (earlier queue statements blanked) and the statement itself


def logical_lines(text: str) -> Iterator[Line]:
    """The file's statements: continuations (``\\`` at the end) joined, ``@=tag`` blocks and the item lines
    of ``queue ... from (`` kept with their first line."""
    physical = text.splitlines()
    index = 0
    while index < len(physical):
        last, joined = _extent(physical, index)
        yield Line(index + 1, last + 1, joined)
        index = last + 1


def _extent(physical: list[str], first: int) -> tuple[int, str]:
    """The last physical line (0-based) of the statement that starts at ``first``, and its text."""
    line = physical[first]
    block = _BLOCK.match(line)
    if block is not None:  # NAME @=TAG ... @TAG
        last = first
        while last + 1 < len(physical) and physical[last].strip() != "@" + block.group(1):
            last += 1
        return last, "\n".join(physical[first : last + 1])
    last = first
    while line.rstrip().endswith("\\") and last + 1 < len(physical) and not _comment(line):
        last += 1
        line = line.rstrip()[:-1] + " " + physical[last].strip()
    if _is_queue(line) and "(" in line and not line.rstrip().endswith(")"):
        while last + 1 < len(physical):  # up to the closing parenthesis of the item list
            last += 1
            if physical[last].strip().startswith(")"):
                break
        return last, "\n".join([line, *physical[first + 1 : last + 1]])
    return last, line


def _comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _is_queue(line: str) -> bool:
    return _QUEUE.match(line.lstrip()) is not None and not _comment(line)


def queue_statements(text: str) -> list[QueueStatement]:
    """One text per ``queue`` statement, each for ``htcondor2.Submit`` to read on its own."""
    physical = text.splitlines()
    statements = []
    blanked = list(physical)
    for line in logical_lines(text):
        if not _is_queue(line.text):
            continue
        before = blanked[: line.number - 1]
        own = physical[line.number - 1 : line.last]
        statements.append(QueueStatement(line.number, "\n".join([*before, *own]) + "\n"))
        for number in range(line.number - 1, line.last):
            blanked[number] = ""
    return statements


def after_last_queue(text: str) -> list[Line]:
    """The commands after the last ``queue`` statement (no job uses them)."""
    lines = [line for line in logical_lines(text) if line.text.strip() and not _comment(line.text)]
    last = max((n for n, line in enumerate(lines) if _is_queue(line.text)), default=None)
    return [] if last is None else lines[last + 1 :]


def syntax_error(text: str) -> Line | None:
    """The first line that is no statement of the submit language, or None."""
    return next((line for line in logical_lines(text) if not is_statement(line)), None)


@attrs.frozen
class Include:
    """An ``include`` line: what it names, and whether that is a command whose output is read."""

    line: Line
    target: str  # the file, or the command line without its ``|``
    command: bool
    optional: bool  # ``include ifexist``: a missing file is no error


def includes(text: str) -> Iterator[Include]:
    """The file's ``include`` lines, in order."""
    for line in logical_lines(text):
        found = _INCLUDE.match(line.text)
        if found is None or _comment(line.text):
            continue
        kind, target = (found.group(1) or "").lower(), found.group(2)
        piped = target.endswith("|")
        yield Include(line, target.rstrip("|").strip(), kind == "command" or piped, kind == "ifexist")


def is_statement(line: Line) -> bool:
    """A blank, a comment, ``NAME = VALUE``, ``NAME @= TAG``, ``queue``, ``if``/``else``/``endif``, ``include``..."""
    stripped = line.text.strip()
    if not stripped or _comment(stripped) or _is_queue(stripped) or _CONTROL.match(stripped):
        return True
    return _ASSIGNMENT.match(stripped) is not None


def assignments(text: str) -> Iterator[tuple[Line, str, str]]:
    """``(line, name, value)`` of every ``NAME = VALUE`` line (``@=`` blocks give their body)."""
    for line in logical_lines(text):
        if _comment(line.text) or _is_queue(line.text):
            continue
        found = _ASSIGNMENT.match(line.text)
        if found is not None:
            yield line, found.group(1), found.group(3)


def used_names(text: str) -> set[str]:
    """Every name a value, a queue statement or a condition refers to (lower case)."""
    names = {name.lower() for name in _REFERENCE.findall(text)}
    names |= {name.lower() for name in _DEFINED.findall(text)}
    return names

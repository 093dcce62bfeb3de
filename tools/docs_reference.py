"""MkDocs hook (mkdocs.yml ``hooks:``): the command and option references, generated from the parsers at build time.

It also turns the Sphinx roles some docstrings use (``:class:`~mwpy.errors.UsageError```), which
mkdocstrings prints as they are, into plain code names.

A page holds a marker comment, ``<!-- generated: commands -->`` or ``<!-- generated: mw-options -->``; this
hook replaces it with Markdown made from ``mwpy``'s argparse parsers (every back end's ``overseer`` options
included) and from the ``--mw-*`` option registry. The help texts live once, in the code, and the site can
never describe an option the code does not have.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from mwpy import backends, cli, options


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: each marker on the page is replaced by its generated reference."""
    for name, make in (("commands", commands_reference), ("mw-options", mw_options_reference)):
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


#: A Sphinx role as the docstring renderer leaves it in the HTML: ``:class:<code>~mwpy.x.Name</code>``.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html: str, **_: Any) -> str:
    """MkDocs' hook: a Sphinx role becomes its code name (``~`` keeps the last part, as in Sphinx)."""
    return ROLE.sub(lambda role: f"<code>{role[2].rsplit('.', 1)[-1] if role[1] else role[2]}</code>", html)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _argument(action: argparse.Action) -> str:
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()  # a tuple: nargs > 1
    if not action.option_strings:
        return f"`{metavar.upper()}`"
    value = "" if action.nargs == 0 else f" {metavar}"
    return ", ".join(f"`{name}{value}`" for name in action.option_strings)


def _help(action: argparse.Action) -> str:
    """The argument's help, with its default when the help does not give it."""
    text = action.help or ""
    shown = action.default not in (None, False, argparse.SUPPRESS) and "default" not in text
    return f"{text} (default {action.default})".strip() if shown else text


def _arguments_table(parser: argparse.ArgumentParser, skip: frozenset[str] = frozenset()) -> list[str]:
    rows = ["| argument | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in skip or action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| {_argument(action)} | {_cell(_help(action))} |")
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands_reference() -> str:
    """Every ``mwpy`` command: its usage, description and arguments, then each back end's overseer options."""
    parser = cli._parser()
    lines: list[str] = []
    for name, command in _subcommands(parser).items():
        lines += [f"## `mwpy {name}`", "", "```text", command.format_usage().strip(), "```", ""]
        if command.description:
            lines += [command.description, ""]
        lines += [*_arguments_table(command), ""]
    base = {action.dest for action in _subcommands(parser)["overseer"]._actions}
    for backend in backends.names():
        overseer = _subcommands(cli._parser(backends.lookup(backend)))["overseer"]
        table = _arguments_table(overseer, skip=frozenset(base))
        if len(table) > 2:
            lines += [f"### `mwpy overseer --backend {backend}`", "", *table, ""]
    return "\n".join(lines)


def mw_options_reference() -> str:
    """Every ``--mw-*`` option of a program, as ``--mw-help`` prints it, from the same table."""
    rows = ["| option | what it does |", "|---|---|"]
    for name, spec in options._SPECS.items():
        shown = f"`{name} {spec.metavar}`" if spec.metavar else f"`{name}`"
        more = " May be given more than once." if spec.repeat else ""
        rows.append(f"| {shown} | {_cell(spec.help)}{more} |")
    return "\n".join(rows)

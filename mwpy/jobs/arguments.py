"""``arguments`` and ``environment`` in both of condor_submit's syntaxes: the new one (in double quotes, ``'...'``
groups, ``''`` and ``""``) and the old one (spaces; ``A=1;B=2``).

Apart from :mod:`mwpy.jobs.description` because each run of a job whose arguments hold ``$$([expression])``
splits them again once the expression is evaluated (:mod:`mwpy.jobs.program`).
"""

from __future__ import annotations

from mwpy.errors import SubmitError


def parse_arguments(value: str, where: str = "") -> tuple[str, ...]:
    """``arguments`` in either syntax: the new one (in double quotes, ``'...'`` groups) or the old (spaces)."""
    value = value.strip()
    if not value:
        return ()
    if not (value.startswith('"') and value.endswith('"') and len(value) >= 2):
        if '"' in value.replace('\\"', ""):
            raise SubmitError(f'arguments ({where}): a double quote in the old syntax must be written \\"')
        return tuple(part.replace('\\"', '"') for part in value.split())
    return tuple(_new_syntax(value[1:-1].replace('""', '"'), "arguments", where))


def parse_environment(value: str, where: str = "") -> tuple[tuple[str, str], ...]:
    """``environment`` in either syntax: the new one (in double quotes, spaces) or the old (``A=1;B=2``)."""
    value = value.strip()
    if not value:
        return ()
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        words = _new_syntax(value[1:-1].replace('""', '"'), "environment", where)
    else:
        words = [part for part in value.split(";") if part.strip()]
    pairs = []
    for word in words:
        name, sep, setting = word.partition("=")
        if not sep or not name.strip():
            raise SubmitError(f"environment ({where}): {word!r} is not NAME=VALUE")
        pairs.append((name.strip(), setting))
    return tuple(pairs)


def _new_syntax(text: str, key: str, where: str) -> list[str]:
    """Words split on white space; ``'...'`` keeps spaces, ``''`` inside it is one single quote."""
    words: list[str] = []
    word: list[str] = []
    started = False
    i = 0
    while i < len(text):
        char = text[i]
        if char == "'":
            end = i + 1
            while True:
                end = text.find("'", end)
                if end < 0:
                    raise SubmitError(f"{key} ({where}): unbalanced single quote")
                if text[end + 1 : end + 2] == "'":
                    end += 2
                    continue
                break
            word.append(text[i + 1 : end].replace("''", "'"))
            started = True
            i = end + 1
        elif char.isspace():
            if started:
                words.append("".join(word))
                word, started = [], False
            i += 1
        else:
            word.append(char)
            started = True
            i += 1
    if started:
        words.append("".join(word))
    return words

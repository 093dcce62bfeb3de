"""Strict JSON for the files mwpy reads (the resource file, the event log): no coercion, readable problems.

Left to itself, cattrs turns ``"123"`` into 123, ``true`` into 1 and a string
into the list of its characters, and ``json`` accepts ``NaN`` and duplicate
keys. A file written by another program (or by someone hostile) must say
exactly what it means, so both readers use the hooks here: the same things
refused, in the same words. :func:`loads` is the one JSON reader for anything
a peer sends (the event log's lines, the file service's headers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_args, get_origin

if TYPE_CHECKING:
    import cattrs

#: How a problem names the items of a list of each type.
_ITEMS = {str: "strings", int: "integers"}


def _exactly(*types: type) -> Any:
    """A structure hook that accepts only these JSON types."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) not in types:
            raise TypeError(f"expected {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}")
        return value

    return structure


def _finite(value: Any, _: Any) -> float:
    """A JSON number that is a real time or interval: not a bool, not NaN or infinite."""
    if type(value) not in (float, int):
        raise TypeError(f"expected float or int, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _list_of(item: type) -> Any:
    """A structure hook for a JSON array whose items all have type ``item``."""
    what = f"a list of {_ITEMS[item]}"

    def structure(value: Any, _: Any) -> list[Any]:
        if type(value) is not list:
            raise TypeError(f"expected {what}, got {type(value).__name__}")
        for element in value:
            if type(element) is not item:
                raise TypeError(f"expected {what}, it holds a value of type {type(element).__name__}")
        return value

    return structure


def _int_dict(value: Any, _: Any) -> dict[str, int]:
    """A JSON object of integers (cattrs would accept other mappings and coerce the values)."""
    if type(value) is not dict:
        raise TypeError(f"expected an object of integers, got {type(value).__name__}")
    for item in value.values():
        if type(item) is not int:
            raise TypeError(f"expected an object of integers, it holds a value of type {type(item).__name__}")
    return dict(value)


def converter(*list_items: type) -> cattrs.Converter:
    """A converter for attrs records read from JSON: str, int, bool, finite numbers, ``dict[str, int]``
    and ``list[T]`` for each ``T`` in ``list_items`` (str or int), each exactly; extra keys are ignored
    (a newer writer may add some).

    cattrs is imported here, not with this module: a process that only writes JSON (a master writing its
    resource file) or reads peers' headers (:func:`loads`) does not wait for it.
    """
    import cattrs  # noqa: PLC0415 - see above

    strict = cattrs.Converter(forbid_extra_keys=False)
    strict.register_structure_hook(str, _exactly(str))
    strict.register_structure_hook(int, _exactly(int))
    strict.register_structure_hook(bool, _exactly(bool))
    strict.register_structure_hook(float, _finite)
    strict.register_structure_hook_func(lambda t: t == dict[str, int], _int_dict)
    for item in list_items:
        strict.register_structure_hook_func(_is_list_of(item), _list_of(item))
    return strict


def _is_list_of(item: type) -> Callable[[Any], bool]:
    """The predicate cattrs asks which hook structures a type: true for ``list[item]``."""

    def matches(annotation: Any) -> bool:
        return get_origin(annotation) is list and get_args(annotation) == (item,)

    return matches


def describe(exc: BaseException, _: Any) -> str:
    """Problem text for ``cattrs.transform_error``: the hook's or validator's own message, not cattrs' generic one."""
    if isinstance(exc, KeyError):
        return "required key missing"
    return str(exc) or type(exc).__name__


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: an object whose keys all differ (with duplicates, readers could disagree on the value)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def refuse_constant(name: str) -> Any:
    """``parse_constant``: ``NaN`` and ``Infinity`` are not JSON."""
    raise ValueError(f"{name} is not a JSON number")


#: One strict decoder (``json.loads`` with hooks would build a new one per call).
_decoder = json.JSONDecoder(parse_constant=refuse_constant, object_pairs_hook=unique_keys)


def loads(text: str | bytes) -> Any:
    """``text`` as strict JSON; ``ValueError`` with the problem for anything else.

    A document nested deeper than the interpreter's recursion limit (a few
    kilobytes of ``[``) raises ``ValueError`` too, never ``RecursionError``:
    a peer's header must cost its own connection at most, not the thread
    that reads it.
    """
    try:
        return _decoder.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
    except RecursionError:
        raise ValueError("not JSON (nested too deep)") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None

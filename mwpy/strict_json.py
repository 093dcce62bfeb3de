"""Strict JSON for the files mwpy reads (the resource file, the event log): no coercion, readable problems.

Left to itself, cattrs turns ``"123"`` into 123, ``true`` into 1 and a string
into the list of its characters, and ``json`` accepts ``NaN`` and duplicate
keys. A file written by another program (or by someone hostile) must say
exactly what it means, so both readers use the hooks here: the same things
refused, in the same words. The resource file is read by :func:`structure`,
which applies them without cattrs (a slave reads the file before it
connects); the event log by a cattrs :func:`converter`. :func:`loads` is the
one JSON reader for anything a peer sends (the event log's lines, the file
service's headers).
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin

import attrs

if TYPE_CHECKING:
    import cattrs

T = TypeVar("T")

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

    cattrs is imported here, not with this module: a process that reads only resource files
    (:func:`structure`) or peers' headers (:func:`loads`) does not wait for it.
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


class Problems(ValueError):
    """What :func:`structure` found wrong, one ``PROBLEM @ PATH`` text per value (``lines``), all in one message."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def structure(data: Any, cls: type[T], path: str = "$") -> T:
    """The attrs record ``cls`` from JSON ``data``, as strictly as :func:`converter`'s and in the same words.

    Without cattrs: a slave reads its resource file before it connects, and cattrs' import and generated
    functions (about 0.02 s) would make a short script wait. Every wrong value is named with its path
    (``expected int, got str @ $.master_port``); a record whose values are all right but that its own
    validators refuse is named by the record's path. Raises :class:`Problems`.
    """
    if type(data) is not dict:
        raise Problems([f"expected an object, got {type(data).__name__} @ {path}"])
    values: dict[str, Any] = {}
    lines: list[str] = []
    for name, alias, kind, required in _fields(cls):
        if name not in data:
            if required:
                lines.append(f"required key missing @ {path}.{name}")
            continue
        try:
            values[alias] = _value(data[name], kind, f"{path}.{name}")
        except Problems as problems:
            lines.extend(problems.lines)
    if lines:
        raise Problems(lines)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # its validators
        raise Problems([f"{describe(exc, None)} @ {path}"]) from None


#: Each record class's fields, as :func:`_fields` finds them once.
_FIELDS: dict[type, tuple[tuple[str, str, Any, bool], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, str, Any, bool], ...]:
    """Each field's key, argument name, type (resolved: annotations are text here) and whether it is required."""
    known = _FIELDS.get(cls)
    if known is None:
        hints = typing.get_type_hints(cls)
        known = _FIELDS[cls] = tuple(
            (field.name, field.alias, hints[field.name], field.default is attrs.NOTHING)
            for field in attrs.fields(cls)
            if field.init
        )
    return known


def _value(value: Any, kind: Any, path: str) -> Any:
    """One value of type ``kind``: a record, an optional value, one of a literal's, a list, or a plain one."""
    origin = get_origin(kind)
    if attrs.has(kind):
        return structure(value, kind, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(kind):
            return None
        (other,) = [arg for arg in get_args(kind) if arg is not type(None)]
        return _value(value, other, path)
    if origin is Literal:
        if not any(type(value) is type(choice) and value == choice for choice in get_args(kind)):
            raise Problems([f"{value} not in literal {kind} @ {path}"])
        return value
    if origin is list and attrs.has(get_args(kind)[0]):
        return _records(value, get_args(kind)[0], path)
    try:
        return _plain(kind)(value, kind)
    except (TypeError, ValueError) as exc:
        raise Problems([f"{describe(exc, None)} @ {path}"]) from None


def _records(value: Any, cls: type, path: str) -> list[Any]:
    """A JSON array of records: every wrong item named by its index."""
    if type(value) is not list:
        raise Problems([f"expected a list, got {type(value).__name__} @ {path}"])
    items: list[Any] = []
    lines: list[str] = []
    for index, item in enumerate(value):
        try:
            items.append(structure(item, cls, f"{path}[{index}]"))
        except Problems as problems:
            lines.extend(problems.lines)
    if lines:
        raise Problems(lines)
    return items


@functools.cache
def _plain(kind: Any) -> Any:
    """The hook for a plain type: exactly a str, int or bool, a finite number, ``dict[str, int]``, a list of str
    or int."""
    if kind in (str, int, bool):
        return _exactly(kind)
    if kind is float:
        return _finite
    if kind == dict[str, int]:
        return _int_dict
    if get_origin(kind) is list and get_args(kind)[0] in _ITEMS:
        return _list_of(get_args(kind)[0])
    raise TypeError(f"strict_json cannot read {kind}")


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

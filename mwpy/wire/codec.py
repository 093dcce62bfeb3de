"""Everything pickled to travel, encoded and decoded in one module: both ends of the wire import the same pair.

:mod:`mwpy.wire.protocol` frames messages (a message is the pickled tuple of
its fields); the bytes those messages *carry* are made and read here:

==========================  ==========================  =========================
what                        made by                     read by
==========================  ==========================  =========================
a task's arguments          :func:`encode_arguments`    :func:`decode_arguments`
                            (master, at submit)         (slave, before the call)
a function for an Executor  :func:`function_reference`  :func:`resolve_function`
                            (master, once per function) (slave, once per slave)
a task's value              :func:`encode_value`        :func:`decode_value`,
                            (slave)                     :func:`decode_outcome`
a task's failure            :func:`encode_error`,       :func:`decode_outcome`,
                            :func:`encode_failure`      :func:`decode_exception`
a journaled value           the slave's value bytes,    :func:`decode_outcome`
                            stored as they came         (master, on replay)
==========================  ==========================  =========================

A change of format therefore cannot reach one side only (Parsl's
``serialize/facade.py`` is the model). The hot paths stay what they were:
:func:`decode_arguments` and :func:`decode_value` *are* ``pickle.loads``
(no call of ours around the C function), and a value is pickled on its own so
that one the master cannot unpickle fails only its own result.

Where later work plugs in, each in one function here: functions by value
(cloudpickle for a function no slave can import) in :func:`function_reference`
and :func:`resolve_function`; objects shared by handle (resolved once per
slave) through a pickler's ``persistent_id`` in :func:`encode_arguments` and an
unpickler's ``persistent_load`` in :func:`decode_arguments`; large values
through a store in :func:`encode_value` / :func:`decode_outcome`.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from typing import Any, Final

from mwpy.wire.protocol import PICKLE_PROTOCOL

#: What a decoded failure is: (exception type name, message, traceback text, pickled exception or None).
Failure = tuple[str, str, str, bytes | None]
#: A pickled exception bigger than this travels as text only (its type, message and traceback).
MAX_PICKLED_EXCEPTION: Final = 1024 * 1024
#: Functions a slave has unpickled (a program has few); past this many the cache starts again.
FUNCTIONS_KEPT: Final = 1024

# ---------------------------------------------------------------------- master -> slave


def encode_arguments(
    algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, as_itself: bool = False
) -> bytes:
    """A task's ``(args, kwargs)``, pickled at submit time: an argument that cannot travel fails at the call site.

    The master API raises a ``TypeError`` naming the task; an Executor
    (``as_itself``) raises pickle's own error, as ``concurrent.futures`` users
    expect, with a note naming the task.
    """
    try:
        return pickle.dumps((args, kwargs), PICKLE_PROTOCOL)
    except Exception as exc:
        problem = f"cannot send the arguments of task {algorithm!r}"
        if as_itself:
            exc.add_note(problem)
            raise
        raise TypeError(f"{problem}: {exc}") from exc


#: ``(args, kwargs)`` from :func:`encode_arguments`' bytes: ``pickle.loads`` itself, the slave's per-task hot path.
decode_arguments: Final[Callable[[bytes], tuple[tuple[Any, ...], dict[str, Any]]]] = pickle.loads


def function_reference(fn: Callable[..., Any]) -> bytes:
    """A module-level function as it travels: pickled (by reference, its module and name) once per function."""
    try:
        return pickle.dumps(fn, PICKLE_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"cannot send the function {getattr(fn, '__qualname__', fn)} to slaves: {exc}") from exc


def encode_initializer(fn: Callable[..., object], args: tuple[Any, ...]) -> bytes:
    """An Executor's ``initializer`` (by reference) and ``initargs``, for its slaves; pickle's own error if not."""
    try:
        return pickle.dumps((fn, args), PICKLE_PROTOCOL)
    except Exception as exc:
        exc.add_note(f"cannot send the initializer {getattr(fn, '__qualname__', fn)} and its initargs to slaves")
        raise


def decode_initializer(blob: bytes) -> tuple[Callable[..., object], tuple[Any, ...]]:
    """What :func:`encode_initializer` made (on the slave, after the user's script is loaded)."""
    fn, args = pickle.loads(blob)
    return fn, args


_functions: dict[bytes, Callable[..., Any]] = {}


def resolve_function(reference: bytes) -> Callable[..., Any]:
    """The function :func:`function_reference` made ``reference`` of, unpickled once per slave process."""
    fn = _functions.get(reference)
    if fn is None:
        if len(_functions) >= FUNCTIONS_KEPT:
            _functions.clear()
        fn = _functions[reference] = pickle.loads(reference)
    return fn


# ---------------------------------------------------------------------- slave -> master


def encode_value(value: Any) -> bytes:
    """A task's return value on the wire (may raise whatever pickle raises)."""
    return pickle.dumps(value, PICKLE_PROTOCOL)


def encode_failure(kind: str, message: str, trace: str = "", exception: bytes | None = None) -> bytes:
    """A failure on the wire: three strings (so it always unpickles on the master) and maybe the exception."""
    return pickle.dumps((kind, message, trace, exception), PICKLE_PROTOCOL)


def failure_of(exc: BaseException, trace: str = "") -> Failure:
    """``exc`` as a failure: its type's name, its text, ``trace``, and itself pickled when it can travel.

    The exception itself goes along when it is an ``Exception`` or a
    ``SystemExit`` that pickles within ``MAX_PICKLED_EXCEPTION`` bytes: the
    master raises it as itself when it can unpickle it (a ``SystemExit`` only
    from an ``mwpy.Executor``'s future, as the standard executors do; raised
    by a master algorithm's ``future.result()`` it would end the wrong
    program), and falls back to the text.
    """
    kind = type(exc).__qualname__
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {kind}>"
    pickled = None
    if isinstance(exc, Exception | SystemExit):
        try:
            pickled = pickle.dumps(exc, PICKLE_PROTOCOL)
        except Exception:
            pickled = None
        if pickled is not None and len(pickled) > MAX_PICKLED_EXCEPTION:
            pickled = None
    return kind, message, trace, pickled


def encode_error(exc: BaseException) -> bytes:
    """The exception being handled, as a failure on the wire (call from inside ``except``: the traceback goes along)."""
    return encode_failure(*failure_of(exc, traceback.format_exc()))


#: A value from :func:`encode_value`'s bytes: ``pickle.loads`` itself, the master's per-result hot path
#: (:func:`decode_outcome` says why when it fails).
decode_value: Final[Callable[[bytes], Any]] = pickle.loads


def decode_outcome(ok: bool, blob: bytes) -> tuple[Any, Failure | None]:
    """``(value, None)`` or ``(None, failure)``; a blob the master cannot unpickle is a failure itself."""
    try:
        decoded = pickle.loads(blob)
    except Exception as exc:
        return None, ("ResultDecodeError", f"the master cannot unpickle the result: {exc!r}", "", None)
    if ok:
        return decoded, None
    if (
        type(decoded) is tuple
        and len(decoded) == 4
        and all(type(part) is str for part in decoded[:3])
        and (decoded[3] is None or type(decoded[3]) is bytes)
    ):
        return None, decoded
    return None, (
        "ResultDecodeError",
        "the slave sent a failure that is not (type, message, traceback, exception)",
        "",
        None,
    )


def decode_exception(pickled: bytes) -> BaseException | None:
    """A failure's exception as itself, or None when it does not unpickle here (its class is unknown, say)."""
    try:
        exc = pickle.loads(pickled)
    except Exception:
        return None
    return exc if isinstance(exc, BaseException) else None

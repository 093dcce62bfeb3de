"""The task algorithms mwpy itself submits, registered wherever mwpy's slave runs.

``mwpy.Executor`` runs plain functions and ``mw.map(..., chunksize=n)`` runs
n calls in one task: both travel as tasks of these algorithms (their names
are in mwpy/names.py). A slave imports this module with the slave code
(mwpy/slave.py), so it knows them whatever the program imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwpy import names
from mwpy.task import registry, task
from mwpy.wire import codec

#: The functions this process unpickled from an Executor's references, each once.
functions = codec.Functions()


@task(name=names.CALL)
def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An object that is no plain function (a partial, a callable instance): it travels pickled with each call."""
    return fn(*args, **kwargs)


@task(name=names.CALL_FUNCTION)
def call_function(reference: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A plain function: pickled once by the executor (by reference) or at each submit (by value, its content
    maybe a shared handle), unpickled once per slave per content (mwpy/wire/codec.py).

    Pickling the function for every call, and finding it again on the slave,
    cost about 2 µs of a no-op task's 13.
    """
    return functions.resolve(reference)(*args, **kwargs)


@task(name=names.CALL_CHUNK)
def call_chunk(fn: Callable[..., Any], chunk: list[tuple[Any, ...]]) -> list[Any]:
    """``Executor.map(..., chunksize=n)``: one task runs ``fn`` over n argument tuples."""
    return [fn(*args) for args in chunk]


@task(name=names.MAP_CHUNK)
def map_chunk(name: str, chunk: list[tuple[Any, ...]], kwargs: dict[str, Any]) -> list[Any]:
    """``mw.map(..., chunksize=n)``: one task runs the task algorithm ``name`` over n argument tuples."""
    fn = registry.require(name).fn
    return [fn(*args, **kwargs) for args in chunk]

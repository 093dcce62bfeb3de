"""The codec (mwpy/wire/codec.py): what travels pickled, made on one side and read on the other (docs/mutation.md).

Both ends import the same pair of functions, so a test that only round-trips
would pass a change made to both; these also pin the shapes a peer built from
another copy of mwpy relies on (a failure is three strings and maybe the
pickled exception), the size limit at its edge, and that a value or failure
the master cannot read is a failure of that result alone.
"""

from __future__ import annotations

import functools
import os
import pickle
import threading

import pytest

from mwpy.task_records import Result, TaskError, TaskRaisedError, task_exception
from mwpy.wire import codec
from mwpy.wire.protocol import PICKLE_PROTOCOL

#: A cache of functions as a slave keeps one (mwpy/calls.py).
FUNCTIONS = codec.Functions()


def test_a_value_travels_with_pickle_protocol_5() -> None:
    """Out-of-band capable buffers (pickle.PickleBuffer) need protocol 5: a task may return one."""
    blob = codec.encode_value(pickle.PickleBuffer(b"zero-copy"))
    assert codec.decode_outcome(True, blob) == (b"zero-copy", None)


def test_a_failure_without_the_exception_decodes_to_its_three_strings() -> None:
    blob = codec.encode_failure("Timeout", "took too long", "trace")
    assert codec.decode_outcome(False, blob) == (None, ("Timeout", "took too long", "trace", None))
    assert codec.decode_outcome(False, codec.encode_failure("E", "m")) == (None, ("E", "m", "", None))


def test_undecodable_results_are_failures_that_say_why() -> None:
    value, failure = codec.decode_outcome(True, b"not a pickle")
    assert value is None
    assert failure is not None
    assert failure[0] == "ResultDecodeError"
    assert failure[1].startswith("the master cannot unpickle the result: UnpicklingError(")
    assert failure[2:] == ("", None)
    why = "the slave sent a failure that is not (type, message, traceback, exception)"
    not_a_failure = (None, ("ResultDecodeError", why, "", None))
    for shape in (42, ("E", "m", "t"), ("E", "m", "t", "not bytes"), ("E", b"m", "t", None), ["E", "m", "t", None]):
        assert codec.decode_outcome(False, pickle.dumps(shape)) == not_a_failure


def test_an_exception_travels_as_itself_when_it_can() -> None:
    try:
        raise ValueError(pickle.PickleBuffer(b"buffer"))  # picklable with protocol 5 only
    except ValueError as exc:
        blob = codec.encode_error(exc)
    _, failure = codec.decode_outcome(False, blob)
    assert failure is not None
    assert failure[0] == "ValueError"
    assert failure[3] is not None
    assert pickle.loads(failure[3]).args == (b"buffer",)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def failure_of(exc: BaseException) -> tuple[str, str, str, bytes | None]:
    try:
        raise exc
    except BaseException as caught:  # the point is to encode any exception
        blob = codec.encode_error(caught)
    value, failure = codec.decode_outcome(False, blob)
    assert value is None
    assert failure is not None
    return failure


def test_an_exception_that_cannot_travel_whole_still_travels_as_text() -> None:
    kind, message, trace, pickled = failure_of(Unprintable())
    assert (kind, message, pickled is not None) == ("Unprintable", "<unprintable Unprintable>", True)
    assert "raise exc" in trace
    assert failure_of(Unpicklable())[1::2] == ("holds a lock", None)  # the text, no pickled exception


def test_a_system_exit_travels_but_only_an_executor_future_raises_it_as_itself() -> None:
    """The standard executors give a task's SystemExit back as itself; a master algorithm's future must not
    (``result()`` would end the master's program): it raises TaskRaisedError naming the type."""
    kind, message, trace, pickled = failure_of(SystemExit(3))
    assert (kind, message, pickled is not None) == ("SystemExit", "3", True)
    result = Result(1, "f", "slave-1", None, 0.0, error=TaskError(kind, message, trace, pickled))
    raised = task_exception(result)
    assert isinstance(raised, TaskRaisedError)
    assert raised.type_name == "SystemExit"
    as_itself = task_exception(result, (Exception, SystemExit))
    assert type(as_itself) is SystemExit
    assert as_itself.code == 3


def test_an_exception_travels_whole_up_to_the_size_limit() -> None:
    limit = codec.MAX_PICKLED_EXCEPTION
    overhead = len(pickle.dumps(ValueError(b"x" * (limit - 200)), PICKLE_PROTOCOL)) - (limit - 200)
    at_limit = ValueError(b"x" * (limit - overhead))
    assert len(pickle.dumps(at_limit, PICKLE_PROTOCOL)) == limit
    assert failure_of(at_limit)[3] is not None
    too_big = failure_of(ValueError(b"x" * (limit - overhead + 1)))  # one byte more: the text only
    assert (too_big[0], too_big[3]) == ("ValueError", None)


def test_values_and_failures_round_trip_through_the_codec() -> None:
    assert codec.decode_outcome(True, codec.encode_value([1, 2])) == ([1, 2], None)
    try:
        raise KeyError("k")
    except KeyError as exc:
        blob = codec.encode_error(exc)
    value, failure = codec.decode_outcome(False, blob)
    assert value is None
    assert failure is not None
    assert failure[:2] == ("KeyError", "'k'")
    assert "raise KeyError" in failure[2]
    assert failure[3] is not None
    assert repr(pickle.loads(failure[3])) == "KeyError('k')"  # the exception itself travels too
    undecodable = codec.decode_outcome(True, b"garbage")[1]
    assert undecodable is not None
    assert undecodable[0] == "ResultDecodeError"
    assert undecodable[1].startswith("the master cannot unpickle the result: UnpicklingError")
    assert codec.decode_outcome(False, codec.encode_value(42))[1] is not None  # a failure must be 3 strings and bytes


def test_arguments_travel_as_args_and_kwargs_and_fail_at_the_call_site_when_they_cannot() -> None:
    payload = codec.encode_arguments("f", (1, "two"), {"three": 3.0})
    assert codec.decode_arguments(payload) == ((1, "two"), {"three": 3.0})
    zero_copy = codec.encode_arguments("f", (pickle.PickleBuffer(b"buffer"),), {})  # protocol 5's own
    assert codec.decode_arguments(zero_copy) == ((b"buffer",), {})
    with pytest.raises(TypeError, match=r"^cannot send the arguments of task 'f': ") as caught:
        codec.encode_arguments("f", (threading.Lock(),), {})
    assert caught.value.__cause__ is not None


def test_a_function_travels_by_reference_and_is_unpickled_once_per_process() -> None:
    reference = codec.function_reference(pickle.dumps)
    assert FUNCTIONS.resolve(reference) is pickle.dumps
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"^cannot send the function .*<lambda> to slaves: .*lock"):
        codec.function_reference(lambda: not lock.locked())  # by value, but what it closes over cannot travel
    with pytest.raises(TypeError, match=r"^cannot send the function <unlocked _thread.lock object at "):
        codec.function_reference(threading.Lock())  # type: ignore[arg-type]  # no __qualname__: its repr


def test_lambdas_and_closures_travel_by_value_and_module_functions_by_reference() -> None:
    """Issue 22 item 6: what no slave could import goes with cloudpickle; the rest stays a reference."""
    offset = 5

    def add(x: int) -> int:
        return x + offset

    for fn, argument, expected in ((lambda x: x * 3, 2, 6), (add, 1, 6)):
        assert codec.by_value(fn)
        reference = codec.function_reference(fn)
        assert b"cloudpickle" in reference
        assert FUNCTIONS.resolve(reference)(argument) == expected
    assert not codec.by_value(pickle.dumps)
    assert b"cloudpickle" not in codec.function_reference(pickle.dumps)
    blob = codec.encode_arguments("f", (lambda: "inside",), {})  # a lambda among the arguments, too
    assert codec.decode_arguments(blob)[0][0]() == "inside"


def fresh_reference() -> bytes:
    """Bytes no process has resolved before (the cache outlives a test): what they name is a new object."""
    return pickle.dumps(functools.partial(int, base=2, nonce=os.urandom(8)), PICKLE_PROTOCOL)


def test_a_function_is_unpickled_once_then_found_and_the_cache_is_bounded() -> None:
    reference = fresh_reference()
    first = FUNCTIONS.resolve(reference)
    assert isinstance(first, functools.partial)
    assert first.func is int
    assert FUNCTIONS.resolve(reference) is first  # found, not unpickled again
    for _ in range(codec.FUNCTIONS_KEPT):
        FUNCTIONS.resolve(fresh_reference())
    assert FUNCTIONS.resolve(reference) is not first  # forgotten once FUNCTIONS_KEPT others came


def test_a_failure_of_an_exception_outside_an_except_carries_no_traceback() -> None:
    kind, message, trace, pickled = codec.failure_of(KeyError("k"))
    assert (kind, message, trace) == ("KeyError", "'k'", "")
    assert pickled is not None


def test_an_exception_is_rebuilt_as_itself_or_not_at_all() -> None:
    assert repr(codec.decode_exception(pickle.dumps(KeyError("k")))) == "KeyError('k')"
    assert codec.decode_exception(b"garbage") is None
    assert codec.decode_exception(pickle.dumps("not an exception")) is None

"""Everything pickled to travel, encoded and decoded in one module: both ends of the wire import the same pair.

:mod:`mwpy.wire.protocol` frames messages (a message is the pickled tuple of
its fields); the bytes those messages *carry* are made and read here:

==========================  ==========================  =========================
what                        made by                     read by
==========================  ==========================  =========================
a task's arguments          :func:`encode_arguments`    :func:`decode_arguments`
                            (master, at submit)         (slave, before the call)
a function for an Executor  :func:`function_reference`  :class:`Functions`
                            (master, once per function) (slave, once per slave)
a task's value              :func:`encode_value`        :func:`decode_value`,
                            (slave)                     :func:`decode_outcome`
a task's failure            :func:`encode_error`,       :func:`decode_outcome`,
                            :func:`encode_failure`      :func:`decode_exception`
a journaled value           the slave's value bytes,    :func:`decode_outcome`
                            stored as they came         (master, on replay)
an object shared once       :func:`encode_shared`       :func:`decode_shared`
                            (master, into a file)       (slave, from its mapping)
a file argument             :class:`File` (master,      :func:`shared_file`
                            in :func:`encode_with`)     (slave, its local copy)
a large value, a file       :func:`encode_result`       :func:`stored_value`,
returned                    (slave, to the file         :func:`stored_file`
                            service)                    (master, its copy)
==========================  ==========================  =========================

A change of format therefore cannot reach one side only (Parsl's
``serialize/facade.py`` is the model). The hot paths stay what they were:
:func:`decode_arguments` and :func:`decode_value` *are* ``pickle.loads``
(no call of ours around the C function), and a value is pickled on its own so
that one the master cannot unpickle fails only its own result.

Functions no slave can import (a notebook's or a REPL's ``__main__``, a
lambda, a closure) travel by value, with cloudpickle, master to slave only
(:func:`function_reference`, and :func:`encode_arguments` for one inside the
arguments); slaves never send code. An object shared once per slave travels as
a :class:`Shared` handle, which pickles as a call of :func:`shared_object` with
the handle's few bytes, made once (a copyreg extension code stands for the
function). This module does no I/O and keeps no state: what a handle, a
``File`` or a large value needs of the file service is an explicit step, and
its caller hands over what it needs — the slave's data plane
(:func:`decode_arguments_with`, :func:`encode_result`; mwpy/data/plane.py),
the master's file service (:func:`encode_with`, :func:`decode_outcome`;
mwpy/data/shares.py) — for the length of one call (a context variable), never
a module global. A shared object's
file (:func:`encode_shared`) is pickle protocol 5 with the out-of-band buffers
(a numpy array's data) laid out after the pickle, each aligned, so that the
slave unpickles straight from a memory map, no copy.
"""

from __future__ import annotations

import contextvars
import copyreg
import hashlib
import io
import operator
import os
import pickle
import struct
import traceback
from collections.abc import Callable
from typing import IO, Any, Final, Protocol

import attrs

from mwpy.errors import SharedObjectError
from mwpy.wire import importable
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

    Plain pickle first (fast, by reference); what it refuses (a lambda or a
    closure among the arguments) is tried again with cloudpickle, by value.
    What cannot travel at all: the master API raises a ``TypeError`` naming
    the task; an Executor (``as_itself``) raises pickle's own error, as
    ``concurrent.futures`` users expect, with a note naming the task.
    """
    try:
        return pickle.dumps((args, kwargs), PICKLE_PROTOCOL)
    except Exception:
        pass
    import cloudpickle  # noqa: PLC0415 (40 ms to import: only for what plain pickle refused)

    try:
        by_value: bytes = cloudpickle.dumps((args, kwargs), PICKLE_PROTOCOL)
    except Exception as exc:
        problem = f"cannot send the arguments of task {algorithm!r}"
        if as_itself:
            exc.add_note(problem)
            raise
        raise TypeError(f"{problem}: {exc}") from exc
    return by_value


#: ``(args, kwargs)`` from :func:`encode_arguments`' bytes: ``pickle.loads`` itself, the slave's per-task hot path.
decode_arguments: Final[Callable[[bytes], tuple[tuple[Any, ...], dict[str, Any]]]] = pickle.loads


def function_reference(fn: Callable[..., Any]) -> bytes:
    """A function as it travels, made once per function: by reference (its module and name) when slaves can
    import it, else by value (cloudpickle: its code, defaults and the globals it uses)."""
    try:
        if importable.by_value(fn):
            import cloudpickle  # noqa: PLC0415 (40 ms to import: only for a function sent by value)

            pickled: bytes = cloudpickle.dumps(fn, PICKLE_PROTOCOL)
        else:
            pickled = pickle.dumps(fn, PICKLE_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"cannot send the function {getattr(fn, '__qualname__', fn)} to slaves: {exc}") from exc
    return pickled


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


class Functions:
    """Functions unpickled from :func:`function_reference`'s bytes, each once (a slave's is in mwpy/calls.py)."""

    def __init__(self) -> None:
        self._known: dict[bytes, Callable[..., Any]] = {}

    def resolve(self, reference: bytes) -> Callable[..., Any]:
        """The function ``reference`` names: unpickled the first time, then looked up."""
        fn = self._known.get(reference)
        if fn is None:
            if len(self._known) >= FUNCTIONS_KEPT:
                self._known.clear()
            fn = self._known[reference] = pickle.loads(reference)
        return fn


# ---------------------------------------------------------------------- objects shared once per slave

#: Pickled arguments above this many bytes travel through the file service, not in a frame (issue 22).
SPILL_ABOVE: Final = 16 << 20
#: A keyword argument of ``map`` above this many bytes is shared once per slave, not sent with every call.
SHARE_ABOVE: Final = 1 << 20
#: Every buffer in a shared object's file starts at a multiple of this (the widest vector loads like it aligned).
SHARED_ALIGN: Final = 64
#: A shared object's file: magic, number of out-of-band buffers, length of the pickle; then each buffer's length.
_SHARED_HEAD: Final = struct.Struct("<8sQQ")
_SHARED_MAGIC: Final = b"mwpyshr1"


#: A handle's pickled form, after the call: its hash (32 bytes), size, port and ``keep``, then its host (UTF-8).
_HANDLE_KEY: Final = struct.Struct("<32sQH?")
#: :func:`shared_object`'s code in copyreg's extension registry (unassigned by Python past 255): a handle pickles
#: as these 3 bytes, not a module and a name, and a slave unpickling one takes the function from copyreg's
#: cache instead of importing and auditing per task. Both ends register it when they import this module.
SHARED_OBJECT_CODE: Final = 0x6D77


def _handle_key(handle: Shared) -> bytes:
    fields = _HANDLE_KEY.pack(bytes.fromhex(handle.digest), handle.size, handle.port, handle.keep)
    return fields + handle.host.encode()


def _handle_reduced(handle: Shared) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
    return shared_object, (handle.key,)


@attrs.frozen
class Shared:
    """A handle to an object shared once per slave (``mw.share(obj)``): small, passed as an argument at any depth.

    It names the object's file by its SHA-256 (``digest``) and ``size``, and the
    file service it is fetched from; it pickles as a call of
    :func:`shared_object` with one bytes argument, its ``key``, so a slave
    unpickling the arguments gets the object. The pickled form is made once,
    with the handle (a task carries it every time: pickling it costs one
    call of copyreg's reducer, no hashing, no formatting).
    """

    digest: str
    size: int
    host: str
    port: int
    #: False for a task's arguments too large for a frame (:data:`SPILL_ABOVE`): used once, not kept.
    keep: bool = True
    #: All of the above in a few bytes: what the handle pickles to, and the slave's key to the object it holds.
    key: bytes = attrs.field(init=False, eq=False, repr=False, default=attrs.Factory(_handle_key, takes_self=True))
    _reduced: tuple[Callable[[bytes], Any], tuple[bytes]] = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_handle_reduced, takes_self=True)
    )

    @classmethod
    def from_key(cls, key: bytes) -> Shared:
        """The handle whose :attr:`key` is ``key`` (on the slave, the first time a task names it)."""
        try:
            digest, size, port, keep = _HANDLE_KEY.unpack_from(key)
            host = key[_HANDLE_KEY.size :].decode()
        except (struct.error, UnicodeDecodeError):
            raise SharedObjectError(f"not a shared object's handle: {key[:80]!r}") from None
        return cls(digest.hex(), size, host, port, keep)

    def __repr__(self) -> str:
        return f"<mwpy.Shared {self.digest[:12]} {self.size} bytes>"


copyreg.pickle(Shared, operator.attrgetter("_reduced"))


def _used_here(handle: Shared, *args: object, **kwargs: object) -> Any:
    raise SharedObjectError(
        f"{handle!r} stands for its object only in a task's arguments on a slave: pass it to submit() or map(), "
        "or use the object itself here"
    )


def _no_attribute(handle: Shared, name: str) -> Any:
    if name.startswith("__"):  # protocols looked up by pickle, copy, numpy: absent, as on any object
        raise AttributeError(name)
    return _used_here(handle)


# A handle used as its object outside a task (indexed, called, added, iterated, given to numpy, an attribute
# of the object read) says so, instead of a TypeError about a handle nobody wrote.
for _method in (
    "__getitem__", "__setitem__", "__len__", "__iter__", "__contains__", "__call__", "__array__", "__add__",
    "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__floordiv__",
    "__mod__", "__pow__", "__matmul__", "__rmatmul__", "__neg__", "__lt__", "__le__", "__gt__", "__ge__",
):  # fmt: skip
    setattr(Shared, _method, _used_here)
Shared.__getattr__ = _no_attribute  # type: ignore[attr-defined]


def _path_text(path: str | os.PathLike[str]) -> str:
    return os.fspath(path)


@attrs.frozen
class File:
    """``mwpy.File(path)``: a file as a task's argument; the task gets a ``File`` of a verified local copy.

    On the master it names a file there; pickled into a task's arguments it is
    published on the master's file service by its SHA-256 (hashed once while
    unchanged), and on the slave it is a ``File`` of the cached copy (same
    base name, same permission bits), fetched once per slave. It is a path-like
    object: ``open(f)``, ``os.fspath(f)``, ``Path(f)`` work on both sides.
    """

    path: str = attrs.field(converter=_path_text)

    def __fspath__(self) -> str:
        return self.path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        publish = _publisher.get()
        if publish is None:
            raise SharedObjectError(
                f"mwpy.File({self.path!r}) travels only in a task's arguments or its value, between master and slave"
            )
        return publish(self.path)


class Store(Protocol):
    """Where a task's arguments put what does not ride in a frame: the master's file service (mwpy/data/shares.py)."""

    def spill(self, payload: bytes) -> bytes:
        """Pickled arguments too large for a frame, as the small payload that names their file."""
        ...  # pragma: no cover

    def publish_file(self, path: str) -> tuple[Shared, int]:
        """Offer the file at ``path``; its handle and permission bits."""
        ...  # pragma: no cover


#: While a task's arguments (master) or value (slave) are pickled: how a :class:`File` among them travels,
#: as what it pickles to (a call and its arguments).
_publisher: contextvars.ContextVar[Callable[[str], tuple[Callable[..., Any], tuple[Any, ...]]] | None] = (
    contextvars.ContextVar("mwpy_file_publisher", default=None)
)


def _argument_file(store: Store, path: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    handle, mode = store.publish_file(path)
    return shared_file, (handle.key, mode, os.path.basename(path))


def encode_with(
    store: Store, algorithm: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, as_itself: bool = False
) -> bytes:
    """:func:`encode_arguments` with ``store`` publishing the :class:`File` arguments and taking large ones.

    Plain pickle first, with no publisher set: arguments with no :class:`File` (and
    nothing for cloudpickle) are most, and setting a context variable for each
    cost a tenth of the master's time per no-op task; a File refuses to pickle
    there, and the arguments go again the full way.
    """
    try:
        payload = pickle.dumps((args, kwargs), PICKLE_PROTOCOL)
    except Exception:  # a File, a lambda, or what cannot travel: encode_arguments decides, with the publisher set
        token = _publisher.set(lambda path: _argument_file(store, path))
        try:
            payload = encode_arguments(algorithm, args, kwargs, as_itself=as_itself)
        finally:
            _publisher.reset(token)
    return store.spill(payload) if len(payload) > SPILL_ABOVE else payload


class DataPlane(Protocol):
    """A slave's side of the file service (mwpy/data/plane.py), which the explicit steps below are given."""

    def resolve(self, key: bytes) -> Any:
        """The object a :class:`Shared` handle of ``key`` names (fetched and mapped once)."""
        ...  # pragma: no cover

    def resolve_file(self, handle: Shared, mode: int, name: str) -> File:
        """The local copy of a :class:`File` argument."""
        ...  # pragma: no cover

    def store(self, address: tuple[str, int], source: IO[bytes], size: int) -> str:
        """Send ``size`` bytes of ``source`` to the file service at ``address``; their SHA-256."""
        ...  # pragma: no cover

    def store_file(self, address: tuple[str, int], path: str) -> tuple[str, int]:
        """Send the file at ``path`` there; its SHA-256 and permission bits."""
        ...  # pragma: no cover

    def relay(self, digest: str, address: tuple[str, int]) -> tuple[str, int]:
        """Send the value held here under ``digest`` to the file service at ``address``; its hash and size."""
        ...  # pragma: no cover

    def hold(self, body: bytes) -> Shared | None:
        """Keep a task's large value (``body``, pickled) on this slave, served to its peers by hash; its handle
        (None: this slave serves nothing, and the value goes to the master)."""
        ...  # pragma: no cover


#: While :func:`decode_arguments_with` unpickles a task's arguments: the slave's data plane.
_resolving: contextvars.ContextVar[DataPlane | None] = contextvars.ContextVar("mwpy_resolving", default=None)


def decode_arguments_with(blob: bytes, plane: DataPlane | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """:func:`decode_arguments` on a slave: the shared objects and files the arguments name come from ``plane``.

    ``pickle.loads`` first: arguments that name none (most) cost what they
    cost; one that names one refuses there and is read again with ``plane``.
    """
    try:
        return pickle.loads(blob)  # type: ignore[no-any-return]
    except SharedObjectError:
        if plane is None:
            raise
    token = _resolving.set(plane)
    try:
        return pickle.loads(blob)  # type: ignore[no-any-return]
    finally:
        _resolving.reset(token)


def shared_object(key: bytes) -> Any:
    """The object the :class:`Shared` handle of ``key`` names (what unpickling the handle calls): the slave's
    data plane's answer, looked up by ``key`` itself once the slave holds the object."""
    plane = _resolving.get()
    if plane is None:
        raise SharedObjectError(f"shared object {key[:6].hex()} can only be used in a task on a slave")
    return plane.resolve(key)


copyreg.add_extension(__name__, shared_object.__name__, SHARED_OBJECT_CODE)


def shared_file(key: bytes, mode: int, name: str) -> File:
    """The local copy of a :class:`File` argument (what unpickling one calls on the slave); ``key`` is its
    :class:`Shared` handle's."""
    plane = _resolving.get()
    if plane is None:
        raise SharedObjectError(f"file {name!r} can only be used in a task on a slave")
    return plane.resolve_file(Shared.from_key(key), mode, name)


def _padding(offset: int) -> bytes:
    return b"\0" * (-offset % SHARED_ALIGN)


def pickled_out_of_band(obj: Any) -> tuple[bytes, list[memoryview]]:
    """``obj`` pickled with protocol 5: the pickle, and the buffer-protocol data (views, not copies) beside it."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        body = pickle.dumps(obj, 5, buffer_callback=buffers.append)
    except Exception:
        import cloudpickle  # noqa: PLC0415 (40 ms to import: only for what plain pickle refused)

        try:
            buffers.clear()
            body = cloudpickle.dumps(obj, 5, buffer_callback=buffers.append)
        except Exception as exc:
            raise TypeError(f"cannot share {type(obj).__name__}: {exc}") from exc
    return body, [buffer.raw() for buffer in buffers]


def encode_shared(obj: Any, out: IO[bytes]) -> tuple[str, int]:
    """Write ``obj`` to ``out`` as a shared object's file; return the file's SHA-256 and size.

    Pickle protocol 5 hands buffer-protocol data (a numpy array's) out of band:
    it is written from the object's own memory, never copied into the pickle.
    """
    return write_shared(*pickled_out_of_band(obj), out)


def write_shared(body: bytes, views: list[memoryview], out: IO[bytes]) -> tuple[str, int]:
    """A shared object's file of a pickle and its out-of-band buffers (none for spilled arguments)."""
    digest = hashlib.sha256()
    written = 0

    def write(data: bytes | memoryview) -> None:
        nonlocal written
        digest.update(data)
        out.write(data)
        written += len(data)

    write(_SHARED_HEAD.pack(_SHARED_MAGIC, len(views), len(body)))
    write(struct.pack(f"<{len(views)}Q", *(view.nbytes for view in views)))
    write(body)
    for view in views:
        write(_padding(written))
        write(view)
    return digest.hexdigest(), written


def decode_shared(data: memoryview) -> Any:
    """The object of a shared object's file (mapped in memory): its buffers are views of ``data``, not copies."""
    magic, count, length = _SHARED_HEAD.unpack_from(data)
    if magic != _SHARED_MAGIC:
        raise SharedObjectError("not a shared object's file")
    offset = _SHARED_HEAD.size + 8 * count
    sizes = struct.unpack_from(f"<{count}Q", data, _SHARED_HEAD.size)
    body = data[offset : offset + length]
    offset += length
    buffers = []
    for size in sizes:
        offset += -offset % SHARED_ALIGN
        buffers.append(data[offset : offset + size])
        offset += size
    return pickle.loads(body, buffers=buffers)


# ---------------------------------------------------------------------- slave -> master


def encode_value(value: Any) -> bytes:
    """A task's return value on the wire (may raise whatever pickle raises)."""
    return pickle.dumps(value, PICKLE_PROTOCOL)


def encode_result(value: Any, address: tuple[str, int], plane: DataPlane | None = None, *, hold: bool = False) -> bytes:
    """:func:`encode_value` on a slave whose master's file service is at ``address``: each :class:`File` in the
    value is sent there through ``plane`` (by hash), and so is a value above :data:`SPILL_ABOVE` bytes
    pickled, the frame then carrying only its hash; with ``hold`` (an Executor's call; a master algorithm's
    task whose future is an argument) such a value stays on this slave (``plane.hold``) and the frame carries
    its :class:`Held` reference. A value with neither costs what :func:`encode_value` costs."""
    try:
        out = pickle.dumps(value, PICKLE_PROTOCOL)  # encode_value's, without its call
    except SharedObjectError:  # a File in the value (it refuses to pickle outside this): send it
        if plane is None or not address[1]:
            raise
        token = _publisher.set(lambda path: _returned_file(plane, address, path))
        try:
            out = encode_value(value)
        finally:
            _publisher.reset(token)
    if len(out) <= SPILL_ABOVE or plane is None:
        return out
    if hold and (handle := plane.hold(out)) is not None:
        return pickle.dumps(_HeldHere(handle.key), PICKLE_PROTOCOL)
    if not address[1]:
        return out
    digest = plane.store(address, io.BytesIO(out), len(out))
    return pickle.dumps(_Stored(digest, len(out)), PICKLE_PROTOCOL)


def _returned_file(plane: DataPlane, address: tuple[str, int], path: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    handle, mode = plane.store_file(address, path)
    return stored_file, (handle, mode, os.path.basename(path))


@attrs.frozen
class _Stored:
    """A value the slave stored on the master's file service: what the frame carries in its place."""

    digest: str
    size: int

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, int]]:
        return stored_value, (self.digest, self.size)


@attrs.frozen
class Held:
    """A task's large value that stayed on the slave that made it: what the master keeps in its place.

    As another task's argument it travels as its :attr:`handle` (a :class:`Shared` naming the holder's file
    service): the consumer's slave takes it from its own cache when it made it, else fetches it from the
    holder. The caller's ``result()`` fetches it on demand (mwpy/data/shares.py).
    """

    handle: Shared


@attrs.frozen
class _HeldHere:
    """What a held value's frame carries: its handle's few bytes."""

    key: bytes

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[bytes]]:
        return held_value, (self.key,)


def held_value(key: bytes) -> Held:
    """The reference to a value its slave holds (what unpickling its frame gives the master: no bytes moved)."""
    return Held(Shared.from_key(key))


def journal_form(blob: bytes, value: Any) -> bytes:
    """What a journal keeps of a success: its bytes as they came, but the value itself for one a slave
    stored on the master (only its hash came, and its file goes once read). A small value that merely
    contains the name is pickled again: the same value either way."""
    if len(blob) < 512 and b"stored_value" in blob:
        return encode_value(value)
    return blob


class Received(Protocol):
    """The master's side of :func:`encode_result`: what slaves stored, taken by hash (mwpy/data/shares.py's
    :class:`SharedObjects`), given to :func:`decode_outcome`."""

    def value(self, digest: str, size: int) -> Any:
        """The value stored under ``digest`` (checked against it when it arrived), its file then removed."""
        ...  # pragma: no cover

    def file(self, digest: str, mode: int, name: str) -> File:
        """A :class:`File` of the file stored under ``digest``, kept under ``name`` with ``mode``."""
        ...  # pragma: no cover


#: While :func:`decode_outcome` unpickles a result for a master: that master's file service's results.
_receiving: contextvars.ContextVar[Received | None] = contextvars.ContextVar("mwpy_received", default=None)


def stored_value(digest: str, size: int) -> Any:
    """A value a slave stored on the master (what unpickling its result calls in :func:`decode_outcome`)."""
    received = _receiving.get()
    if received is None:
        raise SharedObjectError(f"a stored result {digest[:12]} can only be read by its master")
    return received.value(digest, size)


def stored_file(digest: str, mode: int, name: str) -> File:
    """The master's verified copy of a :class:`File` a task returned (what unpickling it calls in
    :func:`decode_outcome`)."""
    received = _receiving.get()
    if received is None:
        raise SharedObjectError(f"a returned file {name!r} can only be read by its master")
    return received.file(digest, mode, name)


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
    """The exception being handled, as a failure on the wire (call from inside ``except``: the traceback goes along).

    Called on a slave: numpy's "read-only" error gets a note (a shared array arrives read-only, memory-mapped),
    and so does an error from a ``multiprocessing.Manager()`` proxy (it reaches its manager from local slaves
    only).
    """
    if isinstance(exc, ValueError) and "read-only" in str(exc):
        exc.add_note(READ_ONLY_NOTE)
    elif any(frame.filename.endswith(_MANAGER_FILES) for frame in traceback.extract_tb(exc.__traceback__)):
        exc.add_note(MANAGER_NOTE)
    return encode_failure(*failure_of(exc, traceback.format_exc()))


_MANAGER_FILES: Final = (
    os.path.join("multiprocessing", "managers.py"),
    os.path.join("multiprocessing", "connection.py"),
)
#: What a task's error from a ``multiprocessing.Manager()`` proxy says besides multiprocessing's words.
MANAGER_NOTE: Final = (
    'mwpy: a multiprocessing.Manager() proxy reaches its manager only from local slaves (backend="local"), '
    "which are given the caller's authkey when it imported multiprocessing before the Executor started, and "
    "while the manager runs; elsewhere pass the data as arguments, share() it, or return it"
)


#: What a task's "read-only" error says besides numpy's words.
READ_ONLY_NOTE: Final = (
    "mwpy: an array shared with share() (or a map keyword argument of 1 MiB or more) arrives read-only, "
    "mapped from the slave's cache: change a copy (arr.copy())"
)


#: What unpickling a result may raise that fails that result alone: any error, and ``SystemExit`` (a
#: ``__reduce__`` may call ``sys.exit``), which must not end the master. Ctrl-C still goes through.
UNPICKLING_FAILURES: Final = (Exception, SystemExit)

#: A value from :func:`encode_value`'s bytes: ``pickle.loads`` itself, the master's per-result hot path
#: (:func:`decode_outcome` says why when it fails).
decode_value: Final[Callable[[bytes], Any]] = pickle.loads


def decode_outcome(ok: bool, blob: bytes, received: Received | None = None) -> tuple[Any, Failure | None]:
    """``(value, None)`` or ``(None, failure)``; a blob the master cannot unpickle is a failure itself.

    ``received``: the master's file service's results, where a value or a file a slave stored there is
    taken from (the explicit step of the data plane; without it such a result fails).
    """
    token = _receiving.set(received)
    try:
        decoded = pickle.loads(blob)
    except UNPICKLING_FAILURES as exc:
        return None, ("ResultDecodeError", f"the master cannot unpickle the result: {exc!r}", "", None)
    finally:
        _receiving.reset(token)
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

"""The file service's conversation as tables, sans-IO: which frame may come in which state, and the words.

:mod:`mwpy.wire.session` is this for the task wire; here it is for the data
plane (:mod:`mwpy.data.service` serves it, :mod:`mwpy.data.client` speaks it).
Nothing here touches a socket: a :class:`Conversation` is told each frame's
kind and answers the next state or raises :class:`~mwpy.errors.ProtocolError`,
so the grammar is tested in memory and the server only moves bytes.

Every frame is a 4-byte length and a body; after the handshake
(:mod:`mwpy.data.link`) a body is a kind byte, a payload and a MAC tag. The
requests and their answers::

    client                                          server
    G {"sha256"}                              ─►    S {"size"}, size raw bytes, E   (or X {"error"})  fetch
    P {"job","name","size","executable"},
      D chunk..., E {"sha256"}                ─►    K {}   (or X {"error"})          a job's output
    J {"job","usage"}                         ─►    K {"stop": null|"hold"|"remove"} a running job's usage
    R {"size"}, D chunk..., E {"sha256"}      ─►    K {}   (or X {"error"})          a large value, a file

Headers are strict JSON (no NaN, no duplicate keys); chunks are bytes;
nothing received is unpickled.
"""

from __future__ import annotations

import enum
from typing import Any, Final

from mwpy import strict_json
from mwpy.errors import ProtocolError

#: Bytes per data frame.
CHUNK: Final = 1 << 20
#: The largest frame either side accepts once authenticated (a chunk, its kind byte, its tag).
MAX_FRAME: Final = CHUNK + 64
#: The largest frame a peer may send before its member id is known (the sealed hello).
MAX_HELLO_FRAME: Final = 1024

# The words: a frame's kind byte.
HELLO: Final = b"H"
FETCH: Final = b"G"
OUTPUT: Final = b"P"
USAGE: Final = b"J"
RESULT: Final = b"R"
DATA: Final = b"D"
END: Final = b"E"
SIZE: Final = b"S"
TAKEN: Final = b"K"
REFUSED: Final = b"X"


class State(enum.Enum):
    """Where the server's side of one connection is: between requests, or inside an upload's body."""

    IDLE = "idle"
    BODY = "body"


#: (state, kind of the frame the server receives) -> the state after it; any other pair is a protocol error.
SERVER_RECEIVES: Final[dict[tuple[State, bytes], State]] = {
    (State.IDLE, FETCH): State.IDLE,
    (State.IDLE, USAGE): State.IDLE,
    (State.IDLE, OUTPUT): State.BODY,
    (State.IDLE, RESULT): State.BODY,
    (State.BODY, DATA): State.BODY,
    (State.BODY, END): State.IDLE,
}

#: A request's kind -> the kinds its answer may start with (the client's table).
ANSWERS: Final[dict[bytes, tuple[bytes, ...]]] = {
    FETCH: (SIZE, REFUSED),
    OUTPUT: (TAKEN, REFUSED),
    USAGE: (TAKEN,),
    RESULT: (TAKEN, REFUSED),
}


class Conversation:
    """The server's side of one connection's requests, sans-IO: told each frame's kind, it keeps the state."""

    def __init__(self) -> None:
        self.state = State.IDLE

    def receive(self, kind: bytes, payload: bytes) -> dict[str, Any]:
        """Take a frame of ``kind``: its header (a request's, an end's) or ``{}`` for a data frame."""
        after = SERVER_RECEIVES.get((self.state, kind))
        if after is None:
            raise ProtocolError(f"unexpected frame {kind!r}" + (" in an upload" if self.state is State.BODY else ""))
        self.state = after
        if kind == DATA:
            return {}
        return header(payload) if payload or kind != END else {"end": True}


def header(payload: bytes) -> dict[str, Any]:
    """A frame's JSON header (strict: no NaN, no duplicate keys, no nesting deep enough to exhaust the stack)."""
    try:
        value = strict_json.loads(payload) if payload else {}
    except ValueError:
        raise ProtocolError("undecodable header") from None
    if not isinstance(value, dict):
        raise ProtocolError("undecodable header")
    return value

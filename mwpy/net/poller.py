"""The master's epoll, with what each descriptor stands for: readiness without selectors' Python layer.

``selectors.EpollSelector`` wraps the same epoll in Python: each call converts
the timeout, sizes the answer, builds a key per ready descriptor and a list of
(key, events) pairs. A one-task round trip polls at least twice, and a spin
(mwpy/net/spin.py) many times between a task's departure and its result; here
a quick look is epoll's own call and one test, and only what is ready is looked
up. Events are read as selectors reads them: a hang-up or an error counts as
readable (the read reports it) and as writable. Linux only, as mwpy is.
"""

from __future__ import annotations

import math
import select
import socket
from typing import Any

#: Event bits that make a descriptor readable: any but "writable" alone (selectors' reading of epoll's events).
READABLE = ~select.EPOLLOUT
#: Event bits that make a descriptor writable: any but "readable" alone.
WRITABLE = ~select.EPOLLIN


class Poller:
    """Sockets watched for reading (and for writing while asked), each with its mark: (mark, events) when ready."""

    __slots__ = ("_epoll", "_poll", "_marks")

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._poll = self._epoll.poll
        self._marks: dict[int, Any] = {}

    def register(self, sock: socket.socket, mark: Any) -> None:
        """Watch ``sock`` for reading; it is reported with ``mark``."""
        fd = sock.fileno()
        self._epoll.register(fd, select.EPOLLIN)
        self._marks[fd] = mark

    def modify(self, sock: socket.socket, *, write: bool) -> None:
        """Watch ``sock`` for writing too (``write``), or for reading alone again."""
        self._epoll.modify(sock.fileno(), select.EPOLLIN | select.EPOLLOUT if write else select.EPOLLIN)

    def unregister(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (before it is closed: its descriptor number may be reused at once)."""
        fd = sock.fileno()
        self._epoll.unregister(fd)
        del self._marks[fd]

    def ready(self) -> list[tuple[Any, int]]:
        """What is ready now, without waiting: a spin's look (mwpy/net/spin.py)."""
        ready = self._poll(0)
        return self._marked(ready) if ready else ready

    def wait(self, timeout: float | None) -> list[tuple[Any, int]]:
        """What is ready within ``timeout`` seconds (None: for ever); epoll waits whole milliseconds, never fewer than
        asked (as selectors rounds)."""
        wait = -1.0 if timeout is None else math.ceil(timeout * 1e3) * 1e-3 if timeout > 0 else 0.0
        ready = self._poll(wait, max(len(self._marks), 1))
        return self._marked(ready) if ready else ready

    def _marked(self, ready: list[tuple[int, int]]) -> list[tuple[Any, int]]:
        if len(ready) == 1:  # one task's round trip: its slave's socket alone, without a comprehension's call
            fd, events = ready[0]
            return [(self._marks[fd], events)]
        return [(self._marks[fd], events) for fd, events in ready]

    def close(self) -> None:
        self._epoll.close()

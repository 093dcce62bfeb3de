"""Listening inside a port range (``--mw-master-port-range LOW-HIGH``), and connecting.

A master behind a firewall that opens only a range of ports must put every
port it listens on there: the master's own, the file service's (``mwpy
jobs``) and the metrics exporter's. Each takes the first free port of the
range, in that order; one line names the range when none is left.

:func:`connect` is how a slave reaches its master and a file service: it
hands the resolver an ASCII host name as the bytes it already is, because
Python encodes a ``str`` host with the idna codec first, whose import
(``stringprep``, ``unicodedata``: some 7 ms) would come before a slave's
first task.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import TypeVar

from mwpy.errors import ConfigurationError

#: A port range, both ends included, as ``--mw-master-port-range`` gives it.
PortRange = tuple[int, int]
T = TypeVar("T")


def first_free(ports: PortRange, open_at: Callable[[int], T], what: str) -> T:
    """``open_at(port)`` for the first port of ``ports`` that is not taken.

    :class:`~mwpy.errors.ConfigurationError` (one line, naming the range and ``what`` wanted a port) when every
    port is taken; any other failure to listen is raised as it is.
    """
    low, high = ports
    for port in range(low, high + 1):
        try:
            return open_at(port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    count = high - low + 1
    raise ConfigurationError(f"--mw-master-port-range {low}-{high}: no free port left for {what} (all {count} in use)")


def listen(host: str, ports: PortRange | None, what: str, *, port: int = 0, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``host``: at ``port`` (0: any free one), or the first free one of ``ports``."""
    if ports is None:
        return socket.create_server((host, port), backlog=backlog)
    return first_free(ports, lambda candidate: socket.create_server((host, candidate), backlog=backlog), what)


def connect(host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to ``host``:``port`` (``socket.create_connection``); a non-ASCII host name is encoded
    with idna as Python does."""
    name = host.encode("ascii") if host.isascii() else host
    return socket.create_connection((name, port), timeout=timeout)  # type: ignore[arg-type] # getaddrinfo: bytes

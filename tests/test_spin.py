"""Adaptive spinning (mwpy/net/spin.py) on a real socket: it polls before sleeping only while that has paid off.

The polls are counted by wrapping a real ``select.poll``: a spin is many
``poll(0)`` calls before the sleeping one, no spin is the sleeping call alone.
What a user cares about: a computation whose answers are slow (long tasks, an
idle master) does not burn CPU in spins, and ``--mw-spin-us 0`` never spins.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mwpy.net.spin import Spinner
from mwpy.options import DEFAULT_SPIN_US


class CountedPoll:
    """A real poll of one socket, counting calls by kind."""

    def __init__(self, sock: socket.socket) -> None:
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self.immediate = 0
        self.sleeping = 0

    def __call__(self, timeout: float | None) -> list[tuple[int, int]]:
        if timeout == 0:
            self.immediate += 1
        else:
            self.sleeping += 1
        return self._poller.poll(None if timeout is None else int(timeout * 1000))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    with a, b:
        yield a, b


def test_a_fruitless_spin_stops_spinning_until_a_sleep_ends_at_once(pair: tuple[socket.socket, socket.socket]) -> None:
    reader, writer = pair
    spinner = Spinner(DEFAULT_SPIN_US)
    poll = CountedPoll(reader)
    assert spinner.wait(poll, 0.05) == []  # nothing comes: it spun (as it may at first), then slept
    assert poll.immediate > 1
    assert poll.sleeping == 1
    for _ in range(3):  # slow answers: every later wait sleeps at once, no CPU burnt in spins
        poll.immediate = poll.sleeping = 0
        assert spinner.wait(poll, 0.02) == []
        assert (poll.immediate, poll.sleeping) == (0, 1)
    # An answer already there: the sleep ends at once, so spinning pays again. "At once" is within the spin time
    # (200 µs); on a loaded machine the process may be preempted inside that sleep, so the pair is tried again
    # until one such sleep was quick (a deadline, not a count of lucky runs).
    deadline = time.monotonic() + 30.0
    while True:
        writer.send(b"x")
        assert spinner.wait(poll, 5.0)
        reader.recv(1)
        poll.immediate = poll.sleeping = 0
        timer = threading.Timer(0.05, writer.send, (b"y",))
        timer.start()
        try:
            assert spinner.wait(poll, 5.0)  # spun first, then slept until the answer came
        finally:
            timer.join()
        reader.recv(1)
        if poll.immediate > 1 or time.monotonic() > deadline:
            break
    assert poll.immediate > 1
    assert poll.sleeping == 1


def test_an_answer_within_the_spin_is_caught_without_sleeping(pair: tuple[socket.socket, socket.socket]) -> None:
    reader, writer = pair
    spinner = Spinner(1_000_000)  # a whole second of spinning: the answer surely comes within it
    poll = CountedPoll(reader)
    timer = threading.Timer(0.01, writer.send, (b"x",))
    timer.start()
    try:
        assert spinner.wait(poll, 5.0)
    finally:
        timer.join()
    assert poll.sleeping == 0
    assert poll.immediate > 1


@pytest.mark.parametrize(("spin_us", "timeout"), [(0, 0.01), (DEFAULT_SPIN_US, 0)])
def test_spin_0_or_a_wait_of_0_is_one_plain_poll(
    pair: tuple[socket.socket, socket.socket], spin_us: int, timeout: float
) -> None:
    reader, _ = pair
    spinner = Spinner(spin_us)
    poll = CountedPoll(reader)
    assert spinner.wait(poll, timeout) == []
    assert poll.immediate + poll.sleeping == 1

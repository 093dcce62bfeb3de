"""The peers: what a user would pick instead of mwpy, measured the same way in a child process each.

Every peer gets the same number of worker processes (one thread each), is
warmed up with a batch of tasks before timing starts (so pool or cluster
start-up is not counted), and runs the same no-op task from
``benchmarks._echo``. Throughput uses each peer's batch API (``Executor.map``,
``Client.map`` + ``gather``, a list of Parsl app futures), and for issue 13's
"``ProcessPoolExecutor`` submit() per task" one ``submit()`` per task then every
``result()`` (``processpool-submit``); latency submits one
task and waits for its result before the next. The "floor" is a bare
pickle echo over a loopback TCP socket to another process: no framework at all;
the "event-loop floor" is the same echo waiting in epoll/poll as mwpy must; the
"spinning floor" is the same echo with both sides busy-polling a non-blocking
socket, never sleeping: the least a Python round trip takes on the machine.
The "frames floor" is the spinning echo speaking mwpy's own wire format: a
sealed, authenticated Tasks frame out and a checked Results frame back
(``mwpy.wire.protocol``), with no scheduler, future or session state: what a
framework on mwpy's frames pays before any bookkeeping of its own.

Usage (the harness does this): ``python -m benchmarks.peers PARAMS_JSON OUT_JSON``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import pickle
import select
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from benchmarks._echo import echo
from benchmarks.common import latency_summary, peak_rss_mb

#: A peer as the measurements see it: run a batch of arguments, or one task.
Batch = Callable[[range], list[Any]]
One = Callable[[int], Any]

#: Peers by name, and the module each needs (to skip what is not installed).
REQUIRES: dict[str, str | None] = {
    "processpool-submit": None,
    "processpool-1": None,
    "processpool-100": None,
    "dask": "distributed",
    "parsl": "parsl",
    "floor": None,
    "floor-event-loop": None,
    "floor-spin": None,
    "floor-frames": None,
}


def available(peer: str) -> str | None:
    """``None`` if the peer can run here, else why not."""
    module = REQUIRES[peer]
    if module is None:
        return None
    if importlib.util.find_spec(module) is None:  # find, not import: the harness stays small
        return f"{module} not installed (pip install -e '.[bench]')"
    return None


# ---------------------------------------------------------------------- peers


@contextmanager
def processpool(workers: int, chunksize: int) -> Iterator[tuple[Batch, One]]:
    with ProcessPoolExecutor(workers) as pool:
        yield (lambda args: list(pool.map(echo, args, chunksize=chunksize))), (lambda x: pool.submit(echo, x).result())


@contextmanager
def processpool_submit(workers: int) -> Iterator[tuple[Batch, One]]:
    """One ``submit()`` per task, then every ``result()``: how a user without ``map`` feeds the pool."""
    with ProcessPoolExecutor(workers) as pool:

        def batch(args: range) -> list[Any]:
            futures = [pool.submit(echo, x) for x in args]
            return [future.result() for future in futures]

        yield batch, (lambda x: pool.submit(echo, x).result())


@contextmanager
def dask(workers: int) -> Iterator[tuple[Batch, One]]:
    distributed = importlib.import_module("distributed")
    cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        wait = client.wait_for_workers
        wait(workers, timeout=120)
        yield (
            (lambda args: list(client.gather(client.map(echo, args, pure=False)))),
            (lambda x: client.submit(echo, x, pure=False).result()),
        )
    finally:
        client.close()
        cluster.close()


@contextmanager
def parsl(workers: int) -> Iterator[tuple[Batch, One]]:
    parsl_module = importlib.import_module("parsl")
    config_module = importlib.import_module("parsl.config")
    executors = importlib.import_module("parsl.executors")
    providers = importlib.import_module("parsl.providers")
    with tempfile.TemporaryDirectory(prefix="mwpy-bench-parsl-") as run_dir:
        config = config_module.Config(
            executors=[
                executors.HighThroughputExecutor(
                    label="htex",
                    max_workers_per_node=workers,
                    cores_per_worker=1,
                    provider=providers.LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
                )
            ],
            run_dir=run_dir,
        )
        parsl_module.load(config)
        app = parsl_module.python_app(echo, executors=["htex"])
        try:
            yield (lambda args: [f.result() for f in [app(x) for x in args]]), (lambda x: app(x).result())
        finally:
            parsl_module.dfk().cleanup()
            parsl_module.clear()


_HEADER = struct.Struct("!I")


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes; on a non-blocking socket (the spinning floor) it asks again at once until they come."""
    chunks = bytearray()
    while len(chunks) < size:
        try:
            data = sock.recv(size - len(chunks))
        except BlockingIOError:
            continue
        if not data:
            raise ConnectionError("peer closed")
        chunks += data
    return bytes(chunks)


def _echo_server(listener: socket.socket, event_loop: bool, spin: bool = False) -> None:
    """The floor's far side: unpickle each framed request and send its pickle back.

    With ``event_loop`` it waits the way an mwpy slave does (``poll`` before a
    non-blocking read, with an idle second thread like the slave's heartbeat)
    instead of blocking in ``recv``; with ``spin`` it reads a non-blocking
    socket again and again until the request is there (a reply this small
    fits the socket's buffer, so ``sendall`` never finds it full).
    """
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(not spin)
    poller = select.poll()
    poller.register(conn, select.POLLIN)
    if event_loop:
        idle = threading.Event()
        threading.Thread(target=idle.wait, daemon=True).start()
    with conn:
        while True:
            if event_loop:
                poller.poll(None)
            try:
                (size,) = _HEADER.unpack(_recv_exactly(conn, _HEADER.size))
            except ConnectionError:
                return
            value = pickle.loads(_recv_exactly(conn, size))
            body = pickle.dumps(value, 5)
            conn.sendall(_HEADER.pack(len(body)) + body)


@contextmanager
def floor(workers: int, *, event_loop: bool = False, spin: bool = False) -> Iterator[tuple[Batch, One]]:
    """A pickle echo to another process over loopback TCP: the least any framework can cost.

    With ``event_loop`` the client waits in ``epoll`` (as the mwpy master does)
    and the server in ``poll``: the floor for any design that serves many
    connections from one thread, shown beside the bare one. With ``spin`` both
    sides busy-poll a non-blocking socket and never sleep: no wake-up on the
    path, the physical floor of a Python round trip here, which a framework
    that must not burn idle CPU cannot reach.
    """
    del workers  # one echo process is the floor whatever the worker count
    with _echo_process(_echo_server, event_loop, spin, spin=spin) as sock:
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)

        def one(x: int) -> Any:
            body = pickle.dumps(x, 5)
            sock.sendall(_HEADER.pack(len(body)) + body)
            if event_loop:
                selector.select()
            (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
            return pickle.loads(_recv_exactly(sock, size))

        try:
            yield (lambda args: [one(x) for x in args]), one
        finally:
            selector.close()


@contextmanager
def _echo_process(server: Callable[..., None], *args: Any, spin: bool) -> Iterator[socket.socket]:
    """``server(listener, *args)`` in a forked process, and this side's socket connected to it over loopback
    TCP (non-blocking with ``spin``): the floors' far side and near side."""
    listener = socket.create_server(("127.0.0.1", 0))
    process = multiprocessing.get_context("fork").Process(target=server, args=(listener, *args), daemon=True)
    process.start()
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(not spin)
    try:
        yield sock
    finally:
        sock.close()
        process.join(10)
        listener.close()


def _spin_read(sock: socket.socket, reader: Any, buffer: memoryview) -> None:
    """Read a non-blocking socket into ``reader`` (a ``FrameReader``), asking again at once until bytes come."""
    while True:
        try:
            size = sock.recv_into(buffer)
        except BlockingIOError:
            continue
        if not size:
            raise ConnectionError("peer closed")
        reader.feed(buffer[:size])
        return


def _frames_server(listener: socket.socket, keys: tuple[bytes, bytes]) -> None:
    """The frames floor's far side: open each Tasks frame, call the task, seal its Results frame; spinning."""
    from mwpy.wire import protocol  # noqa: PLC0415 - only this peer needs mwpy

    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(False)
    channel, reader, buffer = protocol.Channel(*keys), protocol.FrameReader(1 << 20), memoryview(bytearray(1 << 16))
    with conn:
        while True:
            try:
                _spin_read(conn, reader, buffer)
            except ConnectionError:
                return
            while (body := reader.next()) is not None:
                tasks = channel.open(body)
                assert isinstance(tasks, protocol.Tasks)
                done = []
                for task_id, _, arguments in tasks.items:
                    started = time.perf_counter()
                    value = echo(*pickle.loads(arguments))
                    done.append((task_id, True, pickle.dumps(value, 5), time.perf_counter() - started))
                conn.sendall(channel.seal_body(protocol.results_body(done)))


@contextmanager
def frames_floor(workers: int) -> Iterator[tuple[Batch, One]]:
    """The spinning echo over mwpy's authenticated frames: one task out, its result back, nothing else."""
    from mwpy.wire import protocol  # noqa: PLC0415 - only this peer needs mwpy

    del workers  # one echo process, as for the other floors
    keys = (b"m" * 32, b"s" * 32)
    with _echo_process(_frames_server, keys[::-1], spin=True) as sock:
        channel, reader = protocol.Channel(*keys), protocol.FrameReader(1 << 20)
        buffer = memoryview(bytearray(1 << 16))

        def one(x: int) -> Any:
            sock.sendall(channel.seal_body(protocol.tasks_body([(x, "echo", pickle.dumps((x,), 5))])))
            while True:
                _spin_read(sock, reader, buffer)
                body = reader.next()
                if body is not None:
                    results = channel.open(body)
                    assert isinstance(results, protocol.Results)
                    protocol.check_results(results)
                    ((task_id, ok, value, _),) = results.items
                    if task_id != x or not ok:
                        raise RuntimeError(f"frames floor: task {task_id} for {x}")
                    return pickle.loads(value)

        yield (lambda args: [one(x) for x in args]), one


def _open(peer: str, workers: int) -> Any:
    if peer == "processpool-submit":
        return processpool_submit(workers)
    if peer.startswith("processpool-"):
        return processpool(workers, int(peer.removeprefix("processpool-")))
    if peer == "floor-event-loop":
        return floor(workers, event_loop=True)
    if peer == "floor-spin":
        return floor(workers, spin=True)
    if peer == "floor-frames":
        return frames_floor(workers)
    return {"dask": dask, "parsl": parsl, "floor": floor}[peer](workers)


# ---------------------------------------------------------------------- measurements


def measure(params: dict[str, Any]) -> dict[str, Any]:
    """Run one peer in one mode; the figures as JSON-able values."""
    report: dict[str, Any] = {}
    started = time.perf_counter()
    with _open(params["peer"], int(params["workers"])) as (batch, one):
        report["startup_seconds"] = time.perf_counter() - started
        warmup = int(params["warmup"])
        if params["mode"] == "throughput":
            _check(batch(range(warmup)), range(warmup))
            args = range(1_000_000_000, 1_000_000_000 + int(params["tasks"]))
            started = time.perf_counter()
            values = batch(args)
            elapsed = time.perf_counter() - started
            _check(values, args)
            report.update(tasks=len(args), seconds=elapsed, tasks_per_s=len(args) / elapsed)
        else:
            for i in range(warmup):
                one(i)
            samples: list[float] = []
            cap = time.monotonic() + float(params.get("max_seconds", 30.0))
            for i in range(int(params["round_trips"])):
                t0 = time.perf_counter()
                value = one(i)
                samples.append(time.perf_counter() - t0)
                if value != i:
                    raise RuntimeError(f"wrong result {value!r} for {i}")
                if time.monotonic() > cap and len(samples) >= 20:
                    break
            report.update(round_trips=len(samples), **latency_summary(samples))
    report["peak_rss_mb"] = peak_rss_mb()
    return report


def _check(values: list[Any], args: range) -> None:
    if values != list(args):
        raise RuntimeError("a peer returned wrong results")


def main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    report = measure(params)
    with open(argv[1], "w", encoding="utf-8") as out:
        json.dump(report, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

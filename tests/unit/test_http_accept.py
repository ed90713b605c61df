"""The HTTP frontend accepts a burst of connections at once (textproc.http.accept).

uvloop (libuv >= 1.45) accepts one connection per loop iteration: 500 streams connecting at
once took 500 iterations of a busy frontend, and a /health probe queued behind them in the
kernel waited up to 1.1 s. These run on uvloop, as the frontend does."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
import uvloop

from textproc.http.accept import BatchAcceptor, BatchAcceptingServer

pytestmark = pytest.mark.timeout(60)


class _Counting(asyncio.Protocol):
    made: list[int] = []

    def connection_made(self, transport: Any) -> None:
        _Counting.made.append(1)


def _connect_many(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks.append(s)
    return socks


async def _iterations_until(n: int, limit: int = 5000) -> int:
    for i in range(limit):
        if len(_Counting.made) >= n:
            return i
        await asyncio.sleep(0)
    return limit


def test_uvloop_alone_takes_one_connection_per_iteration() -> None:
    """The reason for BatchAcceptor (if a uvloop release fixes this, it can go)."""
    async def main() -> int:
        _Counting.made = []
        server = await asyncio.get_running_loop().create_server(_Counting, "127.0.0.1", 0)
        socks = _connect_many(server.sockets[0].getsockname()[1], 100)
        time.sleep(0.05)  # handshakes done, loop not running: all 100 wait in the accept queue
        took = await _iterations_until(100)
        server.close()
        for s in socks:
            s.close()
        return took

    if uvloop.run(main()) < 50:
        pytest.skip("this uvloop accepts a burst by itself: BatchAcceptor is no longer needed")


def test_a_burst_is_accepted_in_a_few_iterations() -> None:
    async def main() -> tuple[int, int]:
        _Counting.made = []
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        acceptor = BatchAcceptor(loop, listener, _Counting)
        socks = _connect_many(listener.getsockname()[1], 300)
        time.sleep(0.05)
        took = await _iterations_until(300)
        acceptor.close()
        await acceptor.wait_closed()
        late = _connect_many(listener.getsockname()[1], 3)  # closed: nobody takes these
        await asyncio.sleep(0.05)
        for s in socks + late:
            s.close()
        listener.close()
        return took, len(_Counting.made)

    took, made = uvloop.run(main())
    assert took <= 300 // 64 + 4  # all taken at once, handed over 64 per iteration
    assert made == 300


class _Order(asyncio.Protocol):
    ports: list[int] = []

    def connection_made(self, transport: Any) -> None:
        _Order.ports.append(transport.get_extra_info("peername")[1])


def test_a_burst_is_handed_over_a_slice_per_iteration_newest_first() -> None:
    """A connection that arrives last in a burst (a /health probe) starts first; no iteration
    sets up more than ``per_turn`` connections."""
    async def main() -> tuple[list[int], list[int], list[int]]:
        _Order.ports = []
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        acceptor = BatchAcceptor(loop, listener, _Order, per_turn=10)
        socks = []
        for _ in range(45):  # one at a time: their order in the accept queue is known
            socks += _connect_many(listener.getsockname()[1], 1)
            time.sleep(0.002)
        time.sleep(0.05)
        per_iteration = []
        for _ in range(50):
            seen = len(_Order.ports)
            await asyncio.sleep(0)
            per_iteration.append(len(_Order.ports) - seen)
            if len(_Order.ports) == 45:
                break
        order = [s.getsockname()[1] for s in socks]
        acceptor.close()
        for s in socks:
            s.close()
        listener.close()
        return _Order.ports, order, per_iteration

    made, order, per_iteration = uvloop.run(main())
    assert sorted(made) == sorted(order)
    assert made[0] == order[-1]  # the newest first
    assert max(per_iteration) <= 10


def test_past_max_pending_it_stops_accepting_until_it_catches_up() -> None:
    async def main() -> tuple[int, int, int]:
        _Counting.made = []
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        acceptor = BatchAcceptor(loop, listener, _Counting, per_turn=5, max_pending=20)
        socks = _connect_many(listener.getsockname()[1], 100)
        time.sleep(0.05)
        acceptor._accept()  # one readiness: takes only up to max_pending
        first = acceptor.accepted
        reading_after_full = acceptor._reading
        await _iterations_until(100, limit=500)
        acceptor.close()
        for s in socks:
            s.close()
        listener.close()
        return first, int(reading_after_full), len(_Counting.made)

    first, reading, made = uvloop.run(main())
    assert first == 20 and reading == 0
    assert made == 100  # reading resumed once half were handed over


def test_close_closes_the_connections_not_yet_handed_over() -> None:
    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        acceptor = BatchAcceptor(loop, listener, _Counting, per_turn=1)
        socks = _connect_many(listener.getsockname()[1], 5)
        time.sleep(0.05)
        acceptor._accept()
        acceptor.close()  # before any hand-over ran
        await asyncio.sleep(0.05)
        last = socks[0]
        last.setblocking(True)
        last.settimeout(2)
        try:
            got = last.recv(10)  # b"" (closed) or a reset
        except ConnectionResetError:
            got = b""
        for s in socks:
            s.close()
        listener.close()
        return got

    assert uvloop.run(main()) == b""


def test_uvicorn_serves_through_it_and_shuts_down() -> None:
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = BatchAcceptingServer(uvicorn.Config(app, loop="uvloop", lifespan="off",
                                                 log_config=None, access_log=False))

    async def main() -> list[bytes]:
        serving = asyncio.ensure_future(server.serve(sockets=[listener]))
        while not server.started:
            await asyncio.sleep(0.01)
        answers = []
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answers.append(await reader.read())
            writer.close()
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        return answers

    answers = uvloop.run(main())
    assert all(a.startswith(b"HTTP/1.1 200") and b"\r\nok\r\n" in a for a in answers)
    assert listener.fileno() == -1  # uvicorn closed the socket it was given


def test_the_frontend_freezes_its_startup_objects_and_collects_less_often() -> None:
    """Under a crowd of 500 streams CPython's default thresholds ran a full collection every
    ~0.5 s, 45-60 ms of CPU each with nothing found: the frontend's longest loop stalls."""
    import gc

    from textproc.heap import freeze_heap
    from textproc.http import run

    before = gc.get_threshold()
    try:
        freeze_heap(run.GC_THRESHOLDS)  # what the frontend's lifespan calls once started
        assert gc.get_freeze_count() > 1000
        assert gc.get_threshold() == run.GC_THRESHOLDS
        assert run.GC_THRESHOLDS[2] >= 100 * before[2]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

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
    assert took <= 5
    assert made == 300


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

    from textproc.http import run

    before = gc.get_threshold()
    try:
        run._quiet_gc()
        assert gc.get_freeze_count() > 1000
        assert gc.get_threshold() == run._GC_THRESHOLDS
        assert run._GC_THRESHOLDS[2] >= 100 * before[2]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

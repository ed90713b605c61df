"""The TextClient's detokenizer reader under a backlog, on a fake socket whose
``recv`` has every frame ready (as zmq.asyncio's does under an engine backlog: the awaited
future is already done, so nothing yields by itself), and the HTTP frontend's Pacer."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from textproc.client.events import StreamState
from textproc.client.inflight import InFlight
from textproc.client.readers import MAX_BUFFERED_OUTPUTS, Readers
from textproc.http.asgi import Pacer, PaceRequests
from textproc.protocol import Outputs, RequestOutput

pytestmark = pytest.mark.timeout(30)
_ENCODE = msgspec.msgpack.Encoder().encode


class _BackloggedSocket:
    """``recv`` returns queued frames at once (a done future); then waits forever."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.taken = 0

    def recv(self, copy: bool = True) -> asyncio.Future[bytes]:
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self.taken < len(self.frames):
            fut.set_result(self.frames[self.taken])
            self.taken += 1
        return fut


def _readers(frames: list[bytes], aborts: list[list[str]]) -> tuple[Readers, InFlight,
                                                                     _BackloggedSocket]:
    inflight = InFlight(1)
    sock = _BackloggedSocket(frames)
    readers = Readers(inflight, [sock], None, _ENCODE, aborts.append)  # type: ignore[arg-type, list-item]
    return readers, inflight, sock


async def _run_reader(readers: Readers, until: Any) -> None:
    task = asyncio.ensure_future(readers.read_detok())
    try:
        for _ in range(10_000):
            if until():
                return
            await asyncio.sleep(0)
    finally:
        task.cancel()


def test_a_backlog_does_not_starve_the_other_tasks() -> None:
    """Before: the reader drained all 2,000 queued frames before any other task ran (/health
    waited seconds, no disconnect was noticed). Now others run between frames."""
    frames = [_ENCODE(Outputs([])) for _ in range(2000)]

    async def main() -> int:
        readers, _, sock = _readers(frames, [])
        seen_at: list[int] = []

        async def other() -> None:
            seen_at.append(sock.taken)

        task = asyncio.ensure_future(readers.read_detok())
        await asyncio.sleep(0)
        side = asyncio.ensure_future(other())
        while not side.done():
            await asyncio.sleep(0)
        task.cancel()
        return seen_at[0]

    assert asyncio.run(main()) < 10


def test_outputs_of_a_gone_stream_are_aborted_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine slow to stop sends outputs for a closed stream every step; an Abort per frame
    was 14% of the frontend's CPU under a crowd. Now one per STRAY_ABORT_EVERY_S (made long
    here: a loaded box reads the 300 frames slower than the real one)."""
    monkeypatch.setattr("textproc.client.readers.STRAY_ABORT_EVERY_S", 600.0)
    frames = [_ENCODE(Outputs([RequestOutput("gone", [{"content": "x"}])])) for _ in range(300)]

    async def main() -> list[list[str]]:
        aborts: list[list[str]] = []
        readers, _, sock = _readers(frames, aborts)
        await _run_reader(readers, lambda: sock.taken >= len(frames))
        return aborts

    assert asyncio.run(main()) == [["gone"]]


def test_a_stream_nobody_reads_is_bounded_then_failed() -> None:
    n = MAX_BUFFERED_OUTPUTS + 100
    frames = [_ENCODE(Outputs([RequestOutput("slow", [{"content": "x"}])])) for _ in range(n)]

    async def main() -> StreamState:
        readers, inflight, sock = _readers(frames, [])
        stream = StreamState("slow", 0)
        inflight.streams["slow"] = stream
        await _run_reader(readers, lambda: sock.taken >= n)
        return stream

    stream = asyncio.run(main())
    assert len(stream.items) < MAX_BUFFERED_OUTPUTS
    assert stream.error is not None and "untaken" in str(stream.error)


def test_pacer_lets_a_few_through_per_loop_turn_in_order() -> None:
    async def main() -> list[list[int]]:
        pacer = Pacer(4)
        turns: list[list[int]] = []
        current: list[int] = []

        async def caller(i: int) -> None:
            await pacer.turn()
            current.append(i)

        tasks = [asyncio.ensure_future(caller(i)) for i in range(10)]
        while not all(t.done() for t in tasks):
            await asyncio.sleep(0)
            if current:
                turns.append(list(current))
                current.clear()
        return turns

    turns = asyncio.run(main())
    assert [i for turn in turns for i in turn] == list(range(10))
    assert max(len(t) for t in turns) <= 4 and len(turns) >= 3


def test_first_outputs_wake_before_running_streams() -> None:
    """An Outputs frame carries one output of every running stream; the streams getting their
    first output (their TTFT) are woken first, whatever their place in the frame."""
    order: list[str] = []
    rids = [f"r{i}" for i in range(6)]
    frame = Outputs([RequestOutput(rid, [{"content": "a"}]) for rid in rids])

    async def main() -> None:
        readers, inflight, sock = _readers([_ENCODE(frame)], [])
        loop = asyncio.get_running_loop()
        for i, rid in enumerate(rids):
            stream = inflight.streams[rid] = StreamState(rid, 0)
            stream.started = i % 2 == 0  # r0, r2, r4 had output before
            stream.waiter = loop.create_future()
            stream.waiter.add_done_callback(lambda _f, rid=rid: order.append(rid))
        await _run_reader(readers, lambda: len(order) == len(rids))

    asyncio.run(main())
    assert order == ["r1", "r3", "r5", "r0", "r2", "r4"]


def test_requests_wait_for_their_turn_before_the_app_but_health_does_not() -> None:
    """PaceRequests is the first middleware: of 100 requests arriving at once only a few reach
    the app per loop iteration, and a /health among them goes straight through."""
    async def main() -> tuple[int, list[str]]:
        reached: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            reached.append(scope["path"])

        paced = PaceRequests(app, Pacer(4))
        calls = [paced({"type": "http", "path": "/v1/chat/completions"}, None, None)
                 for _ in range(100)]
        calls.append(paced({"type": "http", "path": "/health"}, None, None))
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0)
        first = list(reached)
        await asyncio.gather(*tasks)
        return len(reached), first

    total, first = asyncio.run(main())
    assert total == 101
    assert "/health" in first and len(first) <= 5

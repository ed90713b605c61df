"""A worker's read-ahead (``textproc.service.worker._read_ahead``) over a real ROUTER socket:
the frames queued on it come out lower priority first, arrival order within one, a peer's
share of a long prompt before all, at most ``MAX_BACKLOG`` read at once."""

from __future__ import annotations

import heapq
import itertools
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from textproc.options import SamplingOptions
from textproc.protocol import ChatRequest, EncodePart, TokenizeRequest, WorkerInFrame
from textproc.service import worker
from textproc.transport import FrameDecoder

pytestmark = pytest.mark.timeout(30)


def _chat(rid: str, priority: int) -> bytes:
    return msgspec.msgpack.encode(ChatRequest(rid, [{"role": "user", "content": "hi"}],
                                              sampling=SamplingOptions(priority=priority)))


def _queue(tmp_path: Path, frames: list[bytes]) -> tuple[list[Any], Any, Any]:
    ctx: zmq.Context[Any] = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.bind(f"ipc://{tmp_path}/w")
    client = ctx.socket(zmq.DEALER)
    client.connect(f"ipc://{tmp_path}/w")
    for data in frames:
        client.send(data)
    deadline = time.monotonic() + 10
    while not front.poll(100) and time.monotonic() < deadline:
        pass
    time.sleep(0.2)  # every frame is queued on the ROUTER
    return [front, client], ctx, front


def _served(front: Any, n: int) -> list[str]:
    decoder: FrameDecoder[WorkerInFrame] = FrameDecoder(WorkerInFrame, socket_name="test")
    backlog: list[tuple[int, int, bytes, Any]] = []
    order = itertools.count()
    out: list[str] = []
    while len(out) < n:
        worker._read_ahead(front, decoder, backlog, order)
        if not backlog:
            time.sleep(0.01)
            continue
        frame = heapq.heappop(backlog)[3]
        out.append(getattr(frame, "request_id", None) or f"part-{frame.job_id}")
    return out


def test_queued_frames_come_out_by_priority(tmp_path: Path) -> None:
    frames = [_chat("a", 5), _chat("b", 0), msgspec.msgpack.encode(TokenizeRequest("t", "x")),
              _chat("c", -2), _chat("d", 5),
              msgspec.msgpack.encode(EncodePart("7", ["text"], True)), _chat("e", -2)]
    sockets, ctx, front = _queue(tmp_path, frames)
    try:
        assert _served(front, len(frames)) == ["part-7", "c", "e", "b", "t", "a", "d"]
    finally:
        for sock in sockets:
            sock.close(0)
        ctx.term()


def test_read_ahead_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "MAX_BACKLOG", 3)
    sockets, ctx, front = _queue(tmp_path, [_chat(f"r{i}", 10 - i) for i in range(6)])
    try:
        decoder: FrameDecoder[WorkerInFrame] = FrameDecoder(WorkerInFrame, socket_name="test")
        backlog: list[tuple[int, int, bytes, Any]] = []
        worker._read_ahead(front, decoder, backlog, itertools.count())
        assert sorted(f[3].request_id for f in backlog) == ["r0", "r1", "r2"]
    finally:
        for sock in sockets:
            sock.close(0)
        ctx.term()

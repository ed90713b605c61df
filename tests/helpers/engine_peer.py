"""The textproc side of the two engine sockets, bound with plain pyzmq, for engine-facing tests.

``EnginePeer`` binds PUSH on engine-in and PULL on engine-out under a test's tmp dir;
``as_step`` turns a packed step into the equivalent ``EngineStep`` so tests compare one shape.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import zmq

from textproc.protocol import EngineOutFrame, EngineStep, EngineStepPacked, StepOutput, step_entries

__all__ = ["ENC", "OUT", "EnginePeer", "as_step", "entries_of", "poll_until"]

ENC = msgspec.msgpack.Encoder()
OUT = msgspec.msgpack.Decoder(EngineOutFrame)


def as_step(frame: Any) -> Any:
    """A packed step (what EngineLink sends) as the equivalent EngineStep; other frames as is."""
    if not isinstance(frame, EngineStepPacked):
        return frame
    rids, ids, reasons = step_entries(frame)
    return EngineStep(frame.step, [StepOutput(r, list(i), f) for r, i, f in zip(rids, ids, reasons)])


class EnginePeer:
    """PUSH bound on ``<tmp>/engine-in``, PULL bound on ``<tmp>/engine-out``."""

    def __init__(self, tmp_path: Path) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.engine_in = f"ipc://{tmp_path}/engine-in"
        self.engine_out = f"ipc://{tmp_path}/engine-out"
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.bind(self.engine_in)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.bind(self.engine_out)

    def send(self, frame: Any) -> None:
        self.push.send(frame if isinstance(frame, bytes) else ENC.encode(frame))

    def silence(self, timeout_s: float) -> str:
        """The assertion message when nothing arrives within ``timeout_s``."""
        return f"nothing on {self.engine_out} within {timeout_s} s"

    def recv_raw(self, timeout_s: float = 5.0) -> bytes:
        if not self.pull.poll(int(timeout_s * 1000)):
            raise AssertionError(self.silence(timeout_s))
        return self.pull.recv()

    def recv(self, timeout_s: float = 5.0) -> Any:
        return OUT.decode(self.recv_raw(timeout_s))

    def close(self) -> None:
        self.push.close(0)
        self.pull.close(0)
        self.ctx.term()


def entries_of(frame: Any) -> list[tuple[str, list[int], str | None]]:
    """Either step frame as (request_id, new ids, finish_reason) per request."""
    step = as_step(frame)
    assert isinstance(step, EngineStep), frame
    return [(o.request_id, o.token_ids, o.finish_reason) for o in step.outputs]


def poll_until(fn: Any, *, timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{fn} returned nothing within {timeout_s} s")
        time.sleep(0.002)

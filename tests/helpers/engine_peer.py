"""Engine-facing test helpers around ``textproc.testing.engine.EnginePeer`` (textproc's side of
the two engine sockets, bound under a test's tmp dir).

``as_step`` turns a packed step into the equivalent ``EngineStep`` so tests compare one shape.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from textproc.protocol import EngineOutFrame, EngineStep, EngineStepPacked, StepOutput, step_entries
from textproc.testing.engine import EnginePeer

__all__ = ["ENC", "OUT", "EnginePeer", "as_step", "entries_of", "poll_until"]

ENC = msgspec.msgpack.Encoder()
OUT = msgspec.msgpack.Decoder(EngineOutFrame)


def as_step(frame: Any) -> Any:
    """A packed step (what EngineLink sends) as the equivalent EngineStep; other frames as is."""
    if not isinstance(frame, EngineStepPacked):
        return frame
    rids, ids, reasons = step_entries(frame)
    return EngineStep(frame.step, [StepOutput(r, list(i), f) for r, i, f in zip(rids, ids, reasons)],
                      frame.cached_tokens)


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

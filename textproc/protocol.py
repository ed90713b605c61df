"""Every frame textproc sends between processes: msgspec Structs, MessagePack on the wire.

Owns the wire format and PROTOCOL_VERSION. Must not import the text core (workers translate
frames into core calls). Rules (style.md): tagged unions with ``array_like=True``; the tag is the
class name and never changes once shipped; new fields go at the end with defaults; never reorder
or retype a field; bump PROTOCOL_VERSION on any change.

Engine-facing frames (the only ones an engine sees, through ``textproc.engine.EngineLink``):

* ``engine-in`` socket (textproc binds PUSH, the engine connects PULL): ``EngineRequest`` and
  ``EngineAbort`` on ONE socket, so an abort can never overtake the request it aborts.
* ``engine-out`` socket (textproc binds PULL, the engine connects PUSH): ``EngineHello`` once at
  start (a new ``instance_id`` tells textproc the engine restarted), then one ``EngineStep`` per
  engine step carrying every request that produced tokens or finished in that step.

Token ids of prompts travel packed (``pack_ids``: little-endian uint32), not as lists of ints.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any, Sequence

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_FRAME_BYTES",
    "EngineRequest",
    "EngineAbort",
    "StepOutput",
    "EngineStep",
    "EngineHello",
    "EngineInFrame",
    "EngineOutFrame",
    "pack_ids",
    "unpack_ids",
]

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 64 * 1024 * 1024  # zmq MAXMSGSIZE on every receiving socket

_LITTLE = sys.byteorder == "little"


def pack_ids(token_ids: Sequence[int]) -> bytes:
    """Token ids as little-endian uint32 bytes (4 bytes per id).

    >>> unpack_ids(pack_ids([1, 151643]))
    [1, 151643]
    """
    packed = array("I", token_ids)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def unpack_ids(data: bytes) -> list[int]:
    """Inverse of ``pack_ids``; raises ValueError when ``len(data)`` is not a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"packed token ids must be a multiple of 4 bytes, got {len(data)}")
    packed = array("I")
    packed.frombytes(data)
    if not _LITTLE:
        packed.byteswap()
    return packed.tolist()


class EngineRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """A new request for the engine: prompt ids (packed), limits and sampling parameters."""

    request_id: str
    prompt_token_ids: bytes  # pack_ids(...)
    max_tokens: int
    stop_token_ids: list[int] = []  # includes EOS unless ignore_eos
    sampling: dict[str, Any] = {}  # temperature, top_p, top_k, seed, ... passed through untouched
    constraint: str | None = None  # regex the whole output must match (forced tool call)
    min_tokens: int = 0  # stop token ids do not apply before this many tokens
    ignore_eos: bool = False


class EngineAbort(msgspec.Struct, tag=True, array_like=True):
    """Stop generating for these requests (stop string matched, client gone, error)."""

    request_ids: list[str]


class StepOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """One request's part of an engine step: new ids, and why it finished if it did."""

    request_id: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop" (stop token / EOS), "length", "abort", "error"


class EngineStep(msgspec.Struct, tag=True, array_like=True):
    """Everything one engine step produced: one frame per step, not one per token."""

    step: int
    outputs: list[StepOutput]


class EngineHello(msgspec.Struct, tag=True, array_like=True):
    """Sent by EngineLink once when it starts; a new instance_id means the engine restarted."""

    instance_id: str
    protocol_version: int = PROTOCOL_VERSION


EngineInFrame = EngineRequest | EngineAbort
EngineOutFrame = EngineStep | EngineHello

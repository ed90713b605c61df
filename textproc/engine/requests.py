"""What an engine receives: ``IncomingRequest`` (an ``EngineRequest`` with its ids unpacked) and
the rules a decoded request frame must keep before it is handed to the engine."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import msgspec

from textproc.errors import short
from textproc.protocol import MAX_TOP_LOGPROBS, EngineRequest

__all__ = ["IncomingRequest", "check_request", "unpack_array", "unpack_list"]

_BIG_ENDIAN = array("I", [1]).tobytes()[0] == 0


class IncomingRequest(msgspec.Struct):
    """A new request as the engine sees it: ``EngineRequest`` with the prompt ids unpacked.

    ``prompt_token_ids`` is an ``array('I')`` (a ``Sequence[int]``: len, index, slice, iterate;
    ``numpy.frombuffer(ids, numpy.uint32)`` without a copy) unless the link was built with
    ``prompt_ids_as_list=True``: turning 1,024 packed ids into Python ints costs ~10x the memcpy
    (bench/enginelink.py). ``stop_token_ids`` are the ids that stop the request: the model's EOS
    ids (``eos_token_ids``: the tokenizer's and its generation config's) are among them unless
    ``ignore_eos``. Before ``min_tokens`` generated tokens the engine masks ``stop_token_ids``
    and ``eos_token_ids`` (with ``ignore_eos`` too: vLLM's ``all_stop_token_ids``), so neither
    is sampled. ``constraint`` is a regex the whole output must match. ``logit_bias`` maps
    token ids (in the vocabulary) to a bias in -100..100 added to their logits (OpenAI's rule:
    -100 bans the token, 100 forces it).
    ``guide`` (when the request names a compiled index) enforces ``constraint``:
    ``guide.allowed_mask()`` before sampling, ``guide.advance(token_id)`` after, finish when
    ``guide.is_finished``. ``logprobs``: None, or k >= 0: send each new token's logprob and its
    k most likely alternatives with the step (``EngineLink.send_step(logprobs=, top_ids=)``).
    """

    request_id: str
    prompt_token_ids: Sequence[int]
    max_tokens: int
    stop_token_ids: list[int]
    sampling: dict[str, Any]
    constraint: str | None
    min_tokens: int
    ignore_eos: bool
    logit_bias: dict[int, float] = {}
    index_key: str = ""
    guide: Any = None  # textproc.core.constraints.Guide when index_key names an index
    logprobs: int | None = None  # alternatives wanted per new token (None: no logprobs)
    eos_token_ids: list[int] = []  # the model's EOS ids (see above)
    # the prompt's images (protocol.EngineImage: pixel patches, grid, placeholder span), for a
    # vision-language model; the prompt ids hold each image's placeholder tokens already
    images: list[Any] = []
    priority: int = 0  # lower is served first (vLLM's priority; its fcfs policy ignores it)
    lora: str = ""  # the LoRA adapter to serve it with, by name ("": the base model)


def unpack_array(data: bytes) -> array[int]:
    # little-endian uint32 (protocol.pack_ids)
    packed = array("I")
    packed.frombytes(data)
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed


def unpack_list(data: bytes) -> list[int]:
    return unpack_array(data).tolist()



def check_request(frame: EngineRequest) -> str | None:
    """What is wrong with a decoded request, or None."""
    if not frame.request_id:
        return "empty request_id"
    if not frame.prompt_token_ids or len(frame.prompt_token_ids) % 4:
        return (
            f"prompt_token_ids must be a non-empty multiple of 4 bytes (packed uint32), "
            f"got {len(frame.prompt_token_ids)} bytes"
        )
    if frame.max_tokens < 1:
        return f"max_tokens must be >= 1, got {frame.max_tokens!r}"
    if frame.min_tokens < 0:
        return f"min_tokens must be >= 0, got {frame.min_tokens!r}"
    for token_id in frame.stop_token_ids:
        if token_id < 0:
            return f"stop_token_ids must be >= 0, got {short(frame.stop_token_ids)}"
    for token_id in frame.eos_token_ids:
        if token_id < 0:
            return f"eos_token_ids must be >= 0, got {short(frame.eos_token_ids)}"
    if frame.logprobs is not None and not 0 <= frame.logprobs <= MAX_TOP_LOGPROBS:
        return f"logprobs must be None or 0..{MAX_TOP_LOGPROBS}, got {frame.logprobs!r}"
    return None

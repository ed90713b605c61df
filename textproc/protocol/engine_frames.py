"""The frames an engine sees (engine-in, engine-out), and ``step_entries`` to check a packed step.

These are the only frames ``textproc.engine.EngineLink`` handles; no client, worker or
detokenizer frame lives here, so an engine-side change touches this module alone (plus
PROTOCOL_VERSION in ``version.py``).

* ``engine-in`` socket (textproc binds PUSH, the engine connects PULL): ``EngineRequest`` and
  ``EngineAbort`` on ONE socket, so an abort can never overtake the request it aborts;
  ``EngineIndex`` ahead of the first request naming its constraint; ``EngineCall``, an
  operator's call of an engine method (answered by ``EngineCallResult`` on engine-out).
* ``engine-out`` socket (textproc binds PULL, the engine connects PUSH): ``EngineHello`` once at
  start (a new ``instance_id`` tells textproc the engine restarted), then one step frame per
  engine step carrying every request that produced tokens or finished in that step: either
  ``EngineStepPacked`` (columnar, protocol 2: request ids, all new ids packed, counts packed,
  sparse finish reasons; what ``EngineLink.send_step`` sends) or ``EngineStep`` (one
  ``StepOutput`` per request; what ``EngineLink.send_outputs`` sends by default, and older
  engines). A step may carry logprobs for its new tokens (protocol 8): ``logprobs`` (float32,
  one row of ``1 + k`` per new token: the sampled token's, then its k alternatives', most likely
  first) and ``top_ids`` (uint32, the k alternatives of each row), for the requests whose
  ``EngineRequest.logprobs`` asked; ``packing.logprob_rows`` unpacks and checks them. A step
  may say how many prompt tokens the engine found in its prefix cache for the requests whose
  first output it carries (protocol 15: ``cached_tokens``, request id -> count; sparse, one
  entry per request in its life, so the per-token path does not see it).

Token ids of prompts travel packed (``pack_ids``: little-endian uint32), not as lists of ints.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Sequence

import msgspec

from textproc.protocol.packing import unpack_ids
from textproc.protocol.version import PROTOCOL_VERSION

__all__ = [
    "EngineImage",
    "EngineRequest",
    "EngineAbort",
    "StepOutput",
    "EngineStep",
    "EngineHello",
    "EngineStepPacked",
    "IndexTable",
    "EngineIndex",
    "EngineCall",
    "EngineCallResult",
    "step_entries",
    "EngineInFrame",
    "EngineOutFrame",
]


class EngineImage(msgspec.Struct, array_like=True, gc=False):
    """One image of a request, preprocessed by the worker (protocol 16): ``pixel_values``
    float32 little-endian, ``n_patches`` rows of ``patch_dim`` values (the model processor's
    ``pixel_values`` rows for this image), ``grid_thw`` its grid in patches, ``offset`` and
    ``length`` where its placeholder tokens are in the prompt ids, ``digest`` the sha256 of the
    image file (hex: the same bytes, the same image)."""

    digest: str
    pixel_values: bytes
    n_patches: int
    patch_dim: int
    grid_thw: tuple[int, int, int]
    offset: int
    length: int


class EngineRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """A new request for the engine: prompt ids (packed), limits and sampling parameters."""

    request_id: str
    prompt_token_ids: bytes  # pack_ids(...)
    max_tokens: int
    stop_token_ids: list[int] = []  # the ids that stop it: eos_token_ids too unless ignore_eos
    sampling: dict[str, Any] = {}  # temperature, top_p, top_k, seed, ... passed through untouched
    constraint: str | None = None  # regex the whole output must match (forced tool call)
    min_tokens: int = 0  # stop_token_ids and eos_token_ids are masked before this many tokens
    ignore_eos: bool = False
    # token id -> bias added to its logit, in LOGIT_BIAS_RANGE (protocol 4; ids in the vocabulary)
    logit_bias: dict[int, float] = {}
    # the compiled constraint (EngineIndex.table.key) the output must follow; "" for none.
    # The index reached engine-in before this request (the detokenizer sends it once).
    index_key: str = ""
    # protocol 8: None: no logprobs; k >= 0: with each new token send its logprob and the k
    # most likely alternatives (ids + logprobs), k in 0..MAX_TOP_LOGPROBS (vLLM's meaning)
    logprobs: int | None = None
    # protocol 14: the model's EOS ids (the tokenizer's and its generation config's
    # eos_token_id). In stop_token_ids unless ignore_eos; masked until min_tokens even with
    # ignore_eos (vLLM's SamplingParams.all_stop_token_ids)
    eos_token_ids: list[int] = []
    # protocol 16: the prompt's images, in prompt order (a vision-language model's request)
    images: list[EngineImage] = []
    # protocol 18: the scheduling order (vLLM's EngineCoreRequest.priority: lower is served
    # first under its priority policy; an int64)
    priority: int = 0
    # protocol 21: the LoRA adapter to serve it with, by name ("": the base model); the engine
    # knows each name's weights (engine_vllm's --lora-modules)
    lora: str = ""


class IndexTable(msgspec.Struct, array_like=True, gc=False):
    """A compiled constraint index as plain tables (``TokenIndex.pack()``), int32 LE arrays.

    ``masks``: the distinct per-state masks, each ceil(vocab_size / 32) int32 words;
    ``mask_of[state]`` picks one. ``default_next[state]`` is where an allowed id goes unless
    the exceptions (``exc_ids`` / ``exc_next`` from ``exc_offsets[state]`` to
    ``exc_offsets[state + 1]``) say otherwise; ``steer`` / ``distance``: a token on a shortest
    way to a complete output and its length in tokens. Protocol 12: in a counted repetition
    (``maxLength``) a token's next state depends on its length: ``by_chars_of[state]`` (int32,
    -1: none) picks a row of ``by_chars_next`` (rows of ``TokenIndex.BY_CHARS_WIDTH`` int32
    states), indexed by ``char_count[token id]`` (one byte per id), and it replaces
    ``default_next`` there; empty fields: no such state. ``n_known`` > 0: a partial index
    (the engine holds a request that reaches a state without tables until the whole index
    arrives under the same key: ``EngineIndex`` again).
    """

    key: str  # content address: vocabulary + constraint
    vocab_size: int
    end_ids: list[int]
    masks: bytes
    mask_of: bytes
    default_next: bytes
    accepting: bytes
    exc_offsets: bytes
    exc_ids: bytes
    exc_next: bytes
    steer: bytes
    distance: bytes
    char_count: bytes = b""  # protocol 12
    by_chars_of: bytes = b""
    by_chars_next: bytes = b""
    # protocol 13: a partial index (the first states of a progressive compile) numbers n_known
    # states but carries tables for the first len(accepting) only; 0: the whole index
    n_known: int = 0


class EngineIndex(msgspec.Struct, tag=True, array_like=True):
    """A compiled constraint for the engine's index cache, sent once before the first request
    that names it; ``evict`` lists keys the engine may drop (textproc mirrors its cache)."""

    table: IndexTable
    evict: list[str] = []


class EngineAbort(msgspec.Struct, tag=True, array_like=True):
    """Stop generating for these requests (stop string matched, client gone, error)."""

    request_ids: list[str]


class StepOutput(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One request's part of an engine step: new ids, and why it finished if it did.

    ``gc=False`` (as ``RequestOutput``): one is made per request per step and its fields (str,
    ids, bytes) cannot form a cycle, so the collector never tracks it (~20 ns per decoded one).
    """

    request_id: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop" (stop token / EOS), "length", "abort", "error"
    # protocol 8, as in EngineStepPacked but for this request's ids: float32 rows of 1 + k per
    # new id (or a list of floats), and the k alternative ids per row (uint32, or ints)
    logprobs: bytes | list[float] | None = None
    top_ids: bytes | list[int] | None = None


class EngineStep(msgspec.Struct, tag=True, array_like=True):
    """Everything one engine step produced: one frame per step, not one per token."""

    step: int
    outputs: list[StepOutput]
    # protocol 15: request id -> prompt tokens the engine found in its prefix cache, for
    # requests whose first output is in this step (vLLM's num_cached_tokens); absent: 0
    cached_tokens: dict[str, int] = {}


class EngineHello(msgspec.Struct, tag=True, array_like=True):
    """Sent by EngineLink once when it starts; a new instance_id means the engine restarted."""

    instance_id: str
    protocol_version: int = PROTOCOL_VERSION


class EngineStepPacked(msgspec.Struct, tag=True, array_like=True):
    """One engine step in columns: what ``EngineStep`` says, ~4x cheaper to encode and decode.

    ``request_ids[i]`` produced ``counts[i]`` new ids, the next ones in ``token_ids``
    (``token_ids`` holds every request's new ids one after the other). ``counts`` is
    ``pack_ids`` of the per-request counts, or empty when every request produced exactly one
    id (the common decode step). ``finished`` maps an index into ``request_ids`` to its finish
    reason ("stop", "length", "abort", "error"); requests not in it are still running.
    ``step_entries`` unpacks and checks a frame.
    """

    step: int
    request_ids: list[str]
    token_ids: bytes  # pack_ids(all new ids, request after request)
    counts: bytes = b""  # pack_ids(per-request counts); b"": one id per request
    finished: dict[int, str] = {}  # index into request_ids -> finish reason
    # protocol 8: float32 rows of 1 + k per new id, all requests' ids in order (the sampled
    # id's logprob, then the k alternatives', most likely first); b"": no logprobs this step.
    # Rows of requests that did not ask are padding; a request asking j < k takes the first j.
    logprobs: bytes = b""
    top_ids: bytes = b""  # uint32, k per row: the alternatives' ids
    cached_tokens: dict[str, int] = {}  # protocol 15, as EngineStep.cached_tokens


class EngineCall(msgspec.Struct, tag=True, array_like=True):
    """An operator's call of an engine method (protocol 18): a client sends it to detokenizer
    shard 0's detok-front, the shard relays it on its engine-in, and the engine answers ONE
    ``EngineCallResult`` with the same ``call_id`` on that shard's engine-out.

    ``method`` is the name of vLLM's ``EngineCore`` method (``textproc.engine.calls`` lists
    them with their arguments); ``args`` maps argument names to values."""

    call_id: str
    method: str
    args: dict[str, Any] = {}


class EngineCallResult(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """The answer to ``EngineCall`` ``call_id``: ``result`` (the method's return value), or
    ``error`` with ``status`` (400: bad arguments; 501: the engine has no such method)."""

    call_id: str
    result: Any = None
    error: str = ""
    status: int = 200


def step_entries(
    frame: EngineStepPacked,
) -> tuple[list[str], list[Sequence[int]], list[str | None]]:
    """``(request_ids, new ids per request, finish reason per request)`` of a packed step.

    Raises ValueError naming the inconsistency when the columns do not fit together (token
    bytes not a multiple of 4, ``len(counts) != len(request_ids)``, counts not summing to the
    number of ids, a ``finished`` index outside ``request_ids``).
    """
    rids = frame.request_ids
    n = len(rids)
    tokens = unpack_ids(frame.token_ids)  # ValueError: not a multiple of 4 bytes
    ids: list[Sequence[int]]
    if not frame.counts:
        if len(tokens) != n:
            raise ValueError(
                f"EngineStepPacked step {frame.step}: no counts, so one id per request is "
                f"expected, got {len(tokens)} ids for {n} request ids"
            )
        ids = list(zip(tokens))
    else:
        if len(frame.counts) % 4:
            raise ValueError(
                f"EngineStepPacked step {frame.step}: counts must be packed uint32 (a multiple "
                f"of 4 bytes), got {len(frame.counts)} bytes"
            )
        counts = unpack_ids(frame.counts)
        if len(counts) != n:
            raise ValueError(
                f"EngineStepPacked step {frame.step}: {len(counts)} counts for {n} request ids"
            )
        ends = list(accumulate(counts))
        if (ends[-1] if ends else 0) != len(tokens):
            raise ValueError(
                f"EngineStepPacked step {frame.step}: counts sum to {ends[-1] if ends else 0} "
                f"but token_ids holds {len(tokens)} ids"
            )
        ids = list(map(tokens.__getitem__, map(slice, [0, *ends[:-1]], ends)))
    reasons: list[str | None] = [None] * n
    for index, reason in frame.finished.items():
        if not 0 <= index < n:
            raise ValueError(
                f"EngineStepPacked step {frame.step}: finished index {index} outside the "
                f"{n} request ids"
            )
        reasons[index] = reason
    return rids, ids, reasons


EngineInFrame = EngineRequest | EngineAbort | EngineIndex | EngineCall
EngineOutFrame = EngineStep | EngineHello | EngineStepPacked | EngineCallResult

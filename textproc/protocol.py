"""Every frame textproc sends between processes: msgspec Structs, MessagePack on the wire.

Owns the wire format and PROTOCOL_VERSION. Must not import the text core (workers translate
frames into core calls). Rules (style.md): tagged unions with ``array_like=True``; the tag is the
class name and never changes once shipped; new fields go at the end with defaults; never reorder
or retype a field; bump PROTOCOL_VERSION on any change.

Engine-facing frames (the only ones an engine sees, through ``textproc.engine.EngineLink``):

* ``engine-in`` socket (textproc binds PUSH, the engine connects PULL): ``EngineRequest`` and
  ``EngineAbort`` on ONE socket, so an abort can never overtake the request it aborts.
* ``engine-out`` socket (textproc binds PULL, the engine connects PUSH): ``EngineHello`` once at
  start (a new ``instance_id`` tells textproc the engine restarted), then one step frame per
  engine step carrying every request that produced tokens or finished in that step: either
  ``EngineStepPacked`` (columnar, protocol 2: request ids, all new ids packed, counts packed,
  sparse finish reasons; what ``EngineLink.send_step`` sends) or ``EngineStep`` (one
  ``StepOutput`` per request; what ``EngineLink.send_outputs`` sends by default, and older
  engines). A step may carry logprobs for its new tokens (protocol 8): ``logprobs`` (float32,
one row of ``1 + k`` per new token: the sampled token's, then its k alternatives', most likely
first) and ``top_ids`` (uint32, the k alternatives of each row), for the requests whose
``EngineRequest.logprobs`` asked; ``logprob_rows`` unpacks and checks them.

Token ids of prompts travel packed (``pack_ids``: little-endian uint32), not as lists of ints.
"""

from __future__ import annotations

import sys
from array import array
from itertools import accumulate
from typing import Any, Sequence

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_FRAME_BYTES",
    "ENGINE_FINISH_REASONS",
    "FINISH_REASONS",
    "DEFAULT_HWM",
    "MAX_CHOICES",
    "MAX_STOP_STRINGS",
    "MAX_JSON_DEPTH",
    "MAX_MODEL_LEN",
    "MAX_TOKEN_ID",
    "MAX_LOGIT_BIAS",
    "LOGIT_BIAS_RANGE",
    "EngineRequest",
    "EngineAbort",
    "StepOutput",
    "EngineStep",
    "EngineHello",
    "EngineStepPacked",
    "IndexTable",
    "EngineIndex",
    "step_entries",
    "logprob_rows",
    "LogprobEntry",
    "EngineInFrame",
    "EngineOutFrame",
    "pack_ids",
    "unpack_ids",
    "pack_floats",
    "MAX_TOP_LOGPROBS",
    "ChatRequest",
    "CompletionRequest",
    "TokenizeRequest",
    "DetokenizeRequest",
    "StatsRequest",
    "Accepted",
    "Failure",
    "TokenizeResult",
    "DetokenizeResult",
    "Stats",
    "Submit",
    "Hello",
    "Welcome",
    "Abort",
    "Query",
    "Unknown",
    "RequestOutput",
    "Outputs",
    "Ready",
    "ProcessDied",
    "WorkerInFrame",
    "EncodePart",
    "EncodedPart",
    "PeerOutFrame",
    "WorkerOutFrame",
    "FrontInFrame",
    "FrontOutFrame",
    "EventFrame",
]

# 2: EngineStepPacked; 3: stage timings on Accepted and Outputs; 4: EngineRequest.logit_bias,
# ChatRequest.documents, Failure.param; 5: tool formats (ChatRequest.stream_calls /
# parallel_tool_calls, Submit.tool_format / reasoning_format / tool_schemas / stream_calls / max_calls);
# 6: constraint indexes (EngineIndex, EngineRequest.index_key, Submit.index, ChatRequest/
# CompletionRequest.structured); 7: ChatRequest.n / CompletionRequest.n (one prompt, n choices);
# 8: logprobs (EngineRequest / ChatRequest / CompletionRequest / Submit.logprobs, StepOutput and
# EngineStepPacked .logprobs / .top_ids, RequestOutput.logprobs)
# 9: EncodePart / EncodedPart (a worker's share of another worker's long prompt);
# 10: detokenizer shards (no frame changed: endpoints.json lists every shard in
# endpoints.detokenizers, the index of the detokenizer's Ready / Ready(role="engine") / Stats /
# ProcessDied is its shard, requests are routed by textproc.sharding.shard_of)
PROTOCOL_VERSION = 10

# Default limits, written once: config.py's settings, the HTTP frontend and clients import them.
MAX_FRAME_BYTES = 64 * 1024 * 1024  # zmq MAXMSGSIZE on every receiving socket
# how an engine may end a request: a stop token / EOS, max_tokens, an abort, an engine failure
ENGINE_FINISH_REASONS = frozenset({"stop", "length", "abort", "error"})
# what a client sees: the engine's reasons, plus "tool_calls" (a stop after the output made a
# tool call; the text core decides it, see textproc.core.pipeline.OutputPipeline.finish)
FINISH_REASONS = ENGINE_FINISH_REASONS | {"tool_calls"}
DEFAULT_HWM = 100_000  # ZeroMQ send/receive high-water mark, in messages
MAX_CHOICES = 128  # n per request: one prompt, this many engine requests at most
MAX_STOP_STRINGS = 64  # stop strings per request (OpenAI allows 4; each costs per-step work;
# the text core takes up to textproc.core.stops.MAX_STOPS, and its MAX_STOP_CHARS per string)
MAX_JSON_DEPTH = 64  # nesting of any JSON value a client sends (a request body, counted from it)
MAX_MODEL_LEN = 1 << 30  # the largest max_model_len (and so max_tokens) a service accepts
MAX_TOKEN_ID = 2**32 - 1  # what pack_ids (uint32) holds; the vocabulary bounds ids further
MAX_LOGIT_BIAS = 1024  # entries of one request's logit_bias
LOGIT_BIAS_RANGE = (-100.0, 100.0)  # OpenAI's: -100 bans a token, 100 forces it
MAX_TOP_LOGPROBS = 20  # alternatives per token a request may ask for (OpenAI's top_logprobs limit)

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


def pack_floats(values: Sequence[float]) -> bytes:
    """Floats as little-endian float32 bytes (4 bytes per value): how logprobs travel."""
    packed = array("f", values)
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
    # token id -> bias added to its logit, in LOGIT_BIAS_RANGE (protocol 4; ids in the vocabulary)
    logit_bias: dict[int, float] = {}
    # the compiled constraint (EngineIndex.table.key) the output must follow; "" for none.
    # The index reached engine-in before this request (the detokenizer sends it once).
    index_key: str = ""
    # protocol 8: None: no logprobs; k >= 0: with each new token send its logprob and the k
    # most likely alternatives (ids + logprobs), k in 0..MAX_TOP_LOGPROBS (vLLM's meaning)
    logprobs: int | None = None


class IndexTable(msgspec.Struct, array_like=True, gc=False):
    """A compiled constraint index as plain tables (``TokenIndex.pack()``), int32 LE arrays.

    ``masks``: the distinct per-state masks, each ceil(vocab_size / 32) int32 words;
    ``mask_of[state]`` picks one. ``default_next[state]`` is where an allowed id goes unless
    the exceptions (``exc_ids`` / ``exc_next`` from ``exc_offsets[state]`` to
    ``exc_offsets[state + 1]``) say otherwise; ``steer`` / ``distance``: a token on a shortest
    way to a complete output and its length in tokens.
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


class EngineIndex(msgspec.Struct, tag=True, array_like=True):
    """A compiled constraint for the engine's index cache, sent once before the first request
    that names it; ``evict`` lists keys the engine may drop (textproc mirrors its cache)."""

    table: IndexTable
    evict: list[str] = []


class EngineAbort(msgspec.Struct, tag=True, array_like=True):
    """Stop generating for these requests (stop string matched, client gone, error)."""

    request_ids: list[str]


class StepOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """One request's part of an engine step: new ids, and why it finished if it did."""

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


# one generated token's logprob entry as it travels to clients: (token id, its bytes in the
# output, its logprob, its alternatives' ids, bytes and logprobs, most likely first)
LogprobEntry = tuple[int, bytes, float, list[int], list[bytes], list[float]]


def logprob_rows(
    n_tokens: int, logprobs: bytes | Sequence[float], top_ids: bytes | Sequence[int], where: str
) -> tuple[int, Sequence[float], Sequence[int]]:
    """``(row width 1 + k, floats, alternative ids)`` of a step's (or StepOutput's) logprobs.

    Raises ValueError naming ``where`` when they do not fit ``n_tokens`` new ids: not whole
    float32 / uint32 values, a float count that is not a multiple of ``n_tokens``, or not k
    alternative ids per row.
    """
    if isinstance(logprobs, bytes):
        if len(logprobs) % 4:
            raise ValueError(f"{where}: logprobs must be packed float32 (a multiple of 4 bytes), "
                             f"got {len(logprobs)} bytes")
        packed = array("f")
        packed.frombytes(logprobs)
        if not _LITTLE:
            packed.byteswap()
        floats: Sequence[float] = packed
    else:
        floats = logprobs
    if isinstance(top_ids, bytes):
        try:
            ids: Sequence[int] = unpack_ids(top_ids)
        except ValueError as e:
            raise ValueError(f"{where}: top_ids: {e}") from e
    else:
        ids = top_ids
    if not n_tokens or not floats or len(floats) % n_tokens:
        raise ValueError(f"{where}: {len(floats)} logprobs for {n_tokens} new ids; expected "
                         f"1 + k per id")
    width = len(floats) // n_tokens
    if len(ids) != n_tokens * (width - 1):
        raise ValueError(f"{where}: {len(ids)} top_ids for {n_tokens} new ids with {width - 1} "
                         f"alternatives each; expected {n_tokens * (width - 1)}")
    return width, floats, ids


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


EngineInFrame = EngineRequest | EngineAbort | EngineIndex
EngineOutFrame = EngineStep | EngineHello | EngineStepPacked


# ---------------------------------------------------------------------------------------------
# Service frames (textproc's own processes and clients; never seen by an engine).
#
# Sockets and the union each one decodes (docs/architecture.md has the full picture):
#   worker-i    ROUTER (worker binds)      in: WorkerInFrame           out: WorkerOutFrame
#               (peer workers connect a DEALER: in EncodePart, out EncodedPart = PeerOutFrame)
#   detok-in    PULL   (detokenizer binds) in: Submit
#   detok-front ROUTER (detokenizer binds) in: FrontInFrame            out: FrontOutFrame
#   control     PULL   (supervisor binds)  in: Ready (children announce themselves)
#   events      PUB    (supervisor binds)  out: EventFrame
# On the two ROUTER sockets the peer's routing id IS the client id: workers put it into
# Submit.client_id, so a client can only ever receive outputs for requests it sent itself.
# ---------------------------------------------------------------------------------------------


class ChatRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: render ``messages`` with the model's chat template and generate."""

    request_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"  # "none" | "auto" | "required" | named function
    stop: list[str] = []
    max_tokens: int | None = None  # None: whatever max_model_len leaves after the prompt
    min_tokens: int = 0
    include_stop: bool = False
    chat_template_kwargs: dict[str, Any] = {}
    skip_special_tokens: bool = True
    sampling: dict[str, Any] = {}
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    stop_token_ids: list[int] = []  # extra stop token ids, added to EOS
    ignore_eos: bool = False
    # RAG documents for templates that render them (protocol 4): render_chat(documents=...)
    documents: list[dict[str, Any]] | None = None
    stream_calls: bool = True  # False: a non-streamed answer, calls held until complete and valid
    parallel_tool_calls: bool = True  # False: at most one tool call
    # the output must follow: {"json": schema} | {"regex": str} | {"choice": [str, ...]}
    structured: dict[str, Any] | None = None
    # n > 1: the prompt is built once and runs as n engine requests "<request_id>-<i>" (seed + i
    # when sampling has a seed); the worker answers Accepted / Failure per sub-request id
    n: int = 1
    # protocol 8: None: no logprobs; k in 0..MAX_TOP_LOGPROBS: each output token's logprob and
    # its k most likely alternatives (RequestOutput.logprobs)
    logprobs: int | None = None


class CompletionRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: generate after a raw prompt (text, or packed ids in prompt_token_ids)."""

    request_id: str
    prompt: str = ""
    prompt_token_ids: bytes | None = None  # pack_ids(...); when set, ``prompt`` must be ""
    stop: list[str] = []
    max_tokens: int | None = None
    min_tokens: int = 0
    include_stop: bool = False
    skip_special_tokens: bool = True
    sampling: dict[str, Any] = {}
    add_special_tokens: bool = True
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    structured: dict[str, Any] | None = None  # as in ChatRequest
    n: int = 1  # as in ChatRequest
    logprobs: int | None = None  # as in ChatRequest


class TokenizeRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: ids of ``text``, or of the rendered chat prompt when ``messages`` is set."""

    request_id: str
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_special_tokens: bool = False
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] = {}


class DetokenizeRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: text of packed ``token_ids``."""

    request_id: str
    token_ids: bytes
    skip_special_tokens: bool = True


class StatsRequest(msgspec.Struct, tag=True, array_like=True):
    """client -> worker or detokenizer: ask for the process's counters."""

    request_id: str


class Accepted(msgspec.Struct, tag=True, array_like=True):
    """worker -> client: the request went to the detokenizer and engine; outputs will follow."""

    request_id: str
    prompt_tokens: int
    template_s: float = 0.0  # worker time rendering the chat template
    tokenize_s: float = 0.0  # worker time encoding the prompt


class Failure(msgspec.Struct, tag=True, array_like=True):
    """worker -> client: the request was refused or failed; ``status`` is HTTP-like (400, 500...)."""

    request_id: str
    kind: str  # "invalid_input" | "template" | "overloaded" | "internal"
    message: str
    status: int = 400
    param: str | None = None  # the request field at fault ("messages", "max_tokens", ...), protocol 4


class TokenizeResult(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> client: packed ids, plus the rendered prompt text for ``messages``."""

    request_id: str
    token_ids: bytes
    prompt: str | None = None


class DetokenizeResult(msgspec.Struct, tag=True, array_like=True):
    """worker -> client: the decoded text."""

    request_id: str
    text: str


class Stats(msgspec.Struct, tag=True, array_like=True):
    """worker or detokenizer -> client: counters (requests, tokens, malformed frames per socket)."""

    request_id: str
    role: str
    index: int
    counters: dict[str, int]


class Submit(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> detokenizer: how to treat one request's output, plus its encoded EngineRequest.

    The detokenizer registers the per-request state, then forwards ``engine_request`` (an
    ``EngineRequest`` already encoded by the worker) to the engine untouched.
    """

    request_id: str
    client_id: bytes  # the client's routing id on detok-front
    prompt_tokens: int
    max_tokens: int
    engine_request: bytes
    stop: list[str] = []
    include_stop: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    reasoning: bool = False  # parse <think>...</think> into reasoning_content
    tools: bool = False  # parse <tool_call>...</tool_call> into tool_calls
    starts_in_reasoning: bool = False  # the prompt ends inside an open <think>
    tool_format: str = "hermes"  # parsing.TOOL_FORMATS name (with tools)
    reasoning_format: str = "think"  # parsing.REASONING_FORMATS name (with reasoning)
    tool_schemas: list[dict[str, Any]] = []  # the request's tools: declared names, value types
    stream_calls: bool = True  # False: hold each call until complete and valid
    max_calls: int = -1  # -1: no limit (parallel_tool_calls false: 1)
    # the constraint index the engine request names, when this worker has not sent it yet
    index: IndexTable | None = None
    logprobs: int | None = None  # protocol 8: alternatives per token the client wants (None: off)


class Hello(msgspec.Struct, tag=True, array_like=True):
    """client -> detokenizer: first frame on detok-front (the routing id is the client id)."""

    protocol_version: int = PROTOCOL_VERSION


class Welcome(msgspec.Struct, tag=True, array_like=True):
    """detokenizer -> client: answer to Hello; a new ``instance_id`` means a new detokenizer."""

    instance_id: str
    protocol_version: int = PROTOCOL_VERSION


class Abort(msgspec.Struct, tag=True, array_like=True):
    """client -> detokenizer: stop these requests (forwarded to the engine as EngineAbort)."""

    request_ids: list[str]


class Query(msgspec.Struct, tag=True, array_like=True):
    """client -> detokenizer: which of these in-flight requests does the detokenizer not know?"""

    request_ids: list[str]


class Unknown(msgspec.Struct, tag=True, array_like=True):
    """detokenizer -> client: answer to Query, the ids it holds no state or buffer for."""

    request_ids: list[str]


class RequestOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """One request's part of an Outputs frame: deltas since the last frame, and the end if it ended.

    ``deltas`` are OpenAI-style deltas ({"content": s}, {"reasoning_content": s},
    {"tool_calls": [...]}) in order. On the last output ``finish_reason`` is set ("stop",
    "length", "tool_calls", "abort" or "error" with ``error`` saying why), ``stop`` is the matched
    stop string if any, and the token counts are the usage.
    """

    request_id: str
    deltas: list[dict[str, Any]]
    finish_reason: str | None = None
    stop: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    # with ``error``: "invalid_input" (400), "overloaded" (503), "engine_restarted" (503),
    # "engine_error" (500), "internal" (500); the client raises the matching textproc error
    error_kind: str | None = None
    # protocol 8, with Submit.logprobs: one entry per token whose bytes reached the output
    # since the last frame, in order (see textproc.core.logprobs); None: none (a None default
    # costs nothing per output, an empty list default one allocation each)
    logprobs: list[LogprobEntry] | None = None


class Outputs(msgspec.Struct, tag=True, array_like=True):
    """detokenizer -> client: every output for this client from one engine step, in one frame."""

    items: list[RequestOutput]
    detok_s: float = 0.0  # detokenizer time from reading the engine's step(s) to this frame


class Ready(msgspec.Struct, tag=True, array_like=True):
    """child -> supervisor (control), and supervisor -> everyone (events): a process is serving.

    The detokenizer also sends ``Ready(role="engine")`` when an engine's EngineHello arrives.
    A detokenizer's ``index`` is its shard (``--detokenizers N``), also in ``Ready(role="engine")``.
    """

    role: str  # "worker" | "detokenizer" | "engine"
    index: int
    pid: int
    protocol_version: int = PROTOCOL_VERSION


class ProcessDied(msgspec.Struct, tag=True, array_like=True):
    """supervisor -> everyone (events): a child exited; its requests are lost (it is restarted)."""

    role: str
    index: int
    exit_code: int
    pid: int = 0


class EncodePart(msgspec.Struct, tag=True, array_like=True):
    """worker -> peer worker (protocol 9, on the peer's worker-j ROUTER): encode these units.

    One share of a long prompt a worker cut (``Tokenizer.plan_parts``): normalized text with no
    added token in it, encoded with ``Tokenizer.encode_units``; ``at_start``: the first unit
    starts the prompt. Answered with ``EncodedPart``.
    """

    job_id: str
    texts: list[str]
    at_start: bool = False


class EncodedPart(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """peer worker -> worker (protocol 9): the ids of an EncodePart's units, all packed in
    ``token_ids``, with the number of ids of each unit packed in ``counts``; or ``error``."""

    job_id: str
    token_ids: bytes = b""
    counts: bytes = b""
    error: str = ""


WorkerInFrame = (ChatRequest | CompletionRequest | TokenizeRequest | DetokenizeRequest
                 | StatsRequest | EncodePart)
WorkerOutFrame = Accepted | Failure | TokenizeResult | DetokenizeResult | Stats
FrontInFrame = Hello | Abort | Query | StatsRequest
FrontOutFrame = Welcome | Outputs | Unknown | Stats
EventFrame = Ready | ProcessDied
PeerOutFrame = EncodedPart  # what a worker's DEALER to a peer receives

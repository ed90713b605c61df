"""The frames of the detokenizer's sockets: Submit on detok-in, streams and aborts on detok-front.

``detok-in`` is a PULL the detokenizer binds: workers push ``Submit`` (and ``IndexDone``, the
rest of a progressive compile, after the Submits that carried its partial index). ``detok-front`` is a
ROUTER it binds: a client's DEALER sends ``FrontInFrame`` and gets ``FrontOutFrame``; the
routing id is the client id, so a client only ever receives outputs of requests it sent. These
frames change when the output a client streams changes (deltas, parsing, logprobs).
"""

from __future__ import annotations

from typing import Any

import msgspec

from textproc.options import OutputOptions, ParseOptions
from textproc.protocol.engine_frames import EngineCall, EngineCallResult, IndexTable
from textproc.protocol.version import PROTOCOL_VERSION
from textproc.protocol.worker_frames import Stats, StatsRequest

__all__ = [
    "Submit",
    "IndexDone",
    "DetokInFrame",
    "Hello",
    "Welcome",
    "Abort",
    "Query",
    "Unknown",
    "LogprobEntry",
    "RequestOutput",
    "GeneratedIds",
    "Outputs",
    "FrontInFrame",
    "FrontOutFrame",
]

# one generated token's logprob entry as it travels to clients: (token id, its bytes in the
# output, its logprob, its alternatives' ids, bytes and logprobs, most likely first)
LogprobEntry = tuple[int, bytes, float, list[int], list[bytes], list[float]]


class Submit(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> detokenizer: how to treat one request's output, plus its encoded EngineRequest.

    The detokenizer registers the per-request state, then forwards ``engine_request`` (an
    ``EngineRequest`` already encoded by the worker) to the engine untouched.
    """

    request_id: str
    client_id: bytes  # the client's routing id on detok-front
    prompt_tokens: int
    max_tokens: int  # the request's sampling.max_tokens, resolved against the context length
    engine_request: bytes
    min_tokens: int = 0  # the request's sampling.min_tokens (a stop string counts after it)
    output: OutputOptions = OutputOptions()  # the client's, as it sent them
    parse: ParseOptions | None = None  # None: the output is not parsed (plain content)
    # the constraint index the engine request names, when this worker has not sent it yet
    index: IndexTable | None = None
    # the pid of the worker sending ``index`` when it is partial (its IndexDone follows; 0:
    # none): if that worker dies first, the requests on the partial index fail (protocol 13)
    compiler: int = 0


class IndexDone(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> detokenizer: the whole index of a constraint whose partial index (the first
    states of a progressive compile, ``IndexTable.n_known`` > 0) went out on earlier Submits;
    ``table`` None when the whole compile failed (``error``: why): the requests walking the
    partial index then fail with that message (protocol 13)."""

    key: str
    table: IndexTable | None = None
    error: str = ""


DetokInFrame = Submit | IndexDone


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


class RequestOutput(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One request's part of an Outputs frame: deltas since the last frame, and the end if it ended.

    A request's first engine output always gives one, with empty ``deltas`` when the output
    pipeline holds all of its text; later steps that add no delta give none.

    ``deltas`` are OpenAI-style deltas ({"content": s}, {"reasoning_content": s},
    {"tool_calls": [...]}) in order. On the last output ``finish_reason`` is set ("stop",
    "length", "tool_calls", "abort" or "error" with ``error`` saying why), ``stop`` is the matched
    stop string if any, and the token counts are the usage. ``gc=False``: one is made per request
    per step and nothing it holds refers back to it, so the collector never tracks it.
    """

    request_id: str
    deltas: list[dict[str, Any]]
    finish_reason: str | None = None
    stop: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    # with ``error``: "invalid_input" (400), "overloaded" (503), "engine_restarted" (503),
    # "worker_died" (503: the worker compiling its constraint index died), "timeout" (504),
    # "engine_error" (500), "internal" (500); the client raises the matching textproc error
    error_kind: str | None = None
    # protocol 8, with Submit.logprobs: one entry per token whose bytes reached the output
    # since the last frame, in order (see textproc.core.logprobs); None: none (a None default
    # costs nothing per output, an empty list default one allocation each)
    logprobs: list[LogprobEntry] | None = None
    # protocol 15, on the last output with the usage: of ``prompt_tokens``, how many the
    # engine found in its prefix cache (0: none, or an engine that does not say)
    cached_tokens: int = 0
    # protocol 23, with ``output.return_token_ids``: the engine's ids since the previous output
    # of this request (None: not asked, or none since; one None field so that the outputs of
    # every other request pay nothing for it: three bytes fields defaulting to b"" made each
    # output's encoding 45 ns slower)
    ids: GeneratedIds | None = None


class GeneratedIds(msgspec.Struct, array_like=True, gc=False):
    """A request's generated ids on one output (``OutputOptions.return_token_ids``)."""

    token_ids: bytes  # pack_ids of every generated id (EOS and the ids past a stop string's cut too)
    # with ``output.logprobs`` = k: each id's logprob and its k alternatives' (pack_floats,
    # 1 + k per id; MISSING_LOGPROB where the engine sent none) and the alternatives' ids
    # (pack_ids, k per id), most likely first
    logprobs: bytes = b""
    top_ids: bytes = b""


class Outputs(msgspec.Struct, tag=True, array_like=True):
    """detokenizer -> client: every output for this client from one engine step, in one frame."""

    items: list[RequestOutput]
    detok_s: float = 0.0  # detokenizer time from reading the engine's step(s) to this frame


FrontInFrame = Hello | Abort | Query | StatsRequest | EngineCall
FrontOutFrame = Welcome | Outputs | Unknown | Stats | EngineCallResult

"""The frames of a worker's socket (worker-i): client requests and answers, peer-worker shares.

``worker-i`` is a ROUTER the worker binds: a client's DEALER sends ``WorkerInFrame`` and gets
``WorkerOutFrame``; a peer worker's DEALER sends ``EncodePart`` and gets ``EncodedPart``
(``PeerOutFrame``). The routing id is the client id, which the worker puts into
``Submit.client_id``. These frames change when what a client may ask for changes; the
detokenizer's and the engine's frames live in their own modules.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
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
    "EncodePart",
    "EncodedPart",
    "WorkerInFrame",
    "WorkerOutFrame",
    "PeerOutFrame",
]


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
PeerOutFrame = EncodedPart  # what a worker's DEALER to a peer receives

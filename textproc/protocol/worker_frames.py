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

from textproc.options import OutputOptions, SamplingOptions

__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "TokenizeRequest",
    "DetokenizeRequest",
    "StatsRequest",
    "RenderRequest",
    "DerenderRequest",
    "Accepted",
    "Failure",
    "TokenizeResult",
    "DetokenizeResult",
    "Rendered",
    "Derendered",
    "Stats",
    "EncodePart",
    "EncodedPart",
    "WorkerInFrame",
    "WorkerOutFrame",
    "PeerOutFrame",
]


class ChatRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: render ``messages`` with the model's chat template and generate.

    ``sampling`` and ``output`` are the request's options (:mod:`textproc.options`), carried
    whole to the engine request and the detokenizer's Submit. n > 1 (``sampling.n``): the
    worker answers Accepted / Failure per sub-request id ``<request_id>-<i>``.
    """

    request_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"  # "none" | "auto" | "required" | named function
    chat_template_kwargs: dict[str, Any] = {}
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, Any]] | None = None  # RAG documents: render_chat(documents=...)
    # the output must follow: {"json": schema} | {"regex": str} | {"choice": [str, ...]}
    structured: dict[str, Any] | None = None
    sampling: SamplingOptions = SamplingOptions()
    output: OutputOptions = OutputOptions()
    # protocol 16: the images' bytes (encoded files, not decoded yet), in the order of the
    # {"type": "image"} parts in messages, and where each was in the client's body
    # ("messages[0].content[1]"), for errors
    images: list[bytes] = []
    image_params: list[str] = []


class CompletionRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker: generate after a raw prompt (text, or packed ids in prompt_token_ids)."""

    request_id: str
    prompt: str = ""
    prompt_token_ids: bytes | None = None  # pack_ids(...); when set, ``prompt`` must be ""
    add_special_tokens: bool = True
    structured: dict[str, Any] | None = None  # as in ChatRequest
    sampling: SamplingOptions = SamplingOptions()
    output: OutputOptions = OutputOptions()


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


class RenderRequest(msgspec.Struct, tag=True, array_like=True):
    """client -> worker (protocol 17): build ``request`` exactly as for generation (template,
    ids, checks, the model's sampling defaults, max_tokens) and answer with ``Rendered``; the
    request goes to no detokenizer and no engine, and compiles no constraint."""

    request_id: str
    request: ChatRequest | CompletionRequest


class DerenderRequest(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """client -> worker (protocol 20): the text of ``token_ids`` as ``request``'s output would
    read (its stops, special tokens, reasoning and tool-call parsing, decided as for generating
    it), the engine having ended with ``finish_reason``; answered with ``Derendered``. Protocol
    22: the output of the first ``skip`` ids is left out (a stream's earlier chunks: the ids are
    replayed, the answer is what the later ones add)."""

    request_id: str
    request: ChatRequest
    token_ids: bytes
    finish_reason: str | None = None
    skip: int = 0


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


class Rendered(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> client (protocol 17): what a ``RenderRequest``'s request would send the engine:
    the prompt's packed ids, and its ``sampling`` with the model's defaults applied and
    ``max_tokens`` resolved against the context length."""

    request_id: str
    token_ids: bytes
    sampling: SamplingOptions = SamplingOptions()


class Derendered(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
    """worker -> client (protocol 20): a ``DerenderRequest``'s deltas, finish reason and the
    stop string that matched (if one did)."""

    request_id: str
    deltas: list[dict[str, Any]]
    finish_reason: str | None = None
    stop: str | None = None


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
                 | StatsRequest | EncodePart | RenderRequest | DerenderRequest)
WorkerOutFrame = (Accepted | Failure | TokenizeResult | DetokenizeResult | Stats | Rendered
                  | Derendered)
PeerOutFrame = EncodedPart  # what a worker's DEALER to a peer receives

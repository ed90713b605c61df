"""OpenAI API response bodies for the HTTP frontend: completions, chunks, usage, SSE framing.

Owns the JSON the server sends back (``chat.completion``, ``chat.completion.chunk``,
``text_completion``, ``/v1/models``) and the server-sent-event framing (``data: {json}\\n\\n`` ...
``data: [DONE]\\n\\n``), and :class:`ChoiceEnds` (the finish and usage of a request's n
choices), and the logprobs of both APIs from the service's entries (:func:`chat_logprobs`,
:class:`CompletionLogprobs`; token text by ``textproc.core.logprobs.token_text``), shaped by the
request's ``OutputOptions``, which they take whole. Pure: no I/O.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Mapping, Sequence

import msgspec

from textproc.core.logprobs import Entry, token_text
from textproc.http.backend import Output
from textproc.options import OutputOptions

__all__ = [
    "ChoiceEnds",
    "new_id",
    "now",
    "usage_body",
    "chat_chunk",
    "usage_chunk",
    "chat_response",
    "completion_chunk",
    "completion_response",
    "models_body",
    "chat_logprobs",
    "token_logprob",
    "CompletionLogprobs",
    "sse_event",
    "SSE_DONE",
]


def new_id(prefix: str) -> str:
    """A fresh response id, e.g. ``chatcmpl-`` + 32 hex digits."""
    return f"{prefix}-{uuid.uuid4().hex}"


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """The usage object, with the prompt tokens the engine found cached as ``vllm serve
    --enable-prompt-tokens-details`` gives them."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class ChoiceEnds:
    """The finish of each of a request's n choices, and their usage: the prompt once, every
    choice's tokens."""

    def __init__(self, n: int) -> None:
        self.reasons: list[str] = [""] * n
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0  # choice 0's: every choice has the one prompt

    def finish(self, out: Output) -> bool:
        """Record ``out``'s finish; True once every choice has finished."""
        assert out.finish_reason is not None
        self.reasons[out.index] = out.finish_reason
        self.prompt_tokens = out.prompt_tokens
        self.completion_tokens += out.completion_tokens
        if out.index == 0:
            self.cached_tokens = out.cached_tokens
        return all(self.reasons)

    def usage(self) -> dict[str, Any]:
        return usage_body(self.prompt_tokens, self.completion_tokens, self.cached_tokens)


def chat_chunk(
    response_id: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    *,
    finish_reason: str | None = None,
    include_usage: bool = False,
    usage: dict[str, int] | None = None,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice, ``index`` (``usage: null`` when
    include_usage); reasoning goes out as both ``reasoning_content`` and ``reasoning``."""
    return _choices(response_id, "chat.completion.chunk", created, model,
                    [{"index": index, "delta": with_reasoning_alias(delta), "logprobs": logprobs,
                      "finish_reason": finish_reason}],
                    include_usage=include_usage, usage=usage)


def with_reasoning_alias(delta: dict[str, Any]) -> dict[str, Any]:
    """``delta`` with ``reasoning`` (vLLM's newer name) beside ``reasoning_content``, so clients
    that read either see the reasoning.

    >>> with_reasoning_alias({"reasoning_content": "hm"})
    {'reasoning_content': 'hm', 'reasoning': 'hm'}
    """
    if "reasoning_content" not in delta:
        return delta
    return {**delta, "reasoning": delta["reasoning_content"]}


def _choices(
    response_id: str,
    obj: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    *,
    include_usage: bool,
    usage: dict[str, int] | None,
) -> dict[str, Any]:
    """One ``obj`` (a streamed chunk or a whole response) with ``choices``; ``usage``
    (maybe null) when ``include_usage`` or given."""
    chunk: dict[str, Any] = {
        "id": response_id,
        "object": obj,
        "created": created,
        "model": model,
        "choices": choices,
    }
    if include_usage or usage is not None:
        chunk["usage"] = usage
    return chunk


def usage_chunk(
    response_id: str, created: int, model: str, usage: dict[str, int], *, chat: bool = True
) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage``: no choices, the request's usage."""
    return {
        "id": response_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }


def now() -> int:
    """``created``: Unix seconds."""
    return int(time.time())


def chat_response(
    response_id: str,
    created: int,
    model: str,
    choices: Sequence[tuple[dict[str, Any], str]],
    usage: dict[str, int],
    logprobs: Sequence[dict[str, Any] | None] = (),
) -> dict[str, Any]:
    """A whole ``chat.completion`` from (message, finish reason) per choice, in index order
    (reasoning as both ``reasoning_content`` and ``reasoning``), ``logprobs`` per choice."""
    return _choices(response_id, "chat.completion", created, model,
                    [{"index": i, "message": with_reasoning_alias(message),
                      "logprobs": logprobs[i] if logprobs else None,
                      "finish_reason": reason} for i, (message, reason) in enumerate(choices)],
                    include_usage=True, usage=usage)


def completion_chunk(
    response_id: str,
    created: int,
    model: str,
    text: str,
    *,
    finish_reason: str | None = None,
    include_usage: bool = False,
    usage: dict[str, int] | None = None,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk for choice ``index``."""
    return _choices(response_id, "text_completion", created, model,
                    [{"index": index, "text": text, "logprobs": logprobs,
                      "finish_reason": finish_reason}],
                    include_usage=include_usage, usage=usage)


def completion_response(
    response_id: str,
    created: int,
    model: str,
    choices: Sequence[tuple[str, str]],
    usage: dict[str, int],
    logprobs: Sequence[dict[str, Any] | None] = (),
) -> dict[str, Any]:
    """A whole ``text_completion`` from (text, finish reason) per choice, in index order,
    ``logprobs`` per choice."""
    return _choices(response_id, "text_completion", created, model,
                    [{"index": i, "text": text, "logprobs": logprobs[i] if logprobs else None,
                      "finish_reason": reason} for i, (text, reason) in enumerate(choices)],
                    include_usage=True, usage=usage)


_OUTPUT = OutputOptions()  # the defaults


def token_logprob(entry: Entry, output: OutputOptions = _OUTPUT) -> dict[str, Any]:
    """One token's logprob object (chat's ``logprobs.content[i]``, the Responses API's
    ``output_text.logprobs[i]``): ``token`` (``token_text``), ``logprob``, ``bytes`` (exact) and
    ``top_logprobs`` (the alternatives, most likely first); with ``return_tokens_as_token_ids``
    each ``token`` is ``"token_id:<id>"`` (``bytes`` unchanged)."""
    token_id, data, logprob, alt_ids, alt_bytes, alt_logprobs = entry
    if output.return_tokens_as_token_ids:
        return {"token": f"token_id:{token_id}", "logprob": logprob, "bytes": list(data),
                "top_logprobs": [{"token": f"token_id:{i}", "logprob": lp, "bytes": list(b)}
                                 for i, b, lp in zip(alt_ids, alt_bytes, alt_logprobs)]}
    return {"token": token_text(data), "logprob": logprob, "bytes": list(data),
            "top_logprobs": [{"token": token_text(b), "logprob": lp, "bytes": list(b)}
                             for b, lp in zip(alt_bytes, alt_logprobs)]}


def chat_logprobs(entries: Sequence[Entry], output: OutputOptions = _OUTPUT) -> dict[str, Any]:
    """A chat choice's (or chunk's) ``logprobs``: ``{"content": [...], "refusal": None}``."""
    return {"content": [token_logprob(e, output) for e in entries], "refusal": None}


_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that do not start a character


class CompletionLogprobs:
    """One completion choice's ``logprobs`` (``tokens``, ``token_logprobs``, ``top_logprobs``,
    ``text_offset``), chunk by chunk: ``text_offset`` counts characters of the choice's text
    before each token (a token that starts inside a character: the index of that character).
    ``top_logprobs[i]`` maps the alternatives' texts and the chosen token's to their logprobs
    (OpenAI's "the most likely tokens, as well as the chosen token"); with
    ``return_tokens_as_token_ids`` every token is spelled ``"token_id:<id>"``."""

    def __init__(self, output: OutputOptions = _OUTPUT) -> None:
        self.output = output
        self.chars = 0  # characters started so far (lead bytes seen)

    def feed(self, entries: Sequence[Entry]) -> dict[str, Any]:
        tokens: list[str] = []
        logprobs: list[float] = []
        tops: list[dict[str, float]] = []
        offsets: list[int] = []
        as_ids = self.output.return_tokens_as_token_ids
        for token_id, data, logprob, alt_ids, alt_bytes, alt_logprobs in entries:
            text = f"token_id:{token_id}" if as_ids else token_text(data)
            tokens.append(text)
            logprobs.append(logprob)
            top = ({f"token_id:{i}": lp for i, lp in zip(alt_ids, alt_logprobs)} if as_ids else
                   {token_text(b): lp for b, lp in zip(alt_bytes, alt_logprobs)})
            top.setdefault(text, logprob)
            tops.append(top)
            inside = bool(data) and 0x80 <= data[0] < 0xC0
            offsets.append(max(0, self.chars - inside))
            self.chars += len(data.translate(None, _CONTINUATION))
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops,
                "text_offset": offsets}


def models_body(served_models: Sequence[str], created: int, *, max_model_len: int | None,
                lora_modules: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``GET /v1/models``: a LoRA adapter (``lora_modules``: name -> path) with vLLM's ``root``
    (its path) and ``parent`` (the base model, the first served name)."""
    data = []
    loras = lora_modules or {}
    for name in served_models:
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "textproc",
        }
        if name in loras:
            entry["root"] = loras[name]
            entry["parent"] = served_models[0]
        if max_model_len is not None:
            entry["max_model_len"] = max_model_len
        data.append(entry)
    return {"object": "list", "data": data}


_ENCODER = msgspec.json.Encoder()
SSE_DONE = b"data: [DONE]\n\n"


def sse_event(obj: Any) -> bytes:
    """One server-sent event: ``data: {json}\\n\\n`` (compact JSON never contains a newline)."""
    return b"data: " + _ENCODER.encode(obj) + b"\n\n"

"""Response bodies of the scale-out routes, in vLLM's shapes: a rendered ``GenerateRequest``,
``/inference/v1/generate``'s whole answer and its stream chunks, and the derender answers
(``chat.completion`` / ``text_completion``, whole or one chunk).

Owns the JSON only (field names and order as vLLM's pydantic models write them); what goes in
comes from the routes (``routes``) and the stream loop (``events``). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from textproc.http.api_types import ChatParams, CompletionParams
from textproc.http.backend import Output
from textproc.http.openai.answers import usage_body, with_reasoning_alias
from textproc.http.scale_out.bodies import GenerateParams, sampling_params_body
from textproc.core.logprobs import MISSING_LOGPROB
from textproc.options import SamplingOptions

__all__ = ["cut_at_stop", "derendered_chat", "derendered_chunk", "derendered_completion",
           "generate_choice", "generate_chunk", "generate_logprobs", "generate_whole",
           "rendered_request", "stop_reason"]


def rendered_request(request_id: str, params: ChatParams | CompletionParams,
                     token_ids: list[int], resolved: SamplingOptions, *,
                     max_tokens: int | None) -> dict[str, Any]:
    """A render route's answer: vLLM's ``GenerateRequest`` for the ids and sampling the worker
    built (``resolved``: the model's defaults applied) with the request's output options."""
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": None,
        "content_parts": None,
        "sampling_params": sampling_params_body(resolved, params.output, params.structured,
                                                stream=params.stream, max_tokens=max_tokens),
        "model": params.model,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": params.stream,
        "stream_options": ({"include_usage": params.include_usage,
                            "continuous_usage_stats": False} if params.stream else None),
        "cache_salt": None,
        "priority": resolved.priority,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
    }


def stop_reason(out: Output, ids: list[int], stop_token_ids: list[int]) -> int | str | None:
    """vLLM's ``stop_reason``: the stop string matched, or the request's own stop id that
    ended the choice; None for EOS, length and abort."""
    if out.finish_reason != "stop":
        return None
    if out.stop is not None:
        return out.stop
    if ids and ids[-1] in stop_token_ids:
        return ids[-1]
    return None


def _clamped(logprob: float) -> float:
    """vLLM's floor for a logprob: -inf and NaN are -9999.0."""
    return -9999.0 if logprob != logprob else max(logprob, -9999.0)


def generate_logprobs(token_ids: list[int], rows: list[float], alts: list[int],
                      k: int) -> dict[str, Any]:
    """vLLM's ``GenerateLogProbs`` of ``token_ids`` from their rows (1 + k logprobs and k
    alternative ids per id, most likely first): per id its logprob, its rank when it is among
    the k most likely (else None: the engine reports no rank), and ``top_logprobs`` as vLLM
    lists them, the id itself first, then the others, max(k, 1) in all."""
    width = 1 + k
    if len(rows) != len(token_ids) * width or len(alts) != len(token_ids) * k:
        rows, alts = [MISSING_LOGPROB] * (len(token_ids) * width), [0] * (len(token_ids) * k)
    content: list[dict[str, Any]] = []
    for j, token_id in enumerate(token_ids):
        row, top = rows[j * width:(j + 1) * width], alts[j * k:(j + 1) * k]
        if row[0] == MISSING_LOGPROB:
            content.append({"token_id": token_id, "logprob": MISSING_LOGPROB, "rank": None,
                            "top_logprobs": []})
            continue
        rank = top.index(token_id) + 1 if token_id in top else None
        listed = [{"token_id": token_id, "logprob": _clamped(row[0]), "rank": rank}]
        listed += [{"token_id": alt, "logprob": _clamped(row[1 + i]), "rank": i + 1}
                   for i, alt in enumerate(top) if alt != token_id]
        content.append({"token_id": token_id, "logprob": _clamped(row[0]), "rank": rank,
                        "top_logprobs": listed[:max(k, 1)]})
    return {"content": content}


def generate_choice(index: int, finish_reason: str | None, reason: int | str | None,
                    token_ids: list[int], text: str | None, *, whole: bool,
                    logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One choice of a generate answer or chunk (``text`` None: output_mode "tokens")."""
    choice: dict[str, Any] = {
        "index": index,
        "finish_reason": finish_reason if finish_reason or not whole else "stop",
        "stop_reason": reason,
        "token_ids": token_ids,
        "routed_experts": None,
        "sampling_mask": None,
        "weight_versions": None,
    }
    if text is not None:
        choice["text"] = text
    choice["logprobs"] = logprobs
    return choice


def generate_whole(params: GenerateParams, response_id: str, created: int,
                   choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int,
                   cached_tokens: int) -> dict[str, Any]:
    """``/inference/v1/generate``'s answer without ``stream``."""
    return {
        "request_id": response_id,
        "model": params.model,
        "created": created,
        "usage": usage_body(prompt_tokens, completion_tokens, cached_tokens),
        "prompt_logprobs": None,
        "prompt_token_id_logprobs": None,
        "prompt_token_ids": (list(params.completion.prompt) if params.return_prompt_ids
                             else None),
        "mm_placeholders": None,
        "metrics": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "output_mode": "text" if params.text_mode else "tokens",
        "choices": choices,
    }


def generate_chunk(params: GenerateParams, response_id: str, choices: list[dict[str, Any]],
                   *, usage: dict[str, Any] | None = None,
                   prompt_ids: list[int] | None = None) -> dict[str, Any]:
    """One event of ``/inference/v1/generate``'s stream (vLLM leaves ``prompt_token_ids`` out
    but on the first chunk, and writes ``usage`` null on a chunk without it)."""
    chunk: dict[str, Any] = {"request_id": response_id, "usage": usage}
    if prompt_ids is not None:
        chunk["prompt_token_ids"] = prompt_ids
    chunk["output_mode"] = "text" if params.text_mode else "tokens"
    chunk["choices"] = choices
    return chunk


def cut_at_stop(text: str, reason: int | str | None, stops: list[str], include: bool) -> str:
    """A choice's text as the generate server sent it: cut where the stop string that ended it
    (``stop_reason``) first appears, the string kept with ``include``."""
    if isinstance(reason, str) and reason and (reason in stops or not stops):
        at = text.find(reason)
        if at >= 0:
            return text[:at + len(reason)] if include else text[:at]
    return text


def derendered_chat(model: str, response_id: str, created: int,
                    choices: list[tuple[int, dict[str, Any], str | None, int | str | None, int]],
                    prompt_tokens: int) -> dict[str, Any]:
    """``/v1/chat/completions/derender``'s whole answer: a ``chat.completion`` (choices:
    index, assistant message, finish reason, stop reason, token count)."""
    completion = sum(c[4] for c in choices)
    return {
        "id": response_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": i, "message": {"tool_calls": [], **with_reasoning_alias(message)},
                     "logprobs": None, "finish_reason": finish or "stop",
                     "stop_reason": reason, "token_ids": None}
                    for i, message, finish, reason, _ in choices],
        "usage": usage_body(prompt_tokens, completion, 0),
    }


def derendered_completion(model: str, response_id: str, created: int,
                          choices: list[tuple[int, str, str | None, int | str | None, int]],
                          prompt_tokens: int) -> dict[str, Any]:
    """``/v1/completions/derender``'s whole answer: a ``text_completion``."""
    completion = sum(c[4] for c in choices)
    return {
        "id": response_id, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": i, "text": text, "logprobs": None,
                     "finish_reason": finish or "stop", "stop_reason": reason}
                    for i, text, finish, reason, _ in choices],
        "usage": usage_body(prompt_tokens, completion, 0),
    }


def derendered_chunk(model: str, response_id: str, created: int, *, chat: bool,
                     choice: tuple[int, str | dict[str, Any], str | None, int | str | None] | None,
                     role: bool, usage: dict[str, Any] | None) -> dict[str, Any]:
    """One streamed chunk of a derender: a ``chat.completion.chunk`` or a ``text_completion``
    chunk (``choice``: index, text delta (chat: or a delta dict), finish reason, stop reason;
    None: a usage chunk)."""
    body: list[dict[str, Any]] = []
    if choice is not None:
        i, text, finish, reason = choice
        if chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if isinstance(text, dict):
                delta.update(with_reasoning_alias(text))
            else:
                delta.update(content=text, reasoning=None)
            body.append({"index": i, "delta": delta, "logprobs": None, "finish_reason": finish,
                         "stop_reason": reason, "token_ids": None})
        else:
            body.append({"index": i, "text": text, "logprobs": None, "finish_reason": finish,
                         "stop_reason": reason})
    return {"id": response_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created, "model": model, "choices": body, "usage": usage}

"""``/inference/v1/generate``'s answer loops: the run's outputs as vLLM's stream chunks or its
whole answer, ending early (finish_reason "abort") when the abort route names the request.

Owns the loop over one run (``Run``: the service's outputs of the request's n choices) and
:class:`Aborts` (the generate requests in flight on this frontend by answer id, which
``/inference/v1/abort_requests`` ends). Each output's ids are the engine's since the previous
one (``OutputOptions.return_token_ids``), so a chunk's ``token_ids`` are exactly the step's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator

from starlette.responses import Response

from textproc.http.asgi import LastEvents, json_response
from textproc.http.backend import Output, Run, generation_error, no_finish_error
from textproc.http.openai.answers import SSE_DONE, sse_event, usage_body
from textproc.http.scale_out.answers import (
    generate_choice,
    generate_chunk,
    generate_logprobs,
    generate_whole,
    stop_reason,
)
from textproc.http.scale_out.bodies import GenerateParams

__all__ = ["Aborts", "generate_events", "generate_whole_answer"]


class Aborts:
    """The generate requests in flight on this frontend, by the id their answer carries; an
    abort resolves the request's future and its answer loop ends it."""

    def __init__(self) -> None:
        self.live: dict[str, asyncio.Future[None]] = {}

    def register(self, response_id: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.live[response_id] = future
        return future

    def release(self, response_id: str, future: asyncio.Future[None]) -> None:
        if self.live.get(response_id) is future:
            del self.live[response_id]

    def abort(self, request_ids: list[str]) -> int:
        """End the named requests (unknown or finished ids are skipped); how many it found."""
        found = 0
        for rid in request_ids:
            future = self.live.get(rid)
            if future is not None and not future.done():
                future.set_result(None)
                found += 1
        return found


async def _next(run: Run, aborted: asyncio.Future[None]) -> tuple[Output | None, bool]:
    """The run's next output, or (None, True) once the request is aborted: the pending step is
    cancelled, which closes the service stream (the request ends in the engine)."""
    if aborted.done():
        return None, True
    step: asyncio.Future[Output | None] = asyncio.ensure_future(run.next())
    waits: set[asyncio.Future[Any]] = {step, aborted}
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    if step.done():
        return step.result(), False
    step.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await step
    return None, True


class _Choices:
    """The n choices' progress: tokens so far, last id, finish."""

    def __init__(self, params: GenerateParams) -> None:
        n = params.completion.sampling.n
        self.params = params
        self.tokens = [0] * n
        self.last: list[list[int]] = [[] for _ in range(n)]
        self.finished = [False] * n
        self.prompt_tokens = len(params.completion.prompt)
        self.cached_tokens = 0

    def take(self, out: Output) -> tuple[str | None, int | str | None]:
        """Count ``out``; its finish reason and stop reason (raises on a failed generation)."""
        if out.finish_reason == "error":
            raise generation_error(out)
        i = out.index
        self.tokens[i] += len(out.token_ids)
        if out.token_ids:
            self.last[i] = out.token_ids
        reason = None
        if out.finish_reason is not None:
            self.finished[i] = True
            self.cached_tokens = max(self.cached_tokens, out.cached_tokens)
            reason = stop_reason(out, self.last[i], self.params.stop_token_ids)
        return out.finish_reason, reason

    def unfinished(self) -> list[int]:
        return [i for i, done in enumerate(self.finished) if not done]


def _text(out: Output) -> str:
    return "".join(d.get("content", "") for d in out.deltas)


def _logprobs(params: GenerateParams, out: Output) -> dict[str, Any] | None:
    k = params.completion.output.logprobs
    if k is None:
        return None
    return generate_logprobs(out.token_ids, out.id_logprobs, out.id_top_ids, k)


async def generate_events(params: GenerateParams, response_id: str, run: Run, first: Output,
                          aborted: asyncio.Future[None]) -> AsyncIterator[bytes]:
    """The SSE stream of vLLM's ``/inference/v1/generate`` with ``stream``: one chunk per output
    that brought ids, text or a finish; the usage chunk with ``include_usage``; ``[DONE]``."""
    choices = _Choices(params)
    text_mode = params.text_mode
    prompt = params.completion.prompt
    prompt_ids = list(prompt) if params.return_prompt_ids and isinstance(prompt, list) else None
    out: Output | None = first
    was_aborted = False
    try:
        while out is not None:
            run.observe(out)
            finish, reason = choices.take(out)
            text = _text(out) if text_mode else None
            if out.token_ids or finish is not None or text:
                usage = None
                if params.continuous_usage:
                    usage = usage_body(choices.prompt_tokens, choices.tokens[out.index], 0)
                choice = generate_choice(out.index, finish, reason, out.token_ids, text,
                                         whole=False, logprobs=_logprobs(params, out))
                yield sse_event(generate_chunk(params, response_id, [choice], usage=usage,
                                               prompt_ids=prompt_ids))
                prompt_ids = None
            if not choices.unfinished():
                break
            out, was_aborted = await _next(run, aborted)
        else:
            if not was_aborted:
                raise no_finish_error()
        for i in choices.unfinished():  # aborted: vLLM's last chunk of each running choice
            yield sse_event(generate_chunk(params, response_id, [
                generate_choice(i, "abort", None, [], "" if text_mode else None, whole=False)]))
        end = b""
        if params.include_usage:
            total = sum(choices.tokens)
            end = sse_event({"request_id": response_id,
                             "usage": usage_body(choices.prompt_tokens, total,
                                                 choices.cached_tokens),
                             "output_mode": "text" if text_mode else "tokens", "choices": []})
        yield LastEvents(end + SSE_DONE)
    except Exception as exc:  # noqa: BLE001 - the stream has started: the error is an event
        body = getattr(exc, "body", None)
        error = body() if callable(body) else {"error": {"message": str(exc), "code": 500}}
        yield LastEvents(sse_event(error) + SSE_DONE)


async def generate_whole_answer(params: GenerateParams, response_id: str, run: Run,
                                first: Output, aborted: asyncio.Future[None]) -> Response:
    """vLLM's ``/inference/v1/generate`` answer without ``stream``."""
    created = int(time.time())
    choices = _Choices(params)
    n = params.completion.sampling.n
    ids: list[list[int]] = [[] for _ in range(n)]
    texts: list[list[str]] = [[] for _ in range(n)]
    rows: list[list[float]] = [[] for _ in range(n)]
    alts: list[list[int]] = [[] for _ in range(n)]
    ends: list[tuple[str | None, int | str | None]] = [(None, None)] * n
    out: Output | None = first
    while out is not None:
        run.observe(out)
        ends_here = choices.take(out)
        ids[out.index].extend(out.token_ids)
        texts[out.index].append(_text(out))
        rows[out.index].extend(out.id_logprobs)
        alts[out.index].extend(out.id_top_ids)
        if ends_here[0] is not None:
            ends[out.index] = ends_here
        if not choices.unfinished():
            break
        out, was_aborted = await _next(run, aborted)
        if was_aborted:
            for i in choices.unfinished():
                ends[i] = ("abort", None)
            break
    else:
        raise no_finish_error()
    k = params.completion.output.logprobs
    body: list[dict[str, Any]] = [
        generate_choice(i, ends[i][0], ends[i][1], ids[i],
                        "".join(texts[i]) if params.text_mode else None, whole=True,
                        logprobs=None if k is None else generate_logprobs(ids[i], rows[i],
                                                                          alts[i], k))
        for i in range(n)]
    return json_response(generate_whole(params, response_id, created, body,
                                        choices.prompt_tokens, sum(choices.tokens),
                                        choices.cached_tokens))

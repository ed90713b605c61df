"""The Responses API, the answer from a run: the ``response`` object whole, or its events streamed.

Each loop feeds a run's outputs to a :class:`~textproc.http.responses.answers.ResponseBuilder`
and to ``run.observe`` (the accounting), and stores the finished conversation for
``previous_response_id`` (``store``); an ``error`` finish is the ApiError of
``backend.generation_error``: the whole answer raises it, a stream ends with ``error`` then
``response.failed``. It starts, limits and closes nothing (``serving.Serving`` does).
"""

from __future__ import annotations

from typing import AsyncIterator

from starlette.responses import Response

from textproc.core.deltas import join_text
from textproc.http.api_types import ApiError
from textproc.http.asgi import LastEvents, json_response
from textproc.http.backend import Output, Run, generation_error, no_finish_error
from textproc.http.openai.answers import now
from textproc.http.responses.answers import ResponseBuilder, response_sse
from textproc.http.responses.bodies import ResponsesRequest, ResponseStore

__all__ = ["respond_whole", "respond_events"]


def _remember(store: ResponseStore | None, builder: ResponseBuilder) -> None:
    request = builder.request
    if store is not None and request.echo["store"]:
        store.put(builder.response_id, [*request.history, builder.assistant_message()])


async def respond_whole(request: ResponsesRequest, response_id: str, run: Run, first: Output,
                        store: ResponseStore | None) -> Response:
    """The whole Response object once the request finishes."""
    builder = ResponseBuilder(response_id, request, created_at=now())
    out: Output | None = first
    while out is not None:
        run.observe(out)
        builder.feed(out.deltas, out.logprobs)
        if out.finish_reason is not None:
            if out.finish_reason == "error":
                raise generation_error(out)
            builder.finish(out.finish_reason, prompt_tokens=out.prompt_tokens,
                           completion_tokens=out.completion_tokens,
                           cached_tokens=out.cached_tokens)
            _remember(store, builder)
            return json_response(builder.response())
        out = await run.next()
    raise no_finish_error()


async def respond_events(request: ResponsesRequest, response_id: str, run: Run, first: Output,
                         store: ResponseStore | None) -> AsyncIterator[bytes]:
    """The streamed events, as SSE bytes (no ``[DONE]``: the Responses stream ends with
    ``response.completed`` / ``.incomplete`` / ``.failed``)."""
    builder = ResponseBuilder(response_id, request, created_at=now())
    parts: list[bytes] = []  # the events of one output go out together (one write)
    try:
        parts += map(response_sse, builder.start())
        out: Output | None = first
        while out is not None:
            run.observe(out)
            parts += map(response_sse, builder.feed(join_text(out.deltas), out.logprobs))
            if out.finish_reason is not None:
                if out.finish_reason == "error":
                    raise generation_error(out)
                parts += map(response_sse, builder.finish(
                    out.finish_reason, prompt_tokens=out.prompt_tokens,
                    completion_tokens=out.completion_tokens, cached_tokens=out.cached_tokens))
                _remember(store, builder)
                yield LastEvents(b"".join(parts))
                return
            if parts:
                yield b"".join(parts)
                parts = []
            out = await run.next()
        raise no_finish_error()
    except ApiError as exc:
        yield LastEvents(b"".join([*parts, *map(response_sse, builder.fail(exc))]))

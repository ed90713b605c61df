"""Anthropic's Messages API, the answer from a run: ``message`` whole, or its events streamed.

Each loop feeds a run's outputs to a :class:`~textproc.http.anthropic.answers.MessageBuilder`
(the whole answer is the same builder fed the same deltas, so streamed == whole) and to
``run.observe`` (the accounting); an ``error`` finish is the ApiError of
``backend.generation_error``: the whole answer raises it, a stream sends it as an ``error``
event and ends there (as Anthropic's does). It starts, limits and closes nothing
(``serving.Serving`` does).
"""

from __future__ import annotations

from typing import Any, AsyncIterator

from starlette.responses import Response

from textproc.core.deltas import join_text
from textproc.http.anthropic.answers import MessageBuilder
from textproc.http.anthropic.bodies import MessagesRequest
from textproc.http.api_types import ApiError
from textproc.http.asgi import LastEvents, json_response
from textproc.http.backend import Output, Run, generation_error, no_finish_error
from textproc.http.responses.answers import response_sse

__all__ = ["message_whole", "message_events"]


def _sse(event: dict[str, Any]) -> bytes:
    return response_sse(event)  # event: <type>, data: <json>


async def message_whole(request: MessagesRequest, message_id: str, run: Run, first: Output,
                        context_room: int | None) -> Response:
    """The whole ``message`` once the request finishes."""
    builder = MessageBuilder(message_id, request)
    out: Output | None = first
    while out is not None:
        run.observe(out)
        builder.feed(out.deltas)
        if out.finish_reason is not None:
            if out.finish_reason == "error":
                raise generation_error(out)
            builder.finish(out, context_room=context_room)
            return json_response(builder.message())
        out = await run.next()
    raise no_finish_error()


async def message_events(request: MessagesRequest, message_id: str, run: Run, first: Output,
                         context_room: int | None) -> AsyncIterator[bytes]:
    """The streamed events as SSE bytes; the events of one engine output go out together
    (one write), the last ones with the end of the body."""
    builder = MessageBuilder(message_id, request)
    parts: list[bytes] = []
    try:
        parts += map(_sse, builder.start(first.prompt_tokens))  # 0 when not known yet
        out: Output | None = first
        while out is not None:
            run.observe(out)
            parts += map(_sse, builder.feed(join_text(out.deltas)))
            if out.finish_reason is not None:
                if out.finish_reason == "error":
                    raise generation_error(out)
                parts += map(_sse, builder.finish(out, context_room=context_room))
                yield LastEvents(b"".join(parts))
                return
            if parts:
                yield b"".join(parts)
                parts = []
            out = await run.next()
        raise no_finish_error()
    except ApiError as exc:
        yield LastEvents(b"".join([*parts, *map(_sse, builder.fail(exc))]))

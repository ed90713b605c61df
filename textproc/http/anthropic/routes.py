"""The routes of Anthropic's Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Owns what the Messages routes do beyond the life of a request every route shares
(:class:`textproc.http.serving.Serving`: limits, accounting, disconnects, closing; reused, not
copied): errors in Anthropic's shape, and
``max_tokens`` larger than what the prompt leaves of the context. Anthropic's current models
accept such a request and stop with ``stop_reason: "model_context_window_exceeded"`` when the
output reaches the end of the context; Claude Code relies on it (it sends ``max_tokens: 32000``
whatever the model). So here: the request runs as sent; when the worker refuses it because
prompt + ``max_tokens`` exceeds ``max_model_len``, the prompt is counted (the worker's own
render and encode, as count_tokens does) and the request runs again with ``max_tokens`` = the
room left, the answer saying ``model_context_window_exceeded`` if it fills that room. A prompt
that leaves no room is a 400 (Anthropic's "prompt is too long").
"""

from __future__ import annotations

import dataclasses

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from textproc.http.api_types import ApiError, ChatParams
from textproc.http.asgi import json_response
from textproc.http.backend import Output
from textproc.http.anthropic.bodies import (
    MessagesRequest,
    anthropic_error_body,
    parse_count_tokens_request,
    parse_messages_request,
)
from textproc.http.anthropic.answers import anthropic_id
from textproc.http.anthropic.events import message_events, message_whole
from textproc.http.serving import InFlight, Serving

__all__ = ["MessagesRoutes", "anthropic_error_response"]


def anthropic_error_response(exc: ApiError) -> Response:
    """An ApiError as Anthropic's error object (Retry-After on 429 and 529)."""
    status, body = anthropic_error_body(exc)
    headers = {"Retry-After": "1"} if status in (429, 529) else {}
    if exc.close:
        headers["Connection"] = "close"
    return json_response(body, status, headers or None)


class MessagesRoutes:
    """The Messages handlers over one ``Serving`` (backend, limits, metrics)."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    async def create(self, request: Request) -> Response:
        return await self.serving.guard("/v1/messages", request, self._create,
                                         errors=anthropic_error_response)

    async def count_tokens(self, request: Request) -> Response:
        return await self.serving.guard("/v1/messages/count_tokens", request, self._count_tokens,
                                         errors=anthropic_error_response)

    async def _create(self, request: Request, body: bytes) -> Response:
        serving = self.serving
        req = parse_messages_request(body, served_models=serving.backend.served_models)
        mid = anthropic_id("msg")
        run, first, room = await self._start(request, req, mid)
        return await serving.respond(
            request, run, req.chat.stream,
            lambda: message_events(req, mid, run, first, room),
            lambda: message_whole(req, mid, run, first, room),
        )

    async def _start(self, request: Request, req: MessagesRequest,
                     mid: str) -> tuple[InFlight, Output, int | None]:
        """The run, its first output, and the room the context left when that was less than
        ``max_tokens`` (None when the request ran as sent)."""
        serving = self.serving
        limit = serving.backend.max_model_len
        await serving.load_images(req.chat)
        if limit is None or req.max_tokens < limit:  # it may fit: try as sent
            try:
                run, first = await serving.start(request, lambda: serving.backend.chat(
                    req.chat, request_id=mid))
                return run, first, None
            except ApiError as exc:
                # the worker's refusal of prompt + max_tokens over the context names max_tokens
                if exc.status != 400 or exc.param != "max_tokens" or limit is None:
                    raise
        n_prompt = await self._count(req.chat)
        room = limit - n_prompt
        if room < 1:
            raise ApiError(f"prompt is too long: {n_prompt} tokens > {limit - 1} maximum "
                           f"(this model's context is {limit} tokens)", param="messages")
        sampling = req.chat.sampling
        chat = msgspec.structs.replace(req.chat, sampling=dataclasses.replace(
            sampling, max_tokens=room, min_tokens=min(sampling.min_tokens, room)))
        retry = anthropic_id("msg")
        run, first = await serving.start(request, lambda: serving.backend.chat(chat,
                                                                         request_id=retry))
        return run, first, room

    async def _count(self, chat: ChatParams) -> int:
        """The prompt's tokens as the chat route renders and encodes it (a prefill is counted
        as a closed assistant turn, the few tokens of its end included: ``/tokenize`` has no
        continue_final_message; the room left is then, if anything, underestimated)."""
        self.serving.check_serving()
        if chat.images:
            raise ApiError(f"{chat.images[0].param} is an image; token counts cover text "
                           "messages only", param=chat.images[0].param)
        ids = await self.serving.backend.tokenize(
            text=None, messages=chat.messages,
            tools=chat.tools if chat.tool_choice != "none" else None,
            add_special_tokens=False, add_generation_prompt=chat.add_generation_prompt,
            chat_template_kwargs=dict(chat.chat_template_kwargs))
        return len(ids)

    async def _count_tokens(self, request: Request, body: bytes) -> Response:
        chat = parse_count_tokens_request(body, served_models=self.serving.backend.served_models)
        return json_response({"input_tokens": await self._count(chat)})

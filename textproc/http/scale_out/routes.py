"""The routes of vLLM's scale-out API (``vllm serve --enable-scale-out``): render, derender,
token-in / token-out generate and abort.

Owns what each handler does with a body once :class:`textproc.http.serving.Serving` has read
it. Render builds the request in a tokenizer worker exactly as the chat / completion / Messages /
Responses route would (``Backend.render``: the same template, ids, checks and the model's
sampling defaults) and answers vLLM's ``GenerateRequest`` instead of submitting it. Generate
submits the ids as a completion prompt with the body's sampling (``bodies``) and answers the
engine's ids (and text) in vLLM's shapes (``events``). Derender turns ids back into text.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

import msgspec

from starlette.requests import Request
from starlette.responses import Response

from textproc.http.anthropic.bodies import parse_messages_request
from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.core.deltas import MessageAccumulator, one_delta
from textproc.http.asgi import json_response
from textproc.http.openai.answers import new_id
from textproc.http.openai.bodies import decode_body, parse_chat_request
from textproc.http.responses.bodies import parse_responses_request
from textproc.http.scale_out.answers import (
    cut_at_stop,
    derendered_chat,
    derendered_chunk,
    derendered_completion,
    rendered_request,
)
from textproc.http.scale_out.bodies import (
    DerenderParams,
    parse_abort_request,
    parse_completion_render,
    parse_derender_request,
    parse_generate_request,
)
from textproc.http.scale_out.events import Aborts, generate_events, generate_whole_answer
from textproc.http.serving import Serving

__all__ = ["ScaleOutRoutes"]


def _base_id(request: Request, given: str | None) -> str:
    """vLLM's request id: the ``X-Request-Id`` header, else the body's, else a fresh one."""
    header = request.headers.get("x-request-id")
    if header:
        return header
    return given if given else uuid.uuid4().hex[:16]


class ScaleOutRoutes:
    """The scale-out handlers over one ``Serving`` (backend, limits, metrics)."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving
        self.aborts = Aborts()

    # ------------------------------------------------------------ render

    async def render_chat(self, request: Request) -> Response:
        return await self.serving.guard("/v1/chat/completions/render", request,
                                        self._render_chat)

    async def _render_chat(self, request: Request, body: bytes) -> Response:
        params = parse_chat_request(body, served_models=self.serving.backend.served_models)
        return json_response(await self._rendered(request, params, "chatcmpl",
                                                  _body_id(body)))

    async def render_messages(self, request: Request) -> Response:
        # vLLM answers this route's errors in its OpenAI shape, not Anthropic's
        return await self.serving.guard("/v1/messages/render", request, self._render_messages)

    async def _render_messages(self, request: Request, body: bytes) -> Response:
        req = parse_messages_request(body, served_models=self.serving.backend.served_models)
        return json_response(await self._rendered(request, req.chat, "chatcmpl", None))

    async def render_responses(self, request: Request) -> Response:
        return await self.serving.guard("/v1/responses/render", request, self._render_responses)

    async def _render_responses(self, request: Request, body: bytes) -> Response:
        raw = decode_body(body, dict, "responses")
        if raw.get("previous_response_id") is not None:
            raise ApiError("previous_response_id is not supported by the stateless render "
                           "endpoint.", param="previous_response_id")
        req = parse_responses_request(body, served_models=self.serving.backend.served_models)
        rid = raw.get("request_id") if isinstance(raw.get("request_id"), str) else None
        answer = await self._rendered(request, req.chat, None, rid or f"resp_{uuid.uuid4().hex}")
        return json_response(answer)

    async def render_completion(self, request: Request) -> Response:
        return await self.serving.guard("/v1/completions/render", request,
                                        self._render_completion)

    async def _render_completion(self, request: Request, body: bytes) -> Response:
        prompts = parse_completion_render(body, served_models=self.serving.backend.served_models)
        base = f"cmpl-{_base_id(request, _body_id(body))}"
        answers = []
        for i, params in enumerate(prompts):
            rid = base if len(prompts) == 1 else f"{base}-{i}"
            answers.append(await self._rendered(request, params, None, rid))
        return json_response(answers)

    async def _rendered(self, request: Request, params: ChatParams | CompletionParams,
                        prefix: str | None, given: str | None) -> dict[str, Any]:
        """The GenerateRequest of ``params``, its ``max_tokens`` resolved as the generation
        route resolves it."""
        self.serving.check_serving()
        images = params.images if isinstance(params, ChatParams) else None
        if images:  # vLLM's render would carry them as multimodal features: not here
            raise ApiError(f"{images[0].param} is an image; the render routes do not carry "
                           "images (a GenerateRequest here holds token ids only): send text only",
                           param=images[0].param)
        ids, resolved = await self.serving.backend.render(params)
        rid = f"{prefix}-{_base_id(request, given)}" if prefix else str(given)
        return rendered_request(rid, params, ids, resolved, max_tokens=resolved.max_tokens)

    # ------------------------------------------------------------ generate

    async def generate(self, request: Request) -> Response:
        return await self.serving.guard("/inference/v1/generate", request, self._generate)

    async def _generate(self, request: Request, body: bytes) -> Response:
        serving = self.serving
        params = parse_generate_request(body, served_models=serving.backend.served_models)
        serving.check_n(params.completion.sampling.n)
        response_id = f"generate-tokens-{_base_id(request, params.request_id)}"
        internal_id = f"{response_id}-{uuid.uuid4().hex[:8]}"  # unique in the service
        aborts = self.aborts
        aborted = aborts.register(response_id)
        try:
            run, first = await serving.start(request, lambda: serving.backend.complete(
                params.completion, request_id=internal_id))
        except ApiError as exc:
            aborts.release(response_id, aborted)
            if exc.param == "prompt":  # the completion request's name for the body's ids
                exc.param = "token_ids"
            raise
        except BaseException:
            aborts.release(response_id, aborted)
            raise

        async def events() -> AsyncIterator[bytes]:
            try:
                async for data in generate_events(params, response_id, run, first, aborted):
                    yield data
            finally:
                aborts.release(response_id, aborted)

        if params.completion.stream:
            return await serving.respond(request, run, True, events, _unused)
        try:
            return await serving.respond(
                request, run, False, events,
                lambda: generate_whole_answer(params, response_id, run, first, aborted))
        finally:
            aborts.release(response_id, aborted)

    # ------------------------------------------------------------ derender

    async def derender_chat(self, request: Request) -> Response:
        return await self.serving.guard("/v1/chat/completions/derender", request,
                                        lambda r, b: self._derender(b, chat=True))

    async def derender_completion(self, request: Request) -> Response:
        return await self.serving.guard("/v1/completions/derender", request,
                                        lambda r, b: self._derender(b, chat=False))

    async def _derender(self, body: bytes, *, chat: bool) -> Response:
        backend = self.serving.backend
        params = parse_derender_request(body, chat=chat, served_models=backend.served_models)
        self.serving.check_serving()
        created = int(time.time())
        if params.stream:
            return json_response(await self._derender_chunk(params, chat=chat, created=created))
        texts: list[tuple[int, str, str | None, int | str | None, int]] = []
        messages: list[tuple[int, dict[str, Any], str | None, int | str | None, int]] = []
        for answer in params.answers:
            for choice in answer.choices:
                ids = choice.token_ids or []
                finish, reason = choice.finish_reason, choice.stop_reason
                if params.chat is not None:  # the chat route's own output of these ids
                    deltas, finish, stop = await backend.derender(params.chat, ids, finish)
                    reason = stop if stop is not None else reason
                    acc = MessageAccumulator()
                    acc.feed(deltas)
                    messages.append((len(messages), acc.message(new_call_id=lambda: new_id(
                        "call")), finish, reason, len(ids)))
                    continue
                text = await backend.detokenize(ids, skip_special_tokens=params.skip_special_tokens)
                text = cut_at_stop(text, reason, params.stops, params.include_stop)
                if chat:
                    messages.append((len(messages), {"role": "assistant", "content": text},
                                     finish, reason, len(ids)))
                else:
                    texts.append((len(texts), text, finish, reason, len(ids)))
        rid = params.answers[0].request_id if params.answers else ""
        if chat:
            return json_response(derendered_chat(params.model, rid, created, messages,
                                                 sum(params.prompt_tokens)))
        return json_response(derendered_completion(params.model, rid, created, texts,
                                                   sum(params.prompt_tokens)))

    async def _derender_chunk(self, params: DerenderParams, *, chat: bool,
                              created: int) -> dict[str, Any]:
        """One streamed chunk and the state for the next call: the text of all ids so far,
        less what earlier calls sent, less what may still change (an incomplete character at
        the end; the last characters that could begin a stop string)."""
        chunk, state = params.answers[0], params.state
        if len(chunk.choices) > 1:
            raise ApiError("generate_chunk has several choices; derender one choice per call",
                           param="generate_chunk.choices")
        if not chunk.choices:  # the usage chunk
            return {"chunk": derendered_chunk(params.model, chunk.request_id, created, chat=chat,
                                              choice=None, role=False, usage=None),
                    "stream_state": msgspec.to_builtins(state)}
        choice = chunk.choices[0]
        new = choice.token_ids or []
        ids = [*state.output_token_ids, *new]
        if params.chat is not None:  # the chat route's stream: the earlier ids replayed
            deltas, finish, stop = await self.serving.backend.derender(
                params.chat, ids, choice.finish_reason, skip=len(state.output_token_ids))
            parsed = one_delta(deltas)
            for call in parsed.get("tool_calls", []):
                if call.get("id") is None:
                    call["id"] = new_id("call")
            next_state = msgspec.structs.replace(
                state, output_token_ids=ids,
                output_chunk_lens=[*state.output_chunk_lens, len(new)] if new
                else state.output_chunk_lens, role_sent=True)
            return {"chunk": derendered_chunk(
                        params.model, chunk.request_id, created, chat=True,
                        choice=(choice.index, parsed, finish,
                                stop if stop is not None else choice.stop_reason),
                        role=not state.role_sent, usage=None),
                    "stream_state": msgspec.to_builtins(next_state)}
        text = await self.serving.backend.detokenize(
            ids, skip_special_tokens=params.skip_special_tokens)
        if choice.finish_reason is not None:
            text = cut_at_stop(text, choice.stop_reason, params.stops, params.include_stop)
        else:
            text = text.rstrip("\ufffd")  # an incomplete character: its next bytes will come
            hold = max((len(s) for s in params.stops), default=1) - 1
            if hold:
                text = text[:max(0, len(text) - hold)]
        sent = state.logprob_text_offset
        delta = text[sent:]
        role = chat and not state.role_sent
        next_state = msgspec.structs.replace(
            state, output_token_ids=ids,
            output_chunk_lens=[*state.output_chunk_lens, len(new)] if new
            else state.output_chunk_lens,
            logprob_text_offset=sent + len(delta), role_sent=state.role_sent or chat)
        return {"chunk": derendered_chunk(params.model, chunk.request_id, created, chat=chat,
                                          choice=(choice.index, delta, choice.finish_reason,
                                                  choice.stop_reason),
                                          role=role, usage=None),
                "stream_state": msgspec.to_builtins(next_state)}

    # ------------------------------------------------------------ abort

    async def abort_requests(self, request: Request) -> Response:
        return await self.serving.guard("/inference/v1/abort_requests", request, self._abort)

    async def _abort(self, request: Request, body: bytes) -> Response:
        self.aborts.abort(parse_abort_request(body))
        return Response(status_code=200)


def _body_id(body: bytes) -> str | None:
    """A render body's ``request_id`` (vLLM's extension field), if it has one."""
    if b'"request_id"' not in body:
        return None
    value = json.loads(body).get("request_id")
    return value if isinstance(value, str) and value else None


async def _unused() -> Response:
    raise AssertionError("a streamed answer has no whole answer")

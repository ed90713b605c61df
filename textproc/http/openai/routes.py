"""The routes of OpenAI's API: chat and text completions, the model list, and vLLM's
``/tokenize`` and ``/detokenize``.

Owns what each handler does with a body once :class:`textproc.http.serving.Serving` has read it:
parse it (``bodies``), start the run and answer it (``events``) through the shared steps
(limits, accounting, disconnects, closing live there, not here).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from textproc.http.api_types import ApiError
from textproc.http.asgi import error_response, json_response
from textproc.http.openai.answers import models_body, new_id
from textproc.http.openai.bodies import (
    parse_chat_request,
    parse_completion_request,
    parse_detokenize_request,
    parse_tokenize_request,
    tokenize_messages,
    tokenize_tools,
)
from textproc.http.openai.events import (
    chat_events,
    chat_whole,
    completion_events,
    completion_whole,
)
from textproc.http.serving import Serving, header_priority

__all__ = ["OpenAIRoutes"]


class OpenAIRoutes:
    """The OpenAI handlers over one ``Serving`` (backend, limits, metrics)."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    # ------------------------------------------------------------ chat

    async def chat(self, request: Request) -> Response:
        return await self.serving.guard("/v1/chat/completions", request, self._chat)

    async def _chat(self, request: Request, body: bytes) -> Response:
        serving = self.serving
        params = parse_chat_request(body, served_models=serving.backend.served_models)
        header_priority(request, params)
        serving.use_adapter(params)
        serving.check_n(params.sampling.n)
        await serving.load_images(params)
        rid = new_id("chatcmpl")
        run, first = await serving.start(
            request, lambda: serving.backend.chat(params, request_id=rid))
        return await serving.respond(
            request, run, params.stream,
            lambda: chat_events(params, rid, run, first),
            lambda: chat_whole(params, rid, run, first),
        )

    # ------------------------------------------------------------ completions

    async def completions(self, request: Request) -> Response:
        return await self.serving.guard("/v1/completions", request, self._complete)

    async def _complete(self, request: Request, body: bytes) -> Response:
        serving = self.serving
        params = parse_completion_request(body, served_models=serving.backend.served_models)
        header_priority(request, params)
        serving.use_adapter(params)
        serving.check_n(params.sampling.n)
        rid = new_id("cmpl")
        run, first = await serving.start(
            request, lambda: serving.backend.complete(params, request_id=rid))
        return await serving.respond(
            request, run, params.stream,
            lambda: completion_events(params, rid, run, first),
            lambda: completion_whole(params, rid, run, first),
        )

    # ------------------------------------------------------------ models

    async def models(self, request: Request) -> Response:
        serving = self.serving
        serving.metrics.count_request("/v1/models", 200)
        return json_response(models_body(serving.backend.served_models, serving.started,
                                         max_model_len=serving.backend.max_model_len,
                                         lora_modules=serving.backend.lora_modules))

    async def model(self, request: Request) -> Response:
        serving = self.serving
        name = request.path_params["model"]
        body = models_body(serving.backend.served_models, serving.started,
                           max_model_len=serving.backend.max_model_len,
                           lora_modules=serving.backend.lora_modules)
        for entry in body["data"]:
            if entry["id"] == name:
                serving.metrics.count_request("/v1/models/{model}", 200)
                return json_response(entry)
        serving.metrics.count_request("/v1/models/{model}", 404)
        return error_response(ApiError(
            f"model {name!r} does not exist; served: "
            f"{', '.join(map(repr, serving.backend.served_models))}",
            status=404, param="model", code="model_not_found"))

    # ------------------------------------------------------------ tokens

    async def tokenize(self, request: Request) -> Response:
        return await self.serving.guard("/tokenize", request, self._tokenize)

    async def _tokenize(self, request: Request, body: bytes) -> Response:
        backend = self.serving.backend
        req = parse_tokenize_request(body, served_models=backend.served_models)
        self.serving.check_serving()
        messages = tokenize_messages(req) if req.messages is not None else None
        ids = await backend.tokenize(
            text=req.prompt,
            messages=messages,
            tools=tokenize_tools(req),
            # like vLLM: a chat template already writes its special tokens
            add_special_tokens=(req.add_special_tokens if req.add_special_tokens is not None
                                else messages is None),
            add_generation_prompt=req.add_generation_prompt,
            chat_template_kwargs=dict(req.chat_template_kwargs or {}),
        )
        return json_response({"count": len(ids), "max_model_len": backend.max_model_len,
                              "tokens": ids})

    async def detokenize(self, request: Request) -> Response:
        return await self.serving.guard("/detokenize", request, self._detokenize)

    async def _detokenize(self, request: Request, body: bytes) -> Response:
        backend = self.serving.backend
        req = parse_detokenize_request(body, served_models=backend.served_models)
        self.serving.check_serving()
        text = await backend.detokenize(list(req.tokens),
                                        skip_special_tokens=req.skip_special_tokens)
        return json_response({"prompt": text})

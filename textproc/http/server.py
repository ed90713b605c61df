"""The OpenAI-compatible HTTP frontend: a Starlette app over a Backend, served by uvicorn on uvloop.

Owns the routes and the life of one generation request: limits (body size -> 413, requests in
flight -> 429, service down -> 503), accounting in the metrics, and closing the backend stream
when the request ends or the client leaves (which aborts it in the engine). Bodies are validated
by ``openai_api``; the answer loops over a run's outputs (streamed and whole) are ``generation``
(chat, completions) and ``responses_events`` (/v1/responses), shaped by ``responses`` (pure);
Anthropic's /v1/messages has its handlers in ``messages_route`` (over this module's ``_Api``);
SSE and disconnect watching live in ``asgi``. It never touches the service's sockets itself: everything goes through a ``Backend``
(the TextClient adapter in ``client_backend`` in production).
"""

from __future__ import annotations

import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from textproc.http.api_types import ApiError
from textproc.http.asgi import (
    BearerAuth,
    EventStream,
    Pacer,
    PaceRequests,
    error_response,
    json_response,
    read_body,
    until_disconnect,
)
from textproc.http.backend import Backend, Output, no_finish_error
from textproc.http.connections import FramingGuard
from textproc.http.generation import chat_events, chat_whole, completion_events, completion_whole
from textproc.http.messages_route import MessagesRoutes, anthropic_error_response
from textproc.http.metrics import CONTENT_TYPE, Metrics
from textproc.http.frontend_peers import Peers
from textproc.http.openai_api import (
    parse_chat_request,
    parse_completion_request,
    parse_detokenize_request,
    parse_tokenize_request,
    tokenize_messages,
    tokenize_tools,
)
from textproc.http.responses_api import ResponseStore, parse_responses_request
from textproc.http.responses_reasoning import ReasoningSeal
from textproc.http.responses_events import respond_events, respond_whole
from textproc.http.openai_bodies import models_body, new_id, now
from textproc.http.settings import HttpLimits

__all__ = ["build_app", "health_answer"]

_log = logging.getLogger("textproc.http")


def _client_gone() -> ApiError:
    # nginx's 499 "client closed request": nobody reads it, the metrics count it
    return ApiError("the client closed the connection", status=499, code="client_closed")


class _Run:
    """One generation request in flight: its backend stream, first output and accounting."""

    def __init__(self, api: _Api, stream: AsyncIterator[Output], started: float) -> None:
        self.api = api
        self.stream = stream
        self.started = started
        self.saw_token = False
        self._closed = False

    async def next(self) -> Output | None:
        try:
            return await self.stream.__anext__()
        except StopAsyncIteration:
            return None

    def observe(self, out: Output) -> None:
        metrics = self.api.metrics
        for stage, seconds in out.timings_s.items():
            if out.index == 0 or stage == "detokenize":  # n choices: one template, one encode
                metrics.observe(stage, seconds)
        if not self.saw_token and out.deltas:
            self.saw_token = True
            metrics.observe("first_token", time.perf_counter() - self.started)
        if out.finish_reason is not None:
            if out.index == 0:  # n choices share one prompt and one request
                metrics.prompt_tokens += out.prompt_tokens
                metrics.observe("request", time.perf_counter() - self.started)
            metrics.completion_tokens += out.completion_tokens
            metrics.count_finish(out.finish_reason)

    async def close(self) -> None:
        """Release the request: aborts it in the service if it has not finished. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.api.metrics.running -= 1
        aclose = getattr(self.stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                _log.exception("closing a request stream failed")


class _Api:
    """The route handlers, sharing one backend, limits and metrics."""

    def __init__(self, backend: Backend, limits: HttpLimits, metrics: Metrics,
                 peers: Peers) -> None:
        self.backend = backend
        self.limits = limits
        self.metrics = metrics
        self.peers = peers  # the frontends sharing this port: /metrics sums them
        self.started = now()
        # previous_response_id (bounds in responses_api), and the reasoning items' seal: one
        # secret per service, kept in its runtime dir, so every frontend opens what any sealed
        self.response_store = ResponseStore(
            seal=ReasoningSeal.for_service(getattr(backend, "runtime_dir", None)))
        self.pacer = Pacer(limits.handlers_per_turn)

    # ------------------------------------------------------------ helpers

    def _check_serving(self) -> None:
        serving, why = self.backend.health()
        if not serving:
            raise ApiError(f"service unavailable: {why}", status=503, type="server_error",
                           code="service_unavailable")

    async def _guard(
        self,
        endpoint: str,
        request: Request,
        handler: Callable[[Request, bytes], Awaitable[Response]],
        errors: Callable[[ApiError], Response] = error_response,  # the API's error shape
    ) -> Response:
        status = 500
        try:
            body = await read_body(request, self.limits.max_body_bytes,
                                   timeout_s=self.limits.body_timeout_s, metrics=self.metrics)
            response = await handler(request, body)
            status = response.status_code
            return response
        except ClientDisconnect:  # gone mid-upload: not an error, nobody reads an answer
            status = 499
            self.metrics.upload_disconnects += 1
            _log.debug("client left %s before sending the whole body", endpoint)
            return Response(status_code=499)
        except ApiError as exc:
            status = exc.status
            return errors(exc)
        except Exception:
            _log.exception("unexpected error serving %s", endpoint)
            return errors(ApiError("internal server error; see the server log", status=500,
                                   type="server_error", code="internal_error"))
        finally:
            self.metrics.count_request(endpoint, status)

    async def _start(self, request: Request,
                     call: Callable[[], AsyncIterator[Output]]) -> tuple[_Run, Output]:
        """Submit a generation request and wait until the service accepts or refuses it."""
        self._check_serving()
        if self.metrics.running >= self.limits.max_running:
            raise ApiError(
                f"{self.metrics.running} requests in flight, the limit is "
                f"{self.limits.max_running}; retry later",
                status=429, type="rate_limit_error", code="too_many_requests",
            )
        self.metrics.running += 1
        run = _Run(self, call(), time.perf_counter())
        try:
            connected, first = await until_disconnect(request, run.next())
        except BaseException:
            await run.close()
            raise
        if first is None:
            await run.close()
            if not connected:
                self._aborted()
                raise _client_gone()
            raise no_finish_error()
        return run, first

    def _check_n(self, n: int) -> None:
        if n > self.limits.max_n:
            raise ApiError(f"n={n} is over this server's limit of {self.limits.max_n} choices "
                           "per request (--max-n)", param="n")

    def _aborted(self) -> None:
        self.metrics.aborted_by_client += 1
        self.metrics.count_finish("abort")

    async def _respond(
        self, request: Request, run: _Run, stream: bool,
        events: Callable[[], AsyncIterator[bytes]], whole: Callable[[], Awaitable[Response]],
    ) -> Response:
        if stream:
            return EventStream(events(), on_disconnect=self._aborted, cleanup=run.close)
        try:
            connected, response = await until_disconnect(request, whole())
        finally:
            await run.close()
        if not connected or response is None:
            self._aborted()
            raise _client_gone()
        return response

    # ------------------------------------------------------------ chat

    async def chat(self, request: Request) -> Response:
        return await self._guard("/v1/chat/completions", request, self._chat)

    async def _chat(self, request: Request, body: bytes) -> Response:
        params = parse_chat_request(body, served_models=self.backend.served_models)
        self._check_n(params.sampling.n)
        rid = new_id("chatcmpl")
        run, first = await self._start(
            request, lambda: self.backend.chat(params, request_id=rid))
        return await self._respond(
            request, run, params.stream,
            lambda: chat_events(params, rid, run, first),
            lambda: chat_whole(params, rid, run, first),
        )

    # ------------------------------------------------------------ responses

    async def responses(self, request: Request) -> Response:
        return await self._guard("/v1/responses", request, self._responses)

    async def _responses(self, request: Request, body: bytes) -> Response:
        req = parse_responses_request(body, served_models=self.backend.served_models,
                                      store=self.response_store)
        rid = new_id("resp")
        run, first = await self._start(
            request, lambda: self.backend.chat(req.chat, request_id=rid))
        store = self.response_store
        return await self._respond(
            request, run, req.chat.stream,
            lambda: respond_events(req, rid, run, first, store),
            lambda: respond_whole(req, rid, run, first, store),
        )

    # ------------------------------------------------------------ completions

    async def completions(self, request: Request) -> Response:
        return await self._guard("/v1/completions", request, self._complete)

    async def _complete(self, request: Request, body: bytes) -> Response:
        params = parse_completion_request(body, served_models=self.backend.served_models)
        self._check_n(params.sampling.n)
        rid = new_id("cmpl")
        run, first = await self._start(
            request, lambda: self.backend.complete(params, request_id=rid))
        return await self._respond(
            request, run, params.stream,
            lambda: completion_events(params, rid, run, first),
            lambda: completion_whole(params, rid, run, first),
        )

    # ------------------------------------------------------------ the rest

    async def models(self, request: Request) -> Response:
        self.metrics.count_request("/v1/models", 200)
        return json_response(models_body(self.backend.served_models, self.started,
                                 max_model_len=self.backend.max_model_len))

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        body = models_body(self.backend.served_models, self.started,
                           max_model_len=self.backend.max_model_len)
        for entry in body["data"]:
            if entry["id"] == name:
                self.metrics.count_request("/v1/models/{model}", 200)
                return json_response(entry)
        self.metrics.count_request("/v1/models/{model}", 404)
        return error_response(ApiError(
            f"model {name!r} does not exist; served: "
            f"{', '.join(map(repr, self.backend.served_models))}",
            status=404, param="model", code="model_not_found"))

    async def tokenize(self, request: Request) -> Response:
        return await self._guard("/tokenize", request, self._tokenize)

    async def _tokenize(self, request: Request, body: bytes) -> Response:
        req = parse_tokenize_request(body, served_models=self.backend.served_models)
        self._check_serving()
        messages = tokenize_messages(req) if req.messages is not None else None
        ids = await self.backend.tokenize(
            text=req.prompt,
            messages=messages,
            tools=tokenize_tools(req),
            # like vLLM: a chat template already writes its special tokens
            add_special_tokens=(req.add_special_tokens if req.add_special_tokens is not None
                                else messages is None),
            add_generation_prompt=req.add_generation_prompt,
            chat_template_kwargs=dict(req.chat_template_kwargs or {}),
        )
        return json_response({"count": len(ids), "max_model_len": self.backend.max_model_len,
                      "tokens": ids})

    async def detokenize(self, request: Request) -> Response:
        return await self._guard("/detokenize", request, self._detokenize)

    async def _detokenize(self, request: Request, body: bytes) -> Response:
        req = parse_detokenize_request(body, served_models=self.backend.served_models)
        self._check_serving()
        text = await self.backend.detokenize(list(req.tokens),
                                             skip_special_tokens=req.skip_special_tokens)
        return json_response({"prompt": text})

    async def health(self, request: Request) -> Response:
        status, body = health_answer(self.backend, self.metrics)
        return Response(body, status_code=status, media_type="application/json")

    async def metrics_text(self, request: Request) -> Response:
        processes = await self.backend.process_counters()
        total, depths, shares, frontends = self.peers.merged(self.backend.queue_depths(),
                                                             self.backend.worker_requests())
        self.metrics.start_lag_window()  # "since the previous scrape" (total has a copy)
        return Response(total.render(depths, processes, shares, frontends),
                        media_type=CONTENT_TYPE)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})  # 405 carries Allow (RFC 9110)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; see GET /v1/models"
    elif exc.status_code == 405:
        message = (f"method {request.method} is not allowed on {request.url.path}; allowed: "
                   f"{headers.get('Allow', '?')}")
    else:
        message = str(exc.detail)
    response = _error_shape(request.url.path, ApiError(
        message, status=exc.status_code, code="not_found" if exc.status_code == 404 else None))
    response.headers.update(headers)
    return response


def _error_shape(path: str, exc: ApiError) -> Response:
    """An error in the shape of the API ``path`` belongs to (Anthropic's under /v1/messages)."""
    return (anthropic_error_response if path.startswith("/v1/messages") else error_response)(exc)


def health_answer(backend: Backend, metrics: Metrics) -> tuple[int, bytes]:
    """``GET /health``'s status and JSON body (counted): the route's, and the one a probe gets
    on accept (``textproc.http.probe``)."""
    serving, why = backend.health()
    status = 200 if serving else 503
    metrics.count_request("/health", status)
    body = {"status": "ok"} if serving else {"status": "unavailable", "reason": why}
    return status, msgspec.json.encode(body)


def build_app(
    backend: Backend,
    *,
    limits: HttpLimits | None = None,
    metrics: Metrics | None = None,
    lifespan: Any = None,
    api_key: str | None = None,
    peers: Peers | None = None,
    test_hooks: bool = False,
) -> Starlette:
    """The Starlette app serving the OpenAI API over ``backend``.

    With ``api_key``, every route except /health and /metrics answers 401 unless the request
    carries ``Authorization: Bearer <api_key>`` (what the openai client sends). ``peers``: the
    other frontends on this port, whose metrics /metrics adds (default: none). ``test_hooks``
    adds ``POST /_test/block-loop?seconds=S`` (blocks the event loop; tests only).
    """
    metrics = metrics or Metrics()
    api = _Api(backend, limits or HttpLimits(), metrics,
               peers or Peers(None, 0, 1, metrics))
    routes = [
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/responses", api.responses, methods=["POST"]),
        Route("/v1/messages", (messages := MessagesRoutes(api)).create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/models/{model:path}", api.model, methods=["GET"]),
        Route("/tokenize", api.tokenize, methods=["POST"]),
        Route("/detokenize", api.detokenize, methods=["POST"]),
        Route("/health", api.health, methods=["GET"]),
        Route("/metrics", api.metrics_text, methods=["GET"]),
    ]
    if test_hooks:
        routes.append(Route("/_test/block-loop", _block_loop, methods=["POST"]))
    # pacing first: a burst of requests must not hold the loop in one go (asgi.PaceRequests)
    middleware = [Middleware(PaceRequests, pacer=api.pacer),
                  Middleware(FramingGuard, metrics=api.metrics)]
    if api_key:
        middleware.append(Middleware(BearerAuth, api_key=api_key, errors=_error_shape))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error},
                    middleware=middleware, lifespan=lifespan)
    app.state.api = api
    return app



async def _block_loop(request: Request) -> Response:
    """``POST /_test/block-loop?seconds=S`` (``test_hooks`` only): hold the event loop for S
    seconds (at most 60), as a stuck handler would; answers afterwards."""
    seconds = min(60.0, float(request.query_params.get("seconds", "1")))
    time.sleep(seconds)  # blocking on purpose: that is the test
    return json_response({"blocked_s": seconds})

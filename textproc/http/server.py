"""The HTTP frontend's app: every API folder's routes over one ``Serving``, and the process's
own ``/health`` and ``/metrics``.

Owns the assembly (:func:`build_app`): the routes of ``openai/``, ``responses/``,
``anthropic/`` and ``scale_out/`` (each folder's ``routes`` module), the middleware (pacing,
framing limits, the API key), the error answer of a route that does not exist (in the shape of
the API its path belongs to), and ``GET /health`` (:func:`health_answer`, which ``probe`` answers on accept too)
and ``GET /metrics``. What a route does lives in its folder; what every route shares (limits,
accounting, disconnects, closing) in ``serving``; SSE and disconnect watching in ``asgi``. The
process plumbing around the app (uvicorn, the listening socket, the heap) is ``run``'s.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from textproc.http.admin import admin_routes as build_admin_routes
from textproc.http.admin import lora_routes
from textproc.http.anthropic.routes import MessagesRoutes, anthropic_error_response
from textproc.http.api_types import ApiError
from textproc.http.asgi import BearerAuth, PaceRequests, error_response, json_response
from textproc.http.backend import Backend
from textproc.http.connections import FramingGuard
from textproc.http.metrics import CONTENT_TYPE, Metrics, ScrapeInputs
from textproc.http.openai.routes import OpenAIRoutes
from textproc.http.responses.routes import ResponsesRoutes
from textproc.http.scale_out.routes import ScaleOutRoutes
from textproc.http.serving import Serving
from textproc.http.settings import HttpLimits
from textproc.http.tracing import Tracer

__all__ = ["HttpLimits", "build_app", "health_answer"]


class _Status:
    """The process's own routes: ``/health`` and ``/metrics`` (not an API's)."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    async def health(self, request: Request) -> Response:
        status, body = health_answer(self.serving.backend, self.serving.metrics)
        return Response(body, status_code=status, media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        serving = self.serving
        backend, metrics = serving.backend, serving.metrics
        processes = await backend.process_counters()
        metrics.refresh(backend.queue_depths(), backend.worker_requests())
        metrics.vllm(serving.model_name(), backend.max_model_len)  # the families, at 0
        body = metrics.scrape(ScrapeInputs(serving.model_name(), processes,
                                           backend.engine_stats()))
        metrics.start_lag_window()  # "since the previous scrape"
        return Response(body, media_type=CONTENT_TYPE)


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
    if serving:
        body = {"status": "ok", "degraded": why} if why else {"status": "ok"}
    else:
        body = {"status": "unavailable", "reason": why}
    return status, msgspec.json.encode(body)


def build_app(
    backend: Backend,
    *,
    limits: HttpLimits | None = None,
    metrics: Metrics | None = None,
    lifespan: Any = None,
    api_key: str | None = None,
    test_hooks: bool = False,
    admin_routes: bool = False,
    tracer: Tracer | None = None,
    runtime_lora: bool = False,
) -> Starlette:
    """The Starlette app serving every API over ``backend``.

    With ``api_key``, every route except /health and /metrics answers 401 unless the request
    carries ``Authorization: Bearer <api_key>`` (what the openai client sends). ``test_hooks``
    adds ``POST /_test/block-loop?seconds=S`` (blocks the event loop; tests only).
    ``admin_routes`` adds vLLM's admin routes, ``runtime_lora`` its runtime LoRA routes
    (``textproc.http.admin``). ``tracer``: each
    generation request's spans go there (default: no tracing).
    """
    metrics = metrics or Metrics()
    serving = Serving(backend, limits or HttpLimits(), metrics, tracer)
    openai, responses = OpenAIRoutes(serving), ResponsesRoutes(serving)
    messages, status = MessagesRoutes(serving), _Status(serving)
    scale_out = ScaleOutRoutes(serving)
    routes = [
        Route("/v1/chat/completions", openai.chat, methods=["POST"]),
        Route("/v1/completions", openai.completions, methods=["POST"]),
        Route("/v1/responses", responses.create, methods=["POST"]),
        Route("/v1/messages", messages.create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
        Route("/v1/models", openai.models, methods=["GET"]),
        Route("/v1/models/{model:path}", openai.model, methods=["GET"]),
        Route("/tokenize", openai.tokenize, methods=["POST"]),
        Route("/detokenize", openai.detokenize, methods=["POST"]),
        # vLLM's scale-out routes (vllm serve --enable-scale-out), always on here
        Route("/v1/chat/completions/render", scale_out.render_chat, methods=["POST"]),
        Route("/v1/completions/render", scale_out.render_completion, methods=["POST"]),
        Route("/v1/messages/render", scale_out.render_messages, methods=["POST"]),
        Route("/v1/responses/render", scale_out.render_responses, methods=["POST"]),
        Route("/v1/chat/completions/derender", scale_out.derender_chat, methods=["POST"]),
        Route("/v1/completions/derender", scale_out.derender_completion, methods=["POST"]),
        Route("/inference/v1/generate", scale_out.generate, methods=["POST"]),
        Route("/inference/v1/abort_requests", scale_out.abort_requests, methods=["POST"]),
        Route("/health", status.health, methods=["GET"]),
        Route("/metrics", status.metrics, methods=["GET"]),
    ]
    if admin_routes:
        routes.extend(build_admin_routes(serving))
    if runtime_lora:
        routes.extend(lora_routes(serving))
    if test_hooks:
        routes.append(Route("/_test/block-loop", _block_loop, methods=["POST"]))
    # pacing first: a burst of requests must not hold the loop in one go (asgi.PaceRequests)
    middleware = [Middleware(PaceRequests, pacer=serving.pacer),
                  Middleware(FramingGuard, metrics=serving.metrics)]
    if api_key:
        middleware.append(Middleware(BearerAuth, api_key=api_key, errors=_error_shape))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error},
                    middleware=middleware, lifespan=lifespan)
    app.state.serving = serving
    return app


async def _block_loop(request: Request) -> Response:
    """``POST /_test/block-loop?seconds=S`` (``test_hooks`` only): hold the event loop for S
    seconds (at most 60), as a stuck handler would; answers afterwards."""
    seconds = min(60.0, float(request.query_params.get("seconds", "1")))
    time.sleep(seconds)  # blocking on purpose: that is the test
    return json_response({"blocked_s": seconds})

"""What every API route shares: the life of one request, over one backend, limits and metrics.

Owns :class:`Serving` (the backend, the limits, the metrics) and
the steps every handler of every API (``openai/``, ``responses/``, ``anthropic/``) takes through
it: :meth:`Serving.guard` (read the body under its limit, answer an error in the API's shape,
count the request), :meth:`Serving.start` (503 while the service is down, 429 over the requests
in flight, submit, wait until the service accepts or refuses), :meth:`Serving.respond` (stream
or answer whole, closing the run when the request ends or the client leaves, which aborts it in
the engine) and :class:`InFlight` (one generation request's stream and accounting). It never
touches the service's sockets: everything goes through a ``Backend`` (the TextClient adapter in
``client_backend`` in production). An API folder's ``routes`` module holds its handlers over one
``Serving``; ``server`` builds the app from them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import AsyncIterator, Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.http.asgi import EventStream, Pacer, error_response, read_body, until_disconnect
from textproc.http.backend import Backend, Output, no_finish_error
from textproc.http.media import load_images
from textproc.http.metrics import Metrics
from textproc.http.settings import HttpLimits
from textproc.http.tracing import RequestTrace, Tracer
from textproc.options import PRIORITY_RANGE

__all__ = ["Handler", "InFlight", "PRIORITY_HEADER", "Serving", "client_gone",
           "header_priority"]

PRIORITY_HEADER = "x-vllm-priority"  # vLLM's: overrides the body's priority

_log = logging.getLogger("textproc.http")

Handler = Callable[[Request, bytes], Awaitable[Response]]  # a route's work on the body read


def header_priority(request: Request, params: ChatParams | CompletionParams) -> None:
    """vLLM's ``X-Vllm-Priority`` header: an integer there replaces the body's ``priority``
    (anything else is ignored, as vLLM ignores it; so is an integer outside the int64 range,
    which vLLM would pass on)."""
    text = request.headers.get(PRIORITY_HEADER)
    if text is None:
        return
    try:
        priority = int(text)
    except ValueError:
        return
    if PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        params.sampling = dataclasses.replace(params.sampling, priority=priority)


def client_gone() -> ApiError:
    """The request ended because the client left."""
    # nginx's 499 "client closed request": nobody reads it, the metrics count it
    return ApiError("the client closed the connection", status=499, code="client_closed")


class InFlight:
    """One generation request in flight: its backend stream, first output and accounting."""

    def __init__(self, serving: Serving, stream: AsyncIterator[Output], started: float) -> None:
        self.serving = serving
        self.stream = stream
        self.started = started
        self.saw_token = False
        self.queue_s: float | None = None  # arrival until handed to the engine (the timings)
        self.last_token: dict[int, float] = {}  # choice -> when its last text came
        self.vllm = serving.metrics.vllm(serving.model_name(), serving.backend.max_model_len)
        self.trace: RequestTrace | None = None  # with --otlp-traces-endpoint
        self.finish_reasons: list[str] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._closed = False

    async def next(self) -> Output | None:
        try:
            return await self.stream.__anext__()
        except StopAsyncIteration:
            return None

    def observe(self, out: Output) -> None:
        metrics, vllm = self.serving.metrics, self.vllm
        now = time.perf_counter()
        timings = out.timings_s
        if timings:
            for stage, seconds in timings.items():
                if out.index == 0 or stage == "detokenize":  # n choices: one template, one encode
                    metrics.observe(stage, seconds)
            if "queue" in timings:
                self.queue_s = sum(timings.get(stage, 0.0)
                                   for stage in ("template", "tokenize", "queue"))
        if out.deltas:
            last = self.last_token.get(out.index)
            if last is None:
                vllm.ttft.observe(now - self.started)
                if not self.saw_token:
                    self.saw_token = True
                    metrics.observe("first_token", now - self.started)
            else:
                vllm.itl.observe(now - last)
            self.last_token[out.index] = now
        if self.trace is not None:
            self._trace(self.trace, out)
        if out.finish_reason is not None:
            if out.index == 0:  # n choices share one prompt and one request
                metrics.observe("request", now - self.started)
            metrics.finish(vllm, out.finish_reason, prompt_tokens=out.prompt_tokens,
                           generation_tokens=out.completion_tokens,
                           cached_tokens=out.cached_tokens, e2e_s=now - self.started,
                           queue_s=self.queue_s)

    def _trace(self, trace: RequestTrace, out: Output) -> None:
        if out.timings_s and "queue" in out.timings_s:
            trace.accepted(out.timings_s)
        if out.deltas:
            trace.first_token()
        if out.finish_reason is not None:
            self.finish_reasons.append(out.finish_reason)
            self.prompt_tokens = out.prompt_tokens
            self.completion_tokens += out.completion_tokens

    async def close(self) -> None:
        """Release the request: aborts it in the service if it has not finished. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.trace is not None:
            self.trace.finish(finish_reasons=self.finish_reasons, model=self.vllm.model_name,
                              prompt_tokens=self.prompt_tokens,
                              completion_tokens=self.completion_tokens)
        metrics = self.serving.metrics
        metrics.set_running(metrics.running - 1)
        aclose = getattr(self.stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                _log.exception("closing a request stream failed")


class Serving:
    """One backend, its limits and metrics, and the steps every route takes through them."""

    def __init__(self, backend: Backend, limits: HttpLimits, metrics: Metrics,
                 tracer: Tracer | None = None) -> None:
        self.backend = backend
        self.limits = limits
        self.metrics = metrics
        self.tracer = tracer  # --otlp-traces-endpoint (None: off)
        self.started = int(time.time())  # /v1/models' created
        self.pacer = Pacer(limits.handlers_per_turn)

    def model_name(self) -> str:
        """The served model's name, as vLLM's metrics label it (the first served name)."""
        models = self.backend.served_models
        return models[0] if models else "model"

    def check_serving(self) -> None:
        """503 while the service cannot serve (no worker, engine down)."""
        serving, why = self.backend.health()
        if not serving:
            raise ApiError(f"service unavailable: {why}", status=503, type="server_error",
                           code="service_unavailable")

    async def load_images(self, params: ChatParams) -> None:
        """Fill the request's images' bytes (``textproc.http.media``; a 400 names the image);
        the worker decodes them. A backend whose model reads no images (``reads_images``
        False) refuses them here, before anything is fetched."""
        if not params.images:
            return
        if getattr(self.backend, "reads_images", True) is False:
            first = params.images[0].param
            raise ApiError(f"{first} is an image, and the served model does not read images "
                           "(its config.json has no vision_config); send text only",
                           param=first)
        await load_images(params.images, self.limits.media)

    def use_adapter(self, params: ChatParams | CompletionParams) -> None:
        """A request whose model names a LoRA adapter is served with it (vLLM's rule)."""
        if params.model in self.backend.lora_modules:
            params.sampling = dataclasses.replace(params.sampling, lora=params.model)

    def check_n(self, n: int) -> None:
        """400 when ``n`` choices are over this server's ``--max-n``."""
        if n > self.limits.max_n:
            raise ApiError(f"n={n} is over this server's limit of {self.limits.max_n} choices "
                           "per request (--max-n)", param="n")

    async def guard(
        self,
        endpoint: str,
        request: Request,
        handler: Handler,
        errors: Callable[[ApiError], Response] = error_response,  # the API's error shape
    ) -> Response:
        """Read the body (413 over ``max_body_bytes``) and run ``handler`` on it; an ApiError
        becomes ``errors(exc)``, anything else a 500 in that shape. Counts the request under
        ``endpoint`` with the status it got."""
        status = 500
        try:
            body = await read_body(request, self.limits.max_body_bytes,
                                   timeout_s=self.limits.body_timeout_s, metrics=self.metrics)
            response = await handler(request, body)
            status = response.status_code
            return response
        except ClientDisconnect:  # gone mid-upload: not an error, nobody reads an answer
            status = 499
            self.metrics.count("http_upload_disconnects")
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

    async def start(self, request: Request,
                    call: Callable[[], AsyncIterator[Output]]) -> tuple[InFlight, Output]:
        """Submit a generation request and wait until the service accepts or refuses it."""
        self.check_serving()
        if self.metrics.running >= self.limits.max_running:
            raise ApiError(
                f"{self.metrics.running} requests in flight, the limit is "
                f"{self.limits.max_running}; retry later",
                status=429, type="rate_limit_error", code="too_many_requests",
            )
        self.metrics.set_running(self.metrics.running + 1)
        run = InFlight(self, call(), time.perf_counter())
        if self.tracer is not None:
            run.trace = self.tracer.begin(request.headers)
        try:
            connected, first = await until_disconnect(request, run.next())
        except BaseException:
            await run.close()
            raise
        if first is None:
            await run.close()
            if not connected:
                self.aborted()
                raise client_gone()
            raise no_finish_error()
        return run, first

    def aborted(self) -> None:
        """Count a request the client left."""
        metrics = self.metrics
        metrics.count("client_disconnects")
        metrics.finish(metrics.vllm(self.model_name(), self.backend.max_model_len), "abort")

    async def respond(
        self, request: Request, run: InFlight, stream: bool,
        events: Callable[[], AsyncIterator[bytes]], whole: Callable[[], Awaitable[Response]],
    ) -> Response:
        """The answer: ``events()`` as SSE when ``stream``, else ``whole()``; the run is
        closed when it ends either way (or when the client leaves)."""
        if stream:
            return EventStream(events(), on_disconnect=self.aborted, cleanup=run.close)
        try:
            connected, response = await until_disconnect(request, whole())
        finally:
            await run.close()
        if not connected or response is None:
            self.aborted()
            raise client_gone()
        return response

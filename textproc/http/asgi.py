"""ASGI pieces of the HTTP frontend: JSON and error responses, the SSE response that notices a
client leaving, waiting with a disconnect watcher, body reading with a size limit, API-key check.

Owns the rule that a client going away cancels the work done for it: each streamed response runs
its producer and a watcher of ``http.disconnect`` as two plain asyncio tasks, and cancels the
producer once when the client goes away (asyncio semantics, not a level-triggered cancel scope),
so the backend stream's ``finally`` can still send the Abort.
"""

from __future__ import annotations

import asyncio
import hmac
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from textproc.http.api_types import ApiError
from textproc.http.metrics import Metrics

__all__ = [
    "json_response",
    "error_response",
    "wait_disconnect",
    "until_disconnect",
    "read_body",
    "EventStream",
    "LastEvents",
    "BearerAuth",
    "Pacer",
]

T = TypeVar("T")
_JSON = msgspec.json.Encoder()


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_JSON.encode(body), status_code=status, media_type="application/json",
                    headers=headers)


def error_response(exc: ApiError) -> Response:
    """OpenAI's error object with the error's status (Retry-After: 1 on 429 and 503;
    Connection: close when the error says the connection cannot be reused)."""
    headers = {"Retry-After": "1"} if exc.status in (429, 503) else {}
    if exc.close:
        headers["Connection"] = "close"
    return json_response(exc.body(), exc.status, headers or None)


async def wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class LastEvents(bytes):
    """The last bytes of an event stream: ``EventStream`` sends them with the end of the body
    (one write, not two) and stops reading the iterator."""


class EventStream(Response):
    """An ASGI ``text/event-stream`` response that cancels its producer when the client leaves.

    ``events`` yields bytes of one or more whole SSE events; each is one ASGI send (one write
    to the socket), so a generator joins the events it has at the same moment (those of one
    engine output) into one. A ``LastEvents`` ends the stream in the same send.

    ``cleanup`` always runs once at the end (after the last event, an error or a disconnect);
    ``on_disconnect`` runs before it if the client went away before the last event was sent.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[bytes],
        *,
        on_disconnect: Callable[[], None],
        cleanup: Callable[[], Awaitable[None]],
    ) -> None:
        # not Response.__init__: it would add "content-length: 0"
        self.events = events
        self.on_disconnect = on_disconnect
        self.cleanup = cleanup
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": self.raw_headers})
            producer = asyncio.ensure_future(self._produce(send))
            watcher = asyncio.ensure_future(wait_disconnect(receive))
            try:
                await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
                if not producer.done():
                    producer.cancel()
                    await asyncio.wait({producer})
                    self.on_disconnect()
                elif isinstance(producer.exception(), OSError):
                    self.on_disconnect()  # the transport failed while writing: a disconnect
                else:
                    producer.result()
        finally:
            await self.cleanup()

    async def _produce(self, send: Send) -> None:
        try:
            async for data in self.events:
                if type(data) is LastEvents:  # the end of the body goes in the same write
                    await send({"type": "http.response.body", "body": data, "more_body": False})
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                await aclose()


async def read_body(request: Request, limit: int, *, timeout_s: float | None = None,
                    metrics: Metrics | None = None) -> bytes:
    """The whole body: 413 over ``limit`` bytes, 408 (and the connection closed) when it is
    not complete within ``timeout_s`` seconds of the headers (counted in ``metrics``)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            f"request body is {int(declared)} bytes, over the {limit}-byte limit",
            status=413, code="request_too_large",
        )
    chunks = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(f"request body is over the {limit}-byte limit", status=413,
                                   code="request_too_large")
                chunks.append(chunk)
    except TimeoutError as exc:
        if metrics is not None:
            metrics.count("http_body_timeouts")
        raise ApiError(f"the request body did not arrive within {timeout_s:g} s ({size} bytes "
                       "came); send it at once", status=408, code="request_timeout",
                       close=True) from exc
    return b"".join(chunks)


async def until_disconnect(request: Request, work: Awaitable[T]) -> tuple[bool, T | None]:
    """Await ``work``; if the client leaves first, cancel it (which aborts its request).

    Returns ``(True, result)``, or ``(False, None)`` when the client went away.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
            return False, None
    return True, task.result()


class Pacer:
    """Lets at most ``per_turn`` callers through per event-loop iteration, the rest in FIFO
    order in the next ones. 500 requests arriving at once otherwise run their handlers in one
    iteration (~1.5 s on a loaded 2-core box, bench/crowd.py), and /health, disconnects and
    every stream's writer wait behind them."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self.admitted = 0  # this iteration
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    async def turn(self) -> None:
        if self.admitted < self.per_turn and not self.waiting:
            self.admitted += 1
            self._schedule()
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self._schedule()
        await fut  # a cancelled waiter is skipped when its turn comes

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._scheduled = False
        self.admitted = 0
        waiting = self.waiting
        while waiting and self.admitted < self.per_turn:
            fut = waiting.popleft()
            if not fut.done():
                fut.set_result(None)
                self.admitted += 1
        if waiting or self.admitted:
            self._schedule()


class PaceRequests:
    """ASGI middleware, the first: every HTTP request but ``exempt`` paths waits for its
    :class:`Pacer` turn before any other middleware or its handler runs, so 500 requests
    arriving at once cost the loop only their HTTP parsing in the iterations they arrive, and a
    ``/health`` probe among them goes straight to its handler. (The turn used to be taken after
    the body read, so the middleware stack and body read of all 500 ran first; under
    bench/crowd.py the move measured within the run-to-run noise of the API-port ``/health``
    p99, which the connection setup in front of it dominates.)"""

    def __init__(self, app: ASGIApp, pacer: Pacer,
                 exempt: tuple[str, ...] = ("/health", "/metrics")) -> None:
        self.app = app
        self.pacer = pacer
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.exempt:
            await self.pacer.turn()
        await self.app(scope, receive, send)


class BearerAuth:
    """ASGI middleware: every route but /health and /metrics needs ``Authorization: Bearer KEY``
    (what OpenAI clients send) or ``x-api-key: KEY`` (what Anthropic clients send). ``errors``:
    the error shape of a path (the API it belongs to)."""

    OPEN_PATHS = ("/health", "/metrics")

    def __init__(self, app: ASGIApp, api_key: str,
                 errors: Callable[[str, ApiError], Response] | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()
        self.expected_key = api_key.encode()
        self.errors = errors or (lambda path, exc: error_response(exc))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        key = next((v for k, v in scope["headers"] if k == b"x-api-key"), b"")
        if hmac.compare_digest(given, self.expected) or hmac.compare_digest(key,
                                                                            self.expected_key):
            await self.app(scope, receive, send)
            return
        response = self.errors(scope["path"], ApiError(
            "missing or wrong API key; send the header 'Authorization: Bearer <key>' or "
            "'x-api-key: <key>'", status=401, code="invalid_api_key"))
        await response(scope, receive, send)

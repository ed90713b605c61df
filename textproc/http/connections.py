"""Connection guards of the HTTP frontend: a bound on open connections, a deadline for request
headers, and refusing requests whose body framing is ambiguous.

Owns what uvicorn leaves open: a client may hold a socket forever by sending headers
a byte at a time (slowloris), any number of sockets may be open at once, and a request with
both ``Transfer-Encoding`` and ``Content-Length`` would be served by a lenient parser (a proxy
in front may pick the length, which is how requests are smuggled). ``guarded_http`` subclasses
uvicorn's httptools protocol (llhttp, C: a third of h11's CPU per request, bench/chat_cost.py)
with the first two; llhttp would refuse the third with a bare "Invalid HTTP request received."
and a log line per request, so the guard lets it through to ``FramingGuard`` (ASGI middleware),
which answers 400 naming the problem, counts it and closes the connection. Body read deadlines live in ``asgi.read_body``. Every refusal
is counted in :class:`~textproc.http.metrics.Metrics`; none is logged per connection (an attacker
would choose the log volume).
"""

from __future__ import annotations

import asyncio

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from textproc.http.api_types import ApiError
from textproc.http.asgi import error_response
from textproc.http.metrics import Metrics

__all__ = ["guarded_http", "FramingGuard"]


def _busy_response(max_connections: int) -> bytes:
    body = msgspec.json.encode(ApiError(
        f"the server has {max_connections} connections open, its limit; retry later",
        status=503, type="server_error", code="too_many_connections").body())
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n")
    return head.encode() + body


def guarded_http(*, max_connections: int, header_timeout_s: float,
                 metrics: Metrics) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol that refuses connections past ``max_connections`` (503, counted)
    and closes one whose request headers take longer than ``header_timeout_s`` (counted), for
    the first request and for each next one on a kept-alive connection."""
    busy = _busy_response(max_connections)

    class GuardedHttpProtocol(HttpToolsProtocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # both Transfer-Encoding and Content-Length: let FramingGuard refuse it (see above)
            self.parser.set_dangerous_leniencies(lenient_chunked_length=True)
            metrics.set_open_connections(len(self.connections))
            if len(self.connections) > max_connections:
                metrics.count("http_connections_refused")
                transport.write(busy)
                transport.close()
                return
            self._arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            super().connection_lost(exc)
            metrics.set_open_connections(len(self.connections))

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a new request's headers are complete
                self._disarm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # uvicorn's keep-alive timer is cancelled by any byte, so a next request's
            # headers sent slowly would hold the connection forever: give them a deadline too
            self._arm_header_deadline()

        def _arm_header_deadline(self) -> None:
            self._disarm_header_deadline()
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request already started
            self._header_deadline = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm_header_deadline(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _headers_late(self) -> None:
            self._header_deadline = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return
            metrics.count("http_header_timeouts")
            self.transport.close()

    return GuardedHttpProtocol


class FramingGuard:
    """ASGI middleware: 400 and close for a request with both Transfer-Encoding and
    Content-Length (RFC 9112 6.1: a server may reject it; serving it invites smuggling)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name for name, _ in scope["headers"]}
            if b"transfer-encoding" in names and b"content-length" in names:
                self.metrics.count("http_framing_refused")
                response = error_response(ApiError(
                    "the request has both Transfer-Encoding and Content-Length; send one",
                    code="ambiguous_framing"))
                response.headers["connection"] = "close"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

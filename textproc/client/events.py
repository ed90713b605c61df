"""What a TextClient hands its caller: stream events, usage, and errors from Failure kinds.

Owns :class:`TextEvent` (one step of a stream), :class:`Usage`, the per-stream state the
readers fill and the consumer drains (:class:`StreamState`, :func:`take_event`), and
:func:`error_from`, the one mapping of a wire ``Failure`` kind to a typed
:class:`~textproc.errors.TextprocError` (kind, status and param as fields).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, NamedTuple

from textproc.core.deltas import one_delta
from textproc.errors import InvalidInput, TemplateError, TextprocError, WorkerDied
from textproc.protocol import LogprobEntry, RequestOutput, unpack_floats, unpack_ids

__all__ = ["Usage", "TextEvent", "StreamState", "take_event", "error_from"]

# Failure kind -> (error class, HTTP status when the Failure gave none)
_ERRORS: dict[str, tuple[type[TextprocError], int]] = {
    "invalid_input": (InvalidInput, 400),
    "template": (TemplateError, 400),
    "overloaded": (TextprocError, 503),
    "rate_limited": (TextprocError, 429),
    "timeout": (TextprocError, 504),
    "engine_restarted": (WorkerDied, 503),
    "worker_died": (WorkerDied, 503),
    "engine_error": (TextprocError, 500),
    "internal": (TextprocError, 500),
}


def error_from(kind: str, message: str, status: int | None = None,
               param: str | None = None) -> TextprocError:
    """The typed error for a ``Failure`` (or a client-side failure) of ``kind``."""
    cls, default_status = _ERRORS.get(kind, (TextprocError, 500))
    return cls(message, kind=kind, status=status or default_status, param=param)


class Usage(NamedTuple):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # of prompt_tokens, found in the engine's prefix cache

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class TextEvent:
    """What one step of a stream brought: deltas, and on the last event the end.

    ``deltas``: OpenAI deltas in order ({"content"}, {"reasoning_content"},
    {"tool_calls": [...]}); ``delta`` merges them into one dict. ``finish_reason`` ("stop",
    "length", "tool_calls", "abort"), ``stop`` (the matched stop string) and ``usage`` are set
    on the last event only. ``timings`` maps a stage to seconds: "template", "tokenize" (worker
    time) and "queue" (time to reach a worker and come back, less those) on the first event,
    and "detokenize" (the detokenizer's time for the step that produced this event) on each.
    ``index`` is the choice (0..n-1) of a request made with ``n`` > 1, else 0; its
    ``request_id`` is then the choice's sub-request id ``<id>-<index>``. ``logprobs`` (a request
    made with ``logprobs``): the entries of the tokens this event's text came from
    (:data:`textproc.core.logprobs.Entry`; their bytes join to the text, see
    docs/architecture.md "Logprobs"), else empty. ``token_ids`` (a request made with
    ``return_token_ids``): the engine's ids since the previous event, every generated id
    (EOS, and those whose text a stop string cut, too), else empty; with ``logprobs`` = k too,
    ``id_logprobs`` holds 1 + k values per id of ``token_ids`` (its logprob, then its k
    alternatives', most likely first) and ``id_top_ids`` the k alternatives' ids per id.
    """

    __slots__ = ("request_id", "deltas", "finish_reason", "stop", "usage", "timings", "index",
                 "logprobs", "token_ids", "id_logprobs", "id_top_ids")

    def __init__(self, request_id: str, deltas: list[dict[str, Any]], finish_reason: str | None,
                 stop: str | None, usage: Usage | None,
                 timings: dict[str, float] | None = None,
                 logprobs: list[LogprobEntry] | None = None) -> None:
        self.request_id = request_id
        self.deltas = deltas
        self.finish_reason = finish_reason
        self.stop = stop
        self.usage = usage
        self.timings: dict[str, float] = timings if timings is not None else {}
        self.index = 0
        self.logprobs: list[LogprobEntry] = logprobs if logprobs is not None else []
        self.token_ids: list[int] = []
        self.id_logprobs: list[float] = []
        self.id_top_ids: list[int] = []

    @property
    def delta(self) -> dict[str, Any]:
        return one_delta(self.deltas)

    @property
    def text(self) -> str:
        """The ``content`` text of this event."""
        return "".join(d.get("content", "") for d in self.deltas)

    def __repr__(self) -> str:
        return (f"TextEvent({self.request_id!r}, {self.deltas!r}, finish_reason="
                f"{self.finish_reason!r}, stop={self.stop!r}, usage={self.usage!r})")


class StreamState:
    """One stream in flight on a client: the outputs not yet taken, its waiter and its status."""

    __slots__ = ("request_id", "worker", "items", "waiter", "error", "accepted", "last_seen",
                 "pending_at_worker", "prompt_tokens", "unknown_seen", "sent_at", "timings",
                 "detok_s", "started")

    def __init__(self, request_id: str, worker: int) -> None:
        self.request_id = request_id
        self.worker = worker
        self.items: deque[RequestOutput] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self.accepted = False
        self.pending_at_worker = True
        self.last_seen = time.monotonic()
        self.prompt_tokens = 0
        self.unknown_seen = 0  # Query answers saying the detokenizer does not know it
        self.sent_at = time.perf_counter()
        self.timings: dict[str, float] | None = None  # worker stages, handed to the next event
        self.detok_s = 0.0  # the detokenizer's time for the latest Outputs frame
        self.started = False  # an output has arrived (the reader wakes first outputs first)

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.wake()


def take_event(stream: StreamState) -> TextEvent:
    """All outputs that arrived since the consumer last looked, merged into one event.

    Raises the request's error when its last output says it failed.
    """
    items = stream.items
    first = items.popleft()
    logprobs = first.logprobs or []
    ids = first.ids
    packed, rows, alts = (ids.token_ids, ids.logprobs, ids.top_ids) if ids is not None else (b"", b"", b"")
    if not items:
        last, deltas = first, first.deltas
    else:
        deltas = list(first.deltas)
        logprobs = list(logprobs)
        last = first
        while items:
            last = items.popleft()
            deltas.extend(last.deltas)
            if last.logprobs:
                logprobs.extend(last.logprobs)
            if last.ids is not None:
                packed += last.ids.token_ids
                rows += last.ids.logprobs
                alts += last.ids.top_ids
    if last.finish_reason == "error":
        raise error_from(last.error_kind or "internal", last.error or "request failed")
    usage = (Usage(last.prompt_tokens, last.completion_tokens, last.cached_tokens)
             if last.finish_reason else None)
    timings = stream.timings
    if timings is None:
        timings = {"detokenize": stream.detok_s}
    else:
        stream.timings = None
        timings["detokenize"] = stream.detok_s
    event = TextEvent(stream.request_id, deltas, last.finish_reason, last.stop, usage, timings,
                      logprobs)
    if packed:
        event.token_ids = unpack_ids(packed)
        if rows:
            event.id_logprobs = unpack_floats(rows)
            event.id_top_ids = unpack_ids(alts)
    return event

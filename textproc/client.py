"""TextClient: the asyncio client of a running textproc service (frontends and tests use it).

Owns one client's sockets: a DEALER per tokenizer worker, a DEALER to the detokenizer's
``detok-front`` (routing id = this client's id, Hello first) and a SUB to the supervisor's
``events``. ``chat()`` / ``complete()`` send a request to the least-busy worker and return an async
iterator of ``TextEvent`` (OpenAI-style deltas; the last one has finish_reason, the matched stop
and usage). Closing or cancelling the iterator before the end aborts the request in the
detokenizer and the engine. A request held by a worker that dies fails with ``WorkerDied``; so
do requests in flight when the detokenizer dies, and requests the detokenizer turns out not to
know (checked with ``Query`` after a few quiet seconds), so no request waits forever.
Must be used from one event loop; never pickles.
"""

from __future__ import annotations

import asyncio
import json
import os
import logging
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any, AsyncIterator, NamedTuple, Sequence

import zmq
import zmq.asyncio

from textproc.core.deltas import one_delta
from textproc.errors import (
    InvalidInput,
    ProtocolError,
    StartupTimeout,
    TemplateError,
    TextprocError,
    WorkerDied,
    short,
)
from textproc.protocol import (
    PROTOCOL_VERSION,
    Abort,
    Accepted,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResult,
    EventFrame,
    Failure,
    FrontOutFrame,
    Hello,
    Outputs,
    ProcessDied,
    Query,
    Ready,
    RequestOutput,
    Stats,
    StatsRequest,
    TokenizeRequest,
    TokenizeResult,
    Unknown,
    Welcome,
    WorkerOutFrame,
    pack_ids,
    unpack_ids,
)
from textproc.transport import FrameDecoder, close_sockets, encoder, make_socket
from textproc.curve import CurveClientKeys, load_client_keys

_log = logging.getLogger("textproc.client")

__all__ = ["TextClient", "TextEvent", "Usage", "DEFAULT_CALL_TIMEOUT_S"]

_QUERY_AFTER_S = 1.5  # a stream quiet this long is checked with the detokenizer (Query)
_RECONCILE_EVERY_S = 0.5
_DETOK_WAIT_S = 60.0  # how long a new request waits for a restarting detokenizer
_QUERY_ANSWER_S = 10.0  # a detokenizer that leaves a Query unanswered this long is gone
DEFAULT_CALL_TIMEOUT_S = 60.0  # a worker that has not answered a call / accepted a stream by then
_ERRORS: dict[str, tuple[type[TextprocError], int]] = {
    "invalid_input": (InvalidInput, 400),
    "template": (TemplateError, 400),
    "overloaded": (TextprocError, 503),
    "rate_limited": (TextprocError, 429),
    "timeout": (TextprocError, 504),
    "engine_restarted": (WorkerDied, 503),
    "engine_error": (TextprocError, 500),
    "internal": (TextprocError, 500),
}


class Usage(NamedTuple):
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class TextEvent:
    """What one step of a stream brought: delta fragments, and on the last event the end.

    ``deltas``: OpenAI delta fragments in order ({"content"}, {"reasoning_content"},
    {"tool_calls": [...]}); ``delta`` merges them into one dict. ``finish_reason`` ("stop",
    "length", "tool_calls", "abort"), ``stop`` (the matched stop string) and ``usage`` are set
    on the last event only. ``timings`` maps a stage to seconds: "template", "tokenize" (worker
    time) and "queue" (time to reach a worker and come back, less those) on the first event,
    and "detokenize" (the detokenizer's time for the step that produced this event) on each.
    """

    __slots__ = ("request_id", "deltas", "finish_reason", "stop", "usage", "timings")

    def __init__(self, request_id: str, deltas: list[dict[str, Any]], finish_reason: str | None,
                 stop: str | None, usage: Usage | None,
                 timings: dict[str, float] | None = None) -> None:
        self.request_id = request_id
        self.deltas = deltas
        self.finish_reason = finish_reason
        self.stop = stop
        self.usage = usage
        self.timings: dict[str, float] = timings if timings is not None else {}

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


class _Stream:
    __slots__ = ("request_id", "worker", "items", "waiter", "error", "accepted", "last_seen",
                 "pending_at_worker", "prompt_tokens", "unknown_seen", "sent_at", "timings",
                 "detok_s")

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

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.wake()


def _error(kind: str, message: str, status: int | None = None) -> TextprocError:
    cls, default_status = _ERRORS.get(kind, (TextprocError, 500))
    err = cls(message)
    setattr(err, "status", status or default_status)  # read by HTTP frontends (400/503/...)
    setattr(err, "kind", kind)
    return err


class TextClient:
    """An asyncio client of one running service; build with ``await TextClient.connect(dir)``.

    Every call of ``chat``/``complete`` gets its own request id (or the one given); ids must be
    unique among live requests of the whole service.
    """

    def __init__(self, info: dict[str, Any], runtime_dir: Path, *,
                 curve: CurveClientKeys | None = None,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        self.info = info
        self.runtime_dir = runtime_dir
        self.curve = curve
        self.call_timeout_s = call_timeout_s
        self.client_id = b"c" + os.urandom(15)
        self.detok_instance: str | None = None
        self._ctx: zmq.asyncio.Context | None = None
        self._workers: list[zmq.asyncio.Socket] = []
        self._worker_pending: list[set[str]] = []
        self._detok: zmq.asyncio.Socket | None = None
        self._events: zmq.asyncio.Socket | None = None
        self._streams: dict[str, _Stream] = {}
        self._calls: dict[str, tuple[int, asyncio.Future[Any]]] = {}
        self._stats_waiters: dict[str, tuple[list[Stats], int, asyncio.Future[None]]] = {}
        self._welcome: asyncio.Future[str] | None = None
        # set while the detokenizer has answered Hello on the current connection: outputs to
        # this client are routable only then, so new requests wait for it after a restart
        self._detok_up: asyncio.Event | None = None
        self._query_sent_at: float | None = None  # oldest unanswered Query
        self._tasks: list[asyncio.Task[None]] = []
        self._counter = 0
        self._closed = False
        self._encode = encoder().encode
        self._finalizer: weakref.finalize[Any, TextClient] | None = None
        self.malformed = 0
        self.aborts_lost = 0  # Abort frames the detokenizer socket would not take

    # -- construction --------------------------------------------------------------------------

    @classmethod
    async def connect(cls, runtime_dir: str | os.PathLike[str], *, timeout_s: float = 30.0,
                      curve_client_key: str | os.PathLike[str] | None = None,
                      curve_server_key: str | os.PathLike[str] | None = None,
                      call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> TextClient:
        """Connect to the service whose ``endpoints.json`` is (or soon will be) in ``runtime_dir``.

        Waits up to ``timeout_s`` for the file and for the detokenizer's Welcome; raises
        StartupTimeout naming what it waited for. A service started with CURVE keys
        (``endpoints.json`` has ``curve``) needs a client key pair: ``curve_client_key`` (a
        ``*.key_secret`` file whose public key the service allows) and ``curve_server_key``
        (``server.key``); both default to what ``endpoints.json`` names (the service's own key
        pair, readable only by its user). ``call_timeout_s`` bounds how long tokenize /
        detokenize / render and a stream's acceptance wait for a worker (per call overridable).
        """
        path = Path(runtime_dir) / "endpoints.json"
        deadline = time.monotonic() + timeout_s
        while not path.is_file():
            if time.monotonic() >= deadline:
                raise StartupTimeout(
                    f"waited {timeout_s:.1f} s for {path}; is `textproc serve --runtime-dir "
                    f"{runtime_dir}` running?")
            await asyncio.sleep(0.05)
        try:
            info = json.loads(path.read_text())
        except ValueError as e:
            raise ProtocolError(f"{path} is not JSON: {e}") from e
        if not isinstance(info, dict) or info.get("protocol_version") != PROTOCOL_VERSION:
            got = info.get("protocol_version") if isinstance(info, dict) else short(info)
            raise ProtocolError(f"{path}: service speaks protocol {got!r}, this client "
                                f"{PROTOCOL_VERSION}; upgrade the older side")
        curve = _client_curve(info, path, curve_client_key, curve_server_key)
        client = cls(info, Path(runtime_dir), curve=curve, call_timeout_s=call_timeout_s)
        try:
            await client.start(max(0.1, deadline - time.monotonic()))
        except BaseException:
            await client.close()
            raise
        return client

    async def start(self, timeout_s: float) -> None:
        from textproc.config import Endpoints

        ep = Endpoints.from_dict(self.info.get("endpoints"), source=str(self.runtime_dir))
        max_frame = int(self.info.get("max_frame_bytes", 64 << 20))
        ctx = zmq.asyncio.Context()
        self._ctx = ctx
        hwm = int(self.info.get("hwm", 100_000))  # the service's --hwm, for clients too
        opts: dict[str, Any] = {"max_frame_bytes": max_frame, "hwm": hwm,
                                "curve_client": self.curve}
        for address in ep.workers:
            sock = make_socket(ctx, zmq.DEALER, routing_id=self.client_id, **opts)
            sock.connect(address)
            self._workers.append(sock)  # type: ignore[arg-type]
            self._worker_pending.append(set())
        self._detok = make_socket(ctx, zmq.DEALER, routing_id=self.client_id, **opts)  # type: ignore[assignment]
        assert self._detok is not None
        self._detok.connect(ep.detok_front)
        self._events = make_socket(ctx, zmq.SUB, **opts)  # type: ignore[assignment]
        assert self._events is not None
        self._events.setsockopt(zmq.SUBSCRIBE, b"")
        self._events.connect(ep.events)
        self._finalizer = weakref.finalize(self, close_sockets,
                                           [*self._workers, self._detok, self._events], ctx)
        loop = asyncio.get_running_loop()
        for i, sock in enumerate(self._workers):
            self._tasks.append(loop.create_task(self._read_worker(i, sock)))
        self._tasks.append(loop.create_task(self._read_detok()))
        self._tasks.append(loop.create_task(self._read_events()))
        self._tasks.append(loop.create_task(self._reconcile()))
        try:
            await asyncio.wait_for(self._hello(), timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise StartupTimeout(f"waited {timeout_s:.1f} s for the detokenizer's Welcome at "
                                 f"{ep.detok_front}") from e

    async def _hello(self) -> None:
        assert self._detok is not None
        self._detok_up = asyncio.Event()
        self._welcome = asyncio.get_running_loop().create_future()
        await self._detok.send(self._encode(Hello()))
        instance = await asyncio.shield(self._welcome)
        self.detok_instance = instance

    # -- public API ----------------------------------------------------------------------------

    def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
             tool_choice: str | dict[str, Any] = "auto", stop: str | Sequence[str] | None = None,
             max_tokens: int | None = None, min_tokens: int = 0, include_stop: bool = False,
             chat_template_kwargs: dict[str, Any] | None = None, skip_special_tokens: bool = True,
             sampling: dict[str, Any] | None = None, request_id: str | None = None,
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             stop_token_ids: Sequence[int] = (), ignore_eos: bool = False,
             timeout_s: float | None = None) -> AsyncIterator[TextEvent]:
        """Stream a chat completion: async iterator of TextEvent; close it early to abort.

        ``timeout_s`` (default ``call_timeout_s``) bounds the wait for the worker to accept the
        request; a stuck worker then fails the stream with a TextprocError (kind ``timeout``,
        status 504) naming the worker. Generation itself has no deadline.
        """
        rid = request_id if request_id is not None else self._next_id()
        frame = ChatRequest(rid, messages, tools, tool_choice, _stops(stop), max_tokens,
                            min_tokens, include_stop, dict(chat_template_kwargs or {}),
                            skip_special_tokens, dict(sampling or {}), add_generation_prompt,
                            continue_final_message, list(stop_token_ids), ignore_eos)
        return self._generate(rid, frame, timeout_s)

    def complete(self, prompt: str | Sequence[int], *, stop: str | Sequence[str] | None = None,
                 max_tokens: int | None = None, min_tokens: int = 0, include_stop: bool = False,
                 skip_special_tokens: bool = True, sampling: dict[str, Any] | None = None,
                 request_id: str | None = None, add_special_tokens: bool = True,
                 stop_token_ids: Sequence[int] = (), ignore_eos: bool = False,
                 timeout_s: float | None = None) -> AsyncIterator[TextEvent]:
        """Stream a completion of ``prompt`` (text, or token ids); ``timeout_s`` as in ``chat``."""
        rid = request_id if request_id is not None else self._next_id()
        if isinstance(prompt, str):
            text, ids = prompt, None
        else:
            text, ids = "", pack_ids(list(prompt))
        frame = CompletionRequest(rid, text, ids, _stops(stop), max_tokens, min_tokens,
                                  include_stop, skip_special_tokens, dict(sampling or {}),
                                  add_special_tokens, list(stop_token_ids), ignore_eos)
        return self._generate(rid, frame, timeout_s)

    async def tokenize(self, text: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                       tools: list[dict[str, Any]] | None = None, add_special_tokens: bool = False,
                       add_generation_prompt: bool = True,
                       chat_template_kwargs: dict[str, Any] | None = None,
                       timeout_s: float | None = None) -> list[int]:
        """Token ids of ``text``, or of the chat prompt rendered from ``messages``.

        ``timeout_s`` (default ``call_timeout_s``): a worker that has not answered by then
        fails the call with a TextprocError (kind ``timeout``, status 504) naming it.
        """
        result = await self._call(TokenizeRequest(self._next_id(), text, messages, tools,
                                                  add_special_tokens, add_generation_prompt,
                                                  dict(chat_template_kwargs or {})), timeout_s)
        assert isinstance(result, TokenizeResult)
        return unpack_ids(result.token_ids)

    async def render(self, messages: list[dict[str, Any]], *,
                     tools: list[dict[str, Any]] | None = None,
                     chat_template_kwargs: dict[str, Any] | None = None,
                     timeout_s: float | None = None) -> tuple[str, list[int]]:
        """The rendered chat prompt and its ids, as a worker makes them for ``chat``."""
        result = await self._call(TokenizeRequest(self._next_id(), None, messages, tools, False,
                                                  True, dict(chat_template_kwargs or {})), timeout_s)
        assert isinstance(result, TokenizeResult)
        return result.prompt or "", unpack_ids(result.token_ids)

    async def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True,
                         timeout_s: float | None = None) -> str:
        """The text of ``token_ids``; ``timeout_s`` as in ``tokenize``."""
        result = await self._call(DetokenizeRequest(self._next_id(), pack_ids(list(token_ids)),
                                                    skip_special_tokens), timeout_s)
        assert isinstance(result, DetokenizeResult)
        return result.text

    async def stats(self, *, timeout_s: float = 5.0) -> list[Stats]:
        """Counters of every worker and the detokenizer (malformed frames per socket, ...)."""
        self._check_open()
        rid = self._next_id()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        got: list[Stats] = []
        self._stats_waiters[rid] = (got, len(self._workers) + 1, done)
        data = self._encode(StatsRequest(rid))
        try:
            for sock in self._workers:
                await sock.send(data)
            assert self._detok is not None
            await self._detok.send(data)
            await asyncio.wait_for(done, timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            have = sorted(f"{s.role}-{s.index}" for s in got)
            raise TextprocError(f"waited {timeout_s} s for Stats from every process; got {have}") from e
        finally:
            self._stats_waiters.pop(rid, None)
        return sorted(got, key=lambda s: (s.role, s.index))

    @property
    def n_workers(self) -> int:
        return len(self._workers)

    def pending(self) -> int:
        """Requests in flight (streams and calls)."""
        return len(self._streams) + len(self._calls)

    async def close(self) -> None:
        """Fail every pending request, stop the readers, close the sockets. Idempotent."""
        if self._closed:
            return
        self._closed = True
        err = TextprocError("the TextClient was closed")
        for stream in self._streams.values():
            stream.fail(err)
        for _, fut in self._calls.values():
            if not fut.done():
                fut.set_exception(err)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except BaseException:
                pass
        if self._finalizer is not None:
            self._finalizer()
        elif self._ctx is not None:
            self._ctx.destroy(linger=0)

    async def __aenter__(self) -> TextClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals -----------------------------------------------------------------------------

    def _next_id(self) -> str:
        self._counter += 1
        return f"{self.client_id[1:7].hex()}-{self._counter}"

    def _check_open(self) -> None:
        if self._closed:
            raise TextprocError("the TextClient is closed")

    def _pick_worker(self) -> int:
        pending = self._worker_pending
        best = 0
        for i in range(1, len(pending)):
            if len(pending[i]) < len(pending[best]):
                best = i
        return best

    def _timeout_error(self, worker: int, rid: str, what: str, timeout_s: float) -> TextprocError:
        address = self.info.get("endpoints", {}).get("workers", ["?"] * (worker + 1))[worker]
        return _error("timeout", f"worker {worker} ({address}) did not answer {what} for request "
                                 f"{rid!r} within {timeout_s:g} s; it is alive but stuck or "
                                 "overloaded (retry, or raise timeout_s)")

    async def _generate(self, rid: str, frame: ChatRequest | CompletionRequest,
                        timeout_s: float | None) -> AsyncIterator[TextEvent]:
        self._check_open()
        if rid in self._streams or rid in self._calls:
            raise InvalidInput(f"request_id {rid!r} is already in flight on this client")
        up = self._detok_up
        if up is not None and not up.is_set():
            try:
                await asyncio.wait_for(up.wait(), _DETOK_WAIT_S)
            except (asyncio.TimeoutError, TimeoutError) as e:
                raise WorkerDied(f"request {rid!r}: the detokenizer did not come back within "
                                 f"{_DETOK_WAIT_S:.0f} s") from e
        worker = self._pick_worker()
        stream = _Stream(rid, worker)
        self._streams[rid] = stream
        self._worker_pending[worker].add(rid)
        finished = False
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        accept_by = time.monotonic() + limit
        try:
            await self._workers[worker].send(self._encode(frame))
            while True:
                if not stream.items and stream.error is None:
                    stream.waiter = asyncio.get_running_loop().create_future()
                    if stream.pending_at_worker:  # a stuck worker must not hold it forever
                        try:
                            await asyncio.wait_for(stream.waiter, max(0.0, accept_by - time.monotonic()))
                        except (asyncio.TimeoutError, TimeoutError):
                            if stream.pending_at_worker and not stream.items:
                                stream.fail(self._timeout_error(
                                    worker, rid, "(Accepted for a generation request)", limit))
                    else:
                        await stream.waiter
                    stream.waiter = None
                if stream.items:
                    event = self._take(stream)
                    if event.finish_reason is not None:
                        finished = True
                    yield event
                    if finished:
                        return
                elif stream.error is not None:
                    finished = stream.accepted or not stream.pending_at_worker
                    raise stream.error
        finally:
            self._streams.pop(rid, None)
            self._worker_pending[worker].discard(rid)
            if not finished and not self._closed and self._detok is not None:
                # the abort must go out even while this task is being cancelled
                self._send_abort([rid])

    def _send_abort(self, request_ids: list[str]) -> None:
        """Send Abort to the detokenizer without waiting. On a zmq.asyncio socket a NOBLOCK send
        returns a future that holds its error (e.g. Again when the queue is full): consume it and
        count the loss rather than leave an unretrieved exception behind."""
        assert self._detok is not None
        try:
            sent = self._detok.send(self._encode(Abort(request_ids)), flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # socket closed under us
            self.aborts_lost += len(request_ids)
            return
        n = len(request_ids)

        def _done(fut: Any) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                self.aborts_lost += n
                _log.warning("could not send Abort for %d request(s) to the detokenizer: %s",
                             n, fut.exception())

        asyncio.ensure_future(sent).add_done_callback(_done)

    def _take(self, stream: _Stream) -> TextEvent:
        """All outputs that arrived since the consumer last looked, merged into one event."""
        items = stream.items
        first = items.popleft()
        if not items:
            last, deltas = first, first.deltas
        else:
            deltas = list(first.deltas)
            last = first
            while items:
                last = items.popleft()
                deltas.extend(last.deltas)
        if last.finish_reason == "error":
            raise _error(last.error_kind or "internal", last.error or "request failed")
        usage = Usage(last.prompt_tokens, last.completion_tokens) if last.finish_reason else None
        timings = stream.timings
        if timings is None:
            timings = {"detokenize": stream.detok_s}
        else:
            stream.timings = None
            timings["detokenize"] = stream.detok_s
        return TextEvent(stream.request_id, deltas, last.finish_reason, last.stop, usage, timings)

    async def _call(self, frame: TokenizeRequest | DetokenizeRequest, timeout_s: float | None) -> Any:
        self._check_open()
        worker = self._pick_worker()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        rid = frame.request_id
        self._calls[rid] = (worker, fut)
        self._worker_pending[worker].add(rid)
        limit = self.call_timeout_s if timeout_s is None else timeout_s
        try:
            await self._workers[worker].send(self._encode(frame))
            try:
                return await asyncio.wait_for(asyncio.shield(fut), limit)
            except (asyncio.TimeoutError, TimeoutError):
                if fut.done():
                    return fut.result()
                what = type(frame).__name__.replace("Request", "Result")
                raise self._timeout_error(worker, rid, f"({what})", limit) from None
        finally:
            self._calls.pop(rid, None)
            self._worker_pending[worker].discard(rid)

    async def _read_worker(self, index: int, sock: zmq.asyncio.Socket) -> None:
        decoder: FrameDecoder[WorkerOutFrame] = FrameDecoder(WorkerOutFrame, socket_name=f"client<-worker-{index}")
        while True:
            data = await sock.recv(copy=True)
            frame = decoder.decode(data, peer=f"worker-{index}")
            if frame is None:
                self.malformed += 1
                continue
            match frame:
                case Accepted():
                    self._worker_pending[index].discard(frame.request_id)
                    stream = self._streams.get(frame.request_id)
                    if stream is not None:
                        stream.accepted = True
                        stream.pending_at_worker = False
                        stream.prompt_tokens = frame.prompt_tokens
                        stream.last_seen = time.monotonic()
                        round_trip = time.perf_counter() - stream.sent_at
                        stream.timings = {
                            "template": frame.template_s,
                            "tokenize": frame.tokenize_s,
                            "queue": max(0.0, round_trip - frame.template_s - frame.tokenize_s),
                        }
                case Failure():
                    self._worker_pending[index].discard(frame.request_id)
                    err = _error(frame.kind, frame.message, frame.status)
                    stream = self._streams.get(frame.request_id)
                    if stream is not None:
                        stream.fail(err)
                    call = self._calls.get(frame.request_id)
                    if call is not None and not call[1].done():
                        call[1].set_exception(err)
                case TokenizeResult() | DetokenizeResult():
                    self._worker_pending[index].discard(frame.request_id)
                    call = self._calls.get(frame.request_id)
                    if call is not None and not call[1].done():
                        call[1].set_result(frame)
                case Stats():
                    self._on_stats(frame)

    def _on_stats(self, frame: Stats) -> None:
        waiter = self._stats_waiters.get(frame.request_id)
        if waiter is not None:
            got, expected, done = waiter
            got.append(frame)
            if len(got) >= expected and not done.done():
                done.set_result(None)

    async def _read_detok(self) -> None:
        assert self._detok is not None
        decoder: FrameDecoder[FrontOutFrame] = FrameDecoder(FrontOutFrame, socket_name="client<-detok-front")
        streams = self._streams
        while True:
            data = await self._detok.recv(copy=True)
            frame = decoder.decode(data, peer="detokenizer")
            match frame:
                case Outputs():
                    now = time.monotonic()
                    stray: list[str] = []
                    for item in frame.items:
                        stream = streams.get(item.request_id)
                        if stream is None:
                            if item.finish_reason is None:
                                stray.append(item.request_id)
                            continue
                        stream.items.append(item)
                        stream.detok_s = frame.detok_s
                        stream.last_seen = now
                        stream.unknown_seen = 0
                        if stream.pending_at_worker:  # the detokenizer has it: a worker death
                            stream.pending_at_worker = False  # no longer concerns it
                            self._worker_pending[stream.worker].discard(item.request_id)
                        stream.wake()
                    if stray:  # outputs of requests this client gave up on: stop them
                        self._send_abort(stray)
                case Welcome():
                    if frame.protocol_version != PROTOCOL_VERSION:
                        _fail = ProtocolError(
                            f"detokenizer speaks protocol {frame.protocol_version}, client "
                            f"{PROTOCOL_VERSION}")
                        if self._welcome is not None and not self._welcome.done():
                            self._welcome.set_exception(_fail)
                        continue
                    self.detok_instance = frame.instance_id
                    self._query_sent_at = None
                    if self._detok_up is not None:
                        self._detok_up.set()
                    if self._welcome is not None and not self._welcome.done():
                        self._welcome.set_result(frame.instance_id)
                case Unknown():
                    self._query_sent_at = None
                    for rid in frame.request_ids:
                        stream = streams.get(rid)
                        if stream is None or stream.pending_at_worker:
                            continue
                        stream.unknown_seen += 1
                        if stream.unknown_seen >= 2:  # twice, 0.5 s apart: really lost
                            stream.fail(WorkerDied(
                                f"request {rid!r} was lost: the detokenizer holds no state for "
                                "it (it restarted, or the request never reached it)"))
                case Stats():
                    self._on_stats(frame)
                case None:
                    self.malformed += 1

    async def _read_events(self) -> None:
        assert self._events is not None
        decoder: FrameDecoder[EventFrame] = FrameDecoder(EventFrame, socket_name="client<-events")
        while True:
            data = await self._events.recv(copy=True)
            frame = decoder.decode(data, peer="supervisor")
            match frame:
                case ProcessDied(role="worker"):
                    self._on_worker_died(frame)
                case ProcessDied(role="detokenizer"):
                    if self._detok_up is not None:
                        self._detok_up.clear()
                    self._query_sent_at = None
                    err = WorkerDied(f"the detokenizer (pid {frame.pid}) exited with code "
                                     f"{frame.exit_code}; in-flight requests were lost")
                    for stream in list(self._streams.values()):
                        if not stream.pending_at_worker:
                            stream.fail(err)
                case Ready(role="detokenizer"):
                    assert self._detok is not None
                    await self._detok.send(self._encode(Hello()))
                case _:
                    pass

    def _on_worker_died(self, frame: ProcessDied) -> None:
        index = frame.index
        if not 0 <= index < len(self._worker_pending):
            return
        for rid in list(self._worker_pending[index]):
            err = WorkerDied(f"worker {index} (pid {frame.pid}) exited with code {frame.exit_code} "
                             f"while holding request {rid!r}")
            stream = self._streams.get(rid)
            if stream is not None and not stream.items:
                stream.fail(err)
            call = self._calls.get(rid)
            if call is not None and not call[1].done():
                call[1].set_exception(err)
        self._worker_pending[index].clear()

    async def _reconcile(self) -> None:
        """Ask the detokenizer about quiet accepted streams; those it does not know fail."""
        while True:
            await asyncio.sleep(_RECONCILE_EVERY_S)
            up = self._detok_up
            if up is not None and not up.is_set() and self._detok is not None:
                await self._detok.send(self._encode(Hello()))  # in case the Ready event was missed
            cutoff = time.monotonic() - _QUERY_AFTER_S
            quiet = [s.request_id for s in self._streams.values()
                     if not s.pending_at_worker and s.last_seen < cutoff and s.error is None]
            now = time.monotonic()
            if self._query_sent_at is not None and now - self._query_sent_at > _QUERY_ANSWER_S:
                # no answer: the detokenizer (or the whole service) is gone without a
                # ProcessDied event, e.g. the supervisor was killed too
                self._query_sent_at = None
                err = WorkerDied(f"the detokenizer has not answered for {_QUERY_ANSWER_S:.0f} s; "
                                 "in-flight requests were lost")
                for stream in list(self._streams.values()):  # none can finish without it
                    stream.fail(err)
                continue
            if not quiet:
                self._query_sent_at = None  # nothing waits on the answer
            elif self._detok is not None:
                if self._query_sent_at is None:
                    self._query_sent_at = now
                for i in range(0, len(quiet), 4096):
                    await self._detok.send(self._encode(Query(quiet[i:i + 4096])))


def _client_curve(info: dict[str, Any], path: Path, client_key: str | os.PathLike[str] | None,
                  server_key: str | os.PathLike[str] | None) -> CurveClientKeys | None:
    """The CURVE keys for a service described by ``info`` (None when it runs without CURVE)."""
    curve = info.get("curve")
    if curve is None and client_key is None:
        return None
    if curve is not None and not isinstance(curve, dict):
        raise ProtocolError(f"{path}: 'curve' must be an object, got {short(curve)}")
    curve = curve or {}
    client_key = client_key if client_key is not None else curve.get("client_key_file")
    if client_key is None:
        raise InvalidInput(f"the service in {path.parent} uses CURVE: pass curve_client_key (a "
                           "*.key_secret file made by `textproc keys`)")
    server_public = curve.get("server_public_key")
    return load_client_keys(
        client_secret_file=client_key, server_public_file=server_key,
        server_public=server_public.encode() if isinstance(server_public, str) else None)


def _stops(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    return list(stop)

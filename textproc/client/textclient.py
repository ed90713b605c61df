"""TextClient: the asyncio client of a running textproc service (frontends and tests use it).

Owns one client's sockets: a DEALER per tokenizer worker, a DEALER to the detokenizer's
``detok-front`` (routing id = this client's id, Hello first) and a SUB to the supervisor's
``events``. ``chat()`` / ``complete()`` send a request to the least-busy worker (ties round robin) and return an async
iterator of ``TextEvent`` (OpenAI-style deltas; the last one has finish_reason, the matched stop
and usage). Closing or cancelling the iterator before the end aborts the request in the
detokenizer and the engine. A request held by a worker that dies fails with ``WorkerDied``; so
do requests in flight when the detokenizer dies, and requests the detokenizer turns out not to
know (checked with ``Query`` after a few quiet seconds), so no request waits forever.
With detokenizer shards (``--detokenizers N``) the client holds one DEALER per shard and sends
each request's Abort / Query to the shard ``textproc.sharding.shard_of`` names; a shard that
dies fails only the streams it held. Must be used from one event loop; never pickles.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import zmq
import zmq.asyncio

from textproc.client.endpoints import client_curve, read_endpoints
from textproc.client.events import StreamState, TextEvent, error_from, take_event
from textproc.client.inflight import InFlight, conversation_key
from textproc.client.readers import Readers
from textproc.client.streams import Aborts, shards_up, wait_output
from textproc.config import Endpoints
from textproc.curve import CurveClientKeys
from textproc.errors import InvalidInput, StartupTimeout, TextprocError, short
from textproc.options import OutputOptions, SamplingOptions, check_n, split_options
from textproc.protocol import (
    DEFAULT_HWM,
    MAX_TOKEN_ID,
    MAX_FRAME_BYTES,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResult,
    Stats,
    Derendered,
    DerenderRequest,
    Rendered,
    RenderRequest,
    StatsRequest,
    EngineCall,
    EngineCallResult,
    TokenizeRequest,
    TokenizeResult,
    pack_ids,
    unpack_ids,
)
from textproc.transport import close_sockets, encoder, make_socket, new_context

_log = logging.getLogger("textproc.client")

__all__ = ["TextClient", "DEFAULT_CALL_TIMEOUT_S"]

DEFAULT_CALL_TIMEOUT_S = 60.0  # a worker that has not answered a call / accepted a stream by then
_SAMPLING, _OUTPUT = SamplingOptions(), OutputOptions()


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
        self._ctx: zmq.asyncio.Context | None = None
        self._workers: list[zmq.asyncio.Socket] = []
        self._detoks: list[zmq.asyncio.Socket] = []  # detokenizer shard k's detok-front at k
        self._inflight = InFlight(0)
        self._readers: Readers | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._counter = 0
        self._closed = False
        self._broken: TextprocError | None = None  # set when a reader task crashed
        self._encode = encoder().encode
        self._finalizer: weakref.finalize[Any, TextClient] | None = None
        self._aborts = Aborts(self._detoks, self._encode)  # streams closed before their end

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
        deadline = time.monotonic() + timeout_s
        path, info = await read_endpoints(runtime_dir, deadline=deadline, timeout_s=timeout_s)
        curve = client_curve(info, path, curve_client_key, curve_server_key)
        client = cls(info, Path(runtime_dir), curve=curve, call_timeout_s=call_timeout_s)
        try:
            await client.start(max(0.1, deadline - time.monotonic()))
        except BaseException:
            await client.close()
            raise
        return client

    async def start(self, timeout_s: float) -> None:
        ep = Endpoints.from_dict(self.info.get("endpoints"), source=str(self.runtime_dir))
        max_frame = int(self.info.get("max_frame_bytes", MAX_FRAME_BYTES))
        ctx = new_context(zmq.asyncio.Context)
        self._ctx = ctx
        hwm = int(self.info.get("hwm", DEFAULT_HWM))  # the service's --hwm, for clients too
        opts: dict[str, Any] = {"max_frame_bytes": max_frame, "hwm": hwm,
                                "curve_client": self.curve}
        for address in ep.workers:
            sock = make_socket(ctx, zmq.DEALER, routing_id=self.client_id, **opts)
            sock.connect(address)
            self._workers.append(sock)  # type: ignore[arg-type]
        self._inflight = InFlight(len(self._workers))
        for shard in ep.detokenizers:
            detok: zmq.asyncio.Socket = make_socket(ctx, zmq.DEALER, routing_id=self.client_id, **opts)  # type: ignore[assignment]
            detok.connect(shard.detok_front)
            self._detoks.append(detok)
        events: zmq.asyncio.Socket = make_socket(ctx, zmq.SUB, **opts)  # type: ignore[assignment]
        events.setsockopt(zmq.SUBSCRIBE, b"")
        events.connect(ep.events)
        self._finalizer = weakref.finalize(self, close_sockets, [*self._workers, *self._detoks, events],
                                           ctx)
        readers = self._readers = Readers(self._inflight, self._detoks, events, self._encode,
                                          self._aborts.send)
        self._aborts.readers = readers
        loop = asyncio.get_running_loop()
        named = [(f"worker-{i}", readers.read_worker(i, sock)) for i, sock in enumerate(self._workers)]
        named += [("detokenizer" if k == 0 else f"detokenizer-{k}", readers.read_detok(k))
                  for k in range(len(self._detoks))]
        named += [("events", readers.read_events()), ("reconcile", readers.reconcile())]
        for name, coro in named:
            task = loop.create_task(coro, name=f"TextClient reader {name}")
            task.add_done_callback(self._reader_done)
            self._tasks.append(task)
        try:
            await asyncio.wait_for(readers.hello(), timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            missing = [d.detok_front for d, instance in zip(ep.detokenizers, readers.welcome)
                       if instance is None or not instance.done()]
            raise StartupTimeout(f"waited {timeout_s:.1f} s for the detokenizer's Welcome at "
                                 f"{', '.join(missing or [d.detok_front for d in ep.detokenizers])}"
                                 ) from e

    def _reader_done(self, task: asyncio.Task[None]) -> None:
        """A reader task ended: unless the client is closing, that is a crash. Fail everything in
        flight with its error at once, and every later call too (not a later timeout)."""
        if self._closed or task.cancelled():
            return
        exc = task.exception()
        err = TextprocError(
            f"{task.get_name()} stopped: {type(exc).__name__}: {exc}; this TextClient cannot "
            "receive any more (close it and connect again)" if exc is not None else
            f"{task.get_name()} stopped; this TextClient cannot receive any more")
        _log.error("%s", err, exc_info=exc)
        if self._broken is None:  # the first crash is the one to report
            self._broken = err
        self._inflight.fail_all(self._broken)

    # -- public API ----------------------------------------------------------------------------

    def chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
             tool_choice: str | dict[str, Any] = "auto", sampling: SamplingOptions | None = None,
             output: OutputOptions | None = None, structured: dict[str, Any] | None = None,
             chat_template_kwargs: dict[str, Any] | None = None,
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             documents: list[dict[str, Any]] | None = None, request_id: str | None = None,
             timeout_s: float | None = None, images: Sequence[bytes] = (),
             image_params: Sequence[str] = (), **options: Any) -> AsyncIterator[TextEvent]:
        """Stream a chat completion: async iterator of TextEvent; close it early to abort.

        ``images``: the encoded image files (PNG, JPEG, ...) of the ``{"type": "image"}``
        content parts, in order; ``image_params`` names where each came from (for errors).

        The request's options are two values (:mod:`textproc.options`): ``sampling``
        (max_tokens, min_tokens, stop_token_ids, ignore_eos, n, params such as temperature and
        seed, logit_bias) and ``output`` (stop, include_stop, skip_special_tokens,
        stream_calls, parallel_tool_calls, logprobs); their fields may instead be given by
        name (``chat(messages, max_tokens=5, stop=["x"])``).

        ``logprobs`` = k in 0..20: each event's ``logprobs`` holds an entry per output token
        whose bytes reached the text (``textproc.core.logprobs.Entry``: token id, its bytes,
        its logprob from the engine, and its k most likely alternatives as three lists: ids,
        bytes, logprobs).

        ``n`` > 1: n choices of one prompt (rendered and encoded once, seed + i for choice i
        when ``params`` has a seed), as one stream whose events carry ``index`` (0..n-1),
        each choice with its own stops, parser and finish; it ends when all n have finished,
        and closing it early aborts every choice still running.

        ``structured`` makes the output follow a constraint the engine enforces:
        ``{"json": schema}``, ``{"regex": pattern}`` or ``{"choice": [str, ...]}``.

        ``documents`` reach the chat template as ``documents`` (RAG templates render them);
        ``logit_bias`` maps token ids to -100..100 and reaches the engine as
        ``EngineRequest.logit_bias``. A tool call goes out once it is complete and valid (a
        malformed or cut-off call comes back as content, streamed or not; ``stream_calls`` is
        kept for compatibility and changes nothing). ``parallel_tool_calls=False``: at most one
        call.

        ``timeout_s`` (default ``call_timeout_s``) bounds the wait for the worker to accept the
        request; a stuck worker then fails the stream with a TextprocError (kind ``timeout``,
        status 504) naming the worker. Generation itself has no deadline.
        """
        frame = self.chat_request(
            messages, tools=tools, tool_choice=tool_choice, sampling=sampling, output=output,
            structured=structured, chat_template_kwargs=chat_template_kwargs,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, documents=documents,
            request_id=request_id, images=images, image_params=image_params, **options)
        return self._generate(frame, timeout_s)

    def chat_request(self, messages: list[dict[str, Any]], *,
                     tools: list[dict[str, Any]] | None = None,
                     tool_choice: str | dict[str, Any] = "auto",
                     sampling: SamplingOptions | None = None, output: OutputOptions | None = None,
                     structured: dict[str, Any] | None = None,
                     chat_template_kwargs: dict[str, Any] | None = None,
                     add_generation_prompt: bool = True, continue_final_message: bool = False,
                     documents: list[dict[str, Any]] | None = None,
                     request_id: str | None = None, images: Sequence[bytes] = (),
                     image_params: Sequence[str] = (), **options: Any) -> ChatRequest:
        """The frame ``chat`` sends for these arguments (for ``render_only``)."""
        if options:  # keyword convenience: the two values' fields by name
            sampling, output, _ = split_options(_stop_list(options))
        return ChatRequest(request_id if request_id is not None else self._next_id(), messages,
                           tools, tool_choice, dict(chat_template_kwargs or {}),
                           add_generation_prompt, continue_final_message, documents, structured,
                           sampling or _SAMPLING, output or _OUTPUT, list(images),
                           list(image_params))

    def complete(self, prompt: str | Sequence[int], *, sampling: SamplingOptions | None = None,
                 output: OutputOptions | None = None, structured: dict[str, Any] | None = None,
                 add_special_tokens: bool = True, request_id: str | None = None,
                 timeout_s: float | None = None, **options: Any) -> AsyncIterator[TextEvent]:
        """Stream a completion of ``prompt`` (text, or token ids); the options, ``timeout_s``
        and ``structured`` as in ``chat``."""
        frame = self.completion_request(prompt, sampling=sampling, output=output,
                                        structured=structured,
                                        add_special_tokens=add_special_tokens,
                                        request_id=request_id, **options)
        return self._generate(frame, timeout_s)

    def completion_request(self, prompt: str | Sequence[int], *,
                           sampling: SamplingOptions | None = None,
                           output: OutputOptions | None = None,
                           structured: dict[str, Any] | None = None,
                           add_special_tokens: bool = True, request_id: str | None = None,
                           **options: Any) -> CompletionRequest:
        """The frame ``complete`` sends for these arguments (for ``render_only``)."""
        if options:  # keyword convenience: the two values' fields by name
            sampling, output, _ = split_options(_stop_list(options))
        rid = request_id if request_id is not None else self._next_id()
        if isinstance(prompt, str):
            text, ids = prompt, None
        else:
            text, ids = "", _packed(prompt, "prompt")
        return CompletionRequest(rid, text, ids, add_special_tokens, structured,
                                 sampling or _SAMPLING, output or _OUTPUT)

    async def derender(self, request: ChatRequest, token_ids: Sequence[int],
                       finish_reason: str | None, *, skip: int = 0,
                       timeout_s: float | None = None) -> tuple[list[dict[str, Any]],
                                                                str | None, str | None]:
        """The output ``token_ids`` make for ``request`` (from ``chat_request``), as a worker's
        copy of the detokenizer's pipeline reads them: (deltas, finish reason, matched stop);
        ``finish_reason`` is the engine's; ``skip``: leave out what the first ``skip`` ids
        make (a stream's earlier chunks). Bad input raises; ``timeout_s`` as in ``tokenize``."""
        result = await self._call(DerenderRequest(self._next_id(), request,
                                                  _packed(token_ids, "token_ids"),
                                                  finish_reason, skip), timeout_s)
        assert isinstance(result, Derendered)
        return result.deltas, result.finish_reason, result.stop

    async def render_only(self, request: ChatRequest | CompletionRequest, *,
                          timeout_s: float | None = None) -> tuple[list[int], SamplingOptions]:
        """What ``request`` (from ``chat_request`` / ``completion_request``) would send the
        engine, built by a worker exactly as for generation but not submitted: the prompt's
        ids, and the sampling with the model's defaults and ``max_tokens`` resolved. Bad input
        raises as ``chat`` would; ``timeout_s`` as in ``tokenize``."""
        result = await self._call(RenderRequest(self._next_id(), request), timeout_s)
        assert isinstance(result, Rendered)
        return unpack_ids(result.token_ids), result.sampling

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
        result = await self._call(DetokenizeRequest(self._next_id(), _packed(token_ids, "token_ids"),
                                                    skip_special_tokens), timeout_s)
        assert isinstance(result, DetokenizeResult)
        return result.text

    async def stats(self, *, timeout_s: float = 5.0) -> list[Stats]:
        """Counters of every worker and detokenizer shard (malformed frames per socket, ...)."""
        self._check_open()
        rid = self._next_id()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        got: list[Stats] = []
        self._inflight.stats_waiters[rid] = (got, len(self._workers) + len(self._detoks), done)
        data = self._encode(StatsRequest(rid))
        try:
            for sock in [*self._workers, *self._detoks]:
                await sock.send(data)
            await asyncio.wait_for(done, timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            have = sorted(f"{s.role}-{s.index}" for s in got)
            raise TextprocError(f"waited {timeout_s} s for Stats from every process; got {have}") from e
        finally:
            self._inflight.stats_waiters.pop(rid, None)
        return sorted(got, key=lambda s: (s.role, s.index))

    async def engine_call(self, method: str, args: dict[str, Any] | None = None, *,
                          timeout_s: float = 60.0) -> EngineCallResult:
        """Call an engine method (``textproc.engine.calls.ENGINE_CALLS``: vLLM's admin methods)
        through detokenizer shard 0, which relays it to the engine; the engine's answer (its
        ``result``, or ``error`` with an HTTP ``status``). Raises TextprocError naming the
        method when no answer comes within ``timeout_s``."""
        self._check_open()
        call_id = self._next_id()
        fut: asyncio.Future[EngineCallResult] = asyncio.get_running_loop().create_future()
        self._inflight.engine_calls[call_id] = fut
        try:
            await self._detoks[0].send(self._encode(EngineCall(call_id, method, dict(args or {}))))
            return await asyncio.wait_for(fut, timeout_s)
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise TextprocError(f"the engine did not answer {method!r} (call {call_id!r}) "
                                f"within {timeout_s:g} s") from e
        finally:
            self._inflight.engine_calls.pop(call_id, None)

    @property
    def n_workers(self) -> int:
        return len(self._workers)

    def pending(self) -> int:
        """Requests in flight (streams and calls)."""
        return len(self._inflight)

    def queue_depths(self) -> list[int]:
        """Requests each worker holds right now (sent, not yet answered), by worker index."""
        return self._inflight.queue_depths()

    def worker_requests(self) -> list[int]:
        """Requests (streams and calls) this client has sent to each worker, by worker index."""
        return list(self._inflight.worker_requests)

    @property
    def aborts_lost(self) -> int:
        """Request ids whose Abort frame the detokenizer socket would not take."""
        return self._aborts.lost

    @property
    def n_detokenizers(self) -> int:
        return len(self._detoks)

    @property
    def detok_instances(self) -> list[str | None]:
        """Each detokenizer shard's instance id as last welcomed (None before)."""
        return list(self._readers.detok_instances) if self._readers is not None else []

    @property
    def detok_instance(self) -> str | None:
        """The instance id of the detokenizer this client last talked to (None before)."""
        return self._readers.detok_instance if self._readers is not None else None

    @property
    def engine_down(self) -> str | None:
        """Why the engine cannot take requests now (it died and is restarting), else None."""
        return self._readers.engine_down if self._readers is not None else None

    @property
    def malformed(self) -> int:
        """Frames this client received that did not decode."""
        return self._readers.malformed if self._readers is not None else 0

    async def close(self) -> None:
        """Fail every pending request, stop the readers, close the sockets. Idempotent."""
        if self._closed:
            return
        self._aborts.close()  # sends those of streams closed just before
        self._closed = True
        self._inflight.fail_all(TextprocError("the TextClient was closed"))
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
        if self._broken is not None:
            raise self._broken

    async def _generate(self, frame: ChatRequest | CompletionRequest,
                        timeout_s: float | None) -> AsyncIterator[TextEvent]:
        """The events of ``frame``'s choices; closing the iterator early aborts the running ones.

        Nothing happens before the first ``__anext__`` (the open check runs then). A worker
        that has not accepted the request within the call's timeout fails it with
        ``_timeout_error`` (naming the worker).
        """
        self._check_open()
        inflight, readers, workers = self._inflight, self._readers, self._workers
        limit_s = self.call_timeout_s if timeout_s is None else timeout_s
        rid = frame.request_id
        n = check_n(frame.sampling.n)
        ids = [rid] if n == 1 else [f"{rid}-{i}" for i in range(n)]  # the worker's sub-ids
        for sub in ids:
            if sub in inflight.streams or sub in inflight.calls:
                raise InvalidInput(f"request_id {sub!r} is already in flight on this client")
        if readers is not None and readers.detok_up is not None:  # its shards must be up
            await shards_up(readers, ids, rid)
        # follow-up turns go where the conversation's encoded segments are cached
        affinity = (conversation_key(frame.messages)
                    if isinstance(frame, ChatRequest) and len(workers) > 1 else None)
        worker = inflight.pick_worker(affinity)
        streams = [StreamState(sub, worker) for sub in ids]
        for stream in streams:
            inflight.streams[stream.request_id] = stream
            inflight.worker_pending[worker].add(stream.request_id)
        done = [False] * n  # finished, or failed where no abort is needed
        accept_by = time.monotonic() + limit_s

        def expired() -> TextprocError:
            return self._timeout_error(worker, rid, "(Accepted for a generation request)",
                                       limit_s)

        try:
            await workers[worker].send(self._encode(frame))
            if n == 1:  # the common case, per event without the choice bookkeeping below
                stream = streams[0]
                while True:
                    if stream.items:
                        event = take_event(stream)
                        if event.finish_reason is not None:
                            done[0] = True
                            yield event
                            return
                        yield event
                    elif stream.error is not None:
                        done[0] = stream.accepted or not stream.pending_at_worker
                        raise stream.error
                    else:
                        await wait_output(streams, accept_by, expired)
            while not all(done):
                ready = [k for k in range(n) if not done[k]
                         and (streams[k].items or streams[k].error is not None)]
                if not ready:  # whichever choice gets output first wakes us
                    await wait_output([s for k, s in enumerate(streams) if not done[k]],
                                      accept_by, expired)
                    continue
                for k in ready:
                    stream = streams[k]
                    if stream.items:
                        event = take_event(stream)
                        event.index = k
                        if event.finish_reason is not None:
                            done[k] = True
                        yield event
                    elif stream.error is not None:
                        done[k] = stream.accepted or not stream.pending_at_worker
                        raise stream.error
        finally:
            for stream in streams:
                inflight.streams.pop(stream.request_id, None)
                inflight.worker_pending[worker].discard(stream.request_id)
            running = [ids[k] for k in range(n) if not done[k]]
            if running:
                # the abort must go out even while this task is being cancelled
                self._aborts.soon(running)

    def _timeout_error(self, worker: int, rid: str, what: str, timeout_s: float) -> TextprocError:
        address = self.info.get("endpoints", {}).get("workers", ["?"] * (worker + 1))[worker]
        return error_from("timeout", f"worker {worker} ({address}) did not answer {what} for request "
                                 f"{rid!r} within {timeout_s:g} s; it is alive but stuck or "
                                 "overloaded (retry, or raise timeout_s)")

    async def _call(self, frame: (TokenizeRequest | DetokenizeRequest | RenderRequest
                                  | DerenderRequest), timeout_s: float | None) -> Any:
        self._check_open()
        messages = (frame.messages if isinstance(frame, TokenizeRequest) else
                    frame.request.messages if isinstance(frame, RenderRequest)
                    and isinstance(frame.request, ChatRequest) else None)
        affinity = (conversation_key(messages)
                    if messages is not None and len(self._workers) > 1 else None)
        worker = self._inflight.pick_worker(affinity)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        rid = frame.request_id
        self._inflight.calls[rid] = (worker, fut)
        self._inflight.worker_pending[worker].add(rid)
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
            self._inflight.calls.pop(rid, None)
            self._inflight.worker_pending[worker].discard(rid)


def _stop_list(options: dict[str, Any]) -> dict[str, Any]:
    """``stop`` given as one string (OpenAI allows it) as a list of one, None as none."""
    if "stop" not in options or isinstance(options["stop"], list):
        return options
    stop = options["stop"]
    return {**options, "stop": [] if stop is None else [stop] if isinstance(stop, str) else list(stop)}


def _packed(token_ids: Sequence[int], what: str) -> bytes:
    """``pack_ids`` for ids a caller gave: a non-int or an id outside 0..2**32-1 is InvalidInput
    naming ``what``, not the OverflowError / TypeError of ``array('I')``."""
    try:
        return pack_ids(list(token_ids))
    except (OverflowError, TypeError, ValueError) as e:
        bad = next((t for t in token_ids if type(t) is not int or not 0 <= t <= MAX_TOKEN_ID), None)
        raise InvalidInput(f"{what} must be token ids in 0..{MAX_TOKEN_ID}, got {short(bad)}",
                           param=what) from e

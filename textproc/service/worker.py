"""Tokenizer worker process: the serve loop around :class:`~textproc.service.request_builder.RequestBuilder`.

Binds ROUTER ``worker-i``; the peer's routing id is the client id carried into ``Submit``. A long
prompt is encoded together with the other workers (``service/prompt_shares.PeerPool``: DEALERs to their
ROUTERs, which also answer the peers' ``EncodePart`` shares here). Each
frame is decoded by one typed decoder and answered once: a built request goes to the
detokenizer as ONE ``Submit`` (n of them, ``<id>-<i>``, for ``n`` > 1: the prompt is rendered and
encoded once) and the client gets ``Accepted`` per Submit; a bad one gets a ``Failure`` (per
sub-request id) naming what was wrong. Never raises out of the loop for one bad frame or request.
With ``--detokenizers N`` each Submit goes to the shard ``textproc.sharding.shard_of`` names
for its (sub-)request id, through one PUSH and one gate per shard (a shard that is down
refuses only its own requests), and a constraint table rides on the first Submit naming it to
each shard. A worker subscribes to the supervisor's events: when a detokenizer shard dies or
comes back it forgets which tables that shard had (the new process holds none).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import time
from typing import Any

import msgspec
import zmq

from textproc.config import Endpoints, ServiceConfig
from textproc.errors import InvalidInput, TemplateError, TextprocError
from textproc.options import PRIORITY_RANGE, check_n
from textproc.protocol import (
    MAX_CHOICES,
    Accepted,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EncodePart,
    EventFrame,
    Failure,
    IndexDone,
    ProcessDied,
    Ready,
    DerenderRequest,
    RenderRequest,
    Stats,
    StatsRequest,
    Submit,
    TokenizeRequest,
    WorkerInFrame,
)
from textproc.heap import freeze_heap
from textproc.service.bootstrap import ChildRuntime
from textproc.service.prompt_shares import PeerPool
from textproc.service.request_builder import Built, RequestBuilder
from textproc.sharding import shard_of
from textproc.transport import FrameDecoder

__all__ = ["run_worker", "SUBMIT_WAIT_MS"]

_log = logging.getLogger("textproc.worker")


def run_worker(config: ServiceConfig, endpoints: Endpoints, index: int, *, parent_pid: int = 0) -> int:
    """Worker ``index`` entry: bind worker-i, announce Ready, serve until SIGTERM or parent exit."""
    runtime = ChildRuntime(role="worker", index=index, config=config, parent_pid=parent_pid)
    runtime.start()
    tokenizer = runtime.load_tokenizer()
    builder = RequestBuilder(tokenizer, config)
    # the constraint vocabulary (exact token bytes + bitset tables, ~1 s on Qwen3) before Ready,
    # so no request's compile budget pays for it
    builder.constraints.prepare()
    builder.prepare()  # the chat template's compile and lazy encoder tables, also before Ready
    freeze_heap()
    with runtime:
        front = runtime.bind(zmq.ROUTER, endpoints.workers[index])
        detoks = [runtime.connect(zmq.PUSH, shard.detok_in) for shard in endpoints.detokenizers]
        control = runtime.connect(zmq.PUSH, endpoints.control)
        decoder: FrameDecoder[WorkerInFrame] = FrameDecoder(WorkerInFrame,
                                                            socket_name=f"worker-{index}")
        pool = PeerPool(tokenizer, index,
                        endpoints.workers, min_chars=config.split_min_chars,
                        max_chars=config.max_prompt_chars)
        pool.start(runtime, front, decoder)
        builder.encode_text = pool.encode
        events = runtime.connect(zmq.SUB, endpoints.events)
        events.setsockopt(zmq.SUBSCRIBE, b"")
        runtime.send_ready(control)
        _log.info("worker %d ready on %s", index, endpoints.workers[index])
        _serve(builder, runtime, index, front, detoks, decoder, pool, events)
    return 0


WAIT_POLL_MS = 5  # how often a worker looks for the whole indexes its requests wait for
# frames a worker reads ahead of the one it serves, to serve them in priority order (a request's
# sampling.priority, lower first, arrival order within one); the rest wait in ZeroMQ's queue
MAX_BACKLOG = 64
_PEER_FIRST = PRIORITY_RANGE[0] - 1  # a peer's share of its long prompt: that worker waits


def _priority_of(frame: Any) -> int:
    if isinstance(frame, EncodePart):
        return _PEER_FIRST
    priority = getattr(getattr(frame, "sampling", None), "priority", 0)
    return priority if type(priority) is int else 0  # a bad one is refused when served


def _read_ahead(front: zmq.Socket[Any], decoder: FrameDecoder[WorkerInFrame],
                backlog: list[tuple[int, int, bytes, Any]], order: itertools.count[int]) -> None:
    """Move the frames queued on ``front`` into ``backlog`` (a heap by priority, then arrival),
    up to MAX_BACKLOG of them."""
    while len(backlog) < MAX_BACKLOG and int(front.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
        client_id, frame = decoder.decode_routed(front.recv_multipart(copy=True))
        if frame is not None:
            heapq.heappush(backlog, (_priority_of(frame), next(order), client_id, frame))


def _serve(builder: RequestBuilder, runtime: ChildRuntime, index: int,
           front: zmq.Socket[Any], detoks: list[zmq.Socket[Any]],
           decoder: FrameDecoder[WorkerInFrame], pool: PeerPool, events: zmq.Socket[Any]) -> None:
    encode = builder.encode
    deferred = pool.deferred  # frames the pool read while it waited on its peers
    counters = {"requests": 0, "failures": 0, "prompt_tokens": 0, "submit_blocked": 0}
    gate = _SubmitGate(detoks, counters)
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(events, zmq.POLLIN)
    event_decoder: FrameDecoder[EventFrame] = FrameDecoder(EventFrame,
                                                           socket_name=f"worker-{index}<-events")
    next_parent_check = time.monotonic() + 1.0
    constraints = builder.constraints
    backlog: list[tuple[int, int, bytes, Any]] = []  # read ahead: (priority, arrival, client, frame)
    order = itertools.count()
    while not runtime.should_stop:
        if constraints.pending:  # whole indexes our requests' first states wait for
            for done, shards in constraints.take_wholes():
                _send_done(builder, gate, done, shards)
        ready = [] if deferred else poller.poll(
            0 if backlog else WAIT_POLL_MS if constraints.pending else 200)
        now = time.monotonic()
        if now >= next_parent_check:  # by time, so a busy worker notices too
            next_parent_check = now + 1.0
            if not runtime.parent_alive():
                _log.error("supervisor %d is gone; exiting", runtime.parent_pid)
                return
        if deferred:
            client_id, frame = deferred.popleft()
        else:
            if any(sock is events for sock, _ in ready):
                _take_events(events, event_decoder, builder)
            _read_ahead(front, decoder, backlog, order)
            if not backlog:
                continue
            _, _, client_id, frame = heapq.heappop(backlog)
        if frame is None:
            continue
        if isinstance(frame, EncodePart):  # a peer's share of its long prompt
            pool.reply(client_id, pool.serve(frame))
            continue
        counters["requests"] += 1
        builder.arrived = time.monotonic()
        replies: list[Any]
        try:
            match frame:
                case ChatRequest() | CompletionRequest():
                    replies = _generate(builder, gate, frame, client_id, counters)
                case TokenizeRequest():
                    replies = [builder.tokenize(frame)]
                case RenderRequest():
                    replies = [builder.render_only(frame)]
                case DerenderRequest():
                    replies = [builder.derender(frame)]
                case DetokenizeRequest():
                    replies = [builder.detokenize(frame)]
                case StatsRequest():
                    replies = [Stats(frame.request_id, "worker", index,
                                     {**counters, **decoder.counters(), **pool.all_counters(),
                                      **builder.tokenizer.segment_cache.counters(),
                                      "constraint_compiles": builder.constraints.compiles,
                                      "constraint_compile_ms":
                                          round(builder.constraints.compile_s * 1000),
                                      "constraint_first_states_taken":
                                          builder.constraints.first_states_taken,
                                      "images_prepared": builder.image_cache.misses,
                                      "image_cache_hits": builder.image_cache.hits,
                                      "cpu_ms": int(time.process_time() * 1000),
                                      "pid": os.getpid()})]
        except TemplateError as e:
            replies = _failures(frame, "template", str(e), 400, "messages")
        except TextprocError as e:  # InvalidInput and the other textproc errors
            replies = _failures(frame, "invalid_input", str(e), 400, e.param)
        except Exception as e:  # one request's bug must not take the worker down
            _log.exception("request %r failed in worker %d", frame.request_id, index)
            replies = _failures(frame, "internal",
                                f"internal error in worker {index}: {type(e).__name__}: {e}", 500)
        for reply in replies:
            if isinstance(reply, Failure):
                counters["failures"] += 1
            try:
                front.send_multipart([client_id, encode(reply)], flags=zmq.NOBLOCK)
            except zmq.ZMQError as e:
                _log.warning("reply to client %s for %r not delivered: %s", client_id.hex(),
                             reply.request_id, e)


def _take_events(events: zmq.Socket[Any], decoder: FrameDecoder[EventFrame],
                 builder: RequestBuilder) -> None:
    """A detokenizer shard that died or came back holds no table this worker sent it."""
    while True:
        try:
            data = events.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
        match decoder.decode(data, peer="supervisor"):
            case ProcessDied(role="detokenizer", index=shard) | Ready(role="detokenizer", index=shard):
                builder.constraints.forget_shard(shard)
            case _:
                pass


def _sub_ids(frame: Any) -> list[str]:
    """The ids the client waits on: the request's own, or ``<id>-<i>`` for each of n > 1."""
    sampling = getattr(frame, "sampling", None)
    n = sampling.n if sampling is not None else 1
    rid: str = frame.request_id
    return [rid] if n == 1 or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES else [
        f"{rid}-{i}" for i in range(n)]


def _failures(frame: Any, kind: str, message: str, status: int,
              param: str | None = None) -> list[Any]:
    return [Failure(rid, kind, message, status, param) for rid in _sub_ids(frame)]


def _generate(builder: RequestBuilder, gate: _SubmitGate, frame: ChatRequest | CompletionRequest,
              client_id: bytes, counters: dict[str, int]) -> list[Any]:
    """Build the request once and submit it (n times for n > 1); one reply per (sub-)request.
    A Submit carrying a partial index names this worker's pid: its IndexDone is to follow."""
    n = check_n(frame.sampling.n)
    built = (builder.chat(frame, client_id) if isinstance(frame, ChatRequest)
             else builder.completion(frame, client_id))
    submits = [built.submit] if n == 1 else _choices(builder, built, n)
    replies: list[Any] = []
    n_shards = gate.n_shards
    for i, submit in enumerate(submits):
        shard = shard_of(submit.request_id, n_shards)
        if (submit.index is not None and submit.index.n_known) or builder.constraints.pending:
            submit = msgspec.structs.replace(submit, compiler=os.getpid())  # (on a partial index)
        # after one refusal the rest are refused too (they may need the index the first carried)
        if (not replies or isinstance(replies[-1], Accepted)) and gate.send(
                builder.encode(submit), shard):
            if i == 0:
                counters["prompt_tokens"] += built.prompt_tokens
            if submit.index is not None:  # this shard has the index's table now
                builder.constraints.sent(submit.index.key, shard)
            replies.append(Accepted(submit.request_id, built.prompt_tokens, built.template_s,
                                    built.tokenize_s))
        else:
            replies.append(Failure(submit.request_id, "overloaded",
                                   f"request {submit.request_id!r}: the detokenizer is not "
                                   "accepting requests (restarting or overloaded); retry", 503))
    return replies


def _send_done(builder: RequestBuilder, gate: _SubmitGate, done: IndexDone, shards: list[int]) -> None:
    """``done`` to the detokenizer shards a partial index went to; a shard it does not reach
    gets the whole table with its next request naming it instead."""
    constraints = builder.constraints
    data = builder.encode(done)
    for shard in shards:
        if not gate.send(data, shard):
            _log.warning("the whole index %s did not reach detokenizer shard %d", done.key, shard)
            constraints.unsent(done.key, shard)


_INT64 = 2**63


def _choices(builder: RequestBuilder, built: Built, n: int) -> list[Submit]:
    """The n Submits of one built request: ids ``<id>-<i>``, seed + i when a seed was given
    (wrapped into int64), the constraint table on the first one of each detokenizer shard
    that does not hold it yet (sub-ids shard by their own id). The prompt is not encoded
    again: each engine request carries the same packed ids."""
    engine = built.engine_request
    assert engine is not None
    seed = engine.sampling.get("seed")
    constraints = builder.constraints
    n_shards = builder.config.n_detokenizers
    given: set[int] = set()  # shards whose first sub-request carries the table
    out = []
    for i in range(n):
        rid = f"{built.submit.request_id}-{i}"
        sampling = engine.sampling if not isinstance(seed, int) else {
            **engine.sampling, "seed": (seed + i + _INT64) % (2 * _INT64) - _INT64}
        request = msgspec.structs.replace(engine, request_id=rid, sampling=sampling)
        table = None
        shard = shard_of(rid, n_shards)
        if engine.index_key and shard not in given:
            given.add(shard)
            table = constraints.table_for(shard)
        out.append(msgspec.structs.replace(
            built.submit, request_id=rid, engine_request=builder.encode(request), index=table))
    return out


SUBMIT_WAIT_MS = 2000


class _SubmitGate:
    """Sends Submits to the detokenizer shards; after one wait for a shard failed, refuses
    that shard's Submits at once for SUBMIT_WAIT_MS instead of stalling every queued request
    for the full wait (the other shards are not affected)."""

    __slots__ = ("detoks", "counters", "blocked_until", "n_shards")

    def __init__(self, detoks: list[zmq.Socket[Any]], counters: dict[str, int]) -> None:
        self.detoks = detoks  # shard k's detok-in PUSH at k
        self.n_shards = len(detoks)
        self.counters = counters
        # per shard: time.monotonic() before which it counts as down
        self.blocked_until = [0.0] * len(detoks)

    def send(self, data: bytes, shard: int = 0) -> bool:
        """Send one Submit to ``shard``; False when it is down or its queue stays full."""
        # a PUSH blocks when the detokenizer is down or its queue is full: wait, then refuse
        detok = self.detoks[shard]
        wait_ms = 0 if time.monotonic() < self.blocked_until[shard] else SUBMIT_WAIT_MS
        if detok.poll(wait_ms, zmq.POLLOUT):
            detok.send(data, flags=zmq.NOBLOCK)
            return True
        if wait_ms:
            self.blocked_until[shard] = time.monotonic() + SUBMIT_WAIT_MS / 1000
        self.counters["submit_blocked"] += 1
        return False

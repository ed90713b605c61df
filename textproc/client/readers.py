"""The receiving side of a TextClient: one reader task per socket, and the reconciler.

Owns everything that arrives: worker replies (``Accepted``, ``Failure``, results, ``Stats``),
the detokenizer's ``Outputs`` / ``Welcome`` / ``Unknown`` / ``Stats``, the supervisor's
events (a process died or is ready again), and the periodic ``Query`` for quiet streams. It
only fills :class:`~textproc.client.inflight.InFlight` and wakes waiters; sending requests
is :class:`~textproc.client.textclient.TextClient`'s job. Each reader runs until cancelled;
one that raises is reported by the client at once (see ``TextClient._reader_done``).

With detokenizer shards (``--detokenizers N``) there is one detok-front socket, one reader and
one connection state (Welcome, up, the oldest unanswered Query) per shard; a stream belongs to
the shard ``textproc.sharding.shard_of`` names, so a shard's death or silence fails only its
streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import zmq.asyncio

from textproc.client.events import StreamState, error_from
from textproc.client.inflight import InFlight
from textproc.errors import ProtocolError, WorkerDied
from textproc.sharding import shard_of
from textproc.protocol import (
    PROTOCOL_VERSION,
    Accepted,
    Derendered,
    DetokenizeResult,
    EngineCallResult,
    EventFrame,
    Failure,
    FrontOutFrame,
    Hello,
    Outputs,
    ProcessDied,
    Query,
    Ready,
    Rendered,
    Stats,
    TokenizeResult,
    Unknown,
    Welcome,
    WorkerOutFrame,
)
from textproc.transport import FrameDecoder

__all__ = ["Readers", "QUERY_AFTER_S", "RECONCILE_EVERY_S", "QUERY_ANSWER_S",
           "MAX_BUFFERED_OUTPUTS", "STRAY_ABORT_EVERY_S"]

QUERY_AFTER_S = 1.5  # a stream quiet this long is checked with the detokenizer (Query)
RECONCILE_EVERY_S = 0.5
QUERY_ANSWER_S = 10.0  # a detokenizer that leaves a Query unanswered this long is gone
# outputs one stream may hold untaken; past it the stream fails and is aborted (a consumer
# that stopped reading must not hold memory without bound)
MAX_BUFFERED_OUTPUTS = 4096
STRAY_ABORT_EVERY_S = 0.5  # outputs for an id nobody waits for: Abort it again at most this often
_MAX_STRAYS_REMEMBERED = 20_000
_STRAY_FORGET_S = 5.0  # a stray id not seen for this long is forgotten (by reconcile)


class Readers:
    """The reader coroutines of one client and the detokenizer-connection state they keep.

    Per detokenizer shard k (``detoks[k]``): ``detok_up[k]`` is set while shard k has answered
    Hello on the current connection (outputs to this client are routable only then);
    ``welcome[k]`` resolves to its instance id, kept in ``detok_instances[k]``.
    """

    def __init__(self, inflight: InFlight, detoks: list[zmq.asyncio.Socket],
                 events: zmq.asyncio.Socket, encode: Callable[[Any], bytes],
                 send_abort: Callable[[list[str]], None]) -> None:
        self.inflight = inflight
        self.detoks = detoks
        self.n_shards = len(detoks)
        self.events = events
        self.encode = encode
        self.send_abort = send_abort
        self.detok_instances: list[str | None] = [None] * self.n_shards
        self.welcome: list[asyncio.Future[str] | None] = [None] * self.n_shards
        self.detok_up: list[asyncio.Event] | None = None
        self.query_sent_at: list[float | None] = [None] * self.n_shards  # oldest unanswered Query
        self.malformed = 0
        # why the engine cannot take requests now (it died and is restarting), or None
        self.engine_down: str | None = None
        # stray request id -> when its Abort was last re-sent: until the engine stops, every
        # step brings outputs for it again, and an Abort per id per frame was 14% of the HTTP
        # frontend's CPU under a crowd of 500 leaving streams (bench/crowd.py)
        self._strays_aborted: dict[str, float] = {}

    def _abort_strays(self, stray: list[str], now: float) -> None:
        """Abort again the ids of outputs nobody waits for, at most once per
        STRAY_ABORT_EVERY_S each (an Abort can be lost: sent before the Submit arrived)."""
        sent = self._strays_aborted
        if len(sent) > _MAX_STRAYS_REMEMBERED:  # forget the old ones: bounded
            cutoff = now - STRAY_ABORT_EVERY_S
            self._strays_aborted = sent = {r: t for r, t in sent.items() if t > cutoff}
        due = [rid for rid in stray
               if now - sent.get(rid, -STRAY_ABORT_EVERY_S) >= STRAY_ABORT_EVERY_S]
        if due:
            for rid in due:
                sent[rid] = now
            self.send_abort(due)

    def aborted(self, request_ids: list[str]) -> None:
        """The client just sent Abort for these: outputs already on their way are not strays
        to abort again until STRAY_ABORT_EVERY_S has passed (one Abort per stream, not two)."""
        now = time.monotonic()
        sent = self._strays_aborted
        for rid in request_ids:
            sent[rid] = now

    @property
    def detok_instance(self) -> str | None:
        """Shard 0's instance id once every shard has answered Hello, else None."""
        return self.detok_instances[0] if all(self.detok_instances) else None

    async def hello(self) -> list[str]:
        """Say Hello to every detokenizer shard and wait for each Welcome; returns their
        instance ids."""
        loop = asyncio.get_running_loop()
        self.detok_up = [asyncio.Event() for _ in self.detoks]
        welcomes = [loop.create_future() for _ in self.detoks]
        self.welcome = list(welcomes)
        for sock in self.detoks:
            await sock.send(self.encode(Hello()))
        instances = [await asyncio.shield(w) for w in welcomes]
        self.detok_instances = list(instances)
        return instances

    def shard_of(self, request_id: str) -> int:
        return shard_of(request_id, self.n_shards)

    async def read_worker(self, index: int, sock: zmq.asyncio.Socket) -> None:
        decoder: FrameDecoder[WorkerOutFrame] = FrameDecoder(WorkerOutFrame, socket_name=f"client<-worker-{index}")
        while True:
            data = await sock.recv(copy=True)
            frame = decoder.decode(data, peer=f"worker-{index}")
            if frame is None:
                self.malformed += 1
                continue
            match frame:
                case Accepted():
                    self.inflight.worker_pending[index].discard(frame.request_id)
                    stream = self.inflight.streams.get(frame.request_id)
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
                    self.inflight.worker_pending[index].discard(frame.request_id)
                    err = error_from(frame.kind, frame.message, frame.status, frame.param)
                    stream = self.inflight.streams.get(frame.request_id)
                    if stream is not None:
                        stream.fail(err)
                    call = self.inflight.calls.get(frame.request_id)
                    if call is not None and not call[1].done():
                        call[1].set_exception(err)
                case TokenizeResult() | DetokenizeResult() | Rendered() | Derendered():
                    self.inflight.worker_pending[index].discard(frame.request_id)
                    call = self.inflight.calls.get(frame.request_id)
                    if call is not None and not call[1].done():
                        call[1].set_result(frame)
                case Stats():
                    self.inflight.on_stats(frame)

    async def read_detok(self, shard: int = 0) -> None:
        """Read detokenizer shard ``shard``'s frames until cancelled.

        A hot loop kept in one function on purpose: it runs per ``Outputs`` frame of every
        stream on this client, so its locals stay bound and its dispatch is one ``match``."""
        name = "client<-detok-front" if shard == 0 else f"client<-detok-front-{shard}"
        decoder: FrameDecoder[FrontOutFrame] = FrameDecoder(FrontOutFrame, socket_name=name)
        streams = self.inflight.streams
        sock = self.detoks[shard]
        peer = "detokenizer" if self.n_shards == 1 else f"detokenizer-{shard}"
        while True:
            data = await sock.recv(copy=True)
            frame = decoder.decode(data, peer=peer)
            match frame:
                case Outputs():
                    now = time.monotonic()
                    stray: list[str] = []
                    # streams getting their first output wake first: a frame carries one output
                    # of every running stream, and the new ones' first token is their TTFT
                    later: list[StreamState] = []
                    for item in frame.items:
                        stream = streams.get(item.request_id)
                        if stream is None:
                            if item.finish_reason is None:
                                stray.append(item.request_id)
                            continue
                        if len(stream.items) >= MAX_BUFFERED_OUTPUTS and stream.error is None:
                            stream.items.clear()  # bounded: its consumer stopped reading
                            stream.fail(error_from(
                                "overloaded", f"request {item.request_id!r}: its reader left "
                                f"{MAX_BUFFERED_OUTPUTS} outputs untaken; dropped and aborted"))
                        if stream.error is not None:
                            continue
                        stream.items.append(item)
                        stream.detok_s = frame.detok_s
                        stream.last_seen = now
                        stream.unknown_seen = 0
                        if stream.pending_at_worker:  # the detokenizer has it: a worker death
                            stream.pending_at_worker = False  # no longer concerns it
                            self.inflight.worker_pending[stream.worker].discard(item.request_id)
                        if stream.started:
                            later.append(stream)
                        else:
                            stream.started = True
                            stream.wake()
                    for stream in later:
                        stream.wake()
                    if stray:  # outputs of requests this client gave up on: stop them
                        self._abort_strays(stray, now)
                    # A zmq.asyncio recv of a queued frame returns without yielding: under an
                    # engine backlog this loop ran alone, starving every other task (disconnect
                    # watchers, /health, the streams' writers) for seconds (bench/crowd.py:
                    # /health 10 s+, no disconnect reached the engine). Yield after each frame;
                    # yielding only after 5 ms bursts measured worse.
                    await asyncio.sleep(0)
                case Welcome():
                    welcome = self.welcome[shard]
                    if frame.protocol_version != PROTOCOL_VERSION:
                        _fail = ProtocolError(
                            f"{peer} speaks protocol {frame.protocol_version}, client "
                            f"{PROTOCOL_VERSION}")
                        if welcome is not None and not welcome.done():
                            welcome.set_exception(_fail)
                        continue
                    self.detok_instances[shard] = frame.instance_id
                    self.query_sent_at[shard] = None
                    if self.detok_up is not None:
                        self.detok_up[shard].set()
                    if welcome is not None and not welcome.done():
                        welcome.set_result(frame.instance_id)
                case Unknown():
                    self.query_sent_at[shard] = None
                    for rid in frame.request_ids:
                        stream = streams.get(rid)
                        if stream is None or stream.pending_at_worker:
                            continue
                        stream.unknown_seen += 1
                        if stream.unknown_seen >= 2:  # twice, 0.5 s apart: really lost
                            stream.fail(WorkerDied(
                                f"request {rid!r} was lost: the {peer} holds no state for "
                                "it (it restarted, or the request never reached it)"))
                case Stats():
                    self.inflight.on_stats(frame)
                case EngineCallResult():
                    self.inflight.on_engine_call_result(frame)
                case None:
                    self.malformed += 1

    async def read_events(self) -> None:
        decoder: FrameDecoder[EventFrame] = FrameDecoder(EventFrame, socket_name="client<-events")
        while True:
            data = await self.events.recv(copy=True)
            frame = decoder.decode(data, peer="supervisor")
            match frame:
                case ProcessDied(role="worker"):
                    self.inflight.on_worker_died(frame)
                case ProcessDied(role="detokenizer"):
                    shard = frame.index
                    if not 0 <= shard < self.n_shards:
                        continue
                    if self.detok_up is not None:
                        self.detok_up[shard].clear()
                    self.query_sent_at[shard] = None
                    name = "the detokenizer" if self.n_shards == 1 else f"detokenizer {shard}"
                    err = WorkerDied(f"{name} (pid {frame.pid}) exited with code "
                                     f"{frame.exit_code}; its in-flight requests were lost")
                    for stream in list(self.inflight.streams.values()):
                        if not stream.pending_at_worker and self.shard_of(stream.request_id) == shard:
                            stream.fail(err)
                case ProcessDied(role="engine"):
                    # every request this client has in flight was in (or on its way to) that
                    # engine: end them now rather than when the restarted engine says hello
                    # (a real engine takes seconds to minutes to start)
                    self.engine_down = (f"the engine (pid {frame.pid}) exited with code "
                                        f"{frame.exit_code} and is restarting")
                    err = WorkerDied(f"{self.engine_down}; its in-flight requests were lost")
                    for stream in list(self.inflight.streams.values()):
                        stream.fail(err)
                case Ready(role="engine"):
                    self.engine_down = None
                case Ready(role="detokenizer"):
                    if 0 <= frame.index < self.n_shards:
                        await self.detoks[frame.index].send(self.encode(Hello()))
                case _:
                    pass

    async def reconcile(self) -> None:
        """Ask each detokenizer shard about its quiet accepted streams; those it does not know
        fail, and so do all of a shard's streams when it leaves a Query unanswered."""
        while True:
            await asyncio.sleep(RECONCILE_EVERY_S)
            up = self.detok_up
            for shard, sock in enumerate(self.detoks):
                if up is not None and not up[shard].is_set():
                    await sock.send(self.encode(Hello()))  # in case the Ready event was missed
            cutoff = time.monotonic() - QUERY_AFTER_S
            quiet = [s.request_id for s in self.inflight.streams.values()
                     if not s.pending_at_worker and s.last_seen < cutoff and s.error is None]
            by_shard: dict[int, list[str]] = {}
            if self.n_shards == 1:
                by_shard = {0: quiet} if quiet else {}
            else:
                for rid in quiet:
                    by_shard.setdefault(self.shard_of(rid), []).append(rid)
            now = time.monotonic()
            if self._strays_aborted:  # forget ids whose outputs stopped coming: once a crowd
                # has left, its ids would otherwise pin the heap pages they sit on
                forget = now - _STRAY_FORGET_S
                self._strays_aborted = {r: t for r, t in self._strays_aborted.items()
                                        if t > forget}
            for shard, sock in enumerate(self.detoks):
                await self._query(shard, sock, by_shard.get(shard, []), now)

    async def _query(self, shard: int, sock: zmq.asyncio.Socket, quiet: list[str],
                     now: float) -> None:
        sent_at = self.query_sent_at[shard]
        if sent_at is not None and now - sent_at > QUERY_ANSWER_S:
            # no answer: the shard (or the whole service) is gone without a ProcessDied
            # event, e.g. the supervisor was killed too
            self.query_sent_at[shard] = None
            name = "the detokenizer" if self.n_shards == 1 else f"detokenizer {shard}"
            err = WorkerDied(f"{name} has not answered for {QUERY_ANSWER_S:.0f} s; "
                             "in-flight requests were lost")
            for stream in list(self.inflight.streams.values()):  # none can finish without it
                if self.n_shards == 1 or self.shard_of(stream.request_id) == shard:
                    stream.fail(err)
            return
        if not quiet:
            self.query_sent_at[shard] = None  # nothing waits on the answer
            return
        if sent_at is None:
            self.query_sent_at[shard] = now
        for i in range(0, len(quiet), 4096):
            await sock.send(self.encode(Query(quiet[i:i + 4096])))

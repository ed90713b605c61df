"""The detokenizer process: engine token ids -> per-request text deltas, stop strings, parsing.

Owns the per-request output state of every live request and the four sockets around it:
``detok-in`` (PULL, Submit from workers), ``engine-in`` (PUSH, EngineRequest/EngineAbort/EngineIndex
to the engine: one socket, so an abort never overtakes its request and a constraint index always
arrives before the first request naming it; ``IndexRelay`` sends each index once), ``engine-out`` (PULL, EngineHello /
EngineStepPacked / EngineStep from the engine) and ``detok-front`` (ROUTER, clients: Hello/Abort/Query/StatsRequest
in; Welcome/Outputs/Unknown/Stats out, routed by the client's routing id).

Invariants: per engine step the work is O(new tokens); each client gets at most one Outputs frame
per step; per-request state is freed on finish, abort and error; outputs that arrive before their
Submit are buffered (bounded by count and age) and then aborted in the engine; a new engine
instance fails every live request. Never raises out of the loop for one bad frame or request.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import msgspec
import zmq

from textproc.config import Endpoints, ServiceConfig
from textproc.errors import ProtocolError, TextprocError
from textproc.core.deltas import join_text
from textproc.core.detokenizer import DetokenizerVocab
from textproc.core.pipeline import FINISH_REASONS as PIPELINE_FINISH_REASONS, OutputPipeline
from textproc.service.constraints import IndexRelay
from textproc.protocol import (
    ENGINE_FINISH_REASONS,
    PROTOCOL_VERSION,
    Abort,
    EngineAbort,
    EngineHello,
    EngineIndex,
    EngineOutFrame,
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    FrontInFrame,
    Hello,
    Outputs,
    Query,
    RequestOutput,
    Stats,
    StatsRequest,
    StepOutput,
    Submit,
    Unknown,
    Welcome,
    step_entries,
)
from textproc.transport import FrameDecoder, encoder
from textproc.service.bootstrap import ChildRuntime

__all__ = ["RequestTable", "GC_THRESHOLDS", "run_detokenizer"]

_log = logging.getLogger("textproc.detokenizer")
_DONE_IDS_KEPT = 200_000  # finished ids remembered so late engine outputs are dropped, not buffered
_DONE_IDS_TICKS = 120  # ... and for at most this many housekeeping ticks (0.5 s each: 60 s)
_DRAIN_BATCH = 256  # frames taken from one socket before looking at the others
# engine steps handled before looking at Submits and clients again: a step can hold thousands
# of requests, and Submits must not wait behind a long backlog of steps
_ENGINE_DRAIN_BATCH = 4
# A step allocates a few containers per request (decoded StepOutput, RequestOutput, deltas) that
# are alive together and freed by reference counting: at the default gen0 threshold (700) the
# collector ran ~7 times per 1,024-request step, with a full pass every few steps over every live
# pipeline, 23-31% of the CPU of RequestTable.on_step + Outputs encoding (bench/detok_pipeline.py,
# gc.callbacks). Collections now run only when 100k objects outlive their step (new requests).
GC_THRESHOLDS = (100_000, 50, 100)
_RID, _IDS, _REASON = (attrgetter("request_id"), attrgetter("token_ids"),
                       attrgetter("finish_reason"))  # EngineStep entries as columns


class _Request:
    __slots__ = ("client_id", "state", "prompt_tokens", "completion_tokens")

    def __init__(self, client_id: bytes, state: OutputPipeline, prompt_tokens: int) -> None:
        self.client_id = client_id
        self.state = state
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0


class RequestTable:
    """The detokenizer's state machine, without sockets: frames in, frames to send out.

    ``on_submit`` / ``on_step`` / ``on_abort`` return nothing; what they produce collects in
    ``self.outbox`` (client id -> outputs for this round) and ``self.engine_aborts``; the loop
    flushes both after each batch of frames, so each client gets one Outputs frame per round.
    """

    def __init__(self, tokenizer: DetokenizerVocab, config: ServiceConfig) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.live: dict[str, _Request] = {}
        self.per_client: dict[bytes, int] = {}  # live requests per client (max_live_per_client)
        self.early: dict[str, tuple[float, list[StepOutput]]] = {}
        self.done: OrderedDict[str, int] = OrderedDict()  # id -> housekeeping tick it ended
        self.tick = 0
        self.outbox: dict[bytes, list[RequestOutput]] = {}
        self.engine_aborts: list[str] = []
        self.engine_instance: str | None = None
        self.counters: dict[str, int] = {
            "requests_submitted": 0,
            "requests_finished": 0,
            "requests_failed": 0,
            "requests_aborted": 0,
            "stop_string_aborts": 0,
            "tokens_in": 0,
            "engine_steps": 0,
            "early_outputs_buffered": 0,
            "early_outputs_dropped": 0,
            "engine_restarts": 0,
        }

    # -- inputs --------------------------------------------------------------------------------

    def on_submit(self, submit: Submit) -> bytes | None:
        """Register a request; returns the engine request bytes to forward, or None if refused."""
        rid = submit.request_id
        if rid in self.live:
            self._fail_new(submit, f"duplicate request_id {rid!r}: a request with this id is live",
                           "invalid_input")
            return None
        if len(self.live) >= self.config.max_live_requests:
            self._fail_new(submit, f"overloaded: {len(self.live)} live requests, "
                                   f"max_live_requests={self.config.max_live_requests}",
                           "overloaded")
            return None
        n_client = self.per_client.get(submit.client_id, 0)
        if n_client >= self.config.max_live_per_client:
            self._fail_new(submit, f"too many requests: this client has {n_client} live requests, "
                                   f"max_live_per_client={self.config.max_live_per_client}; retry "
                                   "after some finish", "rate_limited")
            return None
        try:
            state = OutputPipeline(
                self.tokenizer, stops=submit.stop, include_stop=submit.include_stop,
                min_tokens=submit.min_tokens, skip_special_tokens=submit.skip_special_tokens,
                reasoning=submit.reasoning, tools=submit.tools,
                starts_in_reasoning=submit.starts_in_reasoning, request_id=rid,
                tool_format=submit.tool_format, reasoning_format=submit.reasoning_format,
                tool_schemas=submit.tool_schemas if submit.tools else None,
                stream_calls=submit.stream_calls,
                max_calls=None if submit.max_calls < 0 else submit.max_calls,
            )
        except TextprocError as e:
            self._fail_new(submit, f"request {rid!r}: {e}", "invalid_input")
            return None
        except Exception as e:  # a bug in the output setup fails this request, not the process
            _log.exception("request %r: output pipeline setup failed", rid)
            self._fail_new(submit, f"request {rid!r}: internal error in the detokenizer: "
                                   f"{type(e).__name__}: {e}", "internal")
            return None
        self.counters["requests_submitted"] += 1
        self.done.pop(rid, None)
        req = _Request(submit.client_id, state, submit.prompt_tokens)
        self.live[rid] = req
        self.per_client[submit.client_id] = n_client + 1
        buffered = self.early.pop(rid, None)
        if buffered is not None:
            for out in buffered[1]:
                if rid not in self.live:
                    break
                self._feed(rid, req, out.token_ids, out.finish_reason)
        return submit.engine_request

    def on_step(self, step: EngineStep | EngineStepPacked) -> None:
        """Feed one engine step; raises ProtocolError (nothing done) for a packed step whose
        columns do not fit together."""
        entries: Iterable[tuple[str, Sequence[int], str | None]]
        if type(step) is EngineStepPacked:
            try:
                entries = zip(*step_entries(step))
            except ValueError as e:
                raise ProtocolError(str(e)) from e
        else:
            assert isinstance(step, EngineStep)
            outs = step.outputs
            entries = zip(map(_RID, outs), map(_IDS, outs), map(_REASON, outs))
        self.counters["engine_steps"] += 1
        live = self.live
        feed = self._feed
        for rid, token_ids, reason in entries:
            req = live.get(rid)
            if req is None:
                if rid not in self.done:
                    self._buffer_early(StepOutput(rid, list(token_ids), reason))
                continue
            feed(rid, req, token_ids, reason)

    def on_hello(self, hello: EngineHello) -> bool:
        """A (re)started engine. Returns True when it is a new instance (all live requests fail)."""
        if hello.protocol_version != PROTOCOL_VERSION:
            _log.error("engine speaks protocol %d, textproc %d; its outputs may not decode",
                       hello.protocol_version, PROTOCOL_VERSION)
        previous, self.engine_instance = self.engine_instance, hello.instance_id
        if previous is None or previous == hello.instance_id:
            return previous is None
        self.counters["engine_restarts"] += 1
        # abort them in the new engine too: requests sent while no engine was connected went
        # to it before its hello arrived (an abort of an id it does not know is harmless)
        for rid in list(self.live):
            self._fail(rid, f"request {rid!r}: the engine restarted (instance {previous} -> "
                            f"{hello.instance_id}); the request was lost", abort_engine=True,
                       kind="engine_restarted")
        self.early.clear()
        return True

    def on_abort(self, client_id: bytes, request_ids: list[str]) -> None:
        """A client gave up on these requests: free them and abort them in the engine."""
        for rid in request_ids:
            req = self.live.get(rid)
            if req is None or req.client_id != client_id:
                continue  # finished already, or not this client's (never abort others' work)
            del self.live[rid]
            self._release(client_id)
            self._mark_done(rid)
            self.counters["requests_aborted"] += 1
            self.engine_aborts.append(rid)

    def unknown(self, request_ids: list[str]) -> list[str]:
        return [rid for rid in request_ids if rid not in self.live and rid not in self.early]

    def expire_early(self, now: float) -> None:
        """Drop buffered outputs whose Submit never came, and abort them in the engine."""
        max_age = self.config.early_output_age_s
        for rid in [rid for rid, (t0, _) in self.early.items() if now - t0 > max_age]:
            _, outs = self.early.pop(rid)
            self._mark_done(rid)  # later steps for it (before the engine aborts) are ignored
            self.counters["early_outputs_dropped"] += len(outs)
            if outs[-1].finish_reason is None:
                self.engine_aborts.append(rid)
            _log.warning("dropped outputs for unknown request %r after %.1f s", rid, max_age)

    def client_gone(self, client_id: bytes, request_ids: list[str]) -> None:
        """Outputs to ``client_id`` could not be delivered: abort its requests."""
        for rid in request_ids:
            req = self.live.pop(rid, None)
            if req is not None:
                self._release(req.client_id)
                self._mark_done(rid)
                self.counters["requests_aborted"] += 1
                self.engine_aborts.append(rid)

    def all_counters(self) -> dict[str, int]:
        return {**self.counters, "live_requests": len(self.live), "early_requests": len(self.early),
                "live_clients": len(self.per_client), "done_ids_kept": len(self.done)}

    # -- internals -----------------------------------------------------------------------------

    def _buffer_early(self, out: StepOutput) -> None:
        entry = self.early.get(out.request_id)
        if entry is None:
            if len(self.early) >= self.config.max_early_outputs:
                self.counters["early_outputs_dropped"] += 1
                if out.finish_reason is None:
                    self.engine_aborts.append(out.request_id)
                self._mark_done(out.request_id)
                return
            entry = (time.monotonic(), [])
            self.early[out.request_id] = entry
        entry[1].append(out)
        self.counters["early_outputs_buffered"] += 1

    def _feed(self, rid: str, req: _Request, token_ids: Sequence[int],
              engine_reason: str | None) -> None:
        """The one path an engine output takes into a live request: new ids, maybe its end."""
        state = req.state
        n = len(token_ids)
        req.completion_tokens += n
        self.counters["tokens_in"] += n
        try:
            deltas = state.feed(token_ids) if n else []
            if state.is_finished:  # a stop string matched: the engine must stop too
                if engine_reason is None:
                    self.engine_aborts.append(rid)
                    self.counters["stop_string_aborts"] += 1
            elif engine_reason is None:  # the common case: a running request's next tokens
                if deltas:
                    self._emit(req, RequestOutput(rid, join_text(deltas)))
                return
            elif engine_reason in PIPELINE_FINISH_REASONS:
                deltas += state.finish(engine_reason)
            else:
                what = (f"the engine reported an error for request {rid!r}" if engine_reason == "error"
                        else f"engine sent unknown finish_reason {engine_reason!r} for request "
                             f"{rid!r}; expected one of {sorted(ENGINE_FINISH_REASONS)}")
                self._fail(rid, what, abort_engine=False, kind="engine_error")
                return
        except Exception as e:  # one request's failure must not stop the others
            # fail it here: feeding the same ids again could duplicate text the pipeline took
            self._pipeline_failed(rid, e, abort_engine=engine_reason is None)
            return
        self._finish(rid, req, deltas, engine_reason, counted=True)

    def _pipeline_failed(self, rid: str, e: Exception, *, abort_engine: bool) -> None:
        """The one error classification for a request's output pipeline."""
        if isinstance(e, TextprocError):  # e.g. a token id outside the vocabulary
            self._fail(rid, f"request {rid!r}: {e}", abort_engine=abort_engine, kind="engine_error")
            return
        _log.exception("request %r: output pipeline failed", rid)
        self._fail(rid, f"request {rid!r}: internal error in the detokenizer: "
                        f"{type(e).__name__}: {e}", abort_engine=abort_engine, kind="internal")

    def _finish(self, rid: str, req: _Request, deltas: list[dict[str, Any]],
                engine_reason: str | None, *, counted: bool = False) -> None:
        """The request ended (stop string or engine finish): send the last output, free it."""
        state = req.state
        if not counted and engine_reason is None:
            self.engine_aborts.append(rid)
            self.counters["stop_string_aborts"] += 1
        del self.live[rid]
        self._release(req.client_id)
        self._mark_done(rid)
        self.counters["requests_finished"] += 1
        self._emit(req, RequestOutput(rid, join_text(deltas), state.finish_reason,
                                      state.matched_stop, req.prompt_tokens,
                                      req.completion_tokens))

    def _emit(self, req: _Request, output: RequestOutput) -> None:
        box = self.outbox.get(req.client_id)
        if box is None:
            self.outbox[req.client_id] = [output]
        else:
            box.append(output)

    def _fail(self, rid: str, message: str, *, abort_engine: bool, kind: str) -> None:
        req = self.live.pop(rid, None)
        if req is None:
            return
        self._release(req.client_id)
        self._mark_done(rid)
        self.counters["requests_failed"] += 1
        if abort_engine:
            self.engine_aborts.append(rid)
        self._emit(req, RequestOutput(rid, [], "error", None, req.prompt_tokens,
                                      req.completion_tokens, message, kind))

    def _fail_new(self, submit: Submit, message: str, kind: str) -> None:
        self.counters["requests_failed"] += 1
        _log.warning("%s", message)
        box = self.outbox.setdefault(submit.client_id, [])
        box.append(RequestOutput(submit.request_id, [], "error", None, submit.prompt_tokens, 0,
                                 message, kind))

    def _release(self, client_id: bytes) -> None:
        n = self.per_client[client_id] - 1
        if n:
            self.per_client[client_id] = n
        else:
            del self.per_client[client_id]

    def _mark_done(self, rid: str) -> None:
        done = self.done
        done[rid] = self.tick
        if len(done) > _DONE_IDS_KEPT:
            done.popitem(last=False)

    def housekeeping(self) -> None:
        """Every 0.5 s: forget finished ids older than 60 s (late outputs come within steps), so
        the memory they hold is bounded by time, not only by count."""
        self.tick += 1
        done, oldest = self.done, self.tick - _DONE_IDS_TICKS
        while done:
            rid = next(iter(done))
            if done[rid] > oldest:
                break
            del done[rid]


def run_detokenizer(config: ServiceConfig, endpoints: Endpoints, *, parent_pid: int = 0) -> int:
    """The detokenizer process entry: bind, announce Ready, serve until SIGTERM or parent exit."""
    runtime = ChildRuntime(role="detokenizer", index=0, config=config, parent_pid=parent_pid)
    runtime.start()
    table = RequestTable(runtime.load_tokenizer(), config)
    runtime.freeze_heap(GC_THRESHOLDS)
    instance_id = uuid.uuid4().hex
    with runtime:
        detok_in = runtime.bind(zmq.PULL, endpoints.detok_in)
        engine_in = runtime.bind(zmq.PUSH, endpoints.engine_in)
        engine_out = runtime.bind(zmq.PULL, endpoints.engine_out)
        front = runtime.bind(zmq.ROUTER, endpoints.detok_front)
        control = runtime.connect(zmq.PUSH, endpoints.control)
        runtime.send_ready(control)
        _log.info("detokenizer ready: detok-in %s, engine-in %s, engine-out %s, detok-front %s",
                  endpoints.detok_in, endpoints.engine_in, endpoints.engine_out,
                  endpoints.detok_front)
        _Loop(table, runtime, instance_id, detok_in, engine_in, engine_out, front, control).run()
    return 0


class _Loop:
    def __init__(self, core: RequestTable, runtime: ChildRuntime, instance_id: str,
                 detok_in: zmq.Socket[Any], engine_in: zmq.Socket[Any],
                 engine_out: zmq.Socket[Any], front: zmq.Socket[Any],
                 control: zmq.Socket[Any]) -> None:
        self.core = core
        self.runtime = runtime
        self.instance_id = instance_id
        self.detok_in = detok_in
        self.engine_in = engine_in
        self.engine_out = engine_out
        self.front = front
        self.control = control
        self.submit_decoder: FrameDecoder[Submit] = FrameDecoder(Submit, socket_name="detok-in")
        self.engine_decoder: FrameDecoder[EngineOutFrame] = FrameDecoder(
            EngineOutFrame, socket_name="engine-out")
        self.front_decoder: FrameDecoder[FrontInFrame] = FrameDecoder(
            FrontInFrame, socket_name="detok-front")
        self.engine_request_decoder = msgspec.msgpack.Decoder(EngineRequest)
        self.encode = encoder().encode
        self.outputs_sent = 0
        self.unroutable = 0
        self.round_start = time.perf_counter()  # when the current poll round began (detok_s)
        # engine frames waiting for an engine to connect (a PUSH with no peer would block)
        self.engine_backlog: deque[bytes] = deque()
        self.relay = IndexRelay()  # constraint indexes: each sent to the engine once

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.detok_in, zmq.POLLIN)
        poller.register(self.engine_out, zmq.POLLIN)
        poller.register(self.front, zmq.POLLIN)
        core = self.core
        next_housekeeping = time.monotonic() + 0.5
        waiting_out = False
        while not self.runtime.should_stop:
            if bool(self.engine_backlog) != waiting_out:
                waiting_out = not waiting_out
                if waiting_out:
                    poller.register(self.engine_in, zmq.POLLOUT)
                else:
                    poller.unregister(self.engine_in)
            ready = dict(poller.poll(200))
            self.round_start = time.perf_counter()
            if self.engine_in in ready:
                self._send_engine_backlog()
            # Submits first: a request's registration should precede its outputs when both wait
            if self.detok_in in ready:
                self._drain_submits()
            if self.engine_out in ready:
                self._drain_engine()
            if self.front in ready:
                self._drain_front()
            if core.outbox or core.engine_aborts:
                self._flush()
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + 0.5
                core.housekeeping()
                if core.early:
                    core.expire_early(now)
                    self._flush()
                if not self.runtime.parent_alive():
                    _log.error("supervisor %d is gone; exiting", self.runtime.parent_pid)
                    return

    def _drain_submits(self, limit: int = _DRAIN_BATCH) -> None:
        decode = self.submit_decoder.decode
        for _ in range(limit):
            try:
                data = self.detok_in.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            submit = decode(data, peer="worker")
            if submit is None:
                continue
            # the engine must only ever see well-formed requests: check the embedded bytes
            # (one decode per request, ~1 us; the packed prompt ids are not unpacked)
            try:
                inner = self.engine_request_decoder.decode(submit.engine_request)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
                self.submit_decoder.count_malformed(f"Submit.engine_request: {e}",
                                                   data=submit.engine_request, peer="worker")
                continue
            if inner.request_id != submit.request_id:
                self.submit_decoder.count_malformed(
                    f"Submit for {submit.request_id!r} carries an EngineRequest for "
                    f"{inner.request_id!r}", data=data, peer="worker")
                continue
            if len(self.engine_backlog) >= self.core.config.max_live_requests:
                # no engine connected (or engine-in full) for a long time: refuse rather than
                # queue without bound (aborted requests' bytes would otherwise stay queued)
                self.core._fail_new(
                    submit, f"request {submit.request_id!r}: no engine is taking requests "
                    f"({len(self.engine_backlog)} frames queued for it); retry later", "overloaded")
                continue
            if submit.index is not None:
                self.relay.remember(submit.index)
            if inner.index_key:
                index_frame = self.relay.frame_for(inner.index_key)
                if index_frame is False:
                    self.core._fail_new(
                        submit, f"request {submit.request_id!r}: constraint index "
                        f"{inner.index_key!r} is no longer held by the detokenizer; retry", "internal")
                    continue
                if isinstance(index_frame, EngineIndex):  # the engine's first request naming it
                    self._send_engine(self.encode(index_frame))
            engine_request = self.core.on_submit(submit)
            if engine_request is not None:
                self._send_engine(engine_request)

    def _drain_engine(self) -> None:
        decode = self.engine_decoder.decode
        for _ in range(_ENGINE_DRAIN_BATCH):
            try:
                data = self.engine_out.recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            frame = decode(data, peer="engine")
            match frame:
                case EngineStep() | EngineStepPacked():
                    try:
                        self.core.on_step(frame)
                    except ProtocolError as e:
                        self.engine_decoder.count_malformed(str(e), data=data, peer="engine")
                        continue
                    self._flush()  # one Outputs frame per client per engine step
                case EngineHello():
                    _log.info("engine connected: instance %s", frame.instance_id)
                    if frame.instance_id != self.core.engine_instance:
                        self.relay.engine_restarted()  # it holds no constraint index yet
                    self.core.on_hello(frame)
                    self.runtime.send_ready(self.control, role="engine", pid=0)
                case None:
                    pass

    def _drain_front(self) -> None:
        decode_routed = self.front_decoder.decode_routed
        for _ in range(_DRAIN_BATCH):
            try:
                parts = self.front.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            client_id, frame = decode_routed(parts)
            match frame:
                case Hello():
                    if frame.protocol_version != PROTOCOL_VERSION:
                        _log.warning("client %s speaks protocol %d, detokenizer %d",
                                     client_id.hex(), frame.protocol_version, PROTOCOL_VERSION)
                    self._send_front(client_id, self.encode(Welcome(self.instance_id)))
                case Abort():
                    self.core.on_abort(client_id, frame.request_ids)
                case Query():
                    # Submits for these ids were sent before the client saw Accepted: take
                    # everything waiting on detok-in first, so the answer cannot race them
                    self._drain_submits(limit=1 << 30)
                    self._send_front(client_id, self.encode(Unknown(self.core.unknown(frame.request_ids))))
                case StatsRequest():
                    counters = self.core.all_counters()
                    for dec in (self.submit_decoder, self.engine_decoder, self.front_decoder):
                        counters.update(dec.counters())
                    counters["outputs_frames_sent"] = self.outputs_sent
                    counters["outputs_unroutable"] = self.unroutable
                    counters["engine_backlog"] = len(self.engine_backlog)
                    counters["indexes_sent_to_engine"] = self.relay.sent_to_engine
                    counters["pid"] = os.getpid()
                    stats = Stats(frame.request_id, "detokenizer", 0, counters)
                    self._send_front(client_id, self.encode(stats))
                case None:
                    pass

    def _send_front(self, client_id: bytes, data: bytes) -> bool:
        try:
            self.front.send_multipart([client_id, data], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.ZMQError as e:
            if e.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                raise
            return False

    def _flush(self) -> None:
        core = self.core
        if core.outbox:
            outbox, core.outbox = core.outbox, {}
            detok_s = time.perf_counter() - self.round_start
            for client_id, items in outbox.items():
                if self._send_front(client_id, self.encode(Outputs(items, detok_s))):
                    self.outputs_sent += 1
                else:
                    self.unroutable += 1
                    _log.warning("client %s unreachable or not reading; aborting its %d requests",
                                 client_id.hex(), len(items))
                    core.client_gone(client_id, [o.request_id for o in items])
        if core.engine_aborts:
            aborts, core.engine_aborts = core.engine_aborts, []
            self._send_engine(self.encode(EngineAbort(aborts)))

    def _send_engine(self, data: bytes) -> None:
        if not self.engine_backlog:
            try:
                self.engine_in.send(data, flags=zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                _log.info("no engine connected (or engine-in full); queueing engine frames")
        self.engine_backlog.append(data)

    def _send_engine_backlog(self) -> None:
        backlog = self.engine_backlog
        while backlog:
            try:
                self.engine_in.send(backlog[0], flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            backlog.popleft()

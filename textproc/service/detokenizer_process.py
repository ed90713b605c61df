"""The detokenizer process: the sockets and the loop around :class:`RequestTable`.

Owns four sockets: ``detok-in`` (PULL, Submit from workers), ``engine-in`` (PUSH,
EngineRequest/EngineAbort/EngineIndex/EngineCall to the engine: one socket, so an abort never
overtakes its request and a constraint index always arrives before the first request naming it;
``IndexRelay`` sends each index once), ``engine-out`` (PULL, EngineHello / EngineStepPacked /
EngineStep / EngineCallResult from the engine) and ``detok-front`` (ROUTER, clients: Hello/
Abort/Query/StatsRequest/EngineCall in; Welcome/Outputs/Unknown/Stats/EngineCallResult out,
routed by the client's routing id; an EngineCall's answer goes to the client that sent it). Each
socket has one typed decoder; the request table decides, this loop moves frames, and flushes
one Outputs frame per client per round (two in a step that brings requests their first tokens:
those go first, see ``RequestTable``). Never raises out of the loop for one bad frame.

With ``--detokenizers N`` this process is shard ``index`` of N: it binds that shard's four
addresses (``Endpoints.detokenizers[index]``) and holds only the requests
``textproc.sharding.shard_of`` gives it (workers route Submits, clients Aborts and Queries,
and EngineLink step outputs by that one function); its Ready, ``Ready(role="engine")`` and
Stats carry the shard index.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import deque
from typing import Any

import msgspec
import zmq

from textproc.config import Endpoints, ServiceConfig
from textproc.core import detokenizer
from textproc.errors import ProtocolError
from textproc.protocol import (
    PROTOCOL_VERSION,
    Abort,
    EngineAbort,
    EngineHello,
    EngineCall,
    EngineCallResult,
    EngineIndex,
    EngineOutFrame,
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    EventFrame,
    FrontInFrame,
    Hello,
    IndexTable,
    Outputs,
    ProcessDied,
    Query,
    Stats,
    StatsRequest,
    DetokInFrame,
    IndexDone,
    Submit,
    Unknown,
    Welcome,
)
from textproc.heap import freeze_heap
from textproc.service.bootstrap import ChildRuntime
from textproc.service.constraints import WAIT_BUDGETS, IndexRelay
from textproc.service.partial_waits import HOLD_SLACK_S, PartialWaits
from textproc.service.request_table import GC_THRESHOLDS, RequestTable
from textproc.transport import FrameDecoder, encoder

__all__ = ["run_detokenizer"]

_log = logging.getLogger("textproc.detokenizer")
_DRAIN_BATCH = 256  # frames taken from one socket before looking at the others
# engine steps handled before looking at Submits and clients again: a step can hold thousands
# of requests, and Submits must not wait behind a long backlog of steps
_ENGINE_DRAIN_BATCH = 4
MAX_ENGINE_CALLS = 1024  # operators' calls awaiting the engine's answer (the oldest forgotten)


def run_detokenizer(config: ServiceConfig, endpoints: Endpoints, index: int = 0, *,
                    parent_pid: int = 0) -> int:
    """Detokenizer shard ``index``'s entry: bind, announce Ready, serve until SIGTERM or parent
    exit."""
    runtime = ChildRuntime(role="detokenizer", index=index, config=config, parent_pid=parent_pid)
    runtime.start()
    tokenizer = runtime.load_tokenizer()
    detokenizer.prepare(tokenizer)  # else the first request waited ~0.3 s for the tables
    table = RequestTable(tokenizer, config)
    freeze_heap(GC_THRESHOLDS)
    instance_id = uuid.uuid4().hex
    shard = endpoints.detokenizers[index]
    with runtime:
        detok_in = runtime.bind(zmq.PULL, shard.detok_in)
        engine_in = runtime.bind(zmq.PUSH, shard.engine_in)
        engine_out = runtime.bind(zmq.PULL, shard.engine_out)
        front = runtime.bind(zmq.ROUTER, shard.detok_front)
        control = runtime.connect(zmq.PUSH, endpoints.control)
        events = runtime.connect(zmq.SUB, endpoints.events)  # workers that die mid-compile
        events.setsockopt(zmq.SUBSCRIBE, b"")
        runtime.send_ready(control)
        _log.info("detokenizer %d of %d ready: detok-in %s, engine-in %s, engine-out %s, "
                  "detok-front %s", index, endpoints.n_detokenizers, shard.detok_in,
                  shard.engine_in, shard.engine_out, shard.detok_front)
        _Loop(table, runtime, instance_id, detok_in, engine_in, engine_out, front, control,
              events).run()
    return 0


class _Loop:
    def __init__(self, core: RequestTable, runtime: ChildRuntime, instance_id: str,
                 detok_in: zmq.Socket[Any], engine_in: zmq.Socket[Any],
                 engine_out: zmq.Socket[Any], front: zmq.Socket[Any],
                 control: zmq.Socket[Any], events: zmq.Socket[Any]) -> None:
        self.core = core
        self.runtime = runtime
        self.instance_id = instance_id
        self.detok_in = detok_in
        self.engine_in = engine_in
        self.engine_out = engine_out
        self.front = front
        self.control = control
        self.events = events
        self.submit_decoder: FrameDecoder[DetokInFrame] = FrameDecoder(DetokInFrame, socket_name="detok-in")
        self.engine_decoder: FrameDecoder[EngineOutFrame] = FrameDecoder(
            EngineOutFrame, socket_name="engine-out")
        self.front_decoder: FrameDecoder[FrontInFrame] = FrameDecoder(
            FrontInFrame, socket_name="detok-front")
        self.event_decoder: FrameDecoder[EventFrame] = FrameDecoder(
            EventFrame, socket_name="detokenizer<-events")
        self.engine_request_decoder = msgspec.msgpack.Decoder(EngineRequest)
        self.encode = encoder().encode
        self.outputs_sent = 0
        self.unroutable = 0
        self.round_start = time.perf_counter()  # when the current poll round began (detok_s)
        # engine frames waiting for an engine to connect (a PUSH with no peer would block)
        self.engine_backlog: deque[bytes] = deque()
        self.relay = IndexRelay()  # constraint indexes: each sent to the engine once
        self.engine_calls: dict[str, bytes] = {}  # operators' calls: call id -> client id
        # partial index key -> the requests naming it, until its whole index (or failure) comes
        # (a whole build starts within WAIT_BUDGETS budgets of its first request, or fails,
        # and then has one budget of its own)
        self.on_partial = PartialWaits((WAIT_BUDGETS + 1) * core.config.max_compile_s + HOLD_SLACK_S,
                                       core.config.max_live_requests, time.monotonic)
        core.flush_first = self._flush  # a step's first tokens go out before the rest

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.detok_in, zmq.POLLIN)
        poller.register(self.engine_out, zmq.POLLIN)
        poller.register(self.front, zmq.POLLIN)
        poller.register(self.events, zmq.POLLIN)
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
            if self.events in ready:
                self._drain_events()
            if core.outbox or core.engine_aborts:
                self._flush()
            now = time.monotonic()
            if now >= next_housekeeping:
                next_housekeeping = now + 0.5
                core.housekeeping()
                for key, (rids, lost) in self.on_partial.expired().items():
                    if lost:
                        self._fail_partial(key, rids, lost, "worker_died")
                    else:
                        self._fail_partial(key, rids, f"its whole index did not come within "
                                           f"{self.on_partial.hold_s:g} s ({WAIT_BUDGETS + 1} compile "
                                           f"budgets, max_compile_s={core.config.max_compile_s:g}, "
                                           "plus slack)", "timeout")
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
            if isinstance(submit, IndexDone):
                self._index_done(submit)
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
                self._remember(submit.index)
            if inner.index_key:
                if self.relay.partial(inner.index_key):  # fails if the whole compile does
                    self.on_partial.add(inner.index_key, submit.request_id, submit.compiler,
                                        self.core.live)
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

    def _index_done(self, done: IndexDone) -> None:
        """The whole index after a partial one: to the engine if it holds the partial one;
        or the whole compile failed: the requests on the partial index fail with its message."""
        rids = self.on_partial.whole(done.key)
        if done.table is not None:
            self._remember(done.table)
            return
        self.relay.drop(done.key)
        for rid in rids:
            self.core._fail(rid, done.error, abort_engine=True, kind="invalid_input")

    def _remember(self, table: IndexTable) -> None:
        """Keep ``table``; when it is the whole one of a partial index, the engine gets it if
        it holds the partial one, and the requests on the partial one wait no more."""
        whole = self.relay.remember(table)
        if whole is not None:
            self._send_engine(self.encode(whole))
        if not table.n_known:
            self.on_partial.whole(table.key)

    def _fail_partial(self, key: str, rids: list[str], why: str, kind: str) -> None:
        """The whole index of partial index ``key`` will not come: its requests fail."""
        live = [rid for rid in rids if rid in self.core.live]  # the others have ended
        if live:
            _log.warning("constraint index %s: %s; failing its %d requests", key, why, len(live))
        for rid in live:
            self.core._fail(rid, f"request {rid!r}: its constraint index was still being "
                            f"compiled and {why}; retry", abort_engine=True, kind=kind)

    def _drain_events(self) -> None:
        while True:
            try:
                data = self.events.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            match self.event_decoder.decode(data, peer="supervisor"):
                case ProcessDied(role="worker", index=worker, exit_code=code, pid=pid) if pid:
                    why = f"worker {worker} (pid {pid}) compiling it exited with code {code}"
                    for key, rids in self.on_partial.worker_died(pid, why).items():
                        self._fail_partial(key, rids, why, "worker_died")
                case _:
                    pass

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
                    self._flush()  # one Outputs frame per client per engine step (+ first tokens)
                case EngineHello():
                    _log.info("engine connected: instance %s", frame.instance_id)
                    if frame.instance_id != self.core.engine_instance:
                        self.relay.engine_restarted()  # it holds no constraint index yet
                    self.core.on_hello(frame)
                    self.runtime.send_ready(self.control, role="engine", pid=0)
                case EngineCallResult():
                    client_id = self.engine_calls.pop(frame.call_id, None)
                    if client_id is not None:
                        self._send_front(client_id, self.encode(frame))
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
                case EngineCall():  # an operator's call: relayed, answered to this client
                    self.engine_calls[frame.call_id] = client_id
                    while len(self.engine_calls) > MAX_ENGINE_CALLS:  # unanswered ones
                        del self.engine_calls[next(iter(self.engine_calls))]
                    self._send_engine(self.encode(frame))
                case StatsRequest():
                    counters = self.core.all_counters()
                    for dec in (self.submit_decoder, self.engine_decoder, self.front_decoder):
                        counters.update(dec.counters())
                    counters["outputs_frames_sent"] = self.outputs_sent
                    counters["outputs_unroutable"] = self.unroutable
                    counters["engine_backlog"] = len(self.engine_backlog)
                    counters["indexes_sent_to_engine"] = self.relay.sent_to_engine
                    counters["indexes_completed_on_engine"] = self.relay.completed_on_engine
                    counters["cpu_ms"] = int(time.process_time() * 1000)
                    counters["pid"] = os.getpid()
                    stats = Stats(frame.request_id, "detokenizer", self.runtime.index, counters)
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

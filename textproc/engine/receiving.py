"""The receiving half of ``EngineLink``: frames on engine-in turned into requests, aborts and indexes.

Owns the engine-in side once the link has connected its sockets: draining every shard's
engine-in without blocking (one zmq call when nothing came), decoding and checking each frame
(``EngineRequest``, ``EngineAbort``, ``EngineIndex``, ``EngineCall``), the queues of requests,
aborts and operators' calls not yet handed to the engine (a call whose arguments break
``textproc.engine.calls.check_call`` answered 400 at once), one index cache per shard, noting which shard owns each request (with
more than one detokenizer), answering a request that breaks a rule with ``"error"`` at once,
the ``malformed_frames`` / ``rejected_requests`` counters, and the reconnect check that sends
``EngineHello`` again through the link's ``StepSender``.

Must never block and never raise on what arrives: a malformed frame is counted and logged.
Invariant: requests and aborts come out in the order each shard sent them; an abort that
arrives for a request still queued removes it from the queue (the id is still reported).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
import zmq

from textproc.engine.indexes import IndexCache
from textproc.engine.requests import IncomingRequest, check_request, unpack_array, unpack_list
from textproc.engine.sending import StepSender
from textproc.engine.steps import StepFormat
from textproc.errors import InvalidInput, ProtocolError, short
from textproc.engine.calls import check_call
from textproc.protocol import (
    EngineAbort,
    EngineCall,
    EngineCallResult,
    EngineIndex,
    EngineInFrame,
    EngineRequest,
)

__all__ = ["FrameReceiver"]

_log = logging.getLogger("textproc.engine")

_LOG_FIRST_N = 10  # log the first N malformed frames, then every _LOG_EVERY-th
_LOG_EVERY = 1000
_MONITOR_EVERY_S = 0.2  # how often the drain looks for a reconnect (to resend EngineHello)


def _priority(request: IncomingRequest) -> int:
    return request.priority


class FrameReceiver:
    """Frames into an engine; ``ins`` (shard k's engine-in PULL at k) and ``monitors`` (shard
    k's engine-out connect monitor at k, empty without ``resend_hello_on_reconnect``) are set
    once the link's sockets are connected and emptied when it closes."""

    def __init__(
        self,
        instance_id: str,
        address: str,
        sender: StepSender,
        *,
        n_shards: int,
        max_frame_bytes: int,
        max_index_bytes: int,
        prompt_ids_as_list: bool,
        step_format: StepFormat,
    ) -> None:
        self.instance_id = instance_id
        self.address = address  # shard 0's engine-in address (for messages)
        self.sender = sender  # rejects and EngineHello after a reconnect go out through it
        self.owners = sender.owners  # with N shards: who owns each request id
        self.max_frame_bytes = max_frame_bytes
        self.prompt_ids_as_list = prompt_ids_as_list
        self.step_format = step_format
        # one cache per shard: each mirrors what that shard's relay sent and evicted
        self.caches = [IndexCache(max_index_bytes) for _ in range(n_shards)]
        self.malformed_frames = 0  # frames on engine-in that failed to decode or validate
        self.rejected_requests = 0  # well-formed frames answered with finish_reason "error"
        self.ins: list[zmq.Socket[Any]] = []
        self.sock: zmq.Socket[Any] | None = None  # shard 0's (the only one by default)
        self.monitors: list[zmq.Socket[Any]] = []
        self.monitor: zmq.Socket[Any] | None = None
        self.requests: list[IncomingRequest] = []  # decoded, not yet handed to the engine
        self.aborts: list[str] = []
        self.calls: list[EngineCall] = []  # operators' calls, not yet handed to the engine
        self.call_shards: dict[str, int] = {}  # call id -> the shard to answer on
        self.decoder: msgspec.msgpack.Decoder[EngineInFrame] = msgspec.msgpack.Decoder(
            EngineInFrame
        )
        self.connects_seen = [0] * n_shards
        self.next_monitor_check = 0.0
        self.fresh_drain = False  # poll_requests drained and poll_aborts has not run since

    def attach(self, ins: list[zmq.Socket[Any]], monitors: list[zmq.Socket[Any]]) -> None:
        self.ins = ins
        self.sock = ins[0] if ins else None
        self.monitors = monitors
        self.monitor = monitors[0] if monitors else None

    def poll_requests(self) -> list[IncomingRequest]:
        self.drain()
        self.fresh_drain = True
        if not self.requests:
            return []
        requests = self.requests
        self.requests = []
        if len(requests) > 1 and any(r.priority for r in requests):
            # lower priority first, arrival order within one (vLLM's priority order)
            requests.sort(key=_priority)
        return requests

    def poll_aborts(self) -> list[str]:
        if self.fresh_drain:
            self.fresh_drain = False
        else:
            self.drain()
        if not self.aborts:
            return []
        aborts = self.aborts
        self.aborts = []
        return aborts

    def poll_calls(self) -> list[EngineCall]:
        if not self.calls:
            return []
        calls, self.calls = self.calls, []
        return calls

    def drain(self) -> None:
        sock = self.sock
        if sock is None:
            raise InvalidInput("EngineLink used before start() or after close()")
        if self.monitor is not None:
            now = time.monotonic()
            if now >= self.next_monitor_check:
                self.next_monitor_check = now + _MONITOR_EVERY_S
                self._check_reconnect()
        if self.owners is not None:
            self._drain_shards()
            return
        # one zmq call when nothing came (the common case); a raised zmq.Again costs more
        if not int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            return
        recv = sock.recv
        getsockopt = sock.getsockopt
        while True:
            try:
                data = recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            self._take(data)
            # EVENTS again instead of a recv that raises zmq.Again: ~10 us less per drain
            if not int(getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                break

    def _drain_shards(self) -> None:
        """``drain`` for more than one shard: every shard's engine-in, shard by shard (each
        shard's requests and aborts stay in the order it sent them)."""
        for shard, sock in enumerate(self.ins):
            if not int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                continue
            while True:
                try:
                    data = sock.recv(zmq.NOBLOCK, copy=True)
                except zmq.Again:
                    break
                self._take(data, shard)
                if not int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                    break

    def _take(self, data: bytes, shard: int = 0) -> None:
        """Decode, check and queue one engine-in frame (a bad one is counted, never raised);
        ``shard``: the detokenizer shard it came from."""
        if len(data) > self.max_frame_bytes:
            self._malformed(
                f"frame of {len(data)} bytes is over max_frame_bytes={self.max_frame_bytes}"
            )
            return
        try:
            frame = self.decoder.decode(data)
        except (msgspec.MsgspecError, RecursionError, ValueError) as exc:
            # RecursionError: msgspec gives up on frames nested ~1000 deep (2 KB is enough)
            self._malformed(f"undecodable frame of {len(data)} bytes: {exc!r}"[:300])
            return
        match frame:
            case EngineRequest():
                problem = check_request(frame)
                if problem is not None:
                    self._reject(frame.request_id, problem)
                    return
                guide = None
                if frame.index_key:
                    cache = self.caches[shard]
                    index = cache.get(frame.index_key)
                    if index is None:
                        self._reject(frame.request_id, f"constraint index {frame.index_key!r} is not "
                                     f"in the engine's index cache ({len(cache)} held)")
                        return
                    # here: see indexes.py (the constraint modules load on first use)
                    from textproc.core.constraints.index.guide import Guide

                    guide = Guide(index)
                if self.owners is not None:
                    self.owners.note(frame.request_id, shard)
                unpack = unpack_list if self.prompt_ids_as_list else unpack_array
                self.requests.append(
                    IncomingRequest(
                        frame.request_id,
                        unpack(frame.prompt_token_ids),
                        frame.max_tokens,
                        frame.stop_token_ids,
                        frame.sampling,
                        frame.constraint,
                        frame.min_tokens,
                        frame.ignore_eos,
                        frame.logit_bias,
                        frame.index_key,
                        guide,
                        frame.logprobs,
                        frame.eos_token_ids,
                        frame.images,
                        frame.priority,
                        frame.lora,
                    )
                )
            case EngineIndex(table=table, evict=evict):
                self._take_index(table, evict, shard)
            case EngineCall():
                problem = check_call(frame)
                if problem is not None:  # answered here: the engine sees only valid calls
                    self.sender.frame(EngineCallResult(frame.call_id, None, problem, 400), shard)
                    return
                self.calls.append(frame)
                self.call_shards[frame.call_id] = shard
            case EngineAbort(request_ids=ids):
                if self.requests:
                    gone = set(ids)
                    self.requests = [r for r in self.requests if r.request_id not in gone]
                self.aborts.extend(ids)

    def _take_index(self, table: Any, evict: list[str], shard: int = 0) -> None:
        problem = self.caches[shard].put(table, evict)
        if problem is not None:
            self._malformed(f"EngineIndex {short(table.key)}: {problem}"[:300])

    def _malformed(self, what: str) -> None:
        self.malformed_frames += 1
        n = self.malformed_frames
        if n <= _LOG_FIRST_N or n % _LOG_EVERY == 0:
            _log.warning(
                "EngineLink %s: dropped malformed frame #%d on engine-in %r: %s",
                self.instance_id[:8],
                n,
                self.address,
                ProtocolError(what),
            )

    def _reject(self, request_id: str, problem: str) -> None:
        self._malformed(f"request_id={short(request_id)}: {problem}")
        self.rejected_requests += 1
        if request_id:
            if self.step_format != "legacy":
                self.sender.packed([request_id], b"", b"\0\0\0\0", {0: "error"})
            else:
                self.sender.entries([(request_id, [], "error")])

    def _check_reconnect(self) -> None:
        for shard, monitor in enumerate(self.monitors):
            while True:
                try:
                    monitor.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.connects_seen[shard] += 1
                if self.connects_seen[shard] > 1:  # the first connect carries the queued hello
                    self.sender.hello(shard)

"""The sending half of ``EngineLink``: one step frame per engine step, to each shard that has entries.

Owns the engine-out side once the link has connected its sockets: encoding a step into one
reused buffer (columns as ``EngineStepPacked``, entries as ``EngineStep``), the split by owner
shard with more than one detokenizer (``textproc.engine.routing``), the step counter,
``EngineHello`` per shard, and what happens when a shard's queue is full: the step is dropped
(counted, never waited for) and its requests are reported finished with ``"error"`` in the next
frame that shard can take, so no stream has a hole in its text. Never blocks; never validates
entries (``EngineLink`` does that before calling in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import msgspec
import zmq

from textproc.engine.routing import Owners, entry_ids, split_cached, split_columns, split_entries
from textproc.engine.steps import NO_CACHED, PACKED_TAG, normalise
from textproc.errors import InvalidInput
from textproc.protocol import EngineHello, pack_ids

__all__ = ["StepSender"]

_log = logging.getLogger("textproc.engine")
_LOG_FIRST_N = 10  # log the first N dropped steps, then every _LOG_EVERY-th
_LOG_EVERY = 1000


class StepSender:
    """Step frames out of an engine; ``outs`` (shard k's engine-out PUSH at k) is set once the
    link's sockets are connected and emptied when it closes."""

    def __init__(self, instance_id: str, addresses: tuple[str, ...], hwm_frames: int) -> None:
        self.instance_id = instance_id
        self.addresses = addresses  # shard k's engine-out address at k (for messages)
        self.hwm_frames = hwm_frames
        self.outs: list[zmq.Socket[Any]] = []
        self.out: zmq.Socket[Any] | None = None  # shard 0's (the only one by default)
        self.owners = Owners(len(addresses)) if len(addresses) > 1 else None
        self.dropped_steps = 0  # step frames not queued (textproc unreachable, HWM full)
        # requests whose outputs were in a dropped step: their text has a hole, so textproc is
        # told they failed (finish "error") with the next step that can be queued
        self.lost_by_shard: list[dict[str, None]] = [{} for _ in addresses]
        self.lost = self.lost_by_shard[0]
        self.lost_requests_reported = 0
        self.hellos_sent = 0
        self.steps_sent = 0  # next step number
        self.encoder = msgspec.msgpack.Encoder()
        self.buf = bytearray()

    def attach(self, outs: list[zmq.Socket[Any]]) -> None:
        self.outs = outs
        self.out = outs[0] if outs else None

    def writable(self) -> bool:
        """True when a step can be queued now on every shard (a step may reach them all)."""
        if self.owners is not None:
            return all(int(s.getsockopt(zmq.EVENTS)) & zmq.POLLOUT for s in self.outs)
        assert self.out is not None
        return bool(int(self.out.getsockopt(zmq.EVENTS)) & zmq.POLLOUT)

    def packed(
        self, request_ids: Sequence[str], tokens: bytes, counts: bytes, finished: Mapping[int, str],
        logprobs: bytes = b"", top_ids: bytes = b"", cached_tokens: Mapping[str, int] = NO_CACHED,
    ) -> None:
        out = self.out
        if out is None:
            raise InvalidInput("EngineLink.send_step before start() or after close()")
        if self.owners is not None:
            self._packed_shards(request_ids, tokens, counts, finished, logprobs, top_ids,
                                cached_tokens)
            return
        if self.lost:
            self._report_lost(out)
        step = self.steps_sent
        self.encoder.encode_into(
            (PACKED_TAG, step, request_ids, tokens, counts, finished, logprobs, top_ids,
             cached_tokens), self.buf)
        self._send_buf(out, step, lambda: request_ids)

    def _packed_shards(
        self, request_ids: Sequence[str], tokens: bytes, counts: bytes, finished: Mapping[int, str],
        logprobs: bytes, top_ids: bytes, cached_tokens: Mapping[str, int],
    ) -> None:
        """One step to N shards: each gets the entries it owns, as one EngineStepPacked."""
        owners = self.owners
        assert owners is not None
        parts = split_columns(owners.of(request_ids), owners.n_shards, request_ids, tokens, counts,
                              finished, logprobs, top_ids)
        cached = split_cached(owners, cached_tokens)
        self._report_lost_shards()
        step = self.steps_sent
        for shard, part in enumerate(parts):
            if part is not None:
                ids = part[0]
                self.encoder.encode_into((PACKED_TAG, step, *part, cached[shard]), self.buf)
                self._send_buf(self.outs[shard], step, partial(list, ids), shard)
        self.steps_sent = step + 1
        if finished:
            owners.forget([request_ids[i] for i in finished])

    def _report_lost_shards(self) -> None:
        for shard, lost in enumerate(self.lost_by_shard):
            if lost:
                self._report_lost(self.outs[shard], shard)

    def entries(self, outputs: Sequence[Any], cached_tokens: Mapping[str, int] = NO_CACHED) -> None:
        out = self.out
        if out is None:
            raise InvalidInput("EngineLink.send_outputs before start() or after close()")
        if self.owners is not None:
            self._entries_shards(outputs, cached_tokens)
            return
        if self.lost:
            self._report_lost(out)
        step = self.steps_sent
        self._encode_entries(step, outputs, cached_tokens)
        self._send_buf(out, step, partial(entry_ids, outputs))

    def _encode_entries(self, step: int, outputs: Sequence[Any],
                        cached_tokens: Mapping[str, int]) -> None:
        try:
            # into one reused buffer: ~25% faster than encode() at 1,024 entries (the send copies)
            self.encoder.encode_into(("EngineStep", step, outputs, cached_tokens), self.buf)
        except TypeError:
            self.encoder.encode_into(("EngineStep", step, normalise(outputs), cached_tokens),
                                     self.buf)

    def _entries_shards(self, outputs: Sequence[Any], cached_tokens: Mapping[str, int]) -> None:
        """One step to N shards: each gets the entries it owns, as one EngineStep."""
        owners = self.owners
        assert owners is not None
        parts = split_entries(owners.of(entry_ids(outputs)), owners.n_shards, outputs)
        cached = split_cached(owners, cached_tokens)
        self._report_lost_shards()
        step = self.steps_sent
        for shard, part in enumerate(parts):
            if part is None:
                continue
            self._encode_entries(step, part, cached[shard])
            self._send_buf(self.outs[shard], step, partial(entry_ids, part), shard)
        self.steps_sent = step + 1

    def _report_lost(self, out: zmq.Socket[Any], shard: int = 0) -> None:
        """Tell textproc that requests whose tokens were dropped failed (finish "error")."""
        lost_ids = self.lost_by_shard[shard]
        lost = list(lost_ids)
        data = self.encoder.encode((PACKED_TAG, self.steps_sent, lost, b"",
                                     pack_ids([0] * len(lost)), dict.fromkeys(range(len(lost)),
                                                                           "error"),
                                     b"", b"", NO_CACHED))
        try:
            out.send(data, zmq.NOBLOCK)
        except zmq.Again:
            return
        self.steps_sent += 1
        self.lost_requests_reported += len(lost)
        lost_ids.clear()

    def _send_buf(self, out: zmq.Socket[Any], step: int,
                  request_ids: Callable[[], Iterable[str]], shard: int = 0) -> None:
        self.steps_sent = step + 1
        try:
            out.send(self.buf, zmq.NOBLOCK, copy=True)
        except zmq.Again:
            self.dropped_steps += 1
            self.lost_by_shard[shard].update(dict.fromkeys(request_ids()))
            if self.dropped_steps <= _LOG_FIRST_N or self.dropped_steps % _LOG_EVERY == 0:
                _log.warning(
                    "EngineLink %s: dropped step %d (#%d): engine-out %r unreachable and "
                    "%d frames queued",
                    self.instance_id[:8],
                    step,
                    self.dropped_steps,
                    self.addresses[shard],
                    self.hwm_frames,
                )

    def frame(self, frame: Any, shard: int = 0) -> bool:
        """One frame other than a step (``EngineCallResult``) on shard ``shard``'s engine-out;
        False when it could not be queued."""
        try:
            self.outs[shard].send(self.encoder.encode(frame), zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("EngineLink %s: %s not queued on %r", self.instance_id[:8],
                         type(frame).__name__, self.addresses[shard])
            return False
        return True

    def hello(self, shard: int = 0) -> None:
        out = self.outs[shard]
        data = self.encoder.encode(EngineHello(self.instance_id))
        try:
            out.send(data, zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("EngineLink %s: EngineHello not queued on %r", self.instance_id[:8],
                         self.addresses[shard])
            return
        self.hellos_sent += 1


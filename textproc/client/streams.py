"""The life of a TextClient stream: the generation loop of one chat/complete call and its aborts.

``generate`` sends one request to a worker and yields its ``TextEvent`` s, choice by choice in
arrival order, until every choice has finished; while the worker has not accepted it, the wait
is bounded by the call's timeout (a timer, never ``asyncio.wait_for``: see ``wait_output``).
A stream closed or cancelled before its end is aborted through ``Aborts``, which sends one
``Abort`` frame per detokenizer shard per loop round. It owns no socket: the worker and
detokenizer sockets belong to the ``TextClient``, which hands them in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Callable, NamedTuple, Sequence

import zmq
import zmq.asyncio

from textproc.client.events import StreamState, TextEvent, take_event
from textproc.client.inflight import InFlight, conversation_key
from textproc.client.readers import Readers
from textproc.errors import InvalidInput, TextprocError, WorkerDied
from textproc.options import check_n
from textproc.protocol import Abort, ChatRequest, CompletionRequest
from textproc.sharding import group_by_shard

_log = logging.getLogger("textproc.client")

__all__ = ["Aborts", "StreamHost", "generate", "wait_output"]

_DETOK_WAIT_S = 60.0  # how long a new request waits for a restarting detokenizer


class Aborts:
    """Abort frames of one client to the detokenizer shards that own the requests.

    ``soon`` batches: every stream closed in the same loop round leaves in one frame per shard
    (500 streams leaving at once were 500 sends, ~4% of the HTTP frontend's CPU under
    bench/crowd.py; each send can wake the socket's I/O thread). ``send`` sends at once without
    waiting. A frame the socket would not take is counted in ``lost``, never raised.
    """

    def __init__(self, detoks: list[zmq.asyncio.Socket], encode: Callable[[Any], bytes]) -> None:
        self.detoks = detoks  # the client's list: detokenizer shard k's detok-front at k
        self.lost = 0  # request ids whose Abort the detokenizer socket would not take
        self.readers: Readers | None = None  # told which ids were aborted (set by start)
        self.is_closed = False
        self._encode = encode
        self._queued: list[str] = []  # streams closed this loop round

    def soon(self, request_ids: list[str]) -> None:
        """Abort these at the end of this loop round, with every other stream closed in it."""
        if self.is_closed or not self.detoks:
            return
        if not self._queued:
            asyncio.get_running_loop().call_soon(self.flush)
        self._queued.extend(request_ids)

    def flush(self) -> None:
        """Send what ``soon`` queued (nothing once closed)."""
        ids, self._queued = self._queued, []
        if ids and not self.is_closed and self.detoks:
            self.send(ids)
            if self.readers is not None:  # their outputs still in flight are expected
                self.readers.aborted(ids)

    def close(self) -> None:
        """Flush (streams closed just before), then send nothing more. Idempotent."""
        self.flush()
        self.is_closed = True

    def send(self, request_ids: list[str]) -> None:
        """Send Abort to the detokenizer shards that own ``request_ids``, without waiting."""
        if len(self.detoks) == 1:
            self._send_to(0, request_ids)
            return
        for shard, ids in group_by_shard(request_ids, len(self.detoks)).items():
            self._send_to(shard, ids)

    def _send_to(self, shard: int, request_ids: list[str]) -> None:
        """On a zmq.asyncio socket a NOBLOCK send returns a future that holds its error (e.g.
        Again when the queue is full): consume it and count the loss rather than leave an
        unretrieved exception behind."""
        try:
            sent = self.detoks[shard].send(self._encode(Abort(request_ids)), flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # socket closed under us
            self.lost += len(request_ids)
            return
        n = len(request_ids)

        def _done(fut: Any) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                self.lost += n
                _log.warning("could not send Abort for %d request(s) to the detokenizer: %s",
                             n, fut.exception())

        asyncio.ensure_future(sent).add_done_callback(_done)


class StreamHost(NamedTuple):
    """What a stream uses of its TextClient, as one value (the client builds it per call)."""

    check_open: Callable[[], None]  # raises when the client is closed or broken
    inflight: InFlight  # the client's request tables and worker choice
    readers: Readers | None  # the reader tasks (None before start): detokenizer shards up
    workers: Sequence[zmq.asyncio.Socket]  # worker i's DEALER at i
    encode: Callable[[Any], bytes]
    timeout_error: Callable[[int, str, str, float], TextprocError]  # worker, id, what, limit
    aborts: Aborts


async def generate(frame: ChatRequest | CompletionRequest, host: StreamHost,
                   limit_s: float) -> AsyncIterator[TextEvent]:
    """The events of ``frame``'s choices; closing the iterator early aborts the running ones.

    Nothing happens before the first ``__anext__`` (``host.check_open`` runs then). A worker
    that has not accepted the request within ``limit_s`` fails it with
    ``host.timeout_error(worker, request_id, what, limit_s)``.
    """
    inflight, readers, workers, aborts = host.inflight, host.readers, host.workers, host.aborts
    host.check_open()
    rid = frame.request_id
    n = check_n(frame.sampling.n)
    ids = [rid] if n == 1 else [f"{rid}-{i}" for i in range(n)]  # the worker's sub-ids
    for sub in ids:
        if sub in inflight.streams or sub in inflight.calls:
            raise InvalidInput(f"request_id {sub!r} is already in flight on this client")
    if readers is not None and readers.detok_up is not None:  # the request's shards must be up
        await _shards_up(readers, ids, rid)
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
        return host.timeout_error(worker, rid, "(Accepted for a generation request)", limit_s)

    try:
        await workers[worker].send(host.encode(frame))
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
            aborts.soon(running)


async def _shards_up(readers: Readers, ids: list[str], rid: str) -> None:
    """Wait until the detokenizer shards of ``ids`` are up (WorkerDied after _DETOK_WAIT_S)."""
    ups = readers.detok_up
    assert ups is not None
    shards = {0} if len(ups) == 1 else {readers.shard_of(sub) for sub in ids}
    for shard in sorted(shards):
        if not ups[shard].is_set():
            try:
                await asyncio.wait_for(ups[shard].wait(), _DETOK_WAIT_S)
            except (asyncio.TimeoutError, TimeoutError) as e:
                name = "the detokenizer" if len(ups) == 1 else f"detokenizer {shard}"
                raise WorkerDied(f"request {rid!r}: {name} did not come back within "
                                 f"{_DETOK_WAIT_S:.0f} s") from e


async def wait_output(live: list[StreamState], accept_by: float,
                      expired: Callable[[], TextprocError]) -> None:
    """Until one of ``live`` has output or an error; while one still waits at its worker,
    at most until ``accept_by`` (then those fail with ``expired()``, naming the worker)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    for stream in live:
        stream.waiter = waiter
    timer = None
    if any(s.pending_at_worker for s in live):  # a stuck worker must not hold it

        def expire() -> None:
            for stream in live:
                if stream.pending_at_worker and not stream.items:
                    stream.fail(expired())

        # a timer, not asyncio.wait_for: that wakes this task one loop round after the
        # output, behind every other stream woken by the same Outputs frame (the first
        # token's delay, i.e. TTFT, went up by the whole frame's fan-out)
        timer = loop.call_at(loop.time() + max(0.0, accept_by - time.monotonic()), expire)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for stream in live:
            stream.waiter = None

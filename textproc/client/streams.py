"""What a TextClient stream waits on: its output with the accept deadline, its detokenizer
shards, and the batched aborts of streams closed early.

``wait_output`` waits until one of a request's choices has output or an error; while the worker
has not accepted it, the wait is bounded by the call's timeout (a timer, never
``asyncio.wait_for``: see ``wait_output``). ``shards_up`` waits for restarting detokenizer
shards. A stream closed or cancelled before its end is aborted through ``Aborts``, which sends
one ``Abort`` frame per detokenizer shard per loop round. The generation loop itself is
``TextClient._generate``; nothing here owns a socket (the TextClient hands its detokenizer
sockets to ``Aborts``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import zmq
import zmq.asyncio

from textproc.client.events import StreamState
from textproc.client.readers import Readers
from textproc.errors import TextprocError, WorkerDied
from textproc.protocol import Abort
from textproc.sharding import group_by_shard

_log = logging.getLogger("textproc.client")

__all__ = ["Aborts", "shards_up", "wait_output"]

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


async def shards_up(readers: Readers, ids: list[str], rid: str) -> None:
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

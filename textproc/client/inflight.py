"""What is in flight on one TextClient: streams, calls, per-worker pending sets, stats waiters.

Owns the tables the sending side (``TextClient``) and the receiving side (``Readers``) share,
the choice of worker for a new request, and failing what a dead process held. No sockets.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from textproc.client.events import StreamState
from textproc.errors import TextprocError, WorkerDied
from textproc.protocol import EngineCallResult, ProcessDied, Stats

__all__ = ["InFlight", "AFFINITY_SLACK", "conversation_key"]

AFFINITY_SLACK = 2  # a conversation's worker may hold this many more requests than the least loaded
_KEY_CHARS = 2048


def conversation_key(messages: Any) -> int | None:
    """A stable key for a conversation: the start of its first two messages (system prompt and
    first user turn), which every follow-up turn resends unchanged; None when there is nothing
    to key on. Reads at most _KEY_CHARS per message, so it costs the same for any length."""
    if not isinstance(messages, list) or not messages:
        return None
    parts = []
    for message in messages[:2]:
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        text = content[:_KEY_CHARS] if isinstance(content, str) else repr(content)[:_KEY_CHARS]
        parts.append(f"{message.get('role')}\0{text}")
    data = "\0\0".join(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class InFlight:
    """The request tables of one client; every entry is removed by whoever added it."""

    def __init__(self, n_workers: int) -> None:
        self.streams: dict[str, StreamState] = {}
        self.calls: dict[str, tuple[int, asyncio.Future[Any]]] = {}  # id -> (worker, result)
        self.worker_pending: list[set[str]] = [set() for _ in range(n_workers)]
        self.worker_requests: list[int] = [0] * n_workers  # requests sent to each, ever
        self._next_worker = 0  # where the round robin among the least loaded resumes
        # stats request id -> (answers so far, answers expected, all arrived)
        self.stats_waiters: dict[str, tuple[list[Stats], int, asyncio.Future[None]]] = {}
        # operators' engine calls: call id -> its EngineCallResult, when it comes
        self.engine_calls: dict[str, asyncio.Future[EngineCallResult]] = {}

    def __len__(self) -> int:
        """Requests in flight (streams and calls)."""
        return len(self.streams) + len(self.calls)

    def queue_depths(self) -> list[int]:
        """Requests each worker holds right now (sent, not yet answered)."""
        return [len(p) for p in self.worker_pending]

    def pick_worker(self, affinity: int | None = None) -> int:
        """The worker for a new request: the one holding the fewest; ties go round robin
        (always taking the lowest index sent 26,021 of 27,402 soak requests to worker 0).

        ``affinity`` (a conversation's key, see :func:`conversation_key`) prefers worker
        ``affinity % n``, which holds that conversation's encoded segments, unless it holds more
        than AFFINITY_SLACK requests beyond the least loaded: affinity never unbalances the pool
        by more than that.
        """
        pending = self.worker_pending
        n = len(pending)
        start = self._next_worker
        best = start % n
        for k in range(1, n):
            i = (start + k) % n
            if len(pending[i]) < len(pending[best]):
                best = i
        if affinity is not None:
            home = affinity % n
            if len(pending[home]) <= len(pending[best]) + AFFINITY_SLACK:
                self.worker_requests[home] += 1
                return home
        self._next_worker = best + 1
        self.worker_requests[best] += 1
        return best

    def fail_all(self, err: BaseException) -> None:
        """Fail every stream, call and stats wait (the client closed or broke)."""
        for stream in self.streams.values():
            stream.fail(err)
        for _, fut in self.calls.values():
            if not fut.done():
                fut.set_exception(err)
        for _, _, done in self.stats_waiters.values():
            if not done.done():
                done.set_exception(err)
        for fut in self.engine_calls.values():
            if not fut.done():
                fut.set_exception(err)

    def on_engine_call_result(self, frame: EngineCallResult) -> None:
        fut = self.engine_calls.get(frame.call_id)
        if fut is not None and not fut.done():
            fut.set_result(frame)

    def on_stats(self, frame: Stats) -> None:
        waiter = self.stats_waiters.get(frame.request_id)
        if waiter is not None:
            got, expected, done = waiter
            got.append(frame)
            if len(got) >= expected and not done.done():
                done.set_result(None)

    def on_worker_died(self, frame: ProcessDied) -> None:
        """Fail what worker ``frame.index`` held (streams it had not answered, its calls)."""
        index = frame.index
        if not 0 <= index < len(self.worker_pending):
            return
        for rid in list(self.worker_pending[index]):
            err: TextprocError = WorkerDied(
                f"worker {index} (pid {frame.pid}) exited with code {frame.exit_code} "
                f"while holding request {rid!r}")
            stream = self.streams.get(rid)
            if stream is not None and not stream.items:
                stream.fail(err)
            call = self.calls.get(rid)
            if call is not None and not call[1].done():
                call[1].set_exception(err)
        self.worker_pending[index].clear()

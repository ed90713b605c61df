"""One long prompt across the worker pool: the worker that got it cuts it, its peers encode shares.

Owns the DEALER sockets a worker connects to every other worker's ``worker-j`` ROUTER, the
``EncodePart`` frames it sends there and the waits for the ``EncodedPart`` answers. A text of at
least ``min_chars`` characters is cut into chunks (``Tokenizer.plan_parts``: exact cuts only,
see ``core/tok/parts.py``), and the chunks are grouped into one share per peer that is not
cooling down plus the worker's own. The worker sends the peers' shares, encodes its own, then
collects the answers.

It never waits on a peer for long: after a grace of half its own share's time it
encodes the missing chunks itself, last first, one at a time, taking any answer that arrives
in between; so a busy, stopped or dead peer costs at most about the time of encoding the whole
text here, never a stall (a peer whose answer did not come in time is skipped for
``PEER_COOLDOWN_S``; one that is not connected fails the send at once, ``ZMQ_IMMEDIATE``).
While it waits it answers the EncodePart frames its peers send it (two workers splitting at
once would otherwise wait on each other) and keeps every other frame it reads for the serve
loop, in order (``deferred``).

The ids always equal ``Tokenizer.encode`` of the whole text: the cuts are exact, and the plan
joins the ids. Nothing here sends to the detokenizer or to clients.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from itertools import chain
from typing import Any

import zmq

from textproc.core.tokenizer import Tokenizer
from textproc.errors import TextprocError
from textproc.protocol import EncodedPart, EncodePart, PeerOutFrame, pack_ids, unpack_ids
from textproc.service.bootstrap import ChildRuntime
from textproc.transport import FrameDecoder, encoder

__all__ = ["PeerPool", "CHUNK_CHARS", "CHUNKS_PER_SHARE", "GRACE_FACTOR", "PEER_COOLDOWN_S"]

_log = logging.getLogger("textproc.worker")

CHUNK_CHARS = 4_096  # the smallest chunk; a share is several chunks
CHUNKS_PER_SHARE = 8  # what the worker can take back one at a time from a late peer
# wait idle this fraction of the own share's time before taking chunks back: a peer's answer
# comes about when the own share is done; on a loaded box (load 5 on 2 cores) a quarter took
# back 2 chunks per prompt, work done twice while the peer was only waiting for a core
GRACE_FACTOR = 0.5
GRACE_MIN_S = 0.002
PEER_COOLDOWN_S = 1.0  # a peer that answered too late gets no share for this long
_DRAIN_MAX = 64  # frames read from the worker's own socket per look while waiting


class PeerPool:
    """The encode a worker's request builder calls: ``encode(text)`` == ``Tokenizer.encode``,
    shared with the peers for long texts. ``start()`` connects; ``close`` is the runtime's."""

    def __init__(self, tokenizer: Tokenizer, index: int, addresses: Sequence[str], *,
                 min_chars: int, max_chars: int) -> None:
        self.tokenizer = tokenizer
        self.index = index
        self.addresses = {j: a for j, a in enumerate(addresses) if j != index}
        self.min_chars = min_chars  # 0: never split
        self.max_chars = max_chars  # of the texts of one EncodePart served
        self.deferred: deque[tuple[bytes, Any]] = deque()  # frames read while waiting
        self.counters = {"split_prompts": 0, "split_shares_sent": 0, "split_chunks_taken_back": 0,
                         "split_shares_served": 0, "split_answers_late": 0, "split_answers_bad": 0}
        self._dealers: list[tuple[int, zmq.Socket[Any]]] = []
        self._front: zmq.Socket[Any] | None = None
        self._front_decoder: FrameDecoder[Any] | None = None
        self._answers: FrameDecoder[EncodedPart] = FrameDecoder(PeerOutFrame, socket_name="peers")
        self._poller = zmq.Poller()
        self._slow_until: dict[int, float] = {}  # peer -> time.monotonic() of its cooldown end
        self._jobs = 0
        self._encode = encoder().encode

    def start(self, runtime: ChildRuntime, front: zmq.Socket[Any],
              front_decoder: FrameDecoder[Any]) -> None:
        """Connect a DEALER to every peer; ``front`` (the worker's ROUTER) is read while waiting."""
        self._front, self._front_decoder = front, front_decoder
        self._poller.register(front, zmq.POLLIN)
        if self.min_chars <= 0:
            return
        routing_id = f"peer-{self.index}".encode()
        for j, address in self.addresses.items():
            sock = runtime.connect(zmq.DEALER, address,
                                   options={zmq.ROUTING_ID: routing_id, zmq.IMMEDIATE: 1})
            self._dealers.append((j, sock))
            self._poller.register(sock, zmq.POLLIN)

    def all_counters(self) -> dict[str, int]:
        return {**self.counters, **self._answers.counters()}

    # -- the receiving side --------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Ids of ``text``, equal to ``Tokenizer.encode(text, add_special_tokens=...)``."""
        tok = self.tokenizer
        now = time.monotonic()
        peers = [(j, s) for j, s in self._dealers if self._slow_until.get(j, 0.0) <= now]
        if len(text) < self.min_chars or not peers:
            return tok.encode(text, add_special_tokens=add_special_tokens)
        # shares of at least half the threshold (a text at it is cut in two), the peers taken
        # in turn so that no one of them gets every first share
        n_shares = max(2, min(1 + len(peers), 2 * len(text) // self.min_chars))
        turn = self._jobs % len(peers)
        peers = (peers[turn:] + peers[:turn])[:n_shares - 1]
        t_plan = time.perf_counter()
        plan = tok.plan_parts(text, n_shares * CHUNKS_PER_SHARE,
                              add_special_tokens=add_special_tokens, min_part_chars=CHUNK_CHARS)
        chunks = plan.parts
        results: list[list[list[int]] | None] = [None] * len(chunks)
        groups = _groups([sum(map(len, c)) for c in chunks], n_shares)
        jobs: dict[str, tuple[int, int, int]] = {}  # job id -> (peer, first chunk, end chunk)
        if len(groups) > 1:
            self.counters["split_prompts"] += 1
        a0, b0 = groups[0] if groups else (0, 0)
        own = list(range(a0, b0))
        for (a, b), (j, sock) in zip(groups[1:], peers):
            self._jobs += 1
            job_id = f"{self.index}.{self._jobs}"
            frame = EncodePart(job_id, [t for chunk in chunks[a:b] for t in chunk])
            try:
                sock.send(self._encode(frame), flags=zmq.NOBLOCK)
            except zmq.ZMQError:  # not connected (restarting) or its queue is full: ours then
                own += range(a, b)
                continue
            jobs[job_id] = (j, a, b)
            self.counters["split_shares_sent"] += 1
        t0 = time.perf_counter()
        for i in own:  # chunk 0 is always ours
            results[i] = tok.encode_units(chunks[i], at_start=plan.at_start and i == 0)
            if jobs:
                self._read_front()  # a peer's share first: it may be waiting on us
        t_own = time.perf_counter()
        grace_until = t_own + max(GRACE_MIN_S, GRACE_FACTOR * (t_own - t0))
        missing = [i for i, r in enumerate(results) if r is None]
        while missing:
            wait_s = grace_until - time.perf_counter()
            if jobs:
                self._wait(jobs, chunks, results, max(0.0, wait_s))
                missing = [i for i in missing if results[i] is None]
            if missing and (wait_s <= 0 or not jobs):
                i = missing.pop()  # the last chunk first: the peer works from the front
                results[i] = tok.encode_units(chunks[i])
                self.counters["split_chunks_taken_back"] += 1
        _log.debug("split %d chars: plan %.1f ms, own share %.1f ms, all %.1f ms, %d chunks in "
                   "%s, %d shares unanswered", len(text), (t0 - t_plan) * 1000, (t_own - t0) * 1000,
                   (time.perf_counter() - t_plan) * 1000, len(chunks), groups, len(jobs))
        cooldown_end = time.monotonic() + PEER_COOLDOWN_S
        for j, _, _ in jobs.values():  # never answered: their answers will come late, if at all
            self._slow_until[j] = cooldown_end
        return plan.assemble([r for r in results if r is not None])

    def _wait(self, jobs: dict[str, tuple[int, int, int]], chunks: list[list[str]],
              results: list[list[list[int]] | None], timeout_s: float) -> None:
        """Poll once (up to ``timeout_s``): take the answers that came, serve the peers' shares."""
        timeout_ms = 0 if timeout_s <= 0 else max(1, int(timeout_s * 1000))
        events = dict(self._poller.poll(timeout_ms))
        for _, sock in self._dealers:
            if sock in events:
                self._take_answers(sock, jobs, chunks, results)
        if self._front is not None and self._front in events:
            self._read_front()

    def _take_answers(self, sock: zmq.Socket[Any], jobs: dict[str, tuple[int, int, int]],
                      chunks: list[list[str]], results: list[list[list[int]] | None]) -> None:
        while True:
            try:
                data = sock.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            answer = self._answers.decode(data, peer="peer")
            if answer is None:
                continue
            job = jobs.pop(answer.job_id, None)
            if job is None:
                self.counters["split_answers_late"] += 1  # a share already taken back
                continue
            _, a, b = job
            try:
                counts = unpack_ids(answer.counts)
                ids = unpack_ids(answer.token_ids)
            except ValueError:
                counts, ids = [], []
            n_units = sum(len(chunks[i]) for i in range(a, b))
            if answer.error or len(counts) != n_units or sum(counts) != len(ids):
                self.counters["split_answers_bad"] += 1  # its chunks are encoded here
                _log.warning("peer share %s: %s", answer.job_id,
                             answer.error or f"{len(counts)} counts for {n_units} units")
                continue
            pos = 0
            units = iter(counts)
            for i in range(a, b):
                got = []
                for _ in chunks[i]:
                    n = next(units)
                    got.append(ids[pos:pos + n])
                    pos += n
                if results[i] is None:
                    results[i] = got

    def _read_front(self) -> None:
        """Read what waits on the worker's own socket: answer peers' shares, keep the rest."""
        front, decoder = self._front, self._front_decoder
        if front is None or decoder is None:
            return
        for _ in range(_DRAIN_MAX):
            try:
                parts = front.recv_multipart(flags=zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            client_id, frame = decoder.decode_routed(parts)
            if isinstance(frame, EncodePart):
                self.reply(client_id, self.serve(frame))
            elif frame is not None:
                self.deferred.append((client_id, frame))

    # -- the peer side -------------------------------------------------------------------------

    def serve(self, frame: EncodePart) -> EncodedPart:
        """Encode one share a peer sent; an error becomes the answer's ``error``, never raised."""
        self.counters["split_shares_served"] += 1
        try:
            if sum(map(len, frame.texts)) > self.max_chars:
                return EncodedPart(frame.job_id, error=f"share over {self.max_chars} characters")
            got = self.tokenizer.encode_units(frame.texts, at_start=frame.at_start)
        except TextprocError as e:
            return EncodedPart(frame.job_id, error=str(e))
        except Exception as e:  # a share's bug must not take the worker down
            _log.exception("share %r failed in worker %d", frame.job_id, self.index)
            return EncodedPart(frame.job_id, error=f"internal error: {type(e).__name__}: {e}")
        return EncodedPart(frame.job_id, pack_ids(list(chain.from_iterable(got))),
                           pack_ids([len(ids) for ids in got]))

    def reply(self, peer_id: bytes, answer: EncodedPart) -> None:
        if self._front is None:
            return
        try:
            self._front.send_multipart([peer_id, self._encode(answer)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:  # the asking worker is gone: it encodes the share itself
            _log.warning("answer %s to %s not delivered: %s", answer.job_id, peer_id, e)


def _groups(sizes: list[int], n: int) -> list[tuple[int, int]]:
    """Chunks (their sizes, in order) into at most n contiguous groups of about equal size."""
    total = sum(sizes)
    cum = [0]
    for size in sizes:
        cum.append(cum[-1] + size)
    bounds = {0, len(sizes)}
    for k in range(1, n):
        goal = total * k / n
        bounds.add(min(range(len(cum)), key=lambda i: abs(cum[i] - goal)))
    ordered = sorted(bounds)
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if a < b]

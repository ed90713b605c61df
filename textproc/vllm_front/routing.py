"""Which engine a request goes to: the one holding the longest cached prefix of its prompt,
unless that one is overloaded, else the least loaded (:class:`PrefixRouter`).

textproc knows a prompt's ids before any engine sees them, which is what a prefix-aware router
needs. Each engine's prefix cache is modelled the way vLLM keys its own: the prompt in blocks
of ``block_size`` tokens (the engine's, from its ready message), each block keyed by a hash
chained over the blocks before it, so a key names a whole prefix. The router remembers, per
engine, the keys of the prompts it sent there, most recent last, at most about as many as the
engine's KV cache holds (``num_gpu_blocks``): an estimate of what vLLM still has cached (its
own eviction is LRU too). A request's match on an engine is how many of its leading blocks that
engine holds.

Load is what the router knows for sure: requests it sent to an engine that have not finished
(``running``: those the engine runs and those it queues); from the engine's own stats only its
KV usage counts (as of its last step; an engine with nothing left is taken as empty). An engine
is overloaded when it has ``overload_margin`` more unfinished requests than the least loaded
one, or its KV cache is over ``kv_full`` used: then the match does not decide, the load does.
Ties go to the least loaded engine, then the one given fewest requests so far. The cost per request is one hash per
block of its prompt and one dict lookup per block per engine.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EngineLoad", "PrefixRouter", "block_keys"]

DEFAULT_BLOCK_SIZE = 16


def block_keys(prompt_ids: Any, block_size: int) -> list[int]:
    """The chained hash of each whole block of ``prompt_ids`` (an ``array('I')`` or a list)."""
    keys: list[int] = []
    previous = 0
    if not isinstance(prompt_ids, array):
        prompt_ids = array("I", prompt_ids)
    data = prompt_ids.tobytes()
    step = prompt_ids.itemsize * block_size
    for start in range(0, len(data) - len(data) % step, step):
        previous = hash((previous, data[start:start + step]))
        keys.append(previous)
    return keys


@dataclass
class EngineLoad:
    """One engine as the router sees it."""

    ready: bool = False
    running: int = 0  # requests sent there and not finished
    waiting: int = 0  # the engine's own queue, from its last stats (shown, not weighed)
    kv_usage: float = 0.0  # 0..1, from its last stats
    capacity_blocks: int = 1 << 16  # blocks its prefix cache holds (its KV cache size)
    sent: int = 0  # requests routed here in all (ties go to the engine given fewest)
    cached: OrderedDict[int, None] = field(default_factory=OrderedDict)


class PrefixRouter:
    """Picks an engine per request; ``routed`` / ``finished`` keep its view of the load."""

    def __init__(self, n_engines: int, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 overload_margin: int = 4, kv_full: float = 0.95, policy: str = "prefix") -> None:
        if policy not in ("prefix", "round_robin", "least_loaded"):
            raise ValueError(f"routing policy {policy!r}: prefix, round_robin or least_loaded")
        self.engines = [EngineLoad() for _ in range(n_engines)]
        self.block_size = block_size
        self.overload_margin = overload_margin
        self.kv_full = kv_full
        self.policy = policy
        self._next = 0  # round robin
        self.matched_blocks = 0  # prompt blocks routed to an engine that held them
        self.last_match = 0  # the last choice's matched blocks
        self.routed_blocks = 0

    def choose(self, prompt_ids: Any) -> tuple[int, list[int]]:
        """``(engine index, the prompt's block keys)``; -1 when no engine is ready."""
        self.last_match = 0
        ready = [i for i, e in enumerate(self.engines) if e.ready]
        if not ready:
            return -1, []
        if self.policy == "round_robin":
            for _ in range(len(self.engines)):
                i, self._next = self._next, (self._next + 1) % len(self.engines)
                if self.engines[i].ready:
                    return i, []
        keys = block_keys(prompt_ids, self.block_size) if self.policy == "prefix" else []
        least = min(self._load(i) for i in ready)
        best, best_score = -1, (-1, 0, 0, 0)
        for i in ready:
            engine = self.engines[i]
            load = self._load(i)
            usable = load - least < self.overload_margin and engine.kv_usage < self.kv_full
            match = _match(engine.cached, keys) if usable else 0
            score = (match, -load, -engine.sent, -i)
            if score > best_score:
                best, best_score = i, score
        self.routed_blocks += len(keys)
        self.matched_blocks += best_score[0]
        self.last_match = best_score[0]
        return best, keys

    def _load(self, i: int) -> int:
        # the requests sent there and not finished: those the engine runs and those it queues
        # (its own waiting count is a part of them, and only as fresh as its last step)
        return self.engines[i].running

    def routed(self, i: int, keys: Sequence[int]) -> None:
        """A request went to engine ``i``: its blocks are cached there from now on."""
        engine = self.engines[i]
        engine.running += 1
        engine.sent += 1
        cached = engine.cached
        for key in reversed(keys):  # a prompt's first blocks last: evicted last, as vLLM's
            if key in cached:
                cached.move_to_end(key)
            else:
                cached[key] = None
        while len(cached) > engine.capacity_blocks:
            cached.popitem(last=False)

    def finished(self, i: int) -> None:
        engine = self.engines[i]
        if engine.running > 0:
            engine.running -= 1
        if engine.running == 0:  # idle: its last stats (sent with its last step) are stale
            engine.waiting = 0
            engine.kv_usage = 0.0

    def ready(self, i: int, *, block_size: int | None = None, capacity_blocks: int | None = None) -> None:
        engine = self.engines[i]
        engine.ready = True
        if block_size:
            self.block_size = block_size
        if capacity_blocks:
            engine.capacity_blocks = capacity_blocks

    def pause(self, i: int) -> None:
        """Engine ``i`` takes nothing new for now; what it holds and runs stays as it was."""
        self.engines[i].ready = False

    def gone(self, i: int) -> None:
        """Engine ``i`` died: nothing of it is cached or running any more."""
        old = self.engines[i]
        self.engines[i] = EngineLoad(capacity_blocks=old.capacity_blocks, sent=old.sent)

    def stats(self, i: int, *, waiting: int, kv_usage: float) -> None:
        engine = self.engines[i]
        engine.waiting = waiting
        engine.kv_usage = kv_usage


def _match(cached: OrderedDict[int, None], keys: Sequence[int]) -> int:
    # how many leading blocks are held
    n = 0
    for key in keys:
        if key not in cached:
            break
        n += 1
    return n

"""The detokenizer's requests on partial constraint indexes, until each index's whole one comes.

A worker sends a request with the partial index of a progressive compile and the whole index
after it (``IndexDone``). Until then the engine may hold the request (it outran the builder), so
the detokenizer must end it if the whole index can no longer come: when every worker compiling
it has died (``ProcessDied`` on the supervisor's events; workers are named by pid, so a
Submit drained after its worker's death is caught too), or at a deadline (the compile budget
plus slack: a worker's compile gives up within its budget, so a whole index that has not come
by then never will). Either way the requests fail with a message saying what happened; the
partial table itself stays in the relay (a restarted worker's compile completes it).

Bounded: each request id is kept under one key, and when the ids kept reach twice the
detokenizer's ``max_live_requests`` those of finished requests are dropped, so at most
``2 * max_live_requests`` ids (and as many keys) are ever held.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Container
from dataclasses import dataclass, field

__all__ = ["PartialWaits", "HOLD_SLACK_S"]

HOLD_SLACK_S = 2.0  # past the compile budget: the whole index's packing and its trip here
_DEAD_KEPT = 64  # pids of dead workers remembered (a Submit of theirs may still be queued)


@dataclass
class _Wait:
    deadline: float
    compilers: set[int] = field(default_factory=set)  # worker pids whose IndexDone is to come
    rids: list[str] = field(default_factory=list)
    lost: str = ""  # why the whole index will not come, when known before the deadline


class PartialWaits:
    """Partial index key -> the requests naming it and the workers compiling its whole index."""

    def __init__(self, hold_s: float, max_requests: int, clock: Callable[[], float]) -> None:
        self.hold_s = hold_s  # how long a request may wait for a whole index
        self.max_requests = max_requests
        self.clock = clock
        self._waits: dict[str, _Wait] = {}
        self._n = 0  # request ids kept, over all keys
        self._dead: OrderedDict[int, str] = OrderedDict()  # dead worker pid -> how it died

    def __len__(self) -> int:
        return self._n

    def add(self, key: str, rid: str, compiler: int, live: Container[str]) -> None:
        """Request ``rid`` walks ``key``'s partial index; ``compiler`` > 0 is the pid of the
        worker that sent that table with it (its whole index follows from there)."""
        wait = self._waits.get(key)
        if wait is None:
            wait = self._waits[key] = _Wait(self.clock() + self.hold_s)
        if compiler in self._dead:  # died before this Submit was read: expires at once
            if not wait.compilers:
                wait.lost, wait.deadline = self._dead[compiler], self.clock()
        elif compiler > 0 and compiler not in wait.compilers:
            wait.compilers.add(compiler)
            wait.lost = ""
            wait.deadline = max(wait.deadline, self.clock() + self.hold_s)
        wait.rids.append(rid)
        self._n += 1
        if self._n >= 2 * self.max_requests:
            self._prune(live)

    def whole(self, key: str) -> list[str]:
        """``key``'s whole index (or why it failed) came: its requests, no longer kept."""
        wait = self._waits.pop(key, None)
        if wait is None:
            return []
        self._n -= len(wait.rids)
        return wait.rids

    def worker_died(self, pid: int, why: str) -> dict[str, list[str]]:
        """The worker of ``pid`` died (``why``): the keys it was the last compiler of, with
        their requests."""
        self._dead[pid] = why
        while len(self._dead) > _DEAD_KEPT:
            self._dead.popitem(last=False)
        lost = [key for key, wait in self._waits.items() if wait.compilers == {pid}]
        for wait in self._waits.values():
            wait.compilers.discard(pid)
        return {key: self.whole(key) for key in lost}

    def expired(self) -> dict[str, tuple[list[str], str]]:
        """The keys whose whole index is past its deadline, with their requests and why it
        will not come when known ("" when only the deadline passed)."""
        now = self.clock()
        done = [(key, wait.lost) for key, wait in self._waits.items() if wait.deadline <= now]
        return {key: (self.whole(key), lost) for key, lost in done}

    def _prune(self, live: Container[str]) -> None:
        for key in list(self._waits):
            wait = self._waits[key]
            kept = [rid for rid in wait.rids if rid in live]
            self._n -= len(wait.rids) - len(kept)
            if kept:
                wait.rids = kept
            else:
                del self._waits[key]

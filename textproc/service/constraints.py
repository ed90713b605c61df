"""Constraints on the service side: workers compile, the detokenizer relays each index once.

Owns :class:`WorkerConstraints` (a worker's vocabulary, compile cache and which indexes it has
already handed to the detokenizer) and :class:`IndexRelay` (the detokenizer's store of index
tables and its mirror of the engine's index cache). The engine holds exactly what the relay
sent minus what it told it to evict, because requests and indexes travel on the one engine-in
socket in order; a new engine instance empties the mirror.

How a slow compile is bounded: every compile has a wall-clock budget of ``MAX_COMPILE_S`` from
the request's arrival at the worker (checked in every phase, from the regex's size to the
shortest completions), so one request holds its worker at most that long and gets a 400 naming
the budget (the vocabulary tables are built before Ready, outside any budget).

One compile per constraint in the service: the workers share an :class:`IndexStore` (the
runtime directory's, or ``--constraint-cache-dir`` to keep it across restarts). A worker
compiles a key only while it holds the key's claim; a worker whose request needs a key another
one is compiling waits for that compile's index (or its failure) within its own budget, and a
constraint compiled before is read back. Failures that would repeat (unsupported constructs,
state or size budget) are kept, so a repeat of the same request fails at once; a deadline
overrun fails only the requests that waited for that compile (a later one compiles again: a
quieter machine may pass).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from textproc.core.constraints import Budget, IndexCache, TokenIndex, TokenVocabulary, compile_constraint
from textproc.core.constraints.compile import FIRST_SECONDS, compile_progressive, constraint_key, constraint_regex
from textproc.errors import InvalidInput, short
from textproc.protocol import EngineIndex, IndexDone, IndexTable
from textproc.service.index_store import IndexStore

_log = logging.getLogger("textproc.worker")

__all__ = ["WorkerConstraints", "IndexRelay", "structured_regex", "MAX_COMPILE_S", "STRUCTURED_KINDS"]

MAX_COMPILE_S = 20.0  # wall seconds one compile may take on a worker (serve --max-compile-s)
# how many compile budgets requests on a constraint's first states wait for another worker's
# whole index: its build is bounded by its own budget from when it starts, and may wait
# behind that worker's other builds
WAIT_BUDGETS = 3
MAX_INDEX_BYTES = 48 << 20  # one index, so its frame stays under the 64 MiB frame limit
WORKER_CACHE_BYTES = 512 << 20  # compiled indexes a worker keeps (LRU)
WORKER_SENT_KEYS = 256  # keys a worker remembers having sent (then it sends the table again)
RELAY_STORE_BYTES = 1 << 30  # index tables the detokenizer keeps to (re)send to an engine
ENGINE_CACHE_BYTES = 512 << 20  # what the detokenizer lets the engine hold (it names evictions)
STRUCTURED_KINDS = ("json", "regex", "choice")
WAIT_POLL_S = 0.005  # how often a worker waiting for another's compile looks for its file
# a string, a counted string (maxLength: its kinds' token walks, index.counted) and a number
WARM_UP_S = 600.0  # the warm-up compile's wall-time budget (a request's is max_compile_s)
_WARM_UP = {"type": "object", "properties": {"s": {"type": "string"}, "c": {"type": "string", "maxLength": 4},
                                             "n": {"type": "integer"}}}


def structured_regex(spec: Any) -> str:
    """The regex of a structured-output spec ``{"json": schema} | {"regex": str} |
    {"choice": [str, ...]}`` (what the HTTP layer makes of response_format / structured_outputs);
    ``{"json": schema, "strict": True}`` closes objects that list properties."""
    strict = isinstance(spec, dict) and "json" in spec and spec.get("strict") is True
    kinds = [k for k in spec if not (strict and k == "strict")] if isinstance(spec, dict) else []
    if len(kinds) != 1 or kinds[0] not in STRUCTURED_KINDS:
        raise InvalidInput(f"structured output {short(spec)} must be one of "
                           f"{{'json': schema}}, {{'regex': str}}, {{'choice': [str]}}")
    kind = kinds[0]
    value = spec[kind]
    if kind == "json":
        return constraint_regex(json_schema=value, strict=strict)[0]
    if kind == "regex":
        return constraint_regex(regex=value)[0]
    return constraint_regex(choice=value)[0]


def _limits(budget: Budget) -> str:
    """The limits a compile's outcome depends on, as the key of a stored failure."""
    return f"{budget.max_states}:{budget.max_bytes}:{budget.max_seconds}:{budget.max_regex_chars}"


@dataclass
class _Pending:
    """A key whose first states (``index``, a partial index) requests went out on; its whole
    index follows from this worker's background build (``build``, holding the store's claim
    ``claim``) or from another worker's compile (looked for in the store)."""

    index: TokenIndex
    pattern: str
    budget: Budget  # the first request's (its clock: that arrival; waiters give up after WAIT_BUDGETS)
    arrived: float  # that request's arrival, as the store's clock (time.time())
    build: Future[tuple[TokenIndex, IndexTable, float]] | None = None
    claim: int | None = None  # the store's compile lock of our build (-1: no lock to be had)
    shards: set[int] = field(default_factory=set)  # detokenizer shards handed the first states


class _Builds:
    """One daemon thread that builds whole indexes in order while the worker's own thread
    serves requests (the GIL is shared: a request waits at most a switch interval or so for
    it, where it used to wait for the whole build). A daemon, so a worker told to stop does
    not wait for a build."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((job, future))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="index-builds", daemon=True)
            self._thread.start()
        return future

    def _run(self) -> None:
        while True:
            job, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as e:  # handed to the worker's thread (take_wholes)
                future.set_exception(e)


def table_of(index: TokenIndex) -> IndexTable:
    """The wire form of a compiled index."""
    fields = index.pack()
    return IndexTable(index.key, **fields)  # type: ignore[arg-type]


class WorkerConstraints:
    """A worker's compiler: vocabulary built on first use, compiled indexes cached by content.

    A new constraint's compile hands out its first states (a partial index) within a few
    milliseconds; its whole index is built on a background thread (``_Builds``) while the
    worker serves other requests, and :meth:`take_wholes`, called between requests, hands it
    (or why it failed) to the detokenizer shards the first states went to."""

    def __init__(self, tokenizer: Any, end_ids: list[int], *, max_frame_bytes: int,
                 text_specials: frozenset[str] = frozenset(), store: IndexStore | None = None,
                 max_compile_s: float = MAX_COMPILE_S, first_seconds: float = FIRST_SECONDS) -> None:
        self.tokenizer = tokenizer
        self.max_compile_s = max_compile_s
        self.store = store  # compiled indexes on disk, shared by the workers (or None)
        self.end_ids = end_ids
        self.text_specials = text_specials  # format markers a forced call writes as text
        self.max_index_bytes = min(MAX_INDEX_BYTES, max_frame_bytes // 2)
        self.cache = IndexCache(WORKER_CACHE_BYTES)
        self._vocab: TokenVocabulary | None = None
        # (detokenizer shard, key) of the tables this worker has handed over
        self._sent: OrderedDict[tuple[int, str], None] = OrderedDict()
        self.first_seconds = first_seconds  # a compile hands out a partial index after this
        self.compiles = 0
        self.compile_s = 0.0  # wall seconds of this worker's compiles (first states and wholes)
        self.first_states_taken = 0  # requests started on another worker's published first states
        self._claim_fd: int | None = None  # the store's claim _claim took, until compile() keeps it
        # keys whose first states requests went out on, their whole indexes to come
        self.pending: dict[str, _Pending] = {}
        self._builds = _Builds()
        self.last: TokenIndex | None = None  # what the last compile() gave (its first states)

    def prepare(self) -> None:
        """Build the vocabulary and its tables now, and create the store's directory (the worker
        does it before Ready)."""
        self.vocab.tables()
        # the token sets every JSON string state needs (its loop, the tokens leaving it, the
        # \uXXXX run, a counted string's walks) are derived once per vocabulary: derive them
        # now, not in a request's compile
        # (a budget of its own: a worker starting on a busy box is slow, never refused)
        compile_constraint(self.vocab, json_schema=_WARM_UP, cache=None,
                           budget=Budget(max_seconds=WARM_UP_S))
        if self.store is not None:
            self.store.start()

    @property
    def vocab(self) -> TokenVocabulary:
        if self._vocab is None:
            self._vocab = TokenVocabulary.from_tokenizer(self.tokenizer, end_ids=self.end_ids,
                                                         text_specials=self.text_specials)
            self._vocab.tables()
        return self._vocab

    def compile(self, pattern: str, shard: int = 0, *,
                started: float | None = None) -> tuple[TokenIndex, IndexTable | None]:
        """The index of ``pattern`` (its first states while its whole index is made) and, if
        this worker has not sent it to detokenizer shard ``shard`` yet, its table. The budget's
        clock starts at ``started`` (the request's arrival at this worker,
        ``time.monotonic()``; default now). A constraint another worker is compiling is not
        compiled again: its requests go out on the first states that worker published."""
        index, table = self._compile(pattern, shard, started)
        self.last = index
        return index, table

    def table_for(self, shard: int) -> IndexTable | None:
        """The last compile's table for shard ``shard``, unless it has it from this worker
        (the n sub-requests of one request spread over the shards)."""
        index = self.last
        if index is None:
            return None
        return self._table(index.key, index, shard, self.pending.get(index.key))

    def _compile(self, pattern: str, shard: int,
                 started: float | None) -> tuple[TokenIndex, IndexTable | None]:
        vocab = self.vocab  # built before the budget's clock starts (once per worker)
        key = constraint_key(vocab, pattern)
        pending = self.pending.get(key)
        if pending is not None:
            return pending.index, self._table(key, pending.index, shard, pending)
        index = self.cache.get(key)
        if index is None and self.store is not None:
            index = self.store.get(key)  # compiled before, by any worker or an earlier run
            if index is not None:
                self.cache.put(key, index)
        if index is None:
            budget = Budget(max_seconds=self.max_compile_s, max_bytes=self.max_index_bytes,
                            started=time.monotonic() if started is None else started,
                            what=f"regex {short(pattern)}")
            index = self._claim(key, pattern, budget)
            pending = self.pending.get(key)
            if pending is not None:  # another worker's first states
                return pending.index, self._table(key, pending.index, shard, pending)
        if index is None:
            claim, self._claim_fd = self._claim_fd, None
            began = time.monotonic()
            try:
                index, rest = compile_progressive(vocab, pattern, budget=budget, cache=self.cache,
                                                  first_seconds=self.first_seconds)
            except InvalidInput as e:
                self._failed(key, budget, e, claim)
                raise
            except BaseException:  # a bug: give the claim back, the next request tries again
                self._release(claim)
                raise
            finally:
                self.compile_s += time.monotonic() - began
            self.compiles += 1
            if rest is None:
                self._stored(table_of(index), claim)
            else:  # the claim is kept until the whole index is stored
                arrived = time.time() - (time.monotonic() - budget.started)
                pending = self.pending[key] = _Pending(index, pattern, budget, arrived, claim=claim)
                pending.build = self._builds.submit(lambda: _whole(rest, budget))
                if self.store is not None:  # the workers waiting for it start on it too
                    self.store.put_partial(table_of(index))
                return index, self._table(key, index, shard, pending)
        return index, self._table(key, index, shard, None)

    def _table(self, key: str, index: TokenIndex, shard: int, pending: _Pending | None) -> IndexTable | None:
        """``index``'s table for shard ``shard``, unless it has it from this worker."""
        if (shard, key) in self._sent:
            return None
        if pending is not None:
            pending.shards.add(shard)
        return table_of(index)

    def _claim(self, key: str, pattern: str, budget: Budget) -> TokenIndex | None:
        """Take ``key``'s compile claim (None, the claim in ``_claim_fd``: compile it here),
        or the index another worker compiled meanwhile (waited for while it compiles; its
        failure is raised), or the first states it published (kept in ``pending``:
        :meth:`take_wholes` sends its whole index once that worker stored it)."""
        store = self.store
        if store is None:
            return None
        arrived = time.time() - (time.monotonic() - budget.started)  # as the store's clock
        while True:
            failure = store.failure(key, _limits(budget), arrived)
            if failure is not None:
                raise InvalidInput(failure)
            fd = store.claim(key)
            if fd is not None:
                if store.has(key):  # stored between the look-up and the claim
                    index = store.get(key)
                    if index is not None:
                        store.release(fd, key)
                        self.cache.put(key, index)
                        return index
                self._claim_fd = fd
                return None
            while not store.has(key):  # another worker compiles it: wait for its file
                budget.check_time("waiting for another worker's compile of it")
                first = store.get_partial(key)
                if first is not None:
                    self.first_states_taken += 1
                    self.pending[key] = _Pending(first, pattern, budget, arrived)
                    return first
                time.sleep(WAIT_POLL_S)
                fd = store.claim(key)
                if fd is not None:  # it stopped: finished, failed, ran out of time or died
                    store.release(fd)
                    break
            index = store.get(key)
            if index is not None:
                self.cache.put(key, index)
                return index

    def take_wholes(self) -> list[tuple[IndexDone, list[int]]]:
        """The pending keys whose whole index (or failure) is settled now, each as the frame
        for the detokenizer shards its first states went to, and those shards; the others are
        looked at again later. Never waits: our own build is taken once its thread is done;
        another worker's whole file is passed on as stored (not unpacked and packed again),
        or compiled here if that worker stopped without storing it (it died); a key whose
        first request's budget is spent fails."""
        settled = []
        for key, pending in list(self.pending.items()):
            try:
                table = self._whole_table(key, pending)
            except InvalidInput as e:
                done = IndexDone(key, None, str(e))
            else:
                if table is None:
                    continue
                done = IndexDone(key, table)
            del self.pending[key]
            shards = sorted(pending.shards)
            if done.table is None:
                for shard in shards:
                    self.unsent(key, shard)
            settled.append((done, shards))
        return settled

    def _whole_table(self, key: str, pending: _Pending) -> IndexTable | None:
        """``key``'s whole table when settled (None while it is still being made); its
        compile's failure raised."""
        if pending.build is not None:
            if not pending.build.done():
                return None
            try:
                _, built, took = pending.build.result()
                self.compile_s += took
            except InvalidInput as e:
                self._failed(key, pending.budget, e, pending.claim)
                raise
            except Exception as e:  # a bug: its requests fail, the next request tries again
                self._release(pending.claim)
                _log.error("building the whole index of %s failed", key, exc_info=e)
                raise InvalidInput(f"internal error building the constraint's index: "
                                   f"{type(e).__name__}: {e}") from e
            self._stored(built, pending.claim)
            return built
        store = self.store
        assert store is not None
        budget = pending.budget
        table = store.get_table(key)
        if table is not None:
            return table
        failure = store.failure(key, _limits(budget), pending.arrived)
        if failure is not None:
            raise InvalidInput(failure)
        waited = time.monotonic() - budget.started
        if waited > WAIT_BUDGETS * budget.max_seconds:
            raise InvalidInput(f"waited over {waited:.0f} s for another worker's compile of "
                               f"{budget.what}, which is still running (the service is busy "
                               f"compiling other constraints); retry")
        fd = store.claim(key)
        if fd is None:
            return None  # still compiled there
        try:
            table = store.get_table(key)  # stored between the look-up and the claim
            if table is not None:
                return table
            self.compiles += 1
            began = time.monotonic()
            try:
                whole = compile_constraint(self.vocab, regex=pending.pattern, budget=budget,
                                           cache=self.cache)
            except InvalidInput as e:
                self.compile_s += time.monotonic() - began
                overrun = time.monotonic() - budget.started > budget.max_seconds
                store.fail(key, _limits(budget), str(e), deadline=overrun)
                raise
            table = table_of(whole)
            self.compile_s += time.monotonic() - began
            store.put(table)
            return table
        finally:
            store.release(fd, key)

    def _stored(self, table: IndexTable, claim: int | None) -> None:
        """The whole index is made: store its ``table`` for the other workers, give back the
        claim."""
        if self.store is not None:
            self.store.put(table)
        self._release(claim, table.key)

    def _failed(self, key: str, budget: Budget, error: InvalidInput, claim: int | None) -> None:
        """Compiling ``key`` failed: the failure is stored for the other workers, then the
        claim is given back. A deadline overrun fails only the requests that arrived before
        it (they waited for this compile: one more would overrun the same way), not later
        ones (a quieter machine may pass it)."""
        if self.store is not None:
            overrun = time.monotonic() - budget.started > budget.max_seconds
            self.store.fail(key, _limits(budget), str(error), deadline=overrun)
        self._release(claim)

    def _release(self, claim: int | None, stored: str | None = None) -> None:
        if claim is not None and self.store is not None:
            self.store.release(claim, stored)

    def unsent(self, key: str, shard: int) -> None:
        """Shard ``shard`` did not get ``key``'s whole table: the next request sends it."""
        self._sent.pop((shard, key), None)

    def forget_shard(self, shard: int) -> None:
        """Detokenizer shard ``shard`` restarted: it holds none of the tables sent to it."""
        for entry in [e for e in self._sent if e[0] == shard]:
            del self._sent[entry]

    def sent(self, key: str, shard: int = 0) -> None:
        """The Submit carrying ``key``'s table reached detokenizer shard ``shard``."""
        entry = (shard, key)
        self._sent[entry] = None
        self._sent.move_to_end(entry)
        while len(self._sent) > WORKER_SENT_KEYS:
            self._sent.popitem(last=False)


def _whole(rest: Callable[[], TokenIndex], budget: Budget) -> tuple[TokenIndex, IndexTable, float]:
    """The whole index ``rest`` compiles, its table (packed on the build thread too) and the
    wall seconds that took; not started once its first request (``budget``'s clock) has
    waited ``WAIT_BUDGETS`` budgets behind other builds (its requests wait no longer)."""
    began = time.monotonic()
    if began - budget.started > WAIT_BUDGETS * budget.max_seconds:
        raise InvalidInput(f"waited over {began - budget.started:.0f} s behind other constraints' "
                           f"compiles before {budget.what} could be compiled (the service is busy "
                           f"compiling); retry")
    whole = rest()
    return whole, table_of(whole), time.monotonic() - began


class IndexRelay:
    """The detokenizer's side: tables by key, and a mirror of what the engine holds."""

    def __init__(self, *, store_bytes: int = RELAY_STORE_BYTES, engine_bytes: int = ENGINE_CACHE_BYTES) -> None:
        self.store_bytes = store_bytes
        self.engine_bytes = engine_bytes
        self._store: OrderedDict[str, tuple[IndexTable, int]] = OrderedDict()
        self._stored = 0
        self._engine: OrderedDict[str, int] = OrderedDict()  # key -> bytes, as the engine holds
        self._engine_total = 0
        self.sent_to_engine = 0  # indexes sent (a partial one's whole one not counted again)
        self.completed_on_engine = 0  # whole indexes sent after their partial ones
        self._partial_sent: set[str] = set()  # keys whose partial table the engine got
        # key -> bytes: partial tables the engine holds whose whole compile failed, evicted
        # with the next index sent (still counted in _engine_total until then)
        self._dropped: dict[str, int] = {}

    def remember(self, table: IndexTable) -> EngineIndex | None:
        """Keep ``table``; a whole table replaces a partial one under its key, and when the
        engine holds that partial one, the returned frame sends it the whole one now."""
        got = self._store.get(table.key)
        if got is not None:
            self._store.move_to_end(table.key)
            if not (got[0].n_known and not table.n_known):
                return None
            self._stored -= got[1]
            del self._store[table.key]
        size = len(table.masks) + len(table.exc_ids) * 2 + 64
        self._store[table.key] = (table, size)
        self._stored += size
        while self._stored > self.store_bytes and len(self._store) > 1:
            _, (_, old) = self._store.popitem(last=False)
            self._stored -= old
        # (a partial table the relay evicted meanwhile may still be walked in the engine)
        if table.n_known or table.key not in self._partial_sent:
            return None
        self._partial_sent.discard(table.key)
        self.completed_on_engine += 1
        if table.key not in self._engine:  # evicted meanwhile: requests may still walk it
            frame = self.frame_for(table.key)
            self.sent_to_engine -= 1  # counted as the partial one's completion
            return frame if isinstance(frame, EngineIndex) else None
        self._engine_total += size - self._engine[table.key]
        self._engine[table.key] = size
        return EngineIndex(table, [])

    def partial(self, key: str) -> bool:
        """Whether the table kept under ``key`` is a partial index (its whole one to follow)."""
        got = self._store.get(key)
        return got is not None and got[0].n_known > 0

    def drop(self, key: str) -> None:
        """Forget ``key``'s table (its whole compile failed): a request naming it fails, and
        the engine is told to evict the partial table it holds. Without that, the mirror
        still listed the key: a later compile of it (a deadline overrun is not cached) would
        find the engine "holding" the failed partial index, never send the new table, and its
        requests would wait on the engine for a whole index that never comes.

        A whole table kept under ``key`` (another worker's compile of the same constraint
        succeeded) stays: requests naming it are in flight, and the workers that sent it
        count on the relay holding it."""
        got = self._store.get(key)
        if got is not None and not got[0].n_known:
            return
        self._partial_sent.discard(key)
        got = self._store.pop(key, None)
        if got is not None:
            self._stored -= got[1]
        size = self._engine.pop(key, None)
        if size is not None:
            self._dropped[key] = size

    def frame_for(self, key: str) -> EngineIndex | None | bool:
        """What to send before a request naming ``key``: an ``EngineIndex``, None when the
        engine holds it already, False when the table is unknown here (the request fails)."""
        if key in self._engine:
            self._engine.move_to_end(key)
            return None
        got = self._store.get(key)
        if got is None:
            return False
        table, size = got
        evict = list(self._dropped)
        self._engine_total -= sum(self._dropped.values())
        self._dropped.clear()
        while self._engine and self._engine_total + size > self.engine_bytes:
            old_key, old_size = self._engine.popitem(last=False)
            self._engine_total -= old_size
            evict.append(old_key)
        self._engine[key] = size
        self._engine_total += size
        self.sent_to_engine += 1
        if table.n_known:
            self._partial_sent.add(key)
        return EngineIndex(table, evict)

    def engine_restarted(self) -> None:
        """A new engine instance holds nothing."""
        self._partial_sent.clear()
        self._dropped.clear()
        self._engine.clear()
        self._engine_total = 0

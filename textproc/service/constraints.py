"""Constraints on the service side: workers compile, the detokenizer relays each index once.

Owns :class:`WorkerConstraints` (a worker's vocabulary, compile cache and which indexes it has
already handed to the detokenizer) and :class:`IndexRelay` (the detokenizer's store of index
tables and its mirror of the engine's index cache). The engine holds exactly what the relay
sent minus what it told it to evict, because requests and indexes travel on the one engine-in
socket in order; a new engine instance empties the mirror.

How a slow compile is bounded: every compile has a wall-clock budget of ``MAX_COMPILE_S``
(checked in every phase, from the regex's size to the shortest completions), so one request
holds its worker at most that long and gets a 400 naming the budget (the vocabulary tables are
built before Ready, outside any budget). With an :class:`IndexStore` (``--constraint-cache-dir``)
a constraint compiled before, by any worker or an earlier run, is read back instead. Failures that would
repeat (unsupported constructs, state or size budget) are cached, so a repeat of the same
request fails at once; a deadline overrun is not (a loaded machine may have caused it). Other
requests are served by the other workers meanwhile.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from textproc.core.constraints import Budget, IndexCache, TokenIndex, TokenVocabulary, compile_constraint
from textproc.core.constraints.compile import constraint_key, constraint_regex
from textproc.errors import InvalidInput, short
from textproc.protocol import EngineIndex, IndexTable
from textproc.service.index_store import IndexStore

__all__ = ["WorkerConstraints", "IndexRelay", "structured_regex", "MAX_COMPILE_S", "STRUCTURED_KINDS"]

MAX_COMPILE_S = 5.0  # wall seconds one compile may take on a worker (serve --max-compile-s)
MAX_INDEX_BYTES = 48 << 20  # one index, so its frame stays under the 64 MiB frame limit
WORKER_CACHE_BYTES = 512 << 20  # compiled indexes a worker keeps (LRU)
WORKER_SENT_KEYS = 256  # keys a worker remembers having sent (then it sends the table again)
RELAY_STORE_BYTES = 1 << 30  # index tables the detokenizer keeps to (re)send to an engine
ENGINE_CACHE_BYTES = 512 << 20  # what the detokenizer lets the engine hold (it names evictions)
STRUCTURED_KINDS = ("json", "regex", "choice")
_WARM_UP = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}}


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


def table_of(index: TokenIndex) -> IndexTable:
    """The wire form of a compiled index."""
    fields = index.pack()
    return IndexTable(index.key, **fields)  # type: ignore[arg-type]


class WorkerConstraints:
    """A worker's compiler: vocabulary built on first use, compiled indexes cached by content."""

    def __init__(self, tokenizer: Any, end_ids: list[int], *, max_frame_bytes: int,
                 text_specials: frozenset[str] = frozenset(), store: IndexStore | None = None,
                 max_compile_s: float = MAX_COMPILE_S) -> None:
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
        self.last: TokenIndex | None = None  # the index of the last compile
        self.compiles = 0

    def prepare(self) -> None:
        """Build the vocabulary and its tables now, and create the store's directory (the worker
        does it before Ready)."""
        self.vocab.tables()
        # the token sets every JSON string state needs (its loop, the tokens leaving it, the
        # \uXXXX run) are derived once per vocabulary: derive them now, not in a request's compile
        compile_constraint(self.vocab, json_schema=_WARM_UP, cache=None)
        if self.store is not None:
            self.store.start()

    @property
    def vocab(self) -> TokenVocabulary:
        if self._vocab is None:
            self._vocab = TokenVocabulary.from_tokenizer(self.tokenizer, end_ids=self.end_ids,
                                                         text_specials=self.text_specials)
            self._vocab.tables()
        return self._vocab

    def compile(self, pattern: str, shard: int = 0) -> tuple[TokenIndex, IndexTable | None]:
        """The index of ``pattern`` and, if this worker has not sent it to detokenizer shard
        ``shard`` yet, its table."""
        vocab = self.vocab  # built before the budget's clock starts (once per worker)
        key = constraint_key(vocab, pattern)
        index = self.cache.get(key)
        if index is None and self.store is not None:
            index = self.store.get(key)  # compiled before, by any worker or an earlier run
            if index is not None:
                self.cache.put(key, index)
        if index is None:
            budget = Budget(max_seconds=self.max_compile_s, max_bytes=self.max_index_bytes)
            index = compile_constraint(vocab, regex=pattern, budget=budget, cache=self.cache)
            self.compiles += 1
            if self.store is not None:
                self.store.put(table_of(index))
        self.last = index
        return index, self.table_for(shard)

    def table_for(self, shard: int) -> IndexTable | None:
        """The last compiled index's table, unless shard ``shard`` has it from this worker."""
        index = self.last
        if index is None or (shard, index.key) in self._sent:
            return None
        return table_of(index)

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


class IndexRelay:
    """The detokenizer's side: tables by key, and a mirror of what the engine holds."""

    def __init__(self, *, store_bytes: int = RELAY_STORE_BYTES, engine_bytes: int = ENGINE_CACHE_BYTES) -> None:
        self.store_bytes = store_bytes
        self.engine_bytes = engine_bytes
        self._store: OrderedDict[str, tuple[IndexTable, int]] = OrderedDict()
        self._stored = 0
        self._engine: OrderedDict[str, int] = OrderedDict()  # key -> bytes, as the engine holds
        self._engine_total = 0
        self.sent_to_engine = 0

    def remember(self, table: IndexTable) -> None:
        if table.key in self._store:
            self._store.move_to_end(table.key)
            return
        size = len(table.masks) + len(table.exc_ids) * 2 + 64
        self._store[table.key] = (table, size)
        self._stored += size
        while self._stored > self.store_bytes and len(self._store) > 1:
            _, (_, old) = self._store.popitem(last=False)
            self._stored -= old

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
        evict = []
        while self._engine and self._engine_total + size > self.engine_bytes:
            old_key, old_size = self._engine.popitem(last=False)
            self._engine_total -= old_size
            evict.append(old_key)
        self._engine[key] = size
        self._engine_total += size
        self.sent_to_engine += 1
        return EngineIndex(table, evict)

    def engine_restarted(self) -> None:
        """A new engine instance holds nothing."""
        self._engine.clear()
        self._engine_total = 0

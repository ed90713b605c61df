"""``compile_constraint``: regex / JSON Schema / choice / forced tool call -> :class:`TokenIndex`.

Owns the one door into the compiler (regex tree -> minimal byte DFA -> token index), its
budget, and the content-addressed cache. The cache key is a hash of the vocabulary's
fingerprint and the regex the constraint becomes, so two spellings of the same constraint
share one index; failures are remembered too (a request that blew the state or size budget,
or used an unsupported construct, fails at once the next time instead of burning the budget
again). Running out of time is not remembered: on a quieter machine it may pass.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from textproc.core.constraints.automaton.dfa import NFA, build_dfa, counted_states_floor
from textproc.core.constraints.automaton.lazy import lazy_dfa
from textproc.core.constraints.budget import MAX_REGEX_CHARS, Budget
from textproc.core.constraints.index.build import build_index, build_partial
from textproc.core.constraints.index.table import TokenIndex
from textproc.core.constraints.index.vocab import TokenVocabulary
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.regex.syntax import Node, parse_regex
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.errors import InvalidInput, short

__all__ = ["compile_constraint", "compile_progressive", "FIRST_SECONDS", "constraint_regex", "IndexCache", "DEFAULT_CACHE", "Budget"]


class IndexCache:
    """Compiled indexes by key, least recently used dropped past ``max_bytes`` (index
    ``nbytes``), plus the last ``max_failures`` failure messages. Thread-safe: a worker's
    background build puts what its own thread reads."""

    def __init__(self, max_bytes: int = 512 << 20, *, max_failures: int = 1024) -> None:
        self.max_bytes = max_bytes
        self.max_failures = max_failures
        self.nbytes = 0
        self._items: OrderedDict[str, TokenIndex] = OrderedDict()
        self._failures: OrderedDict[str, str] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> TokenIndex | None:
        with self._lock:
            index = self._items.get(key)
            if index is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return index
            self.misses += 1
            return None

    def failure(self, key: str) -> str | None:
        """The message of a remembered failure under ``key``, or None."""
        return self._failures.get(key)

    def put(self, key: str, index: TokenIndex) -> None:
        size = index.nbytes
        with self._lock:
            if key in self._items or size > self.max_bytes:
                return
            self._items[key] = index
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self.nbytes -= old.nbytes

    def fail(self, key: str, message: str) -> None:
        with self._lock:
            self._failures[key] = message
            while len(self._failures) > self.max_failures:
                self._failures.popitem(last=False)


DEFAULT_CACHE = IndexCache()
# how long a progressive compile builds first states before it hands out the partial index
FIRST_SECONDS = 0.003


def constraint_regex(
    *,
    regex: str | None = None,
    json_schema: Mapping[str, Any] | bool | str | None = None,
    choice: Sequence[str] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_name: str | None = None,
    max_regex_chars: int = MAX_REGEX_CHARS,
    strict: bool = False,
) -> tuple[str, str]:
    """``(regex, what)``: the regex a constraint becomes and a short name for errors.
    Exactly one of ``regex`` / ``json_schema`` / ``choice`` / ``tools``; a JSON schema whose
    regex would pass ``max_regex_chars`` is refused while it is being expanded; ``strict``
    closes the schema's objects that list properties (``json_schema_to_regex``)."""
    given = [k for k, v in (("regex", regex), ("json_schema", json_schema), ("choice", choice),
                            ("tools", tools)) if v is not None]
    if len(given) != 1:
        raise InvalidInput(f"give exactly one of regex, json_schema, choice, tools; got {given or 'none'}")
    if tool_name is not None and tools is None:
        raise InvalidInput("tool_name needs tools")
    if regex is not None:
        if not isinstance(regex, str):
            raise InvalidInput(f"regex {short(regex)} must be a string")
        return regex, f"regex {short(regex)}"
    if json_schema is not None:
        schema = json_schema
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise InvalidInput(f"json_schema {short(schema)} is not valid JSON: {e}") from e
        return json_schema_to_regex(schema, max_chars=max_regex_chars, strict=strict), "the JSON schema"
    if choice is not None:
        if isinstance(choice, (str, bytes)) or not isinstance(choice, Sequence) or not choice:
            raise InvalidInput(f"choice {short(choice)} must be a non-empty list of strings")
        for i, c in enumerate(choice):
            if not isinstance(c, str):
                raise InvalidInput(f"choice[{i}] {short(c)} must be a string")
        return "|".join(re.escape(c) for c in choice), f"choice {short(list(choice))}"
    assert tools is not None
    what = f"the forced call of tool {tool_name!r}" if tool_name else "a forced tool call"
    return tool_call_pattern(tools, tool_name), what


def compile_constraint(
    vocab: TokenVocabulary,
    *,
    regex: str | None = None,
    json_schema: Mapping[str, Any] | bool | str | None = None,
    choice: Sequence[str] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_name: str | None = None,
    budget: Budget | None = None,
    cache: IndexCache | None = DEFAULT_CACHE,
) -> TokenIndex:
    """The token index of one constraint over ``vocab`` (exactly one of regex / json_schema /
    choice / tools; ``tool_name`` picks the forced tool, else any tool, one or more calls).

    A cache hit costs a hash and a dict lookup. Errors (``InvalidInput``) name what is
    unsupported and where, or which ``budget`` limit was passed while compiling what; every
    phase checks the budget, so a compile ends within milliseconds of its deadline.

    >>> v = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    >>> index = compile_constraint(v, regex="ab")
    >>> index.allowed_ids(index.initial_state)
    [0, 2]
    """
    budget = budget or Budget()
    pattern, what = constraint_regex(regex=regex, json_schema=json_schema, choice=choice, tools=tools,
                                     tool_name=tool_name, max_regex_chars=budget.max_regex_chars)
    key = constraint_key(vocab, pattern)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    budget = dataclasses.replace(budget, what=what)
    failure_key = f"{key}:{budget.max_states}:{budget.max_bytes}:{budget.max_seconds}:{budget.max_regex_chars}"
    if cache is not None:
        failure = cache.failure(failure_key)
        if failure is not None:
            raise InvalidInput(failure)
    return _compile_whole(vocab, pattern, None, budget, cache, key, failure_key)


def compile_progressive(vocab: TokenVocabulary, regex: str, *, budget: Budget | None = None,
                        cache: IndexCache | None = DEFAULT_CACHE, first_seconds: float = FIRST_SECONDS,
                        ) -> tuple[TokenIndex, Callable[[], TokenIndex] | None]:
    """``(first, rest)``: the index of ``regex`` over ``vocab`` in two steps. ``first`` is ready
    within about ``first_seconds``: the whole index (``rest`` None) when it is known already
    (cached) or small (the whole is always the minimal DFA's: one table per key), else a
    partial index (``TokenIndex.partial``: the first states of a DFA
    built on demand, an engine can mask the first steps with it); ``rest()`` then compiles the
    whole index (the minimal DFA's, under the same key; cached like ``compile_constraint``).
    Both steps check ``budget``: ``first`` from its clock's start, ``rest()`` from when it is
    called (a whole build that waits behind others is not charged for their time)."""
    budget = budget or Budget()
    key = constraint_key(vocab, regex)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit, None
    what = f"regex {short(regex)}"
    budget = dataclasses.replace(budget, what=what)
    failure_key = f"{key}:{budget.max_states}:{budget.max_bytes}:{budget.max_seconds}:{budget.max_regex_chars}"
    failure = cache.failure(failure_key) if cache is not None else None
    if failure is not None:
        raise InvalidInput(failure)
    try:
        with _no_cycle_collection():
            tree = parse_regex(regex, budget)
            budget.check_states(counted_states_floor(tree)[1], "automaton states (DFA)")
            lazy = lazy_dfa(tree, budget)
            nfa = lazy.nfa  # the whole DFA is built from the same NFA
            first = build_partial(lazy, vocab, budget, what=what, seconds=first_seconds)
    except RecursionError:
        raise InvalidInput(f"{what} nests too deeply to compile; flatten it") from None
    first.key = key
    if not first.partial:  # small: the whole index is the minimal DFA's (one table per key)
        return _compile_whole(vocab, regex, tree, budget, cache, key, failure_key, nfa), None
    return first, lambda: _compile_whole(vocab, regex, tree, dataclasses.replace(budget, started=time.monotonic()),
                                         cache, key, failure_key, nfa)


def _compile_whole(vocab: TokenVocabulary, pattern: str, tree: Node | None, budget: Budget,
                   cache: IndexCache | None, key: str, failure_key: str,
                   nfa_of_tree: tuple[NFA, int, int] | None = None) -> TokenIndex:
    """The whole index (minimal DFA) of ``pattern`` (parsed: ``tree``, its NFA built:
    ``nfa_of_tree``), cached under ``key``."""
    what = budget.what
    try:
        try:
            budget.check_time("turning the constraint into a regex")
            with _no_cycle_collection():
                dfa = build_dfa(tree if tree is not None else parse_regex(pattern, budget), budget, nfa_of_tree)
                index = build_index(dfa, vocab, budget, what=what)
        except RecursionError:
            raise InvalidInput(f"{what} nests too deeply to compile; flatten it") from None
    except InvalidInput as e:
        # remember what fails on every try; a deadline overrun may pass on a quieter machine
        if cache is not None and time.monotonic() - budget.started <= budget.max_seconds:
            cache.fail(failure_key, str(e))
        raise
    index.key = key
    if cache is not None:
        cache.put(key, index)
    return index


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector: a compile allocates millions of small objects that
    stay alive until it ends (regex tree, automaton rows, walks, exception maps), none of them
    cyclic garbage, and each full collection on the way walks all of them again (codecov: 4
    full collections, 0.5-0.7 s of its 7 s; its regex parse 0.5 -> 0.3 s). Reference counting
    still frees everything at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def constraint_key(vocab: TokenVocabulary, pattern: str) -> str:
    """The content address of ``pattern`` compiled over ``vocab``."""
    h = hashlib.sha256(vocab.fingerprint.encode())
    h.update(b"\0")
    h.update(pattern.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]

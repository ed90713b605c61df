"""Byte DFA x vocabulary -> :class:`TokenIndex`: per state, the allowed ids and where each goes.

Owns the token index and its builder. Semantics (outlines-core's ``Index``): a token is
allowed in a state iff walking its bytes from there never reaches the dead state; the end
ids are allowed exactly in accepting states. Every index state allows something, or the
compile fails ("this vocabulary cannot express ...") instead of stalling a request later.

How the build stays fast (the self-loop fact in the constraints notes): inside a JSON string
almost every token leaves the state unchanged. For a state whose self-loop byte set is large,
the tokens made only of loop bytes (plus whole UTF-8 characters when every character returns
to the state) are one bitset expression over the vocabulary's per-byte bitsets, computed once
per distinct byte set; only the rest (a few thousand tokens holding a quote, a backslash, a
control byte or half a character) are walked. Other states walk the sorted token list as a
trie, following only live bytes. States with many live bytes but no loop (counted
repetitions) walk each distinct byte-class string once.

Layout: per state a full bitmask (ceil(V/32) little-endian int32 words, shared between
states with equal masks), a default next state and a small exception map id -> next state.
A lookup is two indexings and a dict get.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from textproc.core.constraints.automaton import Budget, ByteDFA, utf8_sequences
from textproc.core.constraints.vocab import TokenVocabulary, VocabTables, bits_of, bitset, subrange
from textproc.errors import InvalidInput

__all__ = ["TokenIndex", "build_index"]

_LOOP_MIN = 24  # loop bytes for the bitset path (JSON string states have ~90)
_WIDE = 96  # live bytes above which a loop-less state walks distinct class strings
_SMALL = 24  # ranges this small are walked token by token instead of split further
_MULTIBYTE = [s for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)) for s in utf8_sequences(lo, hi)]
_HIGH = frozenset(range(0x80, 0x100))


class TokenIndex:
    """A compiled constraint: states, the allowed ids per state, and next states.

    ``allowed_mask(state)`` is ``ceil(V / 32)`` little-endian int32 words (bit ``i % 32`` of
    word ``i // 32`` set iff id ``i`` is allowed), the layout GPU mask kernels take. End ids
    are allowed exactly where ``is_accepting(state)``; ``next_state`` of an end id is the
    state itself, of a disallowed id -1.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        end_ids: Iterable[int],
        masks: list[bytes],
        mask_of: list[int],
        default_next: list[int],
        exceptions: list[dict[int, int]],
        accepting: list[bool],
        steer: list[int] | None = None,
        distance: list[int] | None = None,
        key: str = "",
    ) -> None:
        self.vocab_size = vocab_size
        self.end_ids = tuple(end_ids)
        self._ends = frozenset(self.end_ids)
        self._masks = masks
        self._mask_of = mask_of
        self._default = default_next
        self._exc = exceptions
        self._accepting = accepting
        self._steer = steer if steer is not None else [-1] * len(mask_of)
        self._distance = distance if distance is not None else [0] * len(mask_of)
        self.key = key
        self._counts: list[int] = [-1] * len(masks)  # mask -> allowed ids, computed on demand

    initial_state = 0

    @property
    def n_states(self) -> int:
        return len(self._mask_of)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed index (what travels to the engine once)."""
        return sum(map(len, self._masks)) + 16 * self.n_states + 8 * sum(map(len, self._exc))

    def is_accepting(self, state: int) -> bool:
        return self._accepting[state]

    def completion_token(self, state: int) -> int:
        """An allowed id on a shortest way (in tokens) to an accepting state; -1 if accepting."""
        return self._steer[state]

    def completion_length(self, state: int) -> int:
        """How many tokens the shortest way from ``state`` to an accepting state takes."""
        return self._distance[state]

    def allowed_mask(self, state: int) -> bytes:
        return self._masks[self._mask_of[state]]

    def allowed_count(self, state: int) -> int:
        """How many ids are allowed (end ids included)."""
        m = self._mask_of[state]
        count = self._counts[m]
        if count < 0:
            count = self._counts[m] = int.from_bytes(self._masks[m], "little").bit_count()
        return count

    def allowed_ids(self, state: int) -> list[int]:
        """Sorted allowed ids (the end ids included iff the state is accepting)."""
        return bits_of(int.from_bytes(self._masks[self._mask_of[state]], "little"))

    def next_state(self, state: int, token_id: int) -> int:
        mask = self._masks[self._mask_of[state]]
        if not 0 <= token_id < self.vocab_size or not mask[token_id >> 3] >> (token_id & 7) & 1:
            return -1
        if token_id in self._ends:
            return state
        return self._exc[state].get(token_id, self._default[state])

    # -- packing (the engine-side copy is rebuilt from these, no vocabulary needed) -----------

    def pack(self) -> dict[str, bytes | int | list[int]]:
        """Plain fields for a wire frame: masks, per-state arrays and exceptions, int32 LE."""
        exc_ids = array("i")
        exc_next = array("i")
        offsets = array("i", [0])
        for exc in self._exc:
            for token_id in sorted(exc):
                exc_ids.append(token_id)
                exc_next.append(exc[token_id])
            offsets.append(len(exc_ids))
        return {
            "vocab_size": self.vocab_size,
            "end_ids": list(self.end_ids),
            "masks": b"".join(self._masks),
            "mask_of": array("i", self._mask_of).tobytes(),
            "default_next": array("i", self._default).tobytes(),
            "accepting": bytes(self._accepting),
            "exc_offsets": offsets.tobytes(),
            "exc_ids": exc_ids.tobytes(),
            "exc_next": exc_next.tobytes(),
            "steer": array("i", self._steer).tobytes(),
            "distance": array("i", self._distance).tobytes(),
        }

    @classmethod
    def unpack(cls, *, key: str, vocab_size: int, end_ids: list[int], masks: bytes, mask_of: bytes,
               default_next: bytes, accepting: bytes, exc_offsets: bytes, exc_ids: bytes,
               exc_next: bytes, steer: bytes, distance: bytes) -> TokenIndex:
        """Inverse of :meth:`pack` (table copies only: no compile, no vocabulary); ValueError
        naming the field when the tables do not fit together."""
        width = (vocab_size + 31) // 32 * 4
        n = len(accepting)
        for name, data, count in (("mask_of", mask_of, n), ("default_next", default_next, n),
                                  ("steer", steer, n), ("distance", distance, n),
                                  ("exc_offsets", exc_offsets, n + 1), ("exc_next", exc_next, len(exc_ids) // 4)):
            if len(data) != 4 * count:
                raise ValueError(f"index {key!r}: {name} has {len(data)} bytes, expected {4 * count}")
        if vocab_size < 0 or not masks or len(masks) % width or len(exc_ids) % 4 or n == 0:
            raise ValueError(f"index {key!r}: masks of {len(masks)} bytes for vocab_size {vocab_size}")
        mask_list = [masks[i : i + width] for i in range(0, len(masks), width)]
        ids, nexts, offsets = array("i"), array("i"), array("i")
        ids.frombytes(exc_ids)
        nexts.frombytes(exc_next)
        offsets.frombytes(exc_offsets)
        mask_index = array("i")
        mask_index.frombytes(mask_of)
        defaults, steer_ids, distances = array("i"), array("i"), array("i")
        defaults.frombytes(default_next)
        steer_ids.frombytes(steer)
        distances.frombytes(distance)
        n_masks = len(masks) // width
        if (offsets[0] != 0 or offsets[-1] != len(ids) or any(a > b for a, b in zip(offsets, offsets[1:]))
                or any(not 0 <= m < n_masks for m in mask_index) or any(not -1 <= d < n for d in defaults)
                or any(not 0 <= t < n for t in nexts) or any(not 0 <= e < vocab_size for e in end_ids)):
            raise ValueError(f"index {key!r}: offsets, mask numbers or states out of range")
        exc = [dict(zip(ids[offsets[s] : offsets[s + 1]], nexts[offsets[s] : offsets[s + 1]]))
               for s in range(len(offsets) - 1)]
        return cls(vocab_size=vocab_size, end_ids=end_ids, masks=mask_list, mask_of=list(mask_index),
                   default_next=list(defaults), exceptions=exc, accepting=[bool(a) for a in accepting],
                   steer=list(steer_ids), distance=list(distances), key=key)


def build_index(dfa: ByteDFA, vocab: TokenVocabulary, budget: Budget, *, what: str) -> TokenIndex:
    """The token index of ``dfa`` over ``vocab``; ``what`` names the constraint in errors."""
    if dfa.start < 0:
        raise InvalidInput(f"{what} matches nothing")
    tables = vocab.tables()
    token_bytes = [vocab.token_bytes(i) for i in range(vocab.size)] if vocab.size else []
    rows = dfa.rows
    index_of = {dfa.start: 0}
    order = [dfa.start]
    per_state: list[tuple[int, dict[int, int], int]] = []  # (allowed bitset, exceptions, default)
    builder = _Builder(dfa, tables, token_bytes)
    i = 0
    while i < len(order):
        if i % 16 == 15:
            budget.check_time("indexing the vocabulary")
            budget.check_states(len(order), "index states")
        q = order[i]
        allowed, exc, default = builder.state(q)
        if not allowed and not dfa.accepting[q]:
            raise InvalidInput(
                f"this vocabulary cannot express {what}: after some allowed tokens no token "
                f"continues and the output is not complete (a byte sequence no token writes)"
            )
        for t in set(exc.values()) | ({default} if default >= 0 else set()):
            if t not in index_of:
                index_of[t] = len(order)
                order.append(t)
        per_state.append((allowed, exc, default))
        i += 1
    width = (vocab.size + 31) // 32 * 4
    end_bits = 0
    for e in vocab.end_ids:
        end_bits |= 1 << e
    masks: list[bytes] = []
    mask_ids: dict[bytes, int] = {}
    mask_of: list[int] = []
    total = 0
    for (allowed, _, _), q in zip(per_state, order):
        data = (allowed | end_bits if dfa.accepting[q] else allowed).to_bytes(width, "little")
        got = mask_ids.get(data)
        if got is None:
            got = mask_ids[data] = len(masks)
            masks.append(data)
            total += width
            if total > budget.max_bytes:
                raise InvalidInput(
                    f"{what} needs an index over {budget.max_bytes >> 20} MiB; simplify it")
        mask_of.append(got)
    exceptions = [{t: index_of[n] for t, n in exc.items()} for _, exc, _ in per_state]
    defaults = [index_of[d] if d >= 0 else -1 for _, _, d in per_state]
    accepting = [dfa.accepting[q] for q in order]
    steer, distance = _shortest_completions(exceptions, defaults, accepting)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=defaults, exceptions=exceptions, accepting=accepting,
                      steer=steer, distance=distance)


def _shortest_completions(exceptions: list[dict[int, int]], defaults: list[int],
                          accepting: list[bool]) -> tuple[list[int], list[int]]:
    """Per state, a token on a shortest way to an accepting state and that way's length
    (backward BFS over the index graph; default transitions are self-loops, never shorter)."""
    n = len(accepting)
    into: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {predecessor: a token}
    for s, exc in enumerate(exceptions):
        for token_id, t in exc.items():
            if t != s and s not in into[t]:
                into[t][s] = token_id
    steer = [-1] * n
    distance = [0 if a else -1 for a in accepting]
    frontier = [s for s in range(n) if accepting[s]]
    while frontier:
        nxt = []
        for t in frontier:
            for s, token_id in into[t].items():
                if distance[s] < 0:
                    distance[s] = distance[t] + 1
                    steer[s] = token_id
                    nxt.append(s)
        frontier = nxt
    return steer, [d if d >= 0 else 1 << 30 for d in distance]


class _Builder:
    def __init__(self, dfa: ByteDFA, tables: VocabTables, token_bytes: list[bytes]) -> None:
        self.dfa = dfa
        self.rows = dfa.rows
        self.tables = tables
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.loop_cache: dict[tuple[bytes, bool], int] = {}
        self.first_cache: dict[bytes, int] = {}
        self.class_groups: list[tuple[bytes, list[int]]] | None = None

    def state(self, q: int) -> tuple[int, dict[int, int], int]:
        """(allowed ids as a bitset, id -> next for ids not going to default, default next)."""
        row = self.rows[q]
        loop = bytes(b for b in range(256) if row[b] == q)
        live = [(b, t) for b, t in enumerate(row) if t >= 0]
        transparent = len(loop) >= _LOOP_MIN and self.transparent(q)
        if len(loop) >= _LOOP_MIN:
            return self.loop_state(q, loop, live, transparent)
        if len(live) > _WIDE:
            return self.wide_state(q)
        return self.trie_state(q, live)

    def transparent(self, q: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``q`` returns to ``q``."""
        rows = self.rows
        for seq in _MULTIBYTE:
            states = {q}
            for lo, hi in seq:
                states = {rows[s][b] for s in states for b in range(lo, hi + 1)}
                if -1 in states:
                    return False
            if states != {q}:
                return False
        return True

    def loop_state(self, q: int, loop: bytes, live: list[tuple[int, int]], transparent: bool) -> tuple[int, dict[int, int], int]:
        t = self.tables
        key = (loop, transparent)
        inside = self.loop_cache.get(key)
        if inside is None:
            ok = set(loop) | (_HIGH if transparent else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= t.contains[b]
            inside = t.nonempty & ~bad
            if transparent:
                inside &= ~t.not_utf8
            self.loop_cache[key] = inside
        first_key = bytes(b for b, _ in live)
        first = self.first_cache.get(first_key)
        if first is None:
            first = 0
            for b, _ in live:
                first |= t.first[b]
            self.first_cache[first_key] = first
        allowed = inside
        exc: dict[int, int] = {}
        extra: list[int] = []
        token_bytes = self.token_bytes
        walk = self.dfa.walk
        for i in bits_of(first & ~inside):
            n = walk(q, token_bytes[i].lstrip(loop))
            if n >= 0:
                extra.append(i)
                if n != q:
                    exc[i] = n
        return allowed | bitset(extra, self.size), exc, q

    def trie_state(self, q: int, live: list[tuple[int, int]]) -> tuple[int, dict[int, int], int]:
        texts = self.tables.texts
        text_ids = self.tables.text_ids
        rows = self.rows
        walk = self.dfa.walk
        found: list[tuple[int, int]] = []  # (text index, next state)
        stack = [(0, len(texts), 0, q)]
        while stack:
            lo, hi, depth, s = stack.pop()
            if hi - lo <= _SMALL:
                for k in range(lo, hi):
                    n = walk(s, texts[k][depth:])
                    if n >= 0:
                        found.append((k, n))
                continue
            if len(texts[lo]) == depth:
                found.append((lo, s))
                lo += 1
            prefix = texts[lo][:depth]
            for b, n in (live if s == q else [(b, n) for b, n in enumerate(rows[s]) if n >= 0]):
                start, end = subrange(texts, lo, hi, prefix, b)
                if start < end:
                    stack.append((start, end, depth + 1, n))
        exc: dict[int, int] = {}
        for k, n in found:
            for token_id in text_ids[k]:
                exc[token_id] = n
        return bitset(exc, self.size), exc, -1

    def wide_state(self, q: int) -> tuple[int, dict[int, int], int]:
        groups = self.class_groups
        if groups is None:
            groups = self.class_groups = self.group_by_class()
        rows = self.rows
        exc: dict[int, int] = {}
        for rep, ids in groups:
            s = q
            for b in rep:
                s = rows[s][b]
                if s < 0:
                    break
            else:
                for token_id in ids:
                    exc[token_id] = s
        return bitset(exc, self.size), exc, -1

    def group_by_class(self) -> list[tuple[bytes, list[int]]]:
        """Tokens grouped by their string of DFA byte classes (equal strings walk alike);
        each group is keyed by its first token's bytes, a representative."""
        signature: dict[tuple[int, ...], int] = {}
        table = bytearray(256)
        columns = list(zip(*self.rows))  # byte -> next state in every state
        for b in range(256):
            table[b] = signature.setdefault(columns[b], len(signature)) % 256
        if len(signature) > 256:
            table = bytearray(range(256))  # more classes than bytes can name: no grouping
        groups: dict[bytes, tuple[bytes, list[int]]] = {}
        for token_id, data in enumerate(self.token_bytes):
            if data:
                key = data.translate(table)
                got = groups.get(key)
                if got is None:
                    groups[key] = (data, [token_id])
                else:
                    got[1].append(token_id)
        return list(groups.values())

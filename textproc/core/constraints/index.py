"""Byte DFA x vocabulary -> :class:`TokenIndex`: per state, the allowed ids and where each goes.

Owns the token index and its builder. Semantics (outlines-core's ``Index``): a token is
allowed in a state iff walking its bytes from there never reaches the dead state; the end
ids are allowed exactly in accepting states. Every index state allows something, or the
compile fails ("this vocabulary cannot express ...") instead of stalling a request later.

How the build stays fast (the self-loop fact in the constraints notes): inside a JSON string
almost every token leaves the state unchanged. For a state whose self-loop byte set is large,
the tokens made only of loop bytes (plus whole UTF-8 characters when every character returns
to the state) are one bitset expression over the vocabulary's per-byte bitsets, computed once
per distinct byte set; the same holds for a state whose bytes lead into such a loop (the first
character of ``[a-z]+``): tokens starting with those bytes and staying in the loop. Only the
rest (a few thousand tokens holding a quote, a backslash, a control byte or half a character)
are walked, skipping runs of loop bytes with ``bytes.lstrip``. Other states walk the sorted
token list as a trie, following only live bytes. States with many live bytes but no loop
(counted repetitions) walk each distinct byte-class string once.

Layout: per state a full bitmask (ceil(V/32) little-endian int32 words, shared between
states with equal masks), a default next state and a small exception map id -> next state.
A lookup is two indexings and a dict get.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable

from textproc.core.constraints.automaton import Budget, ByteDFA, utf8_sequences
from textproc.core.constraints.vocab import MAX_CHARS, TokenVocabulary, VocabTables, bits_of, bitset, subrange
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
    # one token per state that takes the default transition (for the shortest completions)
    via_default = []
    for s, (allowed, exc, _) in enumerate(per_state):
        rest = allowed & ~end_bits & ~bitset(exc, vocab.size)
        via_default.append((rest & -rest).bit_length() - 1 if defaults[s] >= 0 and rest else -1)
    steer, distance = _shortest_completions(exceptions, defaults, via_default, accepting)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=defaults, exceptions=exceptions, accepting=accepting,
                      steer=steer, distance=distance)


def _shortest_completions(exceptions: list[dict[int, int]], defaults: list[int], via_default: list[int],
                          accepting: list[bool]) -> tuple[list[int], list[int]]:
    """Per state, a token on a shortest way to an accepting state and that way's length
    (backward BFS over the index graph: exceptions, and defaults through ``via_default``)."""
    n = len(accepting)
    into: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {predecessor: a token}
    for s, exc in enumerate(exceptions):
        t = defaults[s]
        if t >= 0 and t != s and via_default[s] >= 0:
            into[t][s] = via_default[s]
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


def _split_default(nexts: dict[int, int], size: int) -> tuple[int, dict[int, int], int]:
    """(allowed bitset, exceptions, default): the most common next state becomes the default."""
    if not nexts:
        return 0, {}, -1
    default = Counter(nexts.values()).most_common(1)[0][0]
    return bitset(nexts, size), {t: n for t, n in nexts.items() if n != default}, default


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
        self.loops: dict[int, bytes] = {}
        self.transparency: dict[int, bool] = {}
        self.plain_cache: dict[tuple[bytes, bool], int] = {}
        self.lives: dict[int, list[tuple[int, int]]] = {}
        # state -> its loop bytes, for the states with a big loop (walk_skipping)
        self.big_loops = {q: loop for q in range(dfa.n_states)
                          if len(loop := self.loop_bytes(q)) >= _LOOP_MIN}

    def live(self, q: int) -> list[tuple[int, int]]:
        """``(byte, next state)`` for the bytes that do not kill ``q``."""
        got = self.lives.get(q)
        if got is None:
            got = self.lives[q] = [(b, t) for b, t in enumerate(self.rows[q]) if t >= 0]
        return got

    def loop_bytes(self, q: int) -> bytes:
        """The bytes that lead from ``q`` back to ``q``."""
        got = self.loops.get(q)
        if got is None:
            row = self.rows[q]
            got = self.loops[q] = bytes(b for b in range(256) if row[b] == q)
        return got

    def state(self, q: int) -> tuple[int, dict[int, int], int]:
        """(allowed ids as a bitset, id -> next for ids not going to default, default next)."""
        live = self.live(q)
        by_next: dict[int, list[int]] = {}
        for b, t in live:
            by_next.setdefault(t, []).append(b)
        # successors whose loop holds every byte leading there from q (q itself when it loops)
        targets = [(t, bytes(bs)) for t, bs in by_next.items()
                   if len(self.loop_bytes(t)) >= _LOOP_MIN and set(bs) <= set(self.loop_bytes(t))]
        if targets:
            return self.loop_state(q, targets, live)
        if len(live) > _WIDE:
            chained = self.chain_state(q, live)
            return chained if chained is not None else self.wide_state(q)
        return self.trie_state(q, live)

    def chain(self, q: int) -> tuple[bytes, list[int], int] | None:
        """A counted repetition seen from ``q``: the ASCII bytes ``plain`` that all lead to one
        next state, and states ``c`` with ``c[0] = q`` and ``c[i + 1]`` the state after one
        more plain byte from ``c[i]`` (-1: dead), as long as every plain byte agrees; plus how
        many of those steps every whole non-ASCII character takes alike. None if no chain."""
        rows = self.rows
        row = rows[q]
        ascii_next = Counter(t for t in row[:128] if t >= 0).most_common(1)
        if not ascii_next:
            return None
        plain = bytes(b for b in range(128) if row[b] == ascii_next[0][0])
        if len(plain) < _LOOP_MIN:
            return None
        states = [q]
        while len(states) < MAX_CHARS and states[-1] >= 0:
            nexts = {rows[states[-1]][b] for b in plain}
            if len(nexts) != 1:
                break
            states.append(nexts.pop())
        shifts = 0  # characters: c[i] --any whole non-ASCII character--> c[i + 1]
        while shifts + 1 < len(states) and states[shifts + 1] >= 0 and self._char_step(states[shifts], states[shifts + 1]):
            shifts += 1
        return plain, states, shifts

    def _char_step(self, s: int, t: int) -> bool:
        rows = self.rows
        for seq in _MULTIBYTE:
            got = {s}
            for lo, hi in seq:
                got = {rows[x][b] for x in got for b in range(lo, hi + 1)}
                if -1 in got:
                    return False
            if got != {t}:
                return False
        return True

    def _char_dies(self, s: int) -> bool:
        """Whether every whole non-ASCII character read from ``s`` reaches the dead state."""
        rows = self.rows
        for seq in _MULTIBYTE:
            got = {s}
            for lo, hi in seq:
                got = {rows[x][b] if x >= 0 else -1 for x in got for b in range(lo, hi + 1)}
            if got != {-1}:
                return False
        return True

    def chain_state(self, q: int, live: list[tuple[int, int]]) -> tuple[int, dict[int, int], int] | None:
        """Counted repetitions (``[^"]{0,8}``): a token of n plain characters goes to
        ``c[n]``, found with one bitset AND per length; the rest is walked."""
        found = self.chain(q)
        if found is None:
            return None
        plain, states, shifts = found
        t = self.tables
        ascii_only = self.tokens_of(plain, False)
        with_chars = (self.tokens_of(plain, True) & ~ascii_only) if shifts else 0
        covered = 0
        groups: list[tuple[int, int]] = []  # (next state, tokens)
        for n in range(1, len(states)):
            tokens = ascii_only & t.by_chars[n]
            if n <= shifts:
                tokens |= with_chars & t.by_chars[n]
            covered |= tokens  # dead ends (states[n] == -1) are covered too: not allowed
            if states[n] >= 0 and tokens:
                groups.append((states[n], tokens))
        if states[-1] < 0:  # every longer plain token dies too
            last = len(states) - 1
            chars_die = with_chars and shifts == last - 1 and self._char_dies(states[last - 1])
            for n in range(last, MAX_CHARS):
                covered |= ascii_only & t.by_chars[n]
                if chars_die:
                    covered |= with_chars & t.by_chars[n]
        if not groups:
            groups.append((-1, 0))
        groups.sort(key=lambda g: g[1].bit_count(), reverse=True)
        default = groups[0][0]  # its (many) tokens need no exception entries
        exc: dict[int, int] = {}
        allowed = 0
        for n, tokens in groups:
            allowed |= tokens
            if n != default:
                exc.update(dict.fromkeys(bits_of(tokens), n))
        walk = self.walk_skipping
        token_bytes = self.token_bytes
        extra: list[int] = []
        for i in bits_of(self.first(bytes(b for b, _ in live)) & ~covered):
            n = walk(q, token_bytes[i])
            if n >= 0:
                extra.append(i)
                if n != default:
                    exc[i] = n
        return allowed | bitset(extra, self.size), exc, default

    def tokens_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens made of ``plain`` bytes (and whole non-ASCII characters)."""
        key = (plain, chars)
        got = self.plain_cache.get(key)
        if got is None:
            t = self.tables
            ok = set(plain) | (_HIGH if chars else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= t.contains[b]
            got = t.nonempty & ~bad & (~t.not_utf8 if chars else -1)
            self.plain_cache[key] = got
        return got

    def transparent(self, q: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``q`` returns to ``q``."""
        got = self.transparency.get(q)
        if got is None:
            got = self.transparency[q] = self._transparent(q)
        return got

    def _transparent(self, q: int) -> bool:
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

    def inside(self, n: int) -> int:
        """Bitset of the tokens that stay in loop state ``n``: made of its loop bytes, plus
        whole UTF-8 characters when every character returns to ``n``."""
        loop = self.loop_bytes(n)
        transparent = self.transparent(n)
        key = (loop, transparent)
        got = self.loop_cache.get(key)
        if got is None:
            t = self.tables
            ok = set(loop) | (_HIGH if transparent else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= t.contains[b]
            got = t.nonempty & ~bad
            if transparent:
                got &= ~t.not_utf8
            self.loop_cache[key] = got
        return got

    def first(self, first_bytes: bytes) -> int:
        """Bitset of the tokens starting with one of ``first_bytes``."""
        got = self.first_cache.get(first_bytes)
        if got is None:
            got = 0
            for b in first_bytes:
                got |= self.tables.first[b]
            self.first_cache[first_bytes] = got
        return got

    def walk_skipping(self, q: int, data: bytes) -> int:
        """``dfa.walk`` that skips runs of loop bytes in loop states at C speed."""
        rows = self.rows
        big = self.big_loops
        i, n = 0, len(data)
        while i < n:
            q = rows[q][data[i]]
            if q < 0:
                return -1
            i += 1
            loop = big.get(q)
            if loop is not None and i < n:
                i = n - len(data[i:].lstrip(loop))
        return q

    def loop_state(self, q: int, targets: list[tuple[int, bytes]],
                   live: list[tuple[int, int]]) -> tuple[int, dict[int, int], int]:
        """Tokens that enter a loop state and stay there are bitset expressions (no walk);
        the rest of the tokens with a live first byte are walked."""
        groups = []
        covered = 0
        for n, entry in targets:
            stay = self.inside(n)
            # tokens staying in q itself may also start with a whole non-ASCII character
            tokens = stay if n == q else stay & self.first(entry)
            groups.append((tokens.bit_count(), n, tokens))
            covered |= tokens
        groups.sort(reverse=True)
        default = groups[0][1]
        exc: dict[int, int] = {}
        for _, n, tokens in groups[1:]:
            exc.update(dict.fromkeys(bits_of(tokens & ~groups[0][2]), n))
        extra: list[int] = []
        token_bytes = self.token_bytes
        walk = self.walk_skipping
        for i in bits_of(self.first(bytes(b for b, _ in live)) & ~covered):
            n = walk(q, token_bytes[i])
            if n >= 0:
                extra.append(i)
                if n != default:
                    exc[i] = n
        return covered | bitset(extra, self.size), exc, default

    def trie_state(self, q: int, live: list[tuple[int, int]]) -> tuple[int, dict[int, int], int]:
        texts = self.tables.texts
        text_ids = self.tables.text_ids
        rows = self.rows
        walk = self.dfa.walk
        found: list[tuple[int, int]] = []  # (text index, next state)
        loop_of = self.loop_bytes
        live_of = self.live
        stack = [(0, len(texts), 0, q)]
        while stack:
            lo, hi, depth, s = stack.pop()
            loop = loop_of(s)
            live_s = live if s == q else live_of(s)
            if hi - lo <= _SMALL or len(loop) >= _LOOP_MIN or len(live_s) > _WIDE:
                # few tokens, a state most bytes loop in (a string) or one where most bytes
                # live (splitting costs more than walking): walk each token, the loop bytes
                # after the prefix skipped at C speed
                for k in range(lo, hi):
                    n = walk(s, texts[k][depth:].lstrip(loop))
                    if n >= 0:
                        found.append((k, n))
                continue
            if len(texts[lo]) == depth:
                found.append((lo, s))
                lo += 1
            prefix = texts[lo][:depth]
            for b, n in live_s:
                start, end = subrange(texts, lo, hi, prefix, b)
                if start < end:
                    stack.append((start, end, depth + 1, n))
        exc: dict[int, int] = {}
        for k, n in found:
            for token_id in text_ids[k]:
                exc[token_id] = n
        return _split_default(exc, self.size)

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
        return _split_default(exc, self.size)

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

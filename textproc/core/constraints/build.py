"""Byte DFA x vocabulary -> :class:`TokenIndex` (the index builder).

Every index state allows something, or the compile fails ("this vocabulary cannot express
...") instead of stalling a request later.

How the build stays fast (the self-loop fact in the constraints notes): inside a JSON string
almost every token leaves the state unchanged. For a state whose self-loop byte set is large,
the tokens made only of loop bytes (plus whole UTF-8 characters when every character returns
to the state) are one bitset expression over the vocabulary's per-byte bitsets, computed once
per distinct byte set; the same holds for a state whose bytes lead into such a loop (the first
character of ``[a-z]+``): tokens starting with those bytes and staying in the loop. Counted
repetitions (``[^"]{0,8}``) group tokens by character count, one AND per length. Only the rest
(a few thousand tokens holding a quote, a backslash, a control byte or half a character) are
walked, skipping runs of loop bytes with ``bytes.lstrip``. Other states walk the sorted token
list as a trie, following only live bytes; what is left walks each distinct byte-class string
once. The most common next state of a state becomes its default (no exception entries).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from textproc.core.constraints.automaton import ByteDFA, utf8_sequences
from textproc.core.constraints.budget import Budget
from textproc.core.constraints.index import TokenIndex
from textproc.core.constraints.vocab import MAX_CHARS, TokenVocabulary, VocabTables, bits_of, bitset, subrange
from textproc.errors import InvalidInput

__all__ = ["build_index"]

_LOOP_MIN = 24  # loop bytes for the bitset path (JSON string states have ~90)
_WIDE = 96  # live bytes above which a loop-less state walks distinct class strings
_SMALL = 24  # ranges this small are walked token by token instead of split further
_MULTIBYTE = [s for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)) for s in utf8_sequences(lo, hi)]
_HIGH = frozenset(range(0x80, 0x100))
_MAX_RUN = 8  # longest fixed-length run into a loop taken as bitsets (\uXXXX: 4)
_MAX_DERIVED = 4096  # derived token sets kept per vocabulary (~20 KB each on a 150k vocabulary)


def build_index(dfa: ByteDFA, vocab: TokenVocabulary, budget: Budget, *, what: str) -> TokenIndex:
    """The token index of ``dfa`` over ``vocab``; ``what`` names the constraint in errors.

    Every loop here checks ``budget`` (the deadline, the states, the index bytes so far)."""
    if dfa.start < 0:
        raise InvalidInput(f"{what} matches nothing")
    index_of = {dfa.start: 0}
    order = [dfa.start]
    per_state: list[tuple[int, dict[int, int], int]] = []  # (allowed bitset, exceptions, default)
    builder = _Builder(dfa, vocab.tables(), vocab.all_token_bytes())
    n_exceptions = 0
    i = 0
    while i < len(order):
        budget.check_time(f"indexing the vocabulary, state {i} of {len(order)} found so far")
        budget.check_states(len(order), "index states")
        q = order[i]
        allowed, exc, default = builder.state(q)
        if not allowed and not dfa.accepting[q]:
            raise InvalidInput(
                f"this vocabulary cannot express {what}: after some allowed tokens no token "
                f"continues and the output is not complete (a byte sequence no token writes)"
            )
        n_exceptions += len(exc)
        _check_bytes(budget, 8 * n_exceptions, what)
        for t in set(exc.values()) | ({default} if default >= 0 else set()):
            if t not in index_of:
                index_of[t] = len(order)
                order.append(t)
        per_state.append((allowed, exc, default))
        i += 1
    end_bits = 0
    for e in vocab.end_ids:
        end_bits |= 1 << e
    accepting = [dfa.accepting[q] for q in order]
    masks, mask_of = _pack_masks(per_state, accepting, end_bits, vocab.size, budget, 8 * n_exceptions, what)
    exceptions = []
    defaults = []
    via_default = []  # one token per state that takes the default transition (shortest completions)
    for s, (allowed, exc, d) in enumerate(per_state):
        if s % 64 == 63:
            budget.check_time("renumbering the index states")
        exceptions.append({t: index_of[n] for t, n in exc.items()})
        defaults.append(index_of[d] if d >= 0 else -1)
        rest = allowed & ~end_bits & ~bitset(exc, vocab.size) if d >= 0 else 0
        via_default.append((rest & -rest).bit_length() - 1 if rest else -1)
    steer, distance = _shortest_completions(exceptions, defaults, via_default, accepting, budget)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=defaults, exceptions=exceptions, accepting=accepting,
                      steer=steer, distance=distance)


def _check_bytes(budget: Budget, n: int, what: str) -> None:
    if n > budget.max_bytes:
        raise InvalidInput(f"{what} needs an index over {budget.max_bytes:,} bytes, the index "
                           f"size budget; simplify it (smaller counted repetitions such as maxLength)")


def _pack_masks(per_state: list[tuple[int, dict[int, int], int]], accepting: list[bool], end_bits: int,
                size: int, budget: Budget, total: int, what: str) -> tuple[list[bytes], list[int]]:
    """(distinct masks, mask number per state); ``total``: index bytes counted before."""
    width = (size + 31) // 32 * 4
    masks: list[bytes] = []
    mask_ids: dict[bytes, int] = {}
    mask_of: list[int] = []
    for s, ((allowed, _, _), is_accepting) in enumerate(zip(per_state, accepting)):
        if s % 64 == 63:
            budget.check_time("packing the masks")
        data = (allowed | end_bits if is_accepting else allowed).to_bytes(width, "little")
        got = mask_ids.get(data)
        if got is None:
            got = mask_ids[data] = len(masks)
            masks.append(data)
            total += width
            _check_bytes(budget, total, what)
        mask_of.append(got)
    return masks, mask_of


def _shortest_completions(exceptions: list[dict[int, int]], defaults: list[int], via_default: list[int],
                          accepting: list[bool], budget: Budget) -> tuple[list[int], list[int]]:
    """Per state, a token on a shortest way to an accepting state and that way's length
    (backward BFS over the index graph: exceptions, and defaults through ``via_default``)."""
    n = len(accepting)
    into: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {predecessor: a token}
    for s, exc in enumerate(exceptions):
        if s % 64 == 63:
            budget.check_time("finding the shortest completions")
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
        budget.check_time("finding the shortest completions")
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
    def __init__(self, dfa: ByteDFA, tables: VocabTables, token_bytes: Sequence[bytes]) -> None:
        self.dfa = dfa
        self.rows = dfa.rows
        self.tables = tables
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.derived = tables.derived  # shared by the compiles over this vocabulary
        if len(self.derived) > _MAX_DERIVED:
            self.derived.clear()
        self.class_groups: list[tuple[bytes, list[int]]] | None = None
        self.loops: dict[int, bytes] = {}
        self.transparency: dict[int, bool] = {}
        self.lives: dict[int, list[tuple[int, int]]] = {}
        self.walked: dict[tuple[int, bytes], int] = {}  # (state, bytes) -> state after them
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
        loops = [t for t in by_next if len(self.loop_bytes(t)) >= _LOOP_MIN]
        if len(by_next) == 1 and not loops:
            run = self.run(q, live)
            if run is not None:
                return self.run_state(*run)
        if not loops and len(live) > _WIDE:
            chained = self.chain_state(q, live)
            return chained if chained is not None else self.wide_state(q)
        return self.mixed_state(q, by_next, loops)

    def run(self, q: int, live: list[tuple[int, int]]) -> tuple[bytes, list[int], bool] | None:
        """A fixed-length run (the 4 hex digits of ``\\uXXXX``, the 8 of a uuid): the ASCII
        bytes ``plain`` that are all ``q`` reads, each leading to one next state, and so on
        for the states after it; (plain, the states from ``q`` to the first that reads other
        bytes, whether that last one loops on every plain byte). None for runs under 2."""
        plain = bytes(b for b, _ in live)
        if not plain.isascii() or len(plain) < 2:
            return None
        states = [q]
        rows = self.rows
        while len(states) <= _MAX_RUN:
            nexts = {rows[states[-1]][b] for b in plain}
            if len(nexts) != 1:
                break
            n = nexts.pop()
            states.append(n)
            loop = self.loop_bytes(n)
            if len(loop) >= _LOOP_MIN and set(plain) <= set(loop):
                return plain, states, True
            if n < 0 or bytes(b for b, _ in self.live(n)) != plain:
                break
        if len(states) < 3 or states[-1] < 0:
            return None
        return plain, states, False

    def run_state(self, plain: bytes, states: list[int], into_loop: bool) -> tuple[int, dict[int, int], int]:
        """Tokens of n plain bytes go to ``states[n]`` (past the run's end: the loop state, when
        the run ends in one), one bitset each; tokens with another byte inside the run die;
        the longer ones walk their rest from the run's last state, as a trie over the distinct
        rests (kept per vocabulary)."""
        k = len(states) - 1
        last = states[-1]
        t = self.tables
        pure = self.tokens_of(plain, False)
        groups: list[tuple[int, int]] = []
        short = 0
        for n in range(1, k + 1 if not into_loop else k):
            tokens = pure & t.by_chars[n]
            short |= tokens
            groups.append((tokens, states[n]))
        if into_loop:
            groups.append((pure & ~short, last))
        rests, rest_ids, rest_first = self.run_rests(plain, k, self.loop_bytes(last) if into_loop else None)
        rows = self.rows
        pairs: dict[int, int] = {}
        if rests and not rests[0]:  # the run, then only loop bytes
            pairs.update(dict.fromkeys(rest_ids[0], last))
        for i, n in self.trie(last, [(b, rows[last][b]) for b in rest_first if rows[last][b] >= 0], rests):
            pairs.update(dict.fromkeys(rest_ids[i], n))
        return self.combine(groups, pairs)

    def run_rests(self, plain: bytes, k: int,
                  loop: bytes | None) -> tuple[list[bytes], list[list[int]], set[int]]:
        """The tokens longer than ``k`` whose first ``k`` bytes are ``plain`` bytes (with a
        ``loop`` after the run: only those not all plain), by their rest after those and the
        loop bytes that follow: (sorted distinct rests, ids per rest, the rests' first bytes);
        kept per vocabulary."""
        key = ("run", plain, k, loop)
        got = self.derived.get(key)
        if got is None:
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            candidates = self.first(plain) & ~self.tokens_of(plain, False) if loop is not None else self.first(plain)
            for i in bits_of(candidates):
                data = token_bytes[i]
                if len(data) > k and not data[:k].lstrip(plain):
                    by_rest.setdefault(data[k:].lstrip(loop) if loop else data[k:], []).append(i)
            texts = sorted(by_rest)
            got = self.derived[key] = (texts, [by_rest[r] for r in texts], {r[0] for r in texts if r})
        return got

    def combine(self, groups: list[tuple[int, int]],
                pairs: dict[int, int]) -> tuple[int, dict[int, int], int]:
        """(allowed, exceptions, default) from disjoint bitset ``groups`` (tokens, next state)
        and walked ``pairs`` (id -> next state): the most common next state is the default."""
        counts: Counter[int] = Counter(pairs.values())
        allowed = bitset(pairs, self.size)
        for tokens, n in groups:
            if tokens:
                counts[n] += tokens.bit_count()
                allowed |= tokens
        if not counts:
            return 0, {}, -1
        default = counts.most_common(1)[0][0]
        exc: dict[int, int] = {}
        for tokens, n in groups:
            if n != default and tokens:
                exc.update(dict.fromkeys(bits_of(tokens), n))
        exc.update((token_id, n) for token_id, n in pairs.items() if n != default)
        return allowed, exc, default

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
        return self.walk_rest(q, live, covered, allowed, exc, default)

    def tokens_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens made of ``plain`` bytes (and whole non-ASCII characters)."""
        key = ("plain", plain, chars)
        got = self.derived.get(key)
        if got is None:
            t = self.tables
            ok = set(plain) | (_HIGH if chars else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= t.contains[b]
            got = t.nonempty & ~bad & (~t.not_utf8 if chars else -1)
            self.derived[key] = got
        return got

    def transparent(self, q: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``q`` returns to ``q``."""
        got = self.transparency.get(q)
        if got is None:
            got = self.transparency[q] = self._char_step(q, q)
        return got

    def inside(self, n: int) -> int:
        """Bitset of the tokens that stay in loop state ``n``: made of its loop bytes, plus
        whole UTF-8 characters when every character returns to ``n``."""
        return self.tokens_of(self.loop_bytes(n), self.transparent(n))

    def first(self, first_bytes: bytes) -> int:
        """Bitset of the tokens starting with one of ``first_bytes``."""
        got = self.derived.get(("first", first_bytes))
        if got is None:
            got = 0
            for b in first_bytes:
                got |= self.tables.first[b]
            self.derived[("first", first_bytes)] = got
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

    def mixed_state(self, q: int, by_next: dict[int, list[int]],
                    loops: list[int]) -> tuple[int, dict[int, int], int]:
        """Tokens that enter a loop state (a string's) and stay there are bitset expressions;
        the other tokens starting with those bytes (a quote or a backslash further on, half a
        character) are grouped by their rest after the loop bytes (per vocabulary, kept) and
        the distinct rests walked as a trie; tokens starting with any other live byte are
        found by walking the sorted token list as a trie, following only live bytes."""
        groups: list[tuple[int, int]] = []  # (tokens, next state)
        first_covered: set[int] = set()  # first bytes of the covered tokens
        pairs: dict[int, int] = {}  # id -> next state, for the tokens walked
        rows = self.rows
        for n in loops:
            if n == q:  # tokens staying in q may also start with a whole non-ASCII character
                tokens = self.inside(q)
                first_covered.update(self.loop_bytes(q))
                if self.transparent(q):
                    first_covered.update(_HIGH)
                rests, rest_ids, rest_first = self.rests(q)
            else:
                entry = bytes(b for b in by_next[n] if b < 0x80)
                tokens = self.first(entry) & self.tail_inside(n)
                first_covered.update(entry)
                rests, rest_ids, rest_first = self.entry_rests(entry, n)
            if rests and not rests[0]:  # nothing after the loop bytes: stays in n
                pairs.update(dict.fromkeys(rest_ids[0], n))
            for k, t in self.trie(n, [(b, rows[n][b]) for b in rest_first if rows[n][b] >= 0], rests):
                pairs.update(dict.fromkeys(rest_ids[k], t))
            groups.append((tokens, n))
        roots = [(b, n) for n, bs in by_next.items() for b in bs if b not in first_covered]
        if len(roots) > _WIDE:  # splitting costs more than walking
            covered = 0
            for tokens, _ in groups:
                covered |= tokens
            pairs.update(self.walk_each(q, self.first(bytes(b for b, _ in roots)) & ~covered))
            roots = []
        text_ids = self.tables.text_ids
        for k, n in self.trie(q, roots):
            for token_id in text_ids[k]:
                pairs[token_id] = n
        return self.combine(groups, pairs)

    def entry_rests(self, entry: bytes, n: int) -> tuple[list[bytes], list[list[int]], set[int]]:
        """The tokens starting with a byte of ``entry`` (each leading into loop state ``n``)
        whose later bytes leave ``n``, by their rest after the first byte and the loop bytes
        that follow: (sorted distinct rests, ids per rest, the rests' first bytes); kept per
        vocabulary (it depends on ``n`` only through its loop bytes and transparency)."""
        loop = self.loop_bytes(n)
        key = ("entry", entry, loop, self.transparent(n))
        got = self.derived.get(key)
        if got is None:
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            for i in bits_of(self.first(entry) & ~self.tail_inside(n)):
                by_rest.setdefault(token_bytes[i][1:].lstrip(loop), []).append(i)
            texts = sorted(by_rest)
            got = self.derived[key] = (texts, [by_rest[r] for r in texts], {r[0] for r in texts if r})
        return got

    def walk_each(self, q: int, tokens: int) -> dict[int, int]:
        """id -> next state for the ``tokens`` (a bitset) that live from ``q``, walked one by
        one; loop bytes leave q where it is, so tokens with the same rest after them walk alike."""
        out: dict[int, int] = {}
        token_bytes = self.token_bytes
        loop = self.loop_bytes(q)
        walked = self.walked
        walk = self.walk_skipping
        for i in bits_of(tokens):
            key = (q, token_bytes[i].lstrip(loop))
            n = walked.get(key, -2)
            if n == -2:
                n = walked[key] = walk(q, key[1]) if key[1] else q
            if n >= 0:
                out[i] = n
        return out

    def tail_inside(self, n: int) -> int:
        """Bitset of the tokens whose bytes after an ASCII first byte stay in loop state ``n``
        (its loop bytes, plus whole UTF-8 characters when every character returns to ``n``)."""
        key = ("tail", self.loop_bytes(n), self.transparent(n))
        got = self.derived.get(key)
        if got is None:
            t = self.tables
            ok = set(key[1]) | (_HIGH if key[2] else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= t.contains_tail[b]
            got = self.derived[key] = t.nonempty & ~bad & (~t.not_utf8 if key[2] else -1)
        return got

    def walk_rest(self, q: int, live: list[tuple[int, int]], covered: int, allowed: int,
                  exc: dict[int, int], default: int) -> tuple[int, dict[int, int], int]:
        """Walk the tokens with a live first byte that no bitset ``covered``; add the ones that
        survive to ``allowed`` (and to ``exc`` unless they go to ``default``)."""
        extra = self.walk_each(q, self.first(bytes(b for b, _ in live)) & ~covered)
        exc.update((i, n) for i, n in extra.items() if n != default)
        return allowed | bitset(extra, self.size), exc, default

    def rests(self, q: int) -> tuple[list[bytes], list[list[int]], set[int]]:
        """The tokens that start in loop state ``q``'s loop but leave it (a quote or a
        backslash further on, half a character), by their rest after the leading loop bytes:
        (sorted distinct rests, ids per rest, the rests' first bytes). Depends only on the
        loop bytes and the transparency, so it is kept across states and compiles."""
        loop, chars = self.loop_bytes(q), self.transparent(q)
        key = ("rests", loop, chars)
        got = self.derived.get(key)
        if got is None:
            first = bytes(sorted(set(loop) | (_HIGH if chars else set())))
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            for i in bits_of(self.first(first) & ~self.inside(q)):
                by_rest.setdefault(token_bytes[i].lstrip(loop), []).append(i)
            texts = sorted(by_rest)
            got = self.derived[key] = (texts, [by_rest[t] for t in texts], {t[0] for t in texts if t})
        return got

    def trie(self, q: int, roots: list[tuple[int, int]],
             texts: list[bytes] | None = None) -> list[tuple[int, int]]:
        """(index in ``texts``, next state) of the texts (sorted; default: every distinct token)
        starting with a byte of ``roots`` (byte, state after it from ``q``) that live: the
        sorted list split by live bytes."""
        if texts is None:
            texts = self.tables.texts
        walk = self.dfa.walk
        walked = self.walked
        found: list[tuple[int, int]] = []  # (text index, next state)
        loop_of = self.loop_bytes
        live_of = self.live
        stack = []
        for b, n in roots:
            start, end = subrange(texts, 0, len(texts), b"", b)
            if start < end:
                stack.append((start, end, 1, n))
        while stack:
            lo, hi, depth, s = stack.pop()
            loop = loop_of(s)
            live_s = live_of(s)
            if hi - lo <= _SMALL + 4 * len(live_s) or len(loop) >= _LOOP_MIN or len(live_s) > _WIDE:
                # few tokens, a state most bytes loop in (a string) or one where most bytes
                # live (splitting costs more than walking): walk each token, the loop bytes
                # after the prefix skipped at C speed
                for k in range(lo, hi):
                    key = (s, texts[k][depth:].lstrip(loop))
                    n = walked.get(key, -2)
                    if n == -2:
                        n = walked[key] = walk(s, key[1])
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
        return found

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

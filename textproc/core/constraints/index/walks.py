"""What a DFA's states read over a vocabulary (:class:`TokenWalks`): the walks of the tokens
from a state, and everything kept across states of one index build.

Owns every cache of a build's per-state work, declared in ``__init__`` and written only here:
a state's live bytes and loop bytes, the walks of token texts from a state (by their rest
after the state's loop bytes), the walks of the tokens that leave a loop (per loop state and
entry bytes), a state's literal run, its near-loop state, the chains of counted repetitions.
The answer paths (:mod:`~textproc.core.constraints.index.states` and the paths it takes) read
them through the methods below. Every walk is the walk definition's (a token is allowed iff
walking its bytes never reaches the dead state, and goes where the walk ends); the methods
only avoid walking tokens one by one:

- ``trie`` / ``trie_ranges``: the sorted token texts split by the live bytes of the states met,
  so a text that dies at a byte is never walked past it; small ranges (and ranges at a state
  most bytes loop in or live from) walked text by text, the loop bytes skipped at C speed;
- ``rest_walk``: the tokens that enter a loop state and leave it later (a quote, a backslash,
  half a character), grouped by their rest after the loop bytes (per vocabulary, in
  :mod:`~textproc.core.constraints.index.token_sets`), the distinct rests walked as a trie;
  kept per (loop state, entry bytes), the same for every state entering that loop;
- ``near_loop`` / ``near_root`` / ``walk_near``: in an open object a key being written that
  shares a prefix with declared keys (``"serv`` of ``service_id``) reads like the key string's
  loop state ``n`` but for a few bytes (those continuing a declared key, or ending it); a rest
  whose first byte is not one of them walks as it does from ``n``, so its walk is looked up
  under ``n`` (Qwen3: ~5,000 tokens start with ``_``, walked one by one before);
- ``root_walks``: the walks of a state's few walked first bytes (a quote or a backslash read
  from every key position of an object leads to the same states), kept once seen twice;
- ``chain``: a counted repetition seen from a state (the plain bytes that all lead one state
  on, and the chain of states they lead through), and ``class_groups``: the tokens grouped by
  their string of DFA byte classes (equal strings walk alike).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import compress

from textproc.core.constraints.automaton.dfa import ByteDFA, utf8_sequences
from textproc.core.constraints.automaton.lazy import LazyDFA
from textproc.core.constraints.index.parts import Kept
from textproc.core.constraints.index.token_sets import Rests, TokenSets
from textproc.core.constraints.index.vocab import MAX_CHARS, VocabTables, bits_of, bitset, subrange

__all__ = ["TokenWalks", "RestTrie", "LOOP_MIN", "TRIE_SMALL", "TRIE_WIDE"]

LOOP_MIN = 24  # bytes a loop (or a chain) needs for the bitset paths (a JSON string's: ~90)
# trie_ranges' thresholds (a replay near a counted bound splits where they split)
TRIE_SMALL = 24  # ranges this small are walked token by token instead of split further
TRIE_WIDE = 96  # live bytes above which a state's range is walked token by token
NEAR_MAX = 16  # bytes a state may differ in from its loop state to count as near it
NEAR_MIN_TOKENS = 32  # texts a first byte must start for the bitset path (fewer: walked)
FEW_ROOTS = 4  # walked first bytes up to which a state's walks are kept per first byte
_BYTES = [bytes((b,)) for b in range(256)]
_HIGH_BYTES = bytes(range(0x80, 0x100))
_MULTIBYTE = [s for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)) for s in utf8_sequences(lo, hi)]

# (plain bytes before the rest, state they lead to, (byte, next state) roots, sorted rests) ->
# (rest index, next state) of the rests that live, in trie walk order (TokenWalks.trie)
RestTrie = Callable[[int, int, list[tuple[int, int]], list[bytes]], list[tuple[int, int]]]


class TokenWalks:
    """The walks of the tokens of ``dfa``'s states over a vocabulary (``tables``, the bytes of
    every id), and what one index build keeps of them."""

    def __init__(self, dfa: ByteDFA | LazyDFA, tables: VocabTables, token_bytes: Sequence[bytes],
                 check: Callable[[], None] = lambda: None) -> None:
        self.dfa = dfa
        self.rows = dfa.rows
        self.tables = tables
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.sets = TokenSets(tables, token_bytes, check)  # kept by the vocabulary across compiles
        self._lives: dict[int, list[tuple[int, int]]] = {}  # state -> (byte, next) of its live bytes
        self._loops: dict[int, bytes] = {}  # state -> the bytes leading back to it
        self._transparency: dict[int, bool] = {}  # state -> every whole character returns to it
        self._walked: dict[tuple[int, bytes], int] = {}  # (state, bytes) -> state after them
        # state -> its loop bytes if it has a big loop, else b"" (walk_skipping)
        self._big_loops: dict[int, bytes] = {}
        # (loop state, entry bytes or None for its own loop) -> the walks of the tokens that
        # leave it (by their rests); loop state -> its non-ASCII first tokens walked
        self._rest_walks: dict[tuple[int, bytes | None], Kept] = {}
        self._high_walks: dict[int, Kept] = {}
        self._nears: dict[int, tuple[int, bytes] | None] = {}  # state -> near_loop
        # a state's walked first bytes (byte, state after it) -> their walks, once seen twice
        self._root_walks: dict[tuple[int, int], Kept | None] = {}
        self._chain_steps: dict[tuple[int, bytes], int | None] = {}  # (state, plain bytes) -> chain's next
        self._char_steps: dict[tuple[int, int], bool] = {}  # (s, t) -> char_step
        self._class_groups: list[tuple[bytes, list[int]]] | None = None  # class_groups, on demand
        self._runs: dict[int, tuple[bytes, list[int]]] = {}  # state -> literal_run

    def live(self, q: int) -> list[tuple[int, int]]:
        """``(byte, next state)`` for the bytes that do not kill ``q``."""
        got = self._lives.get(q)
        if got is None:
            live = list(compress(range(256), map((-1).__lt__, self.rows[q])))  # in C
            row = self.rows[q]  # (a row built on demand is a plain list once read)
            got = self._lives[q] = [(b, row[b]) for b in live]
        return got

    def loop_bytes(self, q: int) -> bytes:
        """The bytes that lead from ``q`` back to ``q``."""
        got = self._loops.get(q)
        if got is None:
            got = self._loops[q] = bytes(compress(range(256), map(q.__eq__, self.rows[q])))  # in C
        return got

    def literal_run(self, q: int) -> tuple[bytes, list[int]]:
        """The bytes read from ``q`` while each state reads one byte (at most the longest
        token's), and the states along them (``q`` first); kept per state."""
        got = self._runs.get(q)
        if got is not None:
            return got
        longest = self.longest_text()
        path: list[int] = []  # states reading one byte, from q, whose run is not known yet
        x = q
        while len(path) < longest and x not in self._runs:
            live = self.live(x)
            if len(live) != 1:
                break
            path.append(x)
            x = live[0][1]
        run, states = self._runs.get(x, (b"", [x]))
        for y in reversed(path):
            run = (self.live(y)[0][0].to_bytes(1, "little") + run)[:longest]
            states = [y, *states[:longest]]
            self._runs[y] = (run, states)
        return self._runs[q]

    def longest_text(self) -> int:
        """The longest token's bytes."""
        return self.tables.longest

    def tokens_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens made of ``plain`` bytes (and whole non-ASCII characters)."""
        return self.sets.made_of(plain, chars)

    def transparent(self, q: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``q`` returns to ``q``."""
        got = self._transparency.get(q)
        if got is None:
            got = self._transparency[q] = self.char_step(q, q)
        return got

    def shares_chars(self, q: int, n: int) -> bool:
        """Whether every non-ASCII byte read from ``q`` goes where it goes from loop state
        ``n`` and every whole character returns to ``n`` (a string's first character after a
        key prefix: the same as inside the string)."""
        row, loop_row = self.rows[q], self.rows[n]
        return row[0x80:] == loop_row[0x80:] and self.transparent(n)

    def inside(self, n: int) -> int:
        """Bitset of the tokens that stay in loop state ``n``: made of its loop bytes, plus
        whole UTF-8 characters when every character returns to ``n``."""
        return self.tokens_of(self.loop_bytes(n), self.transparent(n))

    def first(self, first_bytes: bytes) -> int:
        """Bitset of the tokens starting with one of ``first_bytes``."""
        return self.sets.first(first_bytes)

    def walk_skipping(self, q: int, data: bytes) -> int:
        """``dfa.walk`` that skips runs of loop bytes in loop states at C speed."""
        rows = self.rows
        big = self._big_loops
        i, n = 0, len(data)
        while i < n:
            q = rows[q][data[i]]
            if q < 0:
                return -1
            i += 1
            if i < n:
                loop = big.get(q)
                if loop is None:
                    loop = self.loop_bytes(q)
                    loop = big[q] = loop if len(loop) >= LOOP_MIN else b""
                if loop:
                    i = n - len(data[i:].lstrip(loop))
        return q

    def walk_each(self, q: int, tokens: int) -> dict[int, int]:
        """id -> next state for the ``tokens`` (a bitset) that live from ``q``, walked one by
        one; loop bytes leave q where it is, so tokens with the same rest after them walk alike."""
        out: dict[int, int] = {}
        token_bytes = self.token_bytes
        loop = self.loop_bytes(q)
        walked = self._walked
        walk = self.walk_skipping
        for i in bits_of(tokens):
            key = (q, token_bytes[i].lstrip(loop))
            n = walked.get(key, -2)
            if n == -2:
                n = walked[key] = walk(q, key[1]) if key[1] else q
            if n >= 0:
                out[i] = n
        return out

    def rest_walk(self, n: int, entry: bytes | None) -> Kept:
        """id -> next state of the tokens that start with a byte of ``entry`` (None: a loop
        byte of ``n``, or a non-ASCII byte when ``n`` is transparent), go to loop state ``n``
        and leave its loop later (a quote, a backslash, half a character): their distinct
        rests after the loop bytes walked from ``n`` as a trie; kept per (n, entry)."""
        got = self._rest_walks.get((n, entry))
        if got is None:
            got = self.within_loop(n, entry) if entry is not None else None
            if got is None:
                rests, rest_ids, rest_first = self.rests(n) if entry is None else self.entry_rests(entry, n)
                nexts: dict[int, int] = {}
                if rests and not rests[0]:  # nothing after the loop bytes: stays in n
                    nexts.update(dict.fromkeys(rest_ids[0], n))
                rows = self.rows
                found = self.trie(n, [(b, rows[n][b]) for b in rest_first if rows[n][b] >= 0], rests)
                nexts.update({i: t for k, t in found for i in rest_ids[k]})
                got = Kept.of(nexts, self.size)
            self._rest_walks[(n, entry)] = got
        return got

    def high_walk(self, n: int) -> Kept:
        """id -> next state from loop state ``n`` of the tokens that start with a non-ASCII
        byte but are not made of ``n``'s loop bytes and whole characters (kept per n)."""
        got = self._high_walks.get(n)
        if got is None:
            got = self._high_walks[n] = Kept.of(self.walk_each(n, self.first(_HIGH_BYTES) & ~self.inside(n)), self.size)
        return got

    def entry_rests(self, entry: bytes, n: int) -> Rests:
        """The tokens starting with a byte of ``entry`` (each leading into loop state ``n``)
        whose later bytes leave ``n``, by their rest after the first byte and the loop bytes."""
        return self.sets.entry_rests(entry, self.loop_bytes(n), self.transparent(n))

    def tail_inside(self, n: int) -> int:
        """Bitset of the tokens whose bytes after an ASCII first byte stay in loop state ``n``
        (its loop bytes, plus whole UTF-8 characters when every character returns to ``n``)."""
        return self.sets.tail_made_of(self.loop_bytes(n), self.transparent(n))

    def rests(self, q: int) -> Rests:
        """The tokens that start in loop state ``q``'s loop but leave it (a quote or a
        backslash further on, half a character), by their rest after the leading loop bytes."""
        return self.sets.loop_rests(self.loop_bytes(q), self.transparent(q))

    def trie(self, q: int, roots: list[tuple[int, int]],
             texts: list[bytes] | None = None) -> list[tuple[int, int]]:
        """(index in ``texts``, next state) of the texts (sorted; default: every distinct token)
        starting with a byte of ``roots`` (byte, state after it from ``q``) that live: the
        sorted list split by live bytes."""
        if texts is None:
            texts = self.tables.texts
        stack = []
        for b, n in roots:
            start, end = subrange(texts, 0, len(texts), b"", b)
            if start < end:
                stack.append((start, end, 1, n))
        return self.trie_ranges(stack, texts)

    def trie_ranges(self, stack: list[tuple[int, int, int, int]], texts: list[bytes]) -> list[tuple[int, int]]:
        """(index in ``texts``, next state) of the texts in the ranges ``(lo, hi, depth, state)``
        (``texts[lo:hi]`` share their first ``depth`` bytes, which lead to ``state``) that live."""
        found: list[tuple[int, int]] = []  # (text index, next state)
        loop_of = self.loop_bytes
        live_of = self.live
        while stack:
            lo, hi, depth, s = stack.pop()
            loop = loop_of(s)
            live_s = live_of(s)
            if hi - lo <= TRIE_SMALL + 4 * len(live_s) or len(loop) >= LOOP_MIN or len(live_s) > TRIE_WIDE:
                # few tokens, a state most bytes loop in (a string) or one where most bytes
                # live (splitting costs more than walking): walk each token, the loop bytes
                # after the prefix skipped at C speed
                near = self.near_loop(s) if len(live_s) > TRIE_WIDE and len(loop) < LOOP_MIN else None
                if near is not None:  # a key being written: walks as from its loop state
                    found.extend(self.walk_near(s, near, texts, lo, hi, depth))
                    continue
                if len(live_s) < 64 and hi - lo > len(live_s) + 8:  # most texts die at once
                    found.extend(self.live_texts(s, texts, lo, hi, depth))
                    continue
                found.extend(self.walk_texts(s, texts, range(lo, hi), depth))
                continue
            if len(texts[lo]) == depth:
                found.append((lo, s))
                lo += 1
            prefix = texts[lo][:depth]
            for b, n in live_s:
                child = prefix + _BYTES[b]
                start = bisect_left(texts, child, lo, hi)
                if start < hi and texts[start].startswith(child):  # some text goes on with b
                    end = hi if b == 255 else bisect_left(texts, prefix + _BYTES[b + 1], start, hi)
                    stack.append((start, end, depth + 1, n))
        return found

    def walk_texts(self, s: int, texts: list[bytes], ks: range | list[int], depth: int) -> list[tuple[int, int]]:
        """(k, next state) of the texts ``texts[k]`` for ``k`` in ``ks`` (ascending; their first
        ``depth`` bytes lead to ``s``) that live, each walked on its own: the loop bytes after
        the prefix skipped at C speed, a text whose next byte is dead not walked at all, each
        walk kept in ``walked``."""
        loop = self.loop_bytes(s)
        row = self.rows[s]
        walked = self._walked
        walk = self.dfa.walk
        found: list[tuple[int, int]] = []
        for k in ks:
            text = texts[k]
            if len(text) > depth and row[text[depth]] < 0:
                continue  # dies at its next byte
            key = (s, text[depth:].lstrip(loop))
            n = walked.get(key, -2)
            if n == -2:
                n = walked[key] = walk(s, key[1])
            if n >= 0:
                found.append((k, n))
        return found

    def live_texts(self, s: int, texts: list[bytes], lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
        """(index, next state) of the texts ``texts[lo:hi]`` (sharing their first ``depth``
        bytes, which lead to ``s``) that live, ascending, as walking each finds them: the
        range split by ``s``'s few live bytes first, so a text whose next byte is dead costs
        nothing (the states after a ``\\u`` or a UTF-8 lead byte read a few bytes of ~200)."""
        found: list[tuple[int, int]] = []
        if len(texts[lo]) == depth:
            found.append((lo, s))
            lo += 1
        prefix = texts[lo][:depth] if lo < hi else b""
        stack = []
        for b, n in self.live(s):
            start, end = subrange(texts, lo, hi, prefix, b)
            if start < end:
                stack.append((start, end, depth + 1, n))
        found.extend(self.trie_ranges(stack, texts))
        found.sort()
        return found

    def walk_rest(self, s: int, rest: bytes) -> int:
        """The state ``rest`` leads to from ``s`` (-1: dead; ``s`` for no bytes), kept per
        (state, bytes) as every walk here is."""
        key = (s, rest)
        n = self._walked.get(key, -2)
        if n == -2:
            n = self._walked[key] = self.walk_skipping(s, rest) if rest else s
        return n

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
        if len(plain) < LOOP_MIN:
            return None
        states = [q]
        steps = self._chain_steps  # (state, plain bytes) -> the one state they all lead to, or None
        while len(states) < MAX_CHARS and states[-1] >= 0:
            key = (states[-1], plain)
            n = steps.get(key, -2)
            if n == -2:
                nexts = {rows[states[-1]][b] for b in plain}
                n = steps[key] = nexts.pop() if len(nexts) == 1 else None
            if n is None:
                break
            states.append(n)
        shifts = 0  # characters: c[i] --any whole non-ASCII character--> c[i + 1]
        while shifts + 1 < len(states) and states[shifts + 1] >= 0 and self.char_step(states[shifts], states[shifts + 1]):
            shifts += 1
        return plain, states, shifts

    def char_step(self, s: int, t: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``s`` reaches ``t`` (kept per
        state: each chain state of a repetition asks it for the 47 after it)."""
        got = self._char_steps.get((s, t))
        if got is None:
            got = self._char_steps[(s, t)] = self._char_step(s, t)
        return got

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

    def char_dies(self, s: int) -> bool:
        """Whether every whole non-ASCII character read from ``s`` reaches the dead state."""
        rows = self.rows
        for seq in _MULTIBYTE:
            got = {s}
            for lo, hi in seq:
                got = {rows[x][b] if x >= 0 else -1 for x in got for b in range(lo, hi + 1)}
            if got != {-1}:
                return False
        return True

    def class_groups(self) -> list[tuple[bytes, list[int]]]:
        """Tokens grouped by their string of DFA byte classes (equal strings walk alike);
        each group is keyed by its first token's bytes, a representative (on demand, kept)."""
        if self._class_groups is not None:
            return self._class_groups
        if isinstance(self.dfa, LazyDFA):  # its NFA's byte classes: alike in every state
            table = bytearray(self.dfa.byte_class)
        else:
            signature: dict[tuple[int, ...], int] = {}
            table = bytearray(256)
            columns = list(zip(*self.rows))  # byte -> next state in every state
            for b in range(256):
                table[b] = signature.setdefault(columns[b], len(signature)) % 256
            if len(signature) > 256:
                table = bytearray(range(256))  # more classes than bytes can name: no grouping
        groups: dict[bytes, tuple[bytes, list[int]]] = {}
        check = self.sets.check
        for token_id, data in enumerate(self.token_bytes):
            if token_id % 4096 == 4095:
                check()
            if data:
                key = data.translate(table)
                got = groups.get(key)
                if got is None:
                    groups[key] = (data, [token_id])
                else:
                    got[1].append(token_id)
        self._class_groups = list(groups.values())
        return self._class_groups

    def near_loop(self, s: int) -> tuple[int, bytes] | None:
        """``(n, differing)``: a big loop state ``n`` (not ``s``) whose row ``s``'s row equals
        except at the bytes ``differing`` (at most ``NEAR_MAX``); None if there is none."""
        if s in self._nears:
            return self._nears[s]
        rows = self.rows
        row = rows[s]
        targets = {t for t in set(row) if t >= 0 and t != s and len(self.loop_bytes(t)) >= LOOP_MIN}
        got = None
        for n in sorted(targets):  # every candidate, smallest first: the answer does not hang on order
            loop_row = rows[n]
            differing = bytes(b for b in range(256) if row[b] != loop_row[b])
            if len(differing) <= NEAR_MAX:
                got = (n, differing)
                break
        self._nears[s] = got
        return got

    def near_root(self, c: int, s: int) -> tuple[int, int, Kept, list[int], dict[int, int]] | None:
        """The tokens starting with ASCII byte ``c`` that leads to ``s``, when ``s`` is near a loop
        state ``n`` (:meth:`near_loop`) and enough tokens start with ``c``: ``(tokens that go to n,
        n, the kept walks of the tokens that leave n's loop, the ids walked here instead, id ->
        next state of those that live)``; None otherwise (walk them as a trie)."""
        if c >= 0x80:
            return None
        near = self._nears[s] if s in self._nears else self.near_loop(s)
        if near is None:
            return None
        texts = self.tables.texts
        lo, hi = subrange(texts, 0, len(texts), b"", c)
        if hi - lo < NEAR_MIN_TOKENS:
            return None
        n, differing = near
        prefix = texts[lo][:1]
        text_ids = self.tables.text_ids
        rows = self.rows
        # the texts whose second byte is one of the differing ones (and the text c alone) are
        # walked from where that byte leads from s; every other text starting with c walks its
        # rest from n
        ranges = []
        own: list[int] = []  # text indices walked here
        found: list[tuple[int, int]] = []
        if texts[lo] == prefix:
            own.append(lo)
            found.append((lo, s))
        for d in differing:
            a, b = subrange(texts, lo, hi, prefix, d)
            if a < b:
                own.extend(range(a, b))
                if rows[s][d] >= 0:
                    ranges.append((a, b, 2, rows[s][d]))
        own_ids = [i for k in own for i in text_ids[k]]
        pairs = {i: t for k, t in (*found, *self.trie_ranges(ranges, texts)) for i in text_ids[k]}
        tokens = self.first(prefix) & self.tail_inside(n) & ~bitset(own_ids, self.size)
        return tokens, n, self.rest_walk(n, prefix), own_ids, pairs

    def walk_near(self, s: int, near: tuple[int, bytes], texts: list[bytes], lo: int, hi: int,
                  depth: int) -> list[tuple[int, int]]:
        """(index, next state) of the texts ``texts[lo:hi]`` whose bytes after the first
        ``depth`` live from ``s``, a state near loop state ``n`` (:meth:`near_loop`): a rest
        whose first byte is not one of the differing ones walks as from ``n``, so its walk is
        looked up under ``n`` (the same for every state near ``n``: hundreds of key positions)."""
        n, differing = near
        loop_n = self.loop_bytes(n)
        walked = self._walked
        walk = self.dfa.walk
        walk_n = self.walk_skipping
        found: list[tuple[int, int]] = []
        for k in range(lo, hi):
            rest = texts[k][depth:]
            if rest and rest[0] not in differing:
                key = (n, rest.lstrip(loop_n))
                t = walked.get(key, -2)
                if t == -2:
                    t = walked[key] = walk_n(n, key[1]) if key[1] else n
            else:
                key = (s, rest)
                t = walked.get(key, -2)
                if t == -2:
                    t = walked[key] = walk(s, rest)
            if t >= 0:
                found.append((k, t))
        return found

    def root_walks(self, q: int, roots: list[tuple[int, int]]) -> list[Kept] | None:
        """The walks of the tokens starting with each of ``roots`` (byte, state after it), in
        the trie's order (the last root's first), kept per root once seen twice (every key
        position of an open object reads a quote or a backslash into the same states); None
        while some root is new or for more than a few roots (walk them)."""
        walks = self._root_walks
        if not roots or len(roots) > FEW_ROOTS:
            return None
        new = [root for root in roots if root not in walks]
        if new:
            walks.update(dict.fromkeys(new))
            return None
        out = []
        text_ids = self.tables.text_ids
        for root in reversed(roots):
            got = walks[root]
            if got is None:
                nexts: dict[int, int] = {}
                for k, n in self.trie(q, [root]):
                    nexts.update(dict.fromkeys(text_ids[k], n))
                got = walks[root] = Kept.of(nexts, self.size)
            out.append(got)
        return out

    def within_loop(self, n: int, entry: bytes) -> Kept | None:
        """``self.rest_walk(n, entry)`` when ``entry`` is part of loop state ``n``'s ASCII loop bytes
        (a key being written: every key byte but the declared ones) and the tokens starting with
        it leave the loop with every rest those of all the loop bytes do: the walk of all of them,
        restricted to the tokens starting with ``entry`` (the trie over the same rests visits them
        in the same order). None otherwise (walk them)."""
        loop = self.loop_bytes(n)
        whole = bytes(b for b in loop if b < 0x80)
        if entry == whole or not set(entry) <= set(whole):
            return None
        wanted = 0
        for b in entry:
            wanted |= 1 << b
        if any(not firsts & wanted for firsts in self.sets.rest_firsts(whole, loop, self.transparent(n))):
            return None  # a rest only tokens starting with other bytes have
        return self.rest_walk(n, whole).starting_with(entry, self.token_bytes, self.first(entry))

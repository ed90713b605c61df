"""One index state's tokens: which ids a DFA state allows and where each goes (``StateTokens``).

Owns the per-state work of the index build (:mod:`textproc.core.constraints.index.build` drives it
over the states in reachability order). Every answer is the walk definition (a token is
allowed iff walking its bytes never reaches the dead state, and goes where the walk ends);
the paths below only avoid walking tokens one by one:

- loops (inside a JSON string almost every token leaves the state unchanged): the tokens made
  of a loop's bytes are one bitset expression per distinct loop byte set, and so are the
  tokens entering a loop state and staying (an opening quote); the tokens that leave the loop
  (a quote, a backslash or half a character further on) are grouped by their rest after the
  loop bytes, and the distinct rests are walked as a trie over the sorted rests, so a rest
  that dies at its first byte costs nothing (:mod:`textproc.core.constraints.index.token_sets`
  keeps these per vocabulary);
- fixed-length runs (the 4 hex digits of ``\\uXXXX``, a uuid's 8): tokens of n run bytes go to
  the n-th state, one bitset each, the longer ones walk their rest after the run as a trie;
- counted repetitions (``[^"]{0,8}``): a whole region at once, each kind of state's tokens
  walked once for every position and filtered by the room left, rows by character count
  (:mod:`textproc.core.constraints.index.counted`); a repetition its checks refuse: tokens
  grouped by character count, one AND per length
  (:mod:`textproc.core.constraints.index.chains`), each state answered from the same kind of
  state one position earlier, moved a position on, where no walk can tell the two apart
  (:mod:`textproc.core.constraints.index.shift`, near the bound
  :mod:`textproc.core.constraints.index.replay`);
- a state's first byte that leads to a state reading like a string loop but for a few bytes
  (an open object's key that shares a prefix with declared keys): as the loop, bitsets and
  the loop's kept walks, walking only the tokens through the few bytes
  (:mod:`textproc.core.constraints.index.near`);
- states on short cycles (a string's, free text's): from a template of their region's shape
  kept per vocabulary, only the tokens that leave the region walked
  (:mod:`textproc.core.constraints.index.regions`);
- a state that reads one byte (a key, a call's markup): its literal run's prefixes that are
  tokens, and the tokens starting with the whole run walked from its end;
- other states: the sorted token list walked as a trie, following only live bytes (a range
  at a state that reads few bytes is split by them before its texts are walked); a state
  where most bytes live walks each distinct byte-class string once
  (:mod:`textproc.core.constraints.index.chains`), and one near a loop state looks its texts'
  walks up under that loop state (shared by every key position near it); the walks of a
  state's few walked first bytes (a quote, a backslash: the same states from every key
  position of an object) are kept once seen twice.

Every path but the counted regions' gives the exceptions in the order walking the trie gives
them: the shortest completions take a state's first exception per next state, so those paths
may not reorder (a region's states list theirs in group order: the same masks and next
states, a completion token that may be another one on a shortest way).

The walks of the tokens that leave a loop are kept per loop state and entry bytes (the same for
every state entering it), with their bitset and counts, and the most common next state of a
state becomes its default, no exception entries
(:mod:`textproc.core.constraints.index.parts`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import compress

from textproc.core.constraints.automaton.dfa import ByteDFA
from textproc.core.constraints.automaton.lazy import LazyDFA
from textproc.core.constraints.index.chains import LOOP_MIN, chain_state, char_step, wide_state
from textproc.core.constraints.index.counted import CountedRegions
from textproc.core.constraints.index.near import near_loop, near_root, walk_near
from textproc.core.constraints.index.parts import Kept, combine, root_walks, within_loop
from textproc.core.constraints.index.regions import Regions
from textproc.core.constraints.index.replay import TRIE_SMALL, TRIE_WIDE
from textproc.core.constraints.index.shift import CountedShift
from textproc.core.constraints.index.token_sets import HIGH, Rests, TokenSets
from textproc.core.constraints.index.vocab import VocabTables, bits_of, bitset, subrange

__all__ = ["StateTokens", "State"]

# (allowed ids as a bitset, id -> next state where it differs, default next state, next state
# by character count or None)
State = tuple[int, dict[int, int], int, list[int] | None]

_LOOP_MIN = LOOP_MIN  # loop bytes for the bitset path (JSON string states have ~90)
_WIDE = TRIE_WIDE  # live bytes above which a loop-less state walks distinct class strings
_SMALL = TRIE_SMALL  # ranges this small are walked token by token instead of split further
_BYTES = [bytes((b,)) for b in range(256)]
_HIGH_BYTES = bytes(range(0x80, 0x100))
_MAX_RUN = 8  # longest fixed-length run taken as bitsets (\uXXXX: 4, a uuid: 8)


class StateTokens:
    """The tokens of each state of ``dfa`` over a vocabulary (``tables``, the bytes of every id)."""

    def __init__(self, dfa: ByteDFA | LazyDFA, tables: VocabTables, token_bytes: Sequence[bytes],
                 check: Callable[[], None] = lambda: None) -> None:
        self.dfa = dfa
        self.rows = dfa.rows
        self.tables = tables
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.sets = TokenSets(tables, token_bytes, check)  # kept by the vocabulary across compiles
        self.class_groups: list[tuple[bytes, list[int]]] | None = None
        self.loops: dict[int, bytes] = {}
        self.transparency: dict[int, bool] = {}
        self.lives: dict[int, list[tuple[int, int]]] = {}
        self.walked: dict[tuple[int, bytes], int] = {}  # (state, bytes) -> state after them
        # state -> its loop bytes if it has a big loop, else b"" (walk_skipping; on demand)
        self.big_loops: dict[int, bytes] = {}
        # (loop state, entry bytes or None for its own loop) -> the walks of the tokens that
        # leave it (by their rests); loop state -> its non-ASCII first tokens walked
        self.rest_walks: dict[tuple[int, bytes | None], Kept] = {}
        self.high_walks: dict[int, Kept] = {}
        self.nears: dict[int, tuple[int, bytes] | None] = {}  # index_near.near_loop, per state
        # a state's walked first bytes (byte, state after it) -> their walks, once seen twice
        self.root_walks: dict[tuple[int, int], Kept | None] = {}
        self.counted_regions = CountedRegions(self)  # counted repetitions, whole regions at once
        self.counted = CountedShift(self)  # counted repetitions' answers, moved a position on
        self.regions = Regions(self)  # states on short cycles, from templates kept per vocabulary
        self.chain_steps: dict[tuple[int, bytes], int | None] = {}  # index_chains.chain, kept
        self.char_steps: dict[tuple[int, int], bool] = {}  # index_chains.char_step, kept
        self._longest = -1  # the longest token's bytes (on demand)
        self.runs: dict[int, tuple[bytes, list[int]]] = {}  # state -> literal_run

    def live(self, q: int) -> list[tuple[int, int]]:
        """``(byte, next state)`` for the bytes that do not kill ``q``."""
        got = self.lives.get(q)
        if got is None:
            live = list(compress(range(256), map((-1).__lt__, self.rows[q])))  # in C
            row = self.rows[q]  # (a row built on demand is a plain list once read)
            got = self.lives[q] = [(b, row[b]) for b in live]
        return got

    def loop_bytes(self, q: int) -> bytes:
        """The bytes that lead from ``q`` back to ``q``."""
        got = self.loops.get(q)
        if got is None:
            got = self.loops[q] = bytes(compress(range(256), map(q.__eq__, self.rows[q])))  # in C
        return got

    def state(self, q: int) -> State:
        """(allowed ids as a bitset, id -> next for ids not going to default, default next,
        the next state by character count or None: a counted repetition's state, no default)."""
        region = self.counted_regions.state(q)
        if region is not None:
            return region
        moved = self.counted.state(q)
        if moved is not None:
            return moved
        templated = self.regions.state(q)
        if templated is not None:
            return templated
        answer, shape = self.exact_state(q)
        self.counted.keep(q, answer, shape)
        return answer

    def exact_state(self, q: int) -> tuple[State, str]:
        """``state(q)`` by the paths below, and which path: "run", "chain", "wide", "mixed"
        (tokens entering a loop or near-loop state) or "trie" (a mixed state without loops)."""
        live = self.live(q)
        if len(live) == 1:
            return (*self.literal_state(q), None), "trie"
        by_next: dict[int, list[int]] = {}
        for b, t in live:
            by_next.setdefault(t, []).append(b)
        loops = [t for t in by_next if len(self.loop_bytes(t)) >= _LOOP_MIN]
        if len(by_next) == 1 and not loops:
            run = self.run(q, live)
            if run is not None:
                return (*self.run_state(*run), None), "run"
        if not loops and len(live) > _WIDE:
            chained = chain_state(self, q, live)
            return (chained, "chain") if chained is not None else ((*wide_state(self, q), None), "wide")
        return (*self.mixed_state(q, by_next, loops), None), "mixed" if loops else "trie"

    def literal_state(self, q: int) -> tuple[int, dict[int, int], int]:
        """A state that reads one byte, as do the states after it for a while (a key, a call's
        markup): a token is allowed iff it is a prefix of that literal run (it goes as far into
        the run) or starts with the whole run (the rest walked from the run's end as a trie);
        no other token lives, so they are never looked at."""
        texts = self.tables.texts
        text_ids = self.tables.text_ids
        run, states = self.literal_run(q)
        pairs: dict[int, int] = {}
        whole = True  # whether some token starts with the whole run
        for n in range(1, len(run) + 1):
            prefix = run[:n]
            k = bisect_left(texts, prefix)
            if k == len(texts) or not texts[k].startswith(prefix):
                whole = False  # no token goes this far into the run
                break
            if n < len(run) and texts[k] == prefix:
                pairs.update(dict.fromkeys(text_ids[k], states[n]))
        if whole:  # the run itself, and the tokens going on from its end
            start = bisect_left(texts, run)
            end = bisect_left(texts, run + b"\xff" * (self.longest_text() - len(run) + 1), start)
            for k, n in self.trie_ranges([(start, end, len(run), states[-1])], texts):
                pairs.update(dict.fromkeys(text_ids[k], n))
        return combine(self.size, [], pairs)

    def literal_run(self, q: int) -> tuple[bytes, list[int]]:
        """The bytes read from ``q`` while each state reads one byte (at most the longest
        token's), and the states along them (``q`` first); kept per state."""
        got = self.runs.get(q)
        if got is not None:
            return got
        longest = self.longest_text()
        path: list[int] = []  # states reading one byte, from q, whose run is not known yet
        x = q
        while len(path) < longest and x not in self.runs:
            live = self.live(x)
            if len(live) != 1:
                break
            path.append(x)
            x = live[0][1]
        run, states = self.runs.get(x, (b"", [x]))
        for y in reversed(path):
            run = (self.live(y)[0][0].to_bytes(1, "little") + run)[:longest]
            states = [y, *states[:longest]]
            self.runs[y] = (run, states)
        return self.runs[q]

    def longest_text(self) -> int:
        """The longest token's bytes."""
        if self._longest < 0:
            self._longest = max(map(len, self.tables.texts), default=0)
        return self._longest

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
        rests, rest_ids, rest_first = self.sets.run_rests(plain, k, self.loop_bytes(last) if into_loop else None)
        rows = self.rows
        pairs: dict[int, int] = {}
        if rests and not rests[0]:  # the run, then only loop bytes
            pairs.update(dict.fromkeys(rest_ids[0], last))
        for i, n in self.trie(last, [(b, rows[last][b]) for b in rest_first if rows[last][b] >= 0], rests):
            pairs.update(dict.fromkeys(rest_ids[i], n))
        return combine(self.size, groups, pairs)

    def tokens_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens made of ``plain`` bytes (and whole non-ASCII characters)."""
        return self.sets.made_of(plain, chars)

    def transparent(self, q: int) -> bool:
        """Whether every UTF-8 encoded non-ASCII character read from ``q`` returns to ``q``."""
        got = self.transparency.get(q)
        if got is None:
            got = self.transparency[q] = char_step(self, q, q)
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
        big = self.big_loops
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
                    loop = big[q] = loop if len(loop) >= _LOOP_MIN else b""
                if loop:
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
        kept: list[tuple[Kept, list[int]]] = []  # walks kept across states (without those ids)
        for n in loops:
            if n == q:  # tokens staying in q may also start with a whole non-ASCII character
                tokens = self.inside(q)
                first_covered.update(self.loop_bytes(q))
                if self.transparent(q):
                    first_covered.update(HIGH)
                kept.append((self.rest_walk(q, None), []))
            else:
                entry = bytes(b for b in by_next[n] if b < 0x80)
                tokens = self.first(entry) & self.tail_inside(n)
                first_covered.update(entry)
                if not HIGH & first_covered and self.shares_chars(q, n):
                    # a non-ASCII first byte goes where it goes from n: the tokens made of
                    # whole characters and loop bytes stay in n, the few others are walked
                    # (from n: the same walks for every state that shares n's characters)
                    tokens |= self.first(_HIGH_BYTES) & self.inside(n)
                    kept.append((self.high_walk(n), []))
                    first_covered.update(HIGH)
                kept.append((self.rest_walk(n, entry), []))
            groups.append((tokens, n))
        roots = []
        for n, bs in by_next.items():
            for b in bs:
                if b not in first_covered:
                    near = near_root(self, b, n)
                    if near is None:
                        roots.append((b, n))
                    else:  # a declared key's next byte: like its string loop but a few bytes
                        tokens, n_near, part, own, own_pairs = near
                        groups.append((tokens, n_near))
                        kept.append((part, own))
                        pairs.update(own_pairs)
        if len(roots) > _WIDE:  # splitting costs more than walking
            covered = 0
            for tokens, _ in groups:
                covered |= tokens
            pairs.update(self.walk_each(q, self.first(bytes(b for b, _ in roots)) & ~covered))
            roots = []
        tail = root_walks(self, q, roots)
        if tail is not None:
            return combine(self.size, groups, pairs, kept, tail)
        text_ids = self.tables.text_ids
        pairs.update({i: n for k, n in self.trie(q, roots) for i in text_ids[k]})
        return combine(self.size, groups, pairs, kept)

    def rest_walk(self, n: int, entry: bytes | None) -> Kept:
        """id -> next state of the tokens that start with a byte of ``entry`` (None: a loop
        byte of ``n``, or a non-ASCII byte when ``n`` is transparent), go to loop state ``n``
        and leave its loop later (a quote, a backslash, half a character): their distinct
        rests after the loop bytes walked from ``n`` as a trie; kept per (n, entry)."""
        got = self.rest_walks.get((n, entry))
        if got is None:
            got = within_loop(self, n, entry) if entry is not None else None
            if got is None:
                rests, rest_ids, rest_first = self.rests(n) if entry is None else self.entry_rests(entry, n)
                nexts: dict[int, int] = {}
                if rests and not rests[0]:  # nothing after the loop bytes: stays in n
                    nexts.update(dict.fromkeys(rest_ids[0], n))
                rows = self.rows
                found = self.trie(n, [(b, rows[n][b]) for b in rest_first if rows[n][b] >= 0], rests)
                nexts.update({i: t for k, t in found for i in rest_ids[k]})
                got = Kept.of(nexts, self.size)
            self.rest_walks[(n, entry)] = got
        return got

    def high_walk(self, n: int) -> Kept:
        """id -> next state from loop state ``n`` of the tokens that start with a non-ASCII
        byte but are not made of ``n``'s loop bytes and whole characters (kept per n)."""
        got = self.high_walks.get(n)
        if got is None:
            got = self.high_walks[n] = Kept.of(self.walk_each(n, self.first(_HIGH_BYTES) & ~self.inside(n)), self.size)
        return got

    def entry_rests(self, entry: bytes, n: int) -> Rests:
        """The tokens starting with a byte of ``entry`` (each leading into loop state ``n``)
        whose later bytes leave ``n``, by their rest after the first byte and the loop bytes."""
        return self.sets.entry_rests(entry, self.loop_bytes(n), self.transparent(n))

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
            if hi - lo <= _SMALL + 4 * len(live_s) or len(loop) >= _LOOP_MIN or len(live_s) > _WIDE:
                # few tokens, a state most bytes loop in (a string) or one where most bytes
                # live (splitting costs more than walking): walk each token, the loop bytes
                # after the prefix skipped at C speed
                near = near_loop(self, s) if len(live_s) > _WIDE and len(loop) < _LOOP_MIN else None
                if near is not None:  # a key being written: walks as from its loop state
                    found.extend(walk_near(self, s, near, texts, lo, hi, depth))
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
        walked = self.walked
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

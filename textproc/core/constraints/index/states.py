"""One index state's tokens: which ids a DFA state allows and where each goes (``StateTokens``).

Owns the per-state work of the index build (:mod:`textproc.core.constraints.index.build` drives it
over the states in reachability order): :meth:`StateTokens.state` picks the path that answers a
state. Every answer is the walk definition (a token is allowed iff walking its bytes never
reaches the dead state, and goes where the walk ends); the paths only avoid walking tokens one
by one, and what they walk and keep across states is one
:class:`~textproc.core.constraints.index.walks.TokenWalks` (the build's only caches):

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
  grouped by character count, one AND per length (:meth:`StateTokens.chain_state`), each
  state answered from the same kind of state one position earlier, moved a position on, where
  no walk can tell the two apart, and near the bound its kept trie walked again
  (:mod:`textproc.core.constraints.index.shift`);
- a state's first byte that leads to a state reading like a string loop but for a few bytes
  (an open object's key that shares a prefix with declared keys): as the loop, bitsets and
  the loop's kept walks, walking only the tokens through the few bytes
  (``TokenWalks.near_root``);
- states on short cycles (a string's, free text's): from a template of their region's shape
  kept per vocabulary, only the tokens that leave the region walked
  (:mod:`textproc.core.constraints.index.regions`);
- a state that reads one byte (a key, a call's markup): its literal run's prefixes that are
  tokens, and the tokens starting with the whole run walked from its end;
- other states: the sorted token list walked as a trie, following only live bytes (a range
  at a state that reads few bytes is split by them before its texts are walked); a state
  where most bytes live walks each distinct byte-class string once
  (:meth:`StateTokens.wide_state`), and one near a loop state looks its texts' walks up under
  that loop state (shared by every key position near it); the walks of a state's few walked
  first bytes (a quote, a backslash: the same states from every key position of an object)
  are kept once seen twice.

Every path but the counted regions' gives the exceptions in the order walking the trie gives
them: the shortest completions take a state's first exception per next state, so those paths
may not reorder (a region's states list theirs in group order: the same masks and next
states, a completion token that may be another one on a shortest way).

The walks of the tokens that leave a loop are kept per loop state and entry bytes (the same for
every state entering it), with their bitset and counts, and the most common next state of a
state becomes its default, no exception entries
(:mod:`textproc.core.constraints.index.parts`).

The paths are objects of their own, each given what it calls back into (no module of the index
imports this one but ``build``): ``CountedRegions``, ``CountedShift`` (given :meth:`state` and
:meth:`chain_state`), ``Regions`` (given the shift and :meth:`exact_state`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence

from textproc.core.constraints.automaton.dfa import ByteDFA
from textproc.core.constraints.automaton.lazy import LazyDFA
from textproc.core.constraints.index.counted import CountedRegions
from textproc.core.constraints.index.parts import Kept, State, combine
from textproc.core.constraints.index.regions import Regions
from textproc.core.constraints.index.shift import CountedShift
from textproc.core.constraints.index.table import BY_CHARS_WIDTH
from textproc.core.constraints.index.token_sets import HIGH
from textproc.core.constraints.index.vocab import MAX_CHARS, VocabTables, bitset
from textproc.core.constraints.index.walks import LOOP_MIN, TRIE_WIDE, RestTrie, TokenWalks

__all__ = ["StateTokens", "State"]

_HIGH_BYTES = bytes(range(0x80, 0x100))
_MAX_RUN = 8  # longest fixed-length run taken as bitsets (\uXXXX: 4, a uuid: 8)


class StateTokens:
    """The tokens of each state of ``dfa`` over a vocabulary (``tables``, the bytes of every id):
    :meth:`state` picks the path that answers a state; what the paths walk and keep across
    states is :attr:`walks`."""

    def __init__(self, dfa: ByteDFA | LazyDFA, tables: VocabTables, token_bytes: Sequence[bytes],
                 check: Callable[[], None] = lambda: None) -> None:
        self.walks = TokenWalks(dfa, tables, token_bytes, check)
        self.counted_regions = CountedRegions(self.walks)  # counted repetitions, whole regions at once
        # counted repetitions' answers, moved a position on (a state not answered yet is
        # answered by ``state``; a chain state near a bound by ``chain_state``)
        self.counted = CountedShift(self.walks, self.state, self.chain_state)
        # states on short cycles, from templates kept per vocabulary
        self.regions = Regions(self.walks, self.counted, self.exact_state)

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
        live = self.walks.live(q)
        if len(live) == 1:
            return (*self.literal_state(q), None), "trie"
        by_next: dict[int, list[int]] = {}
        for b, t in live:
            by_next.setdefault(t, []).append(b)
        loops = [t for t in by_next if len(self.walks.loop_bytes(t)) >= LOOP_MIN]
        if len(by_next) == 1 and not loops:
            run = self.run(q, live)
            if run is not None:
                return (*self.run_state(*run), None), "run"
        if not loops and len(live) > TRIE_WIDE:
            chained = self.chain_state(q, live)
            return (chained, "chain") if chained is not None else ((*self.wide_state(q), None), "wide")
        return (*self.mixed_state(q, by_next, loops), None), "mixed" if loops else "trie"

    def literal_state(self, q: int) -> tuple[int, dict[int, int], int]:
        """A state that reads one byte, as do the states after it for a while (a key, a call's
        markup): a token is allowed iff it is a prefix of that literal run (it goes as far into
        the run) or starts with the whole run (the rest walked from the run's end as a trie);
        no other token lives, so they are never looked at."""
        texts = self.walks.tables.texts
        text_ids = self.walks.tables.text_ids
        run, states = self.walks.literal_run(q)
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
            end = bisect_left(texts, run + b"\xff" * (self.walks.longest_text() - len(run) + 1), start)
            for k, n in self.walks.trie_ranges([(start, end, len(run), states[-1])], texts):
                pairs.update(dict.fromkeys(text_ids[k], n))
        return combine(self.walks.size, [], pairs)

    def run(self, q: int, live: list[tuple[int, int]]) -> tuple[bytes, list[int], bool] | None:
        """A fixed-length run (the 4 hex digits of ``\\uXXXX``, the 8 of a uuid): the ASCII
        bytes ``plain`` that are all ``q`` reads, each leading to one next state, and so on
        for the states after it; (plain, the states from ``q`` to the first that reads other
        bytes, whether that last one loops on every plain byte). None for runs under 2."""
        plain = bytes(b for b, _ in live)
        if not plain.isascii() or len(plain) < 2:
            return None
        states = [q]
        rows = self.walks.rows
        while len(states) <= _MAX_RUN:
            nexts = {rows[states[-1]][b] for b in plain}
            if len(nexts) != 1:
                break
            n = nexts.pop()
            states.append(n)
            loop = self.walks.loop_bytes(n)
            if len(loop) >= LOOP_MIN and set(plain) <= set(loop):
                return plain, states, True
            if n < 0 or bytes(b for b, _ in self.walks.live(n)) != plain:
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
        t = self.walks.tables
        pure = self.walks.tokens_of(plain, False)
        groups: list[tuple[int, int]] = []
        short = 0
        for n in range(1, k + 1 if not into_loop else k):
            tokens = pure & t.by_chars[n]
            short |= tokens
            groups.append((tokens, states[n]))
        if into_loop:
            groups.append((pure & ~short, last))
        rests, rest_ids, rest_first = self.walks.sets.run_rests(plain, k, self.walks.loop_bytes(last) if into_loop else None)
        rows = self.walks.rows
        pairs: dict[int, int] = {}
        if rests and not rests[0]:  # the run, then only loop bytes
            pairs.update(dict.fromkeys(rest_ids[0], last))
        for i, n in self.walks.trie(last, [(b, rows[last][b]) for b in rest_first if rows[last][b] >= 0], rests):
            pairs.update(dict.fromkeys(rest_ids[i], n))
        return combine(self.walks.size, groups, pairs)

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
                tokens = self.walks.inside(q)
                first_covered.update(self.walks.loop_bytes(q))
                if self.walks.transparent(q):
                    first_covered.update(HIGH)
                kept.append((self.walks.rest_walk(q, None), []))
            else:
                entry = bytes(b for b in by_next[n] if b < 0x80)
                tokens = self.walks.first(entry) & self.walks.tail_inside(n)
                first_covered.update(entry)
                if not HIGH & first_covered and self.walks.shares_chars(q, n):
                    # a non-ASCII first byte goes where it goes from n: the tokens made of
                    # whole characters and loop bytes stay in n, the few others are walked
                    # (from n: the same walks for every state that shares n's characters)
                    tokens |= self.walks.first(_HIGH_BYTES) & self.walks.inside(n)
                    kept.append((self.walks.high_walk(n), []))
                    first_covered.update(HIGH)
                kept.append((self.walks.rest_walk(n, entry), []))
            groups.append((tokens, n))
        roots = []
        for n, bs in by_next.items():
            for b in bs:
                if b not in first_covered:
                    near = self.walks.near_root(b, n)
                    if near is None:
                        roots.append((b, n))
                    else:  # a declared key's next byte: like its string loop but a few bytes
                        tokens, n_near, part, own, own_pairs = near
                        groups.append((tokens, n_near))
                        kept.append((part, own))
                        pairs.update(own_pairs)
        if len(roots) > TRIE_WIDE:  # splitting costs more than walking
            covered = 0
            for tokens, _ in groups:
                covered |= tokens
            pairs.update(self.walks.walk_each(q, self.walks.first(bytes(b for b, _ in roots)) & ~covered))
            roots = []
        tail = self.walks.root_walks(q, roots)
        if tail is not None:
            return combine(self.walks.size, groups, pairs, kept, tail)
        text_ids = self.walks.tables.text_ids
        pairs.update({i: n for k, n in self.walks.trie(q, roots) for i in text_ids[k]})
        return combine(self.walks.size, groups, pairs, kept)

    def chain_state(self, q: int, live: list[tuple[int, int]], trie: RestTrie | None = None) -> State | None:
        """Counted repetitions (``[^"]{0,8}``): a token of n plain characters goes to
        ``c[n]``, found with one bitset AND per length and written as the state's "next state
        by character count" row (no exception entries); the rest is walked (``trie``: how the
        rests after m plain bytes are walked, by default ``TokenWalks.trie``)."""
        walks = self.walks
        found = walks.chain(q)
        if found is None:
            return None
        plain, states, shifts = found
        t = walks.tables
        ascii_only = walks.tokens_of(plain, False)
        with_chars = (walks.tokens_of(plain, True) & ~ascii_only) if shifts else 0
        covered = 0
        allowed = 0
        row = [-1] * BY_CHARS_WIDTH  # characters -> next state
        for n in range(1, len(states)):
            tokens = ascii_only & t.by_chars[n]
            if n <= shifts:
                tokens |= with_chars & t.by_chars[n]
            covered |= tokens  # dead ends (states[n] == -1) are covered too: not allowed
            if states[n] >= 0 and tokens:
                allowed |= tokens
                row[n] = states[n]
        if states[-1] < 0:  # every longer plain token dies too
            last = len(states) - 1
            chars_die = with_chars and shifts == last - 1 and walks.char_dies(states[last - 1])
            for n in range(last, MAX_CHARS):
                covered |= ascii_only & t.by_chars[n]
                if chars_die:
                    covered |= with_chars & t.by_chars[n]
        pairs = self.chain_rest_pairs(q, plain, states, bool(with_chars), trie)
        # made of plain bytes (and characters) but past what the chain counts: walked whole
        pairs.update(walks.walk_each(q, walks.first(bytes(b for b, _ in live)) & ~covered
                                     & walks.tokens_of(plain, bool(with_chars))))
        counts = t.char_count
        exc = {i: n for i, n in pairs.items() if row[counts[i]] != n}
        return allowed | bitset(pairs, walks.size), exc, -1, row

    def chain_rest_pairs(self, q: int, plain: bytes, states: list[int], chars: bool,
                         trie: RestTrie | None = None) -> dict[int, int]:
        """id -> next state for the tokens not made of ``plain`` bytes (and characters): m
        plain bytes lead to ``states[m]``, and the rest after them is walked from there as a
        trie over the distinct rests (grouped per vocabulary, kept)."""
        walks = self.walks
        rows = walks.rows
        pairs: dict[int, int] = {}
        for m, (rests, rest_ids, rest_first) in walks.sets.chain_rests(plain, chars).items():
            if m >= len(states):  # a longer plain run than the chain follows
                if states[-1] >= 0:
                    ids = [i for group in rest_ids for i in group]
                    pairs.update(walks.walk_each(q, bitset(ids, walks.size)))
                continue
            s = states[m]
            if s < 0:
                continue
            roots = [(b, rows[s][b]) for b in rest_first if rows[s][b] >= 0]
            for k, n in (walks.trie(s, roots, rests) if trie is None else trie(m, s, roots, rests)):
                pairs.update(dict.fromkeys(rest_ids[k], n))
        return pairs

    def wide_state(self, q: int) -> tuple[int, dict[int, int], int]:
        """(allowed, exceptions, default) of a loop-less state where most bytes live and no chain
        is seen: each distinct string of byte classes walked once, for all its tokens."""
        groups = self.walks.class_groups()
        rows = self.walks.rows
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
        return _split_default(exc, self.walks.size)


def _split_default(nexts: dict[int, int], size: int) -> tuple[int, dict[int, int], int]:
    """(allowed bitset, exceptions, default): the most common next state becomes the default."""
    if not nexts:
        return 0, {}, -1
    default = Counter(nexts.values()).most_common(1)[0][0]
    return bitset(nexts, size), {t: n for t, n in nexts.items() if n != default}, default

"""Regex tree -> minimal DFA over UTF-8 bytes (NFA, subset construction, Hopcroft).

Owns :class:`ByteDFA` and :func:`build_dfa`. The NFA is built right to left, each subtree
followed by a known state, and equal subtrees followed by the same state are built once: a
schema's regex spells an object's members several times (once per way the object may have
started) and they end alike, so the subset construction makes about as many states as the
minimal DFA has instead of one set per spelling (a SchemaStore schema: 134,085 -> 1,590, 722
minimal). The DFA reads the UTF-8 bytes of the output;
state -1 is the dead state, and every other state can still reach an accepting state (states
that cannot are folded into -1 before minimising), so "never reaches -1" is exactly "is a
prefix of some match". Work is bounded by a :class:`Budget` (states and a deadline): over
it, an ``InvalidInput`` that says which limit and how to stay under it.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from operator import itemgetter
from dataclasses import dataclass

from textproc.core.constraints.budget import Budget
from textproc.core.constraints.regex.syntax import Alt, CharSet, Concat, Node, Ranges, Repeat

__all__ = ["Budget", "ByteDFA", "NFA", "build_dfa", "utf8_sequences", "walk_rows"]


@dataclass
class ByteDFA:
    """A minimal DFA over bytes: ``rows[q][b]`` is the next state (-1: dead)."""

    rows: list[list[int]]  # state -> 256 next states
    accepting: list[bool]
    start: int  # -1 when the language is empty

    @property
    def n_states(self) -> int:
        return len(self.rows)

    def walk(self, state: int, data: bytes) -> int:
        """The state after ``data`` from ``state`` (-1 once dead)."""
        return walk_rows(self.rows, state, data)


def walk_rows(rows: list[list[int]], state: int, data: bytes) -> int:
    """The state after ``data`` from ``state`` in the byte DFA ``rows`` (-1 once dead)."""
    for b in data:
        state = rows[state][b]
        if state < 0:
            return -1
    return state


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of the code
    points ``lo..hi`` (no surrogates inside), as Rust's ``utf8-ranges`` splits them."""
    out: list[list[tuple[int, int]]] = []
    stack = [(lo, hi)]
    while stack:
        s, e = stack.pop()
        while True:
            split = False
            for border in (0x7F, 0x7FF, 0xFFFF):
                if s <= border < e:
                    stack.append((border + 1, e))
                    e = border
                    split = True
                    break
            if split:
                continue
            if e <= 0x7F:
                out.append([(s, e)])
                break
            for i in range(1, 4):
                mask = (1 << (6 * i)) - 1
                if (s & ~mask) != (e & ~mask):
                    if s & mask:
                        stack.append(((s | mask) + 1, e))
                        e = s | mask
                        split = True
                        break
                    if (e & mask) != mask:
                        stack.append((e & ~mask, e))
                        e = (e & ~mask) - 1
                        split = True
                        break
            if split:
                continue
            a, b = chr(s).encode("utf-8"), chr(e).encode("utf-8")
            out.append(list(zip(a, b)))
            break
    return out


@lru_cache(maxsize=1024)
def _sequences(ranges: Ranges) -> list[list[tuple[int, int]]]:
    """The UTF-8 byte-range sequences of a character set (the same classes recur in a schema's
    regex: every string's character class, kept across compiles)."""
    return [seq for lo, hi in ranges for seq in utf8_sequences(lo, hi)]


class NFA:
    def __init__(self, budget: Budget) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []
        self.budget = budget
        self._built: dict[tuple[int, int], int] = {}  # (subtree number, next state) -> entry
        self._canon_of: dict[int, int] = {}  # id(subtree) -> its number
        self._shapes: dict[tuple[object, ...], int] = {}
        self._keep: list[Node] = []
        self._suffixes: dict[tuple[tuple[tuple[int, int], ...], int], int] = {}

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        if len(self.eps) % 256 == 0:
            self.budget.check_states(len(self.eps) // 8, "automaton states (NFA)")
            self.budget.check_time("building the NFA")
        return len(self.eps) - 1

    def build(self, node: Node, start: int) -> int:
        """Add ``node`` reading from ``start``; return its end state."""
        end = self.state()
        self.eps[start].append(self.build_to(node, end))
        return end

    def build_to(self, node: Node, after: int) -> int:
        """The entry state of ``node`` followed by state ``after`` (built right to left).

        Equal subtrees followed by the same state are built once: a schema's regex spells an
        object's optional members several times, and each spelling is followed by the same rest
        of the object, so they share one sub-automaton and the subset construction never tells
        the copies apart."""
        key = (self._canon(node), after)
        got = self._built.get(key)
        if got is not None:
            return got
        if isinstance(node, CharSet):
            entry = self.state()
            for seq in _sequences(node.ranges):
                self.edges[entry].append((*seq[0], self._suffix(tuple(seq[1:]), after)))
        elif isinstance(node, Concat):
            entry = after
            for item in reversed(node.items):
                entry = self.build_to(item, entry)
        elif isinstance(node, Alt):
            entry = self.state()
            self.eps[entry].extend(self.build_to(item, after) for item in node.items)
        else:
            entry = self._repeat_to(node, after)
        self._built[key] = entry
        return entry

    def _suffix(self, seq: tuple[tuple[int, int], ...], after: int) -> int:
        """The state reading the byte ranges ``seq`` then going to ``after``; one per suffix
        (the continuation bytes of UTF-8 sequences recur: sharing them keeps a character
        class's automaton minimal, as Rust's utf8-ranges suffix cache does)."""
        if not seq:
            return after
        key = (seq, after)
        got = self._suffixes.get(key)
        if got is None:
            got = self._suffixes[key] = self.state()
            self.edges[got].append((*seq[0], self._suffix(seq[1:], after)))
        return got

    def _repeat_to(self, node: Repeat, after: int) -> int:
        if node.hi is None:
            loop = self.state()
            self.eps[loop].append(self.build_to(node.item, loop))
            self.eps[loop].append(after)
            cur = loop
        else:
            cur = after
            for _ in range(node.hi - node.lo):  # X{0,n}: (?:X(?:X...)?)?
                skip = self.state()
                self.eps[skip].append(self.build_to(node.item, cur))
                self.eps[skip].append(after)
                cur = skip
        for _ in range(node.lo):
            cur = self.build_to(node.item, cur)
        return cur

    def _canon(self, node: Node) -> int:
        """A number per distinct subtree: equal subtrees get the same number (hash-consing)."""
        got = self._canon_of.get(id(node))
        if got is not None:
            return got
        shape: tuple[object, ...]
        if isinstance(node, CharSet):
            shape = (0, node.ranges)
        elif isinstance(node, Repeat):
            shape = (1, self._canon(node.item), node.lo, node.hi)
        else:
            shape = (2 if isinstance(node, Concat) else 3, *(self._canon(item) for item in node.items))
        got = self._shapes.setdefault(shape, len(self._shapes))
        self._canon_of[id(node)] = got
        self._keep.append(node)  # ids stay valid while the NFA is built
        return got


def counted_states_floor(node: Node, memo: dict[int, tuple[bool, int]] | None = None) -> tuple[bool, int]:
    """``(nullable, floor)`` of ``node``: whether it matches the empty string, and a number of
    DFA states any DFA built for a regex holding it needs at least (before minimising): a
    counted repetition ``X{lo,hi}`` of an ``X`` that always reads a byte has one subset state
    per count of copies read, ``hi + 1`` of them (``lo + 1`` when unbounded). Lets a compile
    refuse such a count at once instead of when its DFA passes the state budget. A subtree
    the tree shares (``(?&name)``) is looked at once."""
    memo = {} if memo is None else memo
    got = memo.get(id(node))
    if got is not None:
        return got
    if isinstance(node, CharSet):
        got = (False, 1)
    elif isinstance(node, (Concat, Alt)):
        parts = [counted_states_floor(item, memo) for item in node.items]
        floor = max((f for _, f in parts), default=1)
        if isinstance(node, Concat):
            got = (all(n for n, _ in parts), floor)
        else:
            got = (any(n for n, _ in parts), floor)
    else:
        nullable, floor = counted_states_floor(node.item, memo)
        if not nullable:
            floor = max(floor, (node.hi if node.hi is not None else node.lo) + 1)
        got = (nullable or node.lo == 0, floor)
    memo[id(node)] = got
    return got


def build_dfa(tree: Node, budget: Budget, nfa_of_tree: tuple[NFA, int, int] | None = None) -> ByteDFA:
    """The minimal byte DFA of ``tree`` (whole-output match); ``nfa_of_tree``: ``tree``'s NFA
    (with its start and final state) when it is built already (a lazy DFA's), not changed."""
    if nfa_of_tree is None:
        nfa = NFA(budget)
        start = nfa.state()
        final = nfa.build(tree, start)
    else:
        nfa, start, final = nfa_of_tree
    budget.check_time("building the NFA")
    # byte classes: bytes no edge tells apart
    cuts = {0, 256}
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            cuts.add(lo)
            cuts.add(hi + 1)
    bounds = sorted(cuts)
    budget.check_time("determinising")
    class_of = [0] * 256
    for c, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        class_of[lo:hi] = [c] * (hi - lo)
    n_classes = len(bounds) - 1
    # NFA state -> [(classes, target)]
    moves = [[(range(class_of[lo], class_of[hi] + 1), t) for lo, hi, t in edges] for edges in nfa.edges]
    budget.check_time("determinising")
    closure_memo: dict[int, frozenset[int]] = {}

    def closure(s: int) -> frozenset[int]:
        got = closure_memo.get(s)
        if got is None:
            seen = {s}
            todo = [s]
            while todo:
                for t in nfa.eps[todo.pop()]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            # only states with byte edges (and the final state) matter for the DFA
            got = closure_memo[s] = frozenset(q for q in seen if nfa.edges[q] or q == final)
        return got

    first = closure(start)
    ids = {first: 0}
    sets = [first]
    trans: list[list[int]] = []
    i = 0
    while i < len(sets):
        budget.check_time("determinising")
        if i % 16 == 15:
            budget.check_states(len(sets), "automaton states (DFA)")
        targets: dict[int, set[int]] = {}
        for q in sets[i]:
            for classes, t in moves[q]:
                for c in classes:
                    got = targets.get(c)
                    if got is None:
                        targets[c] = {t}
                    else:
                        got.add(t)
        row = [-1] * n_classes
        memo: dict[frozenset[int], int] = {}
        for c, ts in targets.items():
            key = frozenset(ts)
            d = memo.get(key)
            if d is None:
                merged: set[int] = set()
                for t in ts:
                    merged |= closure(t)
                dset = frozenset(merged)
                d = ids.get(dset)
                if d is None:
                    d = ids[dset] = len(sets)
                    sets.append(dset)
                memo[key] = d
            row[c] = d
        trans.append(row)
        i += 1
    budget.check_states(len(sets), "automaton states (DFA)")
    accepting = [final in s for s in sets]
    return _minimise(trans, accepting, class_of, n_classes, budget)


def _minimise(
    trans: list[list[int]], accepting: list[bool], class_of: list[int], k: int, budget: Budget
) -> ByteDFA:
    n = len(trans)
    live = _live_states(trans, accepting, budget)
    if not live[0]:
        return ByteDFA(rows=[], accepting=[], start=-1)
    sink = n
    budget.check_time("minimising")
    full = [[t if t >= 0 and live[t] else sink for t in row] for row in trans] + [[sink] * k]
    budget.check_time("minimising")
    block_of = _hopcroft(full, accepting, live, k, budget)
    return _renumber(full, block_of, accepting, class_of, budget)


def _live_states(trans: list[list[int]], accepting: list[bool], budget: Budget) -> list[bool]:
    """Which states reach an accepting state (the others fold into the dead state)."""
    n = len(trans)
    back: list[list[int]] = [[] for _ in range(n)]
    for q, row in enumerate(trans):
        if q % 256 == 255:
            budget.check_time("minimising")
        for t in set(row):
            if t >= 0:
                back[t].append(q)
    live = [False] * n
    todo = [q for q in range(n) if accepting[q]]
    for q in todo:
        live[q] = True
    while todo:
        for p in back[todo.pop()]:
            if not live[p]:
                live[p] = True
                todo.append(p)
    return live


def _hopcroft(full: list[list[int]], accepting: list[bool], live: list[bool], k: int,
              budget: Budget) -> list[int]:
    """The block of each state of ``full`` (its last state the sink) in the coarsest partition
    that keeps accepting and rejecting states apart and respects every transition."""
    n = sink = len(full) - 1
    # class -> target -> sources, for the live targets only: the sink's block is never a
    # splitter (below), so its predecessors are never asked for
    inverse: list[dict[int, list[int]]] = [{} for _ in range(k)]
    for q, row in enumerate(full):
        if q % 256 == 255:
            budget.check_time("minimising")
        for c, t in enumerate(row):
            if t != sink:
                got = inverse[c].get(t)
                if got is None:
                    inverse[c][t] = [q]
                else:
                    got.append(q)
    # Hopcroft: refine {accepting, rejecting} by predecessors of splitters
    acc = {q for q in range(n) if accepting[q] and live[q]}
    rej = set(range(n + 1)) - acc
    blocks = [b for b in (acc, rej) if b]
    block_of = [0] * (n + 1)
    for b, members in enumerate(blocks):
        for q in members:
            block_of[q] = b
    # the classes on which a state has predecessors: a splitter (block, class) with no
    # predecessors splits nothing, and most (block, class) pairs have none
    into: list[set[int]] = [set() for _ in range(n + 1)]
    for c, inv_c in enumerate(inverse):
        for t in inv_c:
            into[t].add(c)

    def classes_into(members: set[int]) -> set[int]:
        got: set[int] = set()
        for q in members:
            got |= into[q]
        return got

    # Hopcroft stays correct whichever half of a split block it adds as a splitter (the smaller
    # one only bounds its work): it never adds the half holding the sink, which starts among
    # the rejecting states (every state reaches the sink, so that half has the most
    # predecessors); blocks[0] is the accepting block (never empty: the start is live)
    work = deque((0, c) for c in sorted(classes_into(blocks[0])))
    pending = set(work)
    steps = 0
    while work:
        steps += 1
        if steps % 8 == 0:
            budget.check_time("minimising")
        item = work.popleft()
        pending.discard(item)
        a, c = item
        inv = inverse[c]
        touched: dict[int, list[int]] = {}
        for t in blocks[a]:
            for q in inv.get(t, ()):
                touched.setdefault(block_of[q], []).append(q)
        for y, touched_members in touched.items():
            if len(touched_members) == len(blocks[y]):
                continue
            split = set(touched_members)
            blocks[y] -= split
            new = len(blocks)
            blocks.append(split)
            for q in split:
                block_of[q] = new
            into_new = classes_into(split)  # the sink never precedes a splitter: not in split
            pick = new if len(split) <= len(blocks[y]) or block_of[sink] == y else y
            into_pick = into_new if pick == new else classes_into(blocks[y])
            for d in sorted(into_new | into_pick):
                if (y, d) in pending:
                    if d in into_new:
                        pending.add((new, d))
                        work.append((new, d))
                elif d in into_pick:
                    pending.add((pick, d))
                    work.append((pick, d))
    return block_of


def _renumber(full: list[list[int]], block_of: list[int], accepting: list[bool],
              class_of: list[int], budget: Budget) -> ByteDFA:
    """The minimal DFA: blocks numbered in BFS order from the start; the sink's block is -1."""
    sink = len(full) - 1
    dead = block_of[sink]
    order = {block_of[0]: 0}
    reps = [0]
    i = 0
    while i < len(reps):
        for t in full[reps[i]]:
            b = block_of[t]
            if b != dead and b not in order:
                order[b] = len(reps)
                reps.append(t)
        i += 1
    rows = []
    spread = itemgetter(*class_of)  # classes -> the 256 bytes
    for i, q in enumerate(reps):
        if i % 256 == 255:
            budget.check_time("minimising")
        rows.append(list(spread([order.get(block_of[t], -1) for t in full[q]])))
    return ByteDFA(rows=rows, accepting=[accepting[q] for q in reps], start=0)

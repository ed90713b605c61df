"""Counted repetitions one position on (``[^"]{0,255}``): a state's tokens from the same kind of
state one position earlier, every next state moved one position on (:class:`CountedShift`).
Used for the repetitions :mod:`textproc.core.constraints.index.counted` does not take as a
whole region (its checks refuse the DFA there, or a DFA built on demand).

Inside a counted repetition each position has the same states (the chain state, a backslash
read, ``\\u`` and 1-3 hex digits read, 1-3 UTF-8 continuation bytes to go), and a state at
position k + 1 reads every byte string as the one at position k does, one position further on,
until a walk comes near the bound (where the count runs out) or the minimum (where the end
starts or stops being allowed). The map ``sigma`` (state -> the same kind of state one position
on) is found by walking the DFA in lockstep from a chain state and the next one: a state is
*bad* where the two disagree (a byte dead on one side only, two partners, two states with one
partner) or where the lockstep stopped looking, and ``dist`` is the fewest bytes from a state
to a bad one. A state ``p`` whose answer was computed by the walk definition's paths, and
whose computation looked only at states fewer than ``dist(p)`` bytes away (``reach``: its
tokens' longest walk, and the few bytes the paths look past a state), answers for ``sigma(p)``
with the same allowed ids, each next state mapped by ``sigma``, in the same order (so the index
numbers its states and picks its completions as it did without this path). Nearer a bound
than that, a chain state and a loop-less mixed state walk the kept tries of the state one
position earlier again (only the texts long enough to reach a bad state are walked, below);
everything else is computed as before.

A mixed state's trie walk kept as a tree, and walked again one position on: ``TokenWalks.trie``
splits the sorted texts by the live bytes of the states it meets and walks each small range (or
a range at a state where most bytes live) text by text; the texts it finds come out in that
order, which the index keeps (it numbers new states and picks completions in it). Near a
counted repetition's bound the answer one position on differs only in the texts long enough
to reach it, so ``_record`` keeps the walk as a tree of ranges (:class:`Node`) and ``_replay``
walks the same tree from the state one position on: a range whose longest text stays among
good states (closer to no bad state than ``dist``) is moved whole, a walked range walks again
only its long texts, a range at a bad state is walked anew. The texts come out in the order
the trie walk gives from there.

Only the answers of chain states (``StateTokens.chain_state``),
fixed runs and mixed states that walk their tokens as one trie (no loop, no near-loop state
after the first byte) are moved; the lockstep runs over a minimal DFA's rows only (a DFA built
on demand would expand states here that a first mask does not need).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator

from textproc.core.constraints.automaton.dfa import ByteDFA
from textproc.core.constraints.index.parts import State, combine
from textproc.core.constraints.index.vocab import MAX_CHARS, subrange
from textproc.core.constraints.index.walks import LOOP_MIN, TRIE_SMALL, TRIE_WIDE, RestTrie, TokenWalks

__all__ = ["CountedShift", "Region", "Node", "ChainState"]

# StateTokens.chain_state: (state, its live bytes, how the rests are walked) -> its answer or None
ChainState = Callable[[int, list[tuple[int, int]], RestTrie | None], State | None]

_FAR = 1 << 30  # dist of a state no bad state is reachable from
_CHAIN_LOOK = MAX_CHARS + 4  # chain(): MAX_CHARS states on, then a whole character (char_step)
_MIXED_LOOK = 12  # mixed_state / run(): a fixed run's 8 states and its loop, near_loop's 2 bytes
_SAME_AFTER = 256  # bytes past a counted region's end (sigma = identity) the lockstep checks


class Region:
    """One counted repetition's ``sigma`` (state -> the same kind of state one position on),
    its inverse, and ``dist`` (bytes to the nearest bad state; absent: none reachable)."""

    __slots__ = ("sigma", "inverse", "dist")

    def __init__(self, sigma: dict[int, int], inverse: dict[int, int], dist: dict[int, int]) -> None:
        self.sigma = sigma
        self.inverse = inverse
        self.dist = dist

    @classmethod
    def lockstep(cls, rows: list[list[int]], p: int, q: int, check: object) -> Region:
        """The region of chain state ``p`` and the chain state ``q`` one position on: the two
        walked in lockstep over every byte (breadth first); past the region's end (a state its
        own partner) only ``_SAME_AFTER`` bytes deep, the states there bad."""
        sigma: dict[int, int] = {}
        bad: set[int] = set()
        children: dict[int, set[int]] = {}
        todo: deque[tuple[int, int, int]] = deque([(p, q, 0)])  # (state, partner, bytes past the end)
        n = 0
        while todo:
            x, y, past = todo.popleft()
            got = sigma.get(x)
            if got is not None:
                if got != y:
                    bad.add(x)
                continue
            sigma[x] = y
            n += 1
            if n % 1024 == 0 and callable(check):
                check()
            if x == y:
                if past >= _SAME_AFTER:
                    bad.add(x)  # not looked past: a walk through here is not moved
                    continue
                kids = set(rows[x])
                kids.discard(-1)
                children[x] = kids
                todo.extend((c, c, past + 1) for c in kids)
                continue
            kids = set()
            for a, b in set(zip(rows[x], rows[y])):
                if (a < 0) != (b < 0):
                    bad.add(x)
                elif a >= 0:
                    kids.add(a)
                    todo.append((a, b, 1 if a == b else 0))
            children[x] = kids
        inverse: dict[int, int] = {}
        for x, y in sigma.items():
            other = inverse.setdefault(y, x)
            if other != x:  # two states, one partner: neither is moved
                bad.update((x, other))
        return cls(sigma, inverse, _distances(children, bad))


def _distances(children: dict[int, set[int]], bad: set[int]) -> dict[int, int]:
    """Per state the fewest bytes to a state of ``bad`` (0 for those; absent: unreachable)."""
    parents: dict[int, list[int]] = {}
    for x, kids in children.items():
        for c in kids:
            parents.setdefault(c, []).append(x)
    dist = dict.fromkeys(bad, 0)
    frontier = list(bad)
    d = 0
    while frontier:
        d += 1
        nxt = []
        for c in frontier:
            for x in parents.get(c, ()):
                if x not in dist:
                    dist[x] = d
                    nxt.append(x)
        frontier = nxt
    return dist


class Node:
    """A range ``texts[lo:hi]`` (sharing their first ``depth`` bytes, which lead to ``state``;
    the last of them ``byte``): walked text by text (``found``: (text index, next state)) or
    split (``own``: whether ``texts[lo]`` ends here; ``kids`` in walk order)."""

    __slots__ = ("lo", "hi", "depth", "state", "byte", "found", "own", "kids", "longest")

    def __init__(self, lo: int, hi: int, depth: int, state: int, byte: int) -> None:
        self.lo, self.hi, self.depth, self.state, self.byte = lo, hi, depth, state, byte
        self.found: list[tuple[int, int]] | None = None
        self.own = False
        self.kids: list[Node] = []
        self.longest = 0  # the longest text's bytes after depth


class CountedShift:
    """The answers of one index build's counted-repetition states, moved a position on.

    ``state(q)`` answers from the kept answer of ``q``'s state one position earlier when that
    is safe (else None: compute it); ``keep`` keeps the answers computed."""

    def __init__(self, walks: TokenWalks, answer: Callable[[int], State], chain_state: ChainState) -> None:
        self.walks = walks
        self.answer = answer  # any state's answer (StateTokens.state): the positions before one
        self.chain_state = chain_state  # a chain state's answer, its rests walked as given
        self.enabled = isinstance(walks.dfa, ByteDFA)
        self.regions: list[Region] = []
        # state -> (answer, the bytes its computation looked ahead (_FAR: not to be moved), next
        # states tied with the default for the most ids (a mixed state's; None: a chain state's),
        # its shape (StateTokens.exact_state))
        self.kept: dict[int, tuple[State, int, list[int] | None, str]] = {}
        self.tries: dict[int, list[Node]] = {}  # "trie" state near a bound -> its walk as trees
        # chain state near a bound -> per count of plain bytes m (the state after them, its
        # rests' trie walk as trees, the rests)
        self.chain_tries: dict[int, dict[int, tuple[int, list[Node], list[bytes]]]] = {}
        self._longest: list[int] | None = None  # first byte -> its longest token

    def state(self, q: int) -> State | None:
        """``q``'s answer moved from its state one position earlier, or None. The build meets
        a repetition's positions out of order (a token of 30 characters reaches position 30
        first), so the earlier positions not answered yet are answered first, earliest first."""
        kept = self.kept.get(q)
        if kept is not None:
            return kept[0]
        for region in self.regions:
            p = region.inverse.get(q)
            if p is None or p == q:
                continue
            if p not in self.kept:
                self._answer_before(region, p)
            got = self.kept.get(p)
            if got is None:
                continue
            dist = region.dist.get(p, _FAR)
            if dist <= got[1]:  # near a bound: a loop-less mixed state walks its trie again
                if got[3] == "trie" and got[1] < _FAR and dist > _MIXED_LOOK:
                    return self._replayed(region, p, q, got[1])
                if got[3] == "chain":
                    return self._replayed_chain(region, p, q, got[1])
                continue
            answer = _moved(region.sigma, got[0], got[2])
            if answer is not None:
                self.kept[q] = (answer, got[1], None if got[2] is None else [region.sigma[n] for n in got[2]], got[3])
            return answer
        return None

    def _replayed(self, region: Region, p: int, q: int, reach: int) -> State:
        """``q``'s answer from ``p``'s trie walk walked again one position on (the texts that
        may reach a bad state walked, the others moved)."""
        walks = self.walks
        nodes = self.tries.pop(p, None)
        if nodes is None:
            nodes = self._record_roots(p)
        rows = walks.rows[q]
        changed: list[bool] = []
        self.tries[q] = nodes = [self._replay(region.sigma, region.dist, node, rows[node.byte], None, changed)
                                 for node in nodes]
        before = self.kept[p]
        # every text goes where sigma moves it (the long ones that reach the bound die from both
        # positions): the same texts in the same order, so p's answer moved is q's
        moved = None if changed else _moved(region.sigma, before[0], before[2])
        if moved is not None:
            answer = moved
        else:
            text_ids = walks.tables.text_ids
            pairs: dict[int, int] = {}
            for k, n in found_of(nodes):
                for token_id in text_ids[k]:
                    pairs[token_id] = n
            answer = (*combine(walks.size, [], pairs), None)
        self.kept[q] = (answer, reach, _tied(answer), "trie")
        return answer

    def _replayed_chain(self, region: Region, p: int, q: int, reach: int) -> State | None:
        """Chain state ``q``'s answer near a bound: its chain and bitsets as always, the tries
        of its rests after m plain bytes walked again from ``p``'s (None: ``q`` is no chain
        state)."""
        walks = self.walks
        live = walks.live(q)
        if len(live) <= TRIE_WIDE or any(len(walks.loop_bytes(t)) >= LOOP_MIN for t in {t for _, t in live}):
            return None
        before = self.chain_tries.pop(p, None)
        if before is None:
            before = {}
            self.chain_state(p, walks.live(p), self._recording(before))
        after: dict[int, tuple[int, list[Node], list[bytes]]] = {}

        def trie(m: int, s: int, roots: list[tuple[int, int]], rests: list[bytes]) -> list[tuple[int, int]]:
            got = before.get(m)
            if got is not None and got[2] is rests and region.sigma.get(got[0]) == s and region.dist.get(got[0], _FAR):
                rows = walks.rows[s]
                nodes = [self._replay(region.sigma, region.dist, node, rows[node.byte], rests) for node in got[1]]
            else:
                nodes = self._record_trie(roots, rests)
            after[m] = (s, nodes, rests)
            return list(found_of(nodes))

        answer = self.chain_state(q, live, trie)
        if answer is not None:
            self.chain_tries[q] = after
            self.kept[q] = (answer, reach, None, "chain")
        return answer

    def _answer_before(self, region: Region, p: int) -> None:
        """Answer ``p`` and the states of its kind before it that are not answered yet,
        earliest first."""
        path = [p]
        seen = {p}
        while True:
            x = region.inverse.get(path[-1])
            if x is None or x in seen or x in self.kept:
                break
            path.append(x)
            seen.add(x)
        for x in reversed(path):
            self.answer(x)

    def keep(self, q: int, answer: State, shape: str) -> None:
        """Keep ``q``'s answer (computed by the path ``shape``, see ``StateTokens.exact_state``)
        if ``q`` lies in a region; a chain state's starts a region if it does not. Answers of
        other shapes than "chain", "run" and "trie" (a mixed state without loops whose first
        bytes lead to no near-loop state: one trie walk) are kept but never moved on."""
        if not self.enabled:
            return
        in_region = any(r.sigma.get(q, q) != q for r in self.regions)
        if shape == "chain" and not in_region:
            rows = self.walks.rows
            ascii_next = Counter(t for t in rows[q][:128] if t >= 0).most_common(1)
            if not ascii_next or ascii_next[0][0] == q:
                return
            self.regions.append(Region.lockstep(rows, q, ascii_next[0][0], self.walks.sets.check))
            in_region = True
        if not in_region:
            return
        reach, tied = _FAR, None
        if shape == "chain":
            reach = max(_CHAIN_LOOK, max(self.longest()))
        elif shape in ("trie", "run"):
            live = self.walks.live(q)
            if shape == "run" or all(self.walks.near_loop(n) is None for n in {n for _, n in live}):
                longest = self.longest()
                reach = max(_MIXED_LOOK, max((longest[b] for b, _ in live), default=0))
                tied = _tied(answer)
        self.kept[q] = (answer, reach, tied, shape)

    def longest(self) -> list[int]:
        """First byte -> the longest token starting with it (0: none)."""
        if self._longest is None:
            texts = self.walks.tables.texts
            self._longest = [max(map(len, texts[slice(*subrange(texts, 0, len(texts), b"", b))]), default=0)
                             for b in range(256)]
        return self._longest


    def _recording(self, into: dict[int, tuple[int, list[Node], list[bytes]]]) -> RestTrie:
        """A rest trie walk for ``chain_state`` that keeps its trees ``into`` (by m)."""
        def trie(m: int, s: int, roots: list[tuple[int, int]], rests: list[bytes]) -> list[tuple[int, int]]:
            nodes = self._record_trie(roots, rests)
            into[m] = (s, nodes, rests)
            return list(found_of(nodes))
        return trie

    def _record_roots(self, q: int) -> list[Node]:
        """``TokenWalks.trie(q, roots)`` of a loop-less mixed state as trees, in walk order."""
        by_next: dict[int, list[int]] = {}
        for b, t in self.walks.live(q):
            by_next.setdefault(t, []).append(b)
        return self._record_trie([(b, n) for n, bs in by_next.items() for b in bs], self.walks.tables.texts)

    def _record_trie(self, roots: list[tuple[int, int]], texts: list[bytes]) -> list[Node]:
        """``TokenWalks.trie(q, roots, texts)`` as trees, in walk order."""
        nodes = []
        for b, n in roots:
            start, end = subrange(texts, 0, len(texts), b"", b)
            if start < end:
                nodes.append((start, end, n, b))
        return [self._record(texts, start, end, 1, n, b) for start, end, n, b in reversed(nodes)]

    def _record(self, texts: list[bytes], lo: int, hi: int, depth: int, s: int, byte: int) -> Node:
        """One range of ``TokenWalks.trie_ranges`` and what it finds, as a tree."""
        node = Node(lo, hi, depth, s, byte)
        node.longest = max(map(len, texts[lo:hi])) - depth
        loop = self.walks.loop_bytes(s)
        live_s = self.walks.live(s)
        if hi - lo <= TRIE_SMALL + 4 * len(live_s) or len(loop) >= LOOP_MIN or len(live_s) > TRIE_WIDE:
            node.found = self.walks.walk_texts(s, texts, range(lo, hi), depth)
            return node
        if len(texts[lo]) == depth:
            node.own = True
            lo += 1
        prefix = texts[lo][:depth]
        kids = []
        for b, n in live_s:
            start, end = subrange(texts, lo, hi, prefix, b)
            if start < end:
                kids.append((start, end, n, b))
        node.kids = [self._record(texts, start, end, depth + 1, n, b) for start, end, n, b in reversed(kids)]
        return node

    def _replay(self, sigma: dict[int, int], dist: dict[int, int], node: Node, s: int,
               texts: list[bytes] | None = None, changed: list[bool] | None = None) -> Node:
        """``node`` (a range of a trie walk) walked from ``s``, the state one position on from
        ``node.state`` as a good state's next state; texts that stay fewer than ``dist`` bytes
        from a bad state are moved with ``sigma``, the others walked. ``changed`` gets a True
        when some text does not go where ``sigma`` moves it (or a range is walked anew)."""
        if texts is None:
            texts = self.walks.tables.texts
        d = dist.get(node.state, _FAR)
        if d == 0:  # a bad state: the range may split otherwise from here
            if changed is not None:
                changed.append(True)
            return self._record(texts, node.lo, node.hi, node.depth, s, node.byte)
        if d > node.longest:
            return _moved_node(node, sigma)
        new = Node(node.lo, node.hi, node.depth, s, node.byte)
        new.longest = node.longest
        if node.found is None:
            new.own = node.own
            rows = self.walks.rows[s]
            new.kids = [self._replay(sigma, dist, kid, rows[kid.byte], texts, changed) for kid in node.kids]
            return new
        cut = d + node.depth  # texts this long may reach a bad state
        lo, hi = node.lo, node.hi
        long_ks = [k for k, data in zip(range(lo, hi), texts[lo:hi]) if len(data) >= cut]
        long_found = self.walks.walk_texts(s, texts, long_ks, node.depth)
        is_long = set(long_ks)
        if changed is not None and long_found != [(k, sigma.get(n, -3)) for k, n in node.found if k in is_long]:
            changed.append(True)
        moved = [(k, sigma[n]) for k, n in node.found if k not in is_long]
        new.found = sorted(moved + long_found) if long_found else moved
        return new


def found_of(nodes: list[Node]) -> Iterator[tuple[int, int]]:
    """(text index, next state) of the trees ``nodes`` in walk order."""
    for node in nodes:
        if node.found is not None:
            yield from node.found
        else:
            if node.own:
                yield node.lo, node.state
            yield from found_of(node.kids)


def _moved_node(node: Node, sigma: dict[int, int]) -> Node:
    new = Node(node.lo, node.hi, node.depth, sigma[node.state], node.byte)
    new.longest = node.longest
    new.own = node.own
    if node.found is not None:
        new.found = [(k, sigma[n]) for k, n in node.found]
    new.kids = [_moved_node(kid, sigma) for kid in node.kids]
    return new

def _tied(answer: State) -> list[int]:
    """The next states other than the default that as many ids go to as go to the default."""
    allowed, exc, default, _ = answer
    if default < 0:
        return []
    counts = Counter(exc.values())
    top = allowed.bit_count() - len(exc)  # the ids going to the default
    return [n for n, c in counts.items() if c == top]


def _moved(sigma: dict[int, int], answer: State, tied: list[int] | None) -> State | None:
    """``answer`` with every next state one position on; None when the default would change
    (a tie for the most ids broken by state number, which moving may reorder)."""
    allowed, exc, default, row = answer
    moved = dict(zip(exc, map(sigma.__getitem__, exc.values())))
    if row is not None:
        return allowed, moved, -1, [sigma[n] if n >= 0 else -1 for n in row]
    if default < 0:
        return allowed, moved, -1, None
    new_default = sigma[default]
    if tied and min(sigma[n] for n in tied) < new_default:
        return None
    return allowed, moved, new_default, None

"""A mixed state's trie walk kept as a tree, and walked again one position on (:func:`replay`).

:meth:`~textproc.core.constraints.index.states.StateTokens.trie` splits the sorted texts by the
live bytes of the states it meets and walks each small range (or a range at a state where most
bytes live) text by text; the texts it finds come out in that order, which the index keeps
(it numbers new states and picks completions in it). Near a counted repetition's bound the
answer one position on differs only in the texts long enough to reach it, so
:func:`record` keeps the walk as a tree of ranges and :func:`replay` walks the same tree from
the state one position on (:mod:`textproc.core.constraints.index.shift`): a range whose
longest text stays among good states (closer to no bad state than ``dist``) is moved whole,
a walked range walks again only its long texts, a range at a bad state is walked anew. The
texts come out in the order the trie walk gives from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from textproc.core.constraints.index.chains import LOOP_MIN
from textproc.core.constraints.index.vocab import subrange

if TYPE_CHECKING:
    from textproc.core.constraints.index.states import StateTokens

__all__ = ["Node", "record_roots", "record_trie", "replay", "found_of", "TRIE_SMALL", "TRIE_WIDE"]

_FAR = 1 << 30
# StateTokens.trie_ranges' thresholds (it takes them from here: a replay splits where it split)
TRIE_SMALL = 24  # ranges this small are walked token by token instead of split further
TRIE_WIDE = 96  # live bytes above which a state's range is walked token by token


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


def record_roots(st: StateTokens, q: int) -> list[Node]:
    """``st.trie(q, roots)`` of a loop-less mixed state as trees, in walk order."""
    by_next: dict[int, list[int]] = {}
    for b, t in st.live(q):
        by_next.setdefault(t, []).append(b)
    return record_trie(st, [(b, n) for n, bs in by_next.items() for b in bs], st.tables.texts)


def record_trie(st: StateTokens, roots: list[tuple[int, int]], texts: list[bytes]) -> list[Node]:
    """``st.trie(q, roots, texts)`` as trees, in walk order."""
    nodes = []
    for b, n in roots:
        start, end = subrange(texts, 0, len(texts), b"", b)
        if start < end:
            nodes.append((start, end, n, b))
    return [record(st, texts, start, end, 1, n, b) for start, end, n, b in reversed(nodes)]


def record(st: StateTokens, texts: list[bytes], lo: int, hi: int, depth: int, s: int, byte: int) -> Node:
    """One range of ``StateTokens.trie_ranges`` and what it finds, as a tree."""
    node = Node(lo, hi, depth, s, byte)
    node.longest = max(map(len, texts[lo:hi])) - depth
    loop = st.loop_bytes(s)
    live_s = st.live(s)
    if hi - lo <= TRIE_SMALL + 4 * len(live_s) or len(loop) >= LOOP_MIN or len(live_s) > TRIE_WIDE:
        node.found = st.walk_texts(s, texts, range(lo, hi), depth)
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
    node.kids = [record(st, texts, start, end, depth + 1, n, b) for start, end, n, b in reversed(kids)]
    return node


def found_of(nodes: list[Node]) -> Iterator[tuple[int, int]]:
    """(text index, next state) of the trees ``nodes`` in walk order."""
    for node in nodes:
        if node.found is not None:
            yield from node.found
        else:
            if node.own:
                yield node.lo, node.state
            yield from found_of(node.kids)


def replay(st: StateTokens, sigma: dict[int, int], dist: dict[int, int], node: Node, s: int,
           texts: list[bytes] | None = None, changed: list[bool] | None = None) -> Node:
    """``node`` (a range of a trie walk) walked from ``s``, the state one position on from
    ``node.state`` as a good state's next state; texts that stay fewer than ``dist`` bytes
    from a bad state are moved with ``sigma``, the others walked. ``changed`` gets a True
    when some text does not go where ``sigma`` moves it (or a range is walked anew)."""
    if texts is None:
        texts = st.tables.texts
    d = dist.get(node.state, _FAR)
    if d == 0:  # a bad state: the range may split otherwise from here
        if changed is not None:
            changed.append(True)
        return record(st, texts, node.lo, node.hi, node.depth, s, node.byte)
    if d > node.longest:
        return _moved(node, sigma)
    new = Node(node.lo, node.hi, node.depth, s, node.byte)
    new.longest = node.longest
    if node.found is None:
        new.own = node.own
        rows = st.rows[s]
        new.kids = [replay(st, sigma, dist, kid, rows[kid.byte], texts, changed) for kid in node.kids]
        return new
    cut = d + node.depth  # texts this long may reach a bad state
    lo, hi = node.lo, node.hi
    long_ks = [k for k, data in zip(range(lo, hi), texts[lo:hi]) if len(data) >= cut]
    long_found = st.walk_texts(s, texts, long_ks, node.depth)
    is_long = set(long_ks)
    if changed is not None and long_found != [(k, sigma.get(n, -3)) for k, n in node.found if k in is_long]:
        changed.append(True)
    moved = [(k, sigma[n]) for k, n in node.found if k not in is_long]
    new.found = sorted(moved + long_found) if long_found else moved
    return new


def _moved(node: Node, sigma: dict[int, int]) -> Node:
    new = Node(node.lo, node.hi, node.depth, sigma[node.state], node.byte)
    new.longest = node.longest
    new.own = node.own
    if node.found is not None:
        new.found = [(k, sigma[n]) for k, n in node.found]
    new.kids = [_moved(kid, sigma) for kid in node.kids]
    return new

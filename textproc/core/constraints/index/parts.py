"""One index state's answer from its parts (:func:`combine`): bitset groups, walks kept across
states (:class:`Kept`) and the state's own walked tokens -> allowed ids, exceptions, default.

The tokens that leave a string loop after its entry bytes walk alike from every state entering
that loop (an open object's key positions: hundreds of states per schema), so their walks are
kept once (:class:`~textproc.core.constraints.index.walks.TokenWalks`) with their bitset, their
next-state counts and, per default state, the entries that differ from it: a state takes them
with a few dict and bitset operations in C instead of a Python step per token. So do the
tokens a state walks from its few first bytes that are not in a loop (``TokenWalks.root_walks``: a
quote or a backslash read from every key position of an object leads to the same states).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import compress

from textproc.core.constraints.index.vocab import bits_of, bitset

__all__ = ["Kept", "State", "combine"]

# one state's answer: (allowed ids as a bitset, id -> next state where it differs, default next
# state, next state by character count or None)
State = tuple[int, dict[int, int], int, list[int] | None]


class Kept:
    """Walked tokens kept for reuse: id -> next state (``nexts``), their bitset, the count of
    ids per next state, and per default state the entries that go elsewhere (on demand)."""

    __slots__ = ("nexts", "bits", "counts", "_without", "_firsts")

    def __init__(self, nexts: dict[int, int], bits: int, counts: Counter[int]) -> None:
        self.nexts = nexts
        self.bits = bits
        self.counts = counts
        self._without: dict[int, dict[int, int]] = {}
        self._firsts: bytes | None = None

    @classmethod
    def of(cls, nexts: dict[int, int], size: int) -> Kept:
        return cls(nexts, bitset(nexts, size), Counter(nexts.values()))

    def starting_with(self, entry: bytes, token_bytes: Sequence[bytes], bits: int) -> Kept:
        """The entries whose token starts with a byte of ``entry``, in their order (``bits``:
        the ids starting with one of those bytes)."""
        if self._firsts is None:
            self._firsts = bytes(token_bytes[i][0] for i in self.nexts)
        table = bytearray(256)
        for b in entry:
            table[b] = 1
        nexts = dict(compress(self.nexts.items(), self._firsts.translate(table)))
        return Kept(nexts, self.bits & bits, Counter(nexts.values()))

    def without(self, default: int) -> dict[int, int]:
        """The entries whose next state is not ``default`` (kept per default)."""
        got = self._without.get(default)
        if got is None:
            nexts = self.nexts
            if default not in self.counts:  # nothing to leave out: the entries themselves
                got = nexts
            else:  # filtered in C
                got = dict(compress(nexts.items(), map(default.__ne__, nexts.values())))
            self._without[default] = got
        return got


def combine(size: int, groups: list[tuple[int, int]], pairs: dict[int, int],
            kept: Sequence[tuple[Kept, list[int]]] = (), tail: Sequence[Kept] = ()
            ) -> tuple[int, dict[int, int], int]:
    """(allowed, exceptions, default) from disjoint parts: bitset ``groups`` (tokens, next
    state), ``kept`` walks (each without the ids listed beside it, which ``pairs`` answers
    or which die), the walked ``pairs`` (id -> next state) and kept walks ``tail`` whose
    entries come after them; the most common next state is the default (ties: the smallest
    state, whatever order the parts came in). The exceptions are in that order (groups, kept,
    pairs, tail): the shortest completions take a state's first exception per next state."""
    counts: Counter[int] = Counter(pairs.values())
    allowed = bitset(pairs, size)
    for part in tail:
        counts.update(part.counts)
        allowed |= part.bits
    gone_of: list[set[int]] = []  # per kept part: its entries among the ids dropped from it
    for part, dropped in kept:
        counts.update(part.counts)
        bits = part.bits
        gone = part.nexts.keys() & dropped if dropped else set()
        if gone:
            nexts = part.nexts
            for i in gone:
                counts[nexts[i]] -= 1
            bits &= ~bitset(gone, size)
        gone_of.append(gone)
        allowed |= bits
    for tokens, n in groups:
        if tokens:
            counts[n] += tokens.bit_count()
            allowed |= tokens
    if not counts or max(counts.values()) <= 0:
        return 0, {}, -1
    default = min(counts, key=lambda n: (-counts[n], n))
    exc: dict[int, int] = {}
    for tokens, n in groups:
        if n != default and tokens:
            exc.update(dict.fromkeys(bits_of(tokens), n))
    for (part, _), gone in zip(kept, gone_of):
        exc.update(part.without(default))
        for i in gone:
            exc.pop(i, None)
    exc.update((token_id, n) for token_id, n in pairs.items() if n != default)
    for part in tail:
        exc.update(part.without(default))
    return allowed, exc, default

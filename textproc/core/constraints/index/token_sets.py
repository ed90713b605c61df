"""Token sets derived from a vocabulary's tables, keyed by byte sets, kept across compiles.

Owns :class:`TokenSets`: bitsets over ids ("the tokens made of these bytes", "the tokens whose
bytes after the first are these") and *rests* (tokens that start inside a loop, a run or an
entry byte but leave it, grouped by what follows: sorted distinct rests and the ids of each),
which the index builder walks as a trie instead of walking every token. None of these depend
on a DFA, only on byte sets, so the same JSON string states in every schema reuse them; they
live in the vocabulary's ``VocabTables.derived`` (bounded by ``MAX_DERIVED`` entries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from textproc.core.constraints.index.vocab import VocabTables, bits_of

__all__ = ["TokenSets", "Rests", "HIGH", "MAX_DERIVED"]

HIGH = frozenset(range(0x80, 0x100))
MAX_DERIVED = 4096  # derived sets kept per vocabulary (~20 KB each on a 150k vocabulary)
# (sorted distinct rests, ids per rest, the rests' first bytes)
Rests = tuple[list[bytes], list[list[int]], set[int]]


def _rests(by_rest: dict[bytes, list[int]]) -> Rests:
    texts = sorted(by_rest)
    return texts, [by_rest[r] for r in texts], {r[0] for r in texts if r}


class TokenSets:
    """The derived sets of one vocabulary (``tables`` and the bytes of every id)."""

    def __init__(self, tables: VocabTables, token_bytes: Sequence[bytes],
                 check: Callable[[], None] = lambda: None) -> None:
        self.tables = tables
        self.token_bytes = token_bytes
        self.check = check  # called every few thousand tokens (the compile's deadline)
        self.derived = tables.derived
        if len(self.derived) > MAX_DERIVED:
            self.derived.clear()

    def _checked(self, ids: list[int]) -> Iterable[int]:
        """``ids``, calling ``check`` every 4096 (deriving a set walks up to the vocabulary)."""
        for start in range(0, len(ids), 4096):
            self.check()
            yield from ids[start : start + 4096]

    def first(self, first_bytes: bytes) -> int:
        """Bitset of the tokens starting with one of ``first_bytes``."""
        got = self.derived.get(("first", first_bytes))
        if got is None:
            got = 0
            for b in first_bytes:
                got |= self.tables.first[b]
            self.derived[("first", first_bytes)] = got
        return got

    def made_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens made of ``plain`` bytes (and whole non-ASCII characters)."""
        return self._without(("plain", plain, chars), self.tables.contains)

    def tail_made_of(self, plain: bytes, chars: bool) -> int:
        """Bitset of the tokens whose bytes after the first are ``plain`` bytes (and whole
        non-ASCII characters: exact for tokens with an ASCII first byte)."""
        return self._without(("tail", plain, chars), self.tables.contains_tail)

    def _without(self, key: tuple[str, bytes, bool], contains: list[int]) -> int:
        got = self.derived.get(key)
        if got is None:
            t = self.tables
            ok = set(key[1]) | (HIGH if key[2] else set())
            bad = 0
            for b in range(256):
                if b not in ok:
                    bad |= contains[b]
            got = self.derived[key] = t.nonempty & ~bad & (~t.not_utf8 if key[2] else -1)
        return got

    def loop_rests(self, loop: bytes, chars: bool) -> Rests:
        """The tokens that start with a ``loop`` byte (or, with ``chars``, any non-ASCII byte)
        but are not made of those, by their rest after the leading loop bytes."""
        key = ("rests", loop, chars)
        got = self.derived.get(key)
        if got is None:
            first = bytes(sorted(set(loop) | (HIGH if chars else set())))
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            for i in self._checked(bits_of(self.first(first) & ~self.made_of(loop, chars))):
                by_rest.setdefault(token_bytes[i].lstrip(loop), []).append(i)
            got = self.derived[key] = _rests(by_rest)
        return got

    def entry_rests(self, entry: bytes, loop: bytes, chars: bool) -> Rests:
        """The tokens starting with an ``entry`` byte whose later bytes are not all ``loop``
        bytes (and whole characters, with ``chars``), by their rest after the first byte and
        the loop bytes that follow."""
        key = ("entry", entry, loop, chars)
        got = self.derived.get(key)
        if got is None:
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            for i in self._checked(bits_of(self.first(entry) & ~self.tail_made_of(loop, chars))):
                by_rest.setdefault(token_bytes[i][1:].lstrip(loop), []).append(i)
            got = self.derived[key] = _rests(by_rest)
        return got

    def rest_firsts(self, entry: bytes, loop: bytes, chars: bool) -> list[int]:
        """Per rest of :meth:`entry_rests` (in its order), the first bytes of its tokens as a
        bitmask (bit b: some token with that rest starts with b)."""
        key = ("entry-firsts", entry, loop, chars)
        got = self.derived.get(key)
        if got is None:
            token_bytes = self.token_bytes
            got = []
            for ids in self.entry_rests(entry, loop, chars)[1]:
                mask = 0
                for i in ids:
                    mask |= 1 << token_bytes[i][0]
                got.append(mask)
            self.derived[key] = got
        return got

    def run_rests(self, plain: bytes, k: int, loop: bytes | None) -> Rests:
        """The tokens longer than ``k`` whose first ``k`` bytes are ``plain`` bytes (with a
        ``loop`` after the run: only those not all plain), by their rest after those and the
        loop bytes that follow."""
        key = ("run", plain, k, loop)
        got = self.derived.get(key)
        if got is None:
            by_rest: dict[bytes, list[int]] = {}
            token_bytes = self.token_bytes
            candidates = self.first(plain)
            if loop is not None:
                candidates &= ~self.made_of(plain, False)
            for i in self._checked(bits_of(candidates)):
                data = token_bytes[i]
                if len(data) > k and not data[:k].lstrip(plain):
                    by_rest.setdefault(data[k:].lstrip(loop) if loop else data[k:], []).append(i)
            got = self.derived[key] = _rests(by_rest)
        return got

    def chain_rests(self, plain: bytes, chars: bool) -> dict[int, Rests]:
        """The tokens not made of ``plain`` bytes (and, with ``chars``, whole characters), by
        the length m of their leading run of plain bytes: m -> their rests after it."""
        key = ("chain", plain, chars)
        got = self.derived.get(key)
        if got is None:
            by_m: dict[int, dict[bytes, list[int]]] = {}
            token_bytes = self.token_bytes
            for i in self._checked(bits_of(self.tables.nonempty & ~self.made_of(plain, chars))):
                data = token_bytes[i]
                rest = data.lstrip(plain)
                by_m.setdefault(len(data) - len(rest), {}).setdefault(rest, []).append(i)
            got = self.derived[key] = {m: _rests(groups) for m, groups in sorted(by_m.items())}
        return got

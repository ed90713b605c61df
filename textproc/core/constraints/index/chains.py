"""Loop-less states where most bytes live, in the index build (used by
:class:`~textproc.core.constraints.index.states.StateTokens`).

Counted repetitions (``[^"]{0,8}``): a token of n plain characters goes n states on, found with
one bitset AND per length (:func:`chain_state`, for a state most bytes leave along one chain),
written as the state's "next state by character count" row; any other such state walks each
distinct string of byte classes once (:func:`wide_state`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from textproc.core.constraints.automaton.dfa import utf8_sequences
from textproc.core.constraints.automaton.lazy import LazyDFA
from textproc.core.constraints.index.table import BY_CHARS_WIDTH
from textproc.core.constraints.index.vocab import MAX_CHARS, bitset

if TYPE_CHECKING:
    from textproc.core.constraints.index.states import State, StateTokens

__all__ = ["chain_state", "char_step", "wide_state", "LOOP_MIN", "RestTrie"]

LOOP_MIN = 24  # bytes a loop (or a chain) needs for the bitset paths (a JSON string's: ~90)
_MULTIBYTE = [s for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)) for s in utf8_sequences(lo, hi)]


def chain(st: StateTokens, q: int) -> tuple[bytes, list[int], int] | None:
    """A counted repetition seen from ``q``: the ASCII bytes ``plain`` that all lead to one
    next state, and states ``c`` with ``c[0] = q`` and ``c[i + 1]`` the state after one
    more plain byte from ``c[i]`` (-1: dead), as long as every plain byte agrees; plus how
    many of those steps every whole non-ASCII character takes alike. None if no chain."""
    rows = st.rows
    row = rows[q]
    ascii_next = Counter(t for t in row[:128] if t >= 0).most_common(1)
    if not ascii_next:
        return None
    plain = bytes(b for b in range(128) if row[b] == ascii_next[0][0])
    if len(plain) < LOOP_MIN:
        return None
    states = [q]
    steps = st.chain_steps  # (state, plain bytes) -> the one state they all lead to, or None
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
    while shifts + 1 < len(states) and states[shifts + 1] >= 0 and char_step(st, states[shifts], states[shifts + 1]):
        shifts += 1
    return plain, states, shifts


def char_step(st: StateTokens, s: int, t: int) -> bool:
    """Whether every UTF-8 encoded non-ASCII character read from ``s`` reaches ``t`` (kept per
    state: each chain state of a repetition asks it for the 47 after it)."""
    got = st.char_steps.get((s, t))
    if got is None:
        got = st.char_steps[(s, t)] = _char_step(st, s, t)
    return got


def _char_step(st: StateTokens, s: int, t: int) -> bool:
    rows = st.rows
    for seq in _MULTIBYTE:
        got = {s}
        for lo, hi in seq:
            got = {rows[x][b] for x in got for b in range(lo, hi + 1)}
            if -1 in got:
                return False
        if got != {t}:
            return False
    return True


def char_dies(st: StateTokens, s: int) -> bool:
    """Whether every whole non-ASCII character read from ``s`` reaches the dead state."""
    rows = st.rows
    for seq in _MULTIBYTE:
        got = {s}
        for lo, hi in seq:
            got = {rows[x][b] if x >= 0 else -1 for x in got for b in range(lo, hi + 1)}
        if got != {-1}:
            return False
    return True


# (plain bytes before the rest, state they lead to, (byte, next state) roots, sorted rests) ->
# (rest index, next state) of the rests that live, in trie walk order (StateTokens.trie)
RestTrie = Callable[[int, int, list[tuple[int, int]], list[bytes]], list[tuple[int, int]]]


def chain_state(st: StateTokens, q: int, live: list[tuple[int, int]], trie: RestTrie | None = None) -> State | None:
    """Counted repetitions (``[^"]{0,8}``): a token of n plain characters goes to
    ``c[n]``, found with one bitset AND per length and written as the state's "next state
    by character count" row (no exception entries); the rest is walked (``trie``: how the
    rests after m plain bytes are walked, by default ``st.trie``)."""
    found = chain(st, q)
    if found is None:
        return None
    plain, states, shifts = found
    t = st.tables
    ascii_only = st.tokens_of(plain, False)
    with_chars = (st.tokens_of(plain, True) & ~ascii_only) if shifts else 0
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
        chars_die = with_chars and shifts == last - 1 and char_dies(st, states[last - 1])
        for n in range(last, MAX_CHARS):
            covered |= ascii_only & t.by_chars[n]
            if chars_die:
                covered |= with_chars & t.by_chars[n]
    pairs = chain_rest_pairs(st, q, plain, states, bool(with_chars), trie)
    # made of plain bytes (and characters) but past what the chain counts: walked whole
    pairs.update(st.walk_each(q, st.first(bytes(b for b, _ in live)) & ~covered
                                & st.tokens_of(plain, bool(with_chars))))
    counts = t.char_count
    exc = {i: n for i, n in pairs.items() if row[counts[i]] != n}
    return allowed | bitset(pairs, st.size), exc, -1, row


def chain_rest_pairs(st: StateTokens, q: int, plain: bytes, states: list[int], chars: bool,
                     trie: RestTrie | None = None) -> dict[int, int]:
    """id -> next state for the tokens not made of ``plain`` bytes (and characters): m
    plain bytes lead to ``states[m]``, and the rest after them is walked from there as a
    trie over the distinct rests (grouped per vocabulary, kept)."""
    rows = st.rows
    pairs: dict[int, int] = {}
    for m, (rests, rest_ids, rest_first) in st.sets.chain_rests(plain, chars).items():
        if m >= len(states):  # a longer plain run than the chain follows
            if states[-1] >= 0:
                ids = [i for group in rest_ids for i in group]
                pairs.update(st.walk_each(q, bitset(ids, st.size)))
            continue
        s = states[m]
        if s < 0:
            continue
        roots = [(b, rows[s][b]) for b in rest_first if rows[s][b] >= 0]
        for k, n in (st.trie(s, roots, rests) if trie is None else trie(m, s, roots, rests)):
            pairs.update(dict.fromkeys(rest_ids[k], n))
    return pairs


def wide_state(st: StateTokens, q: int) -> tuple[int, dict[int, int], int]:
    """(allowed, exceptions, default) of a loop-less state where most bytes live and no chain
    is seen: each distinct string of byte classes walked once, for all its tokens."""
    groups = st.class_groups
    if groups is None:
        groups = st.class_groups = group_by_class(st)
    rows = st.rows
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
    return _split_default(exc, st.size)


def _split_default(nexts: dict[int, int], size: int) -> tuple[int, dict[int, int], int]:
    """(allowed bitset, exceptions, default): the most common next state becomes the default."""
    if not nexts:
        return 0, {}, -1
    default = Counter(nexts.values()).most_common(1)[0][0]
    return bitset(nexts, size), {t: n for t, n in nexts.items() if n != default}, default


def group_by_class(st: StateTokens) -> list[tuple[bytes, list[int]]]:
    """Tokens grouped by their string of DFA byte classes (equal strings walk alike);
    each group is keyed by its first token's bytes, a representative."""
    if isinstance(st.dfa, LazyDFA):  # its NFA's byte classes: alike in every state
        table = bytearray(st.dfa.byte_class)
    else:
        signature: dict[tuple[int, ...], int] = {}
        table = bytearray(256)
        columns = list(zip(*st.rows))  # byte -> next state in every state
        for b in range(256):
            table[b] = signature.setdefault(columns[b], len(signature)) % 256
        if len(signature) > 256:
            table = bytearray(range(256))  # more classes than bytes can name: no grouping
    groups: dict[bytes, tuple[bytes, list[int]]] = {}
    check = st.sets.check
    for token_id, data in enumerate(st.token_bytes):
        if token_id % 4096 == 4095:
            check()
        if data:
            key = data.translate(table)
            got = groups.get(key)
            if got is None:
                groups[key] = (data, [token_id])
            else:
                got[1].append(token_id)
    return list(groups.values())

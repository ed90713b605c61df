"""Key positions of open objects in the index build: a state that reads like a string loop
state but for a few bytes.

In an open object a key being written that shares a prefix with declared keys (``"serv`` of
``service_id``) is a state whose every byte goes where it goes from the key string's loop
state ``n``, except the few that continue a declared key (``i``) or end it. From the state
before it (``"ser``, reading ``v``) a token ``v`` + rest walks the rest from there, so when the
rest's first byte is not one of those few, the rest walks as it does from ``n``: the tokens
whose later bytes are ``n``'s loop bytes (and whole characters) stay in ``n`` (one bitset
expression), the ones that leave it go where their rest after the loop bytes goes from ``n``
(walked once per loop state and first byte, kept), and only the tokens whose second byte is
one of the few are walked from where it leads. Used by
:class:`~textproc.core.constraints.index.states.StateTokens` for a mixed state's first bytes
that lead to such a state (Qwen3: ~5,000 tokens start with ``_``, walked one by one before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textproc.core.constraints.index.chains import LOOP_MIN
from textproc.core.constraints.index.vocab import bitset, subrange

if TYPE_CHECKING:
    from textproc.core.constraints.index.parts import Kept
    from textproc.core.constraints.index.states import StateTokens

__all__ = ["near_root", "near_loop", "walk_near"]

NEAR_MAX = 16  # bytes a state may differ in from its loop state to count as near it
NEAR_MIN_TOKENS = 32  # texts a first byte must start for the bitset path (fewer: walked)


def near_loop(st: StateTokens, s: int) -> tuple[int, bytes] | None:
    """``(n, differing)``: a big loop state ``n`` (not ``s``) whose row ``s``'s row equals
    except at the bytes ``differing`` (at most ``NEAR_MAX``); None if there is none."""
    if s in st.nears:
        return st.nears[s]
    rows = st.rows
    row = rows[s]
    targets = {t for t in set(row) if t >= 0 and t != s and len(st.loop_bytes(t)) >= LOOP_MIN}
    got = None
    for n in sorted(targets):  # every candidate, smallest first: the answer does not hang on order
        loop_row = rows[n]
        differing = bytes(b for b in range(256) if row[b] != loop_row[b])
        if len(differing) <= NEAR_MAX:
            got = (n, differing)
            break
    st.nears[s] = got
    return got


def near_root(st: StateTokens, c: int, s: int) -> tuple[int, int, Kept, list[int], dict[int, int]] | None:
    """The tokens starting with ASCII byte ``c`` that leads to ``s``, when ``s`` is near a loop
    state ``n`` (:func:`near_loop`) and enough tokens start with ``c``: ``(tokens that go to n,
    n, the kept walks of the tokens that leave n's loop, the ids walked here instead, id ->
    next state of those that live)``; None otherwise (walk them as a trie)."""
    if c >= 0x80:
        return None
    near = st.nears[s] if s in st.nears else near_loop(st, s)
    if near is None:
        return None
    texts = st.tables.texts
    lo, hi = subrange(texts, 0, len(texts), b"", c)
    if hi - lo < NEAR_MIN_TOKENS:
        return None
    n, differing = near
    prefix = texts[lo][:1]
    text_ids = st.tables.text_ids
    rows = st.rows
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
    pairs = {i: t for k, t in (*found, *st.trie_ranges(ranges, texts)) for i in text_ids[k]}
    tokens = st.first(prefix) & st.tail_inside(n) & ~bitset(own_ids, st.size)
    return tokens, n, st.rest_walk(n, prefix), own_ids, pairs


def walk_near(st: StateTokens, s: int, near: tuple[int, bytes], texts: list[bytes], lo: int, hi: int,
              depth: int) -> list[tuple[int, int]]:
    """(index, next state) of the texts ``texts[lo:hi]`` whose bytes after the first
    ``depth`` live from ``s``, a state near loop state ``n`` (:func:`near_loop`): a rest
    whose first byte is not one of the differing ones walks as from ``n``, so its walk is
    looked up under ``n`` (the same for every state near ``n``: hundreds of key positions)."""
    n, differing = near
    loop_n = st.loop_bytes(n)
    walked = st.walked
    walk = st.dfa.walk
    walk_n = st.walk_skipping
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

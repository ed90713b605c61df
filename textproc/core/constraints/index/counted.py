"""Counted repetitions as whole regions (``[^"]{0,40}``): every state of one answered from its
kind's tokens, walked once for all positions (:class:`CountedRegions`).

A counted repetition's states are the same few *kinds* at every position: the chain state
``C_j`` (j items read), and the states inside an item (a backslash read, ``\\u`` and 1-3 hex
digits, 1-3 UTF-8 continuation bytes to go). A region is found from a chain state: its chain
``C_0 .. C_N`` (the ASCII bytes most of them read lead one position on), its kinds (the states
reachable from ``C_0`` without passing a chain state that lead on to ``C_1``, each named by its
first path from ``C_0``), and per kind and byte one *move*: dead, (kind, 0 or 1 positions on),
or an exit (a state outside the region, live from some position on: a closing quote once the
minimum is read). The region is used only when this model is the DFA: every byte of every
state of every position is checked against it (a kind exists at positions ``0 .. N - e``, a
move into a kind is live iff the position it reaches has that kind, an exit goes to one state
from its first live position to the kind's last). Walking a token through the moves is then
walking it through the DFA, so a token from kind ``k`` at position ``j`` is summarised once,
for every ``j``: it dies, or ends in kind ``k'`` ``d`` positions on, or exits after ``d``
positions with its rest walked from the exit's state; it is allowed at ``j`` iff
``j + r <= N`` (``r``: the furthest position it needs, its kinds' ``e`` counted) and, for an
exit, ``j + d`` is at least the exit's first live position. The summaries depend only on the
moves (the same for every JSON string of any bound) and live with the vocabulary's derived
sets; a region then answers each state with a few bitset operations and one dict entry per
exception. A token that ends in the chain kind and has n characters goes ``n - offset``
positions on, with one offset per kind for most of them (the chain state's tokens made of plain
bytes and whole characters: 0; after a backslash, ``nabc``: 0; after ``\\u``, ``00e9ab``: 3),
so such a kind's state answers them with a "next state by character count" row, as
:meth:`~textproc.core.constraints.index.states.StateTokens.chain_state` writes the chain state's, and
lists only the other tokens as exceptions (booking's index: 1.24 M exception entries, 16.5 MB
-> 0.23 M, 7.6 MB).

Every answer is the walk definition (same allowed ids and next states as the paths of
:class:`~textproc.core.constraints.index.states.StateTokens`); the exceptions come in group
order, not the trie's, so a state's completion token may be another one on a shortest way.
Only a minimal DFA's regions (a DFA built on demand would expand states a first mask does not
need); a region the checks refuse is left to the other paths.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from itertools import compress
from operator import itemgetter
from typing import Any

from textproc.core.constraints.automaton.dfa import ByteDFA, utf8_sequences
from textproc.core.constraints.index.parts import State
from textproc.core.constraints.index.table import BY_CHARS_WIDTH
from textproc.core.constraints.index.vocab import MAX_CHARS, bits_of, bitset, subrange
from textproc.core.constraints.index.walks import LOOP_MIN, TokenWalks

__all__ = ["CountedRegions"]

_DEPTH = 12  # bytes from C_0 the kinds are looked for (``\\uXXXX`` is 6, a character 4)
_MAX_SEEN = 256  # states looked at from C_0 (the rest: outside, or the checks refuse it)
_MIN_N = 3  # shorter repetitions are left to the other paths
_ROW_MIN = 64  # tokens a row must answer for a kind other than the chain's to get one
_MULTIBYTE = [s for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)) for s in utf8_sequences(lo, hi)]

# a move (kind, byte) is an int: -1 dead, 2 * kind + positions on (0 or 1), or -2 - exit class


class _Region:
    """One counted repetition: its states per kind and position, its moves, its exits."""

    __slots__ = ("n", "at", "top", "e", "moves", "exits", "plain", "chars", "key", "kinds", "on_chain")

    def __init__(self, at: list[list[int]], moves: tuple[tuple[int, ...], ...],
                 exits: list[tuple[int, int]], plain: bytes, chars: bool) -> None:
        self.at = at  # kind -> position -> state (kind 0: the chain)
        self.n = len(at[0]) - 1
        self.top = [len(states) - 1 for states in at]
        self.e = tuple(self.n - t for t in self.top)
        self.moves = moves
        self.exits = exits  # exit class -> (state, the first position it is live at)
        self.plain = plain  # the ASCII bytes that move the chain state one position on
        self.chars = chars  # whether every whole non-ASCII character does too
        # what the summaries depend on (the same for every JSON string, whatever its bounds)
        self.key = ("counted", plain, moves, self.e)
        self.kinds: dict[int, _Kind] = {}
        self.on_chain = frozenset(at[0])


class _Kind:
    """A kind's tokens in one region, grouped: ``ins`` (r, kind, positions on, ids, the ids
    the kind's row does not answer) sorted by r, ``outs`` (r, lowest start, next state, ids),
    per r the bitset of the ids allowed when at most r positions are left, and ``offset``:
    a token of n characters that ends in the chain kind goes ``n - offset`` positions on, as
    a "next state by character count" row answers it (None: no row, a default and
    exceptions)."""

    __slots__ = ("ins", "in_r", "outs", "allowed_r", "r_levels", "max_lo", "offset")

    def __init__(self, ins: list[tuple[int, int, int, list[int], list[int]]],
                 ins_levels: tuple[list[int], list[int]],
                 outs: list[tuple[int, int, int, list[int]]], offset: int | None, size: int) -> None:
        self.ins = ins  # sorted by r
        self.in_r = [g[0] for g in ins]
        self.outs = outs
        self.offset = offset
        self.max_lo = max((g[1] for g in outs), default=0)
        # the ids of groups always live (any start) by r, cumulative: one bitset per r level;
        # the ins' levels come from the vocabulary's derived sets, the exits' are this DFA's
        by_r: dict[int, list[int]] = {}
        for r, lo, _, ids in outs:
            if lo <= 0:
                by_r.setdefault(r, []).extend(ids)
        in_levels, in_allowed = ins_levels
        levels = sorted({*in_levels, *by_r})
        buf = bytearray((size + 7) // 8)
        allowed: list[int] = []
        j = 0
        for r in levels:
            for i in by_r.get(r, ()):
                buf[i >> 3] |= 1 << (i & 7)
            j = bisect_right(in_levels, r, j)
            got = in_allowed[j - 1] if j else 0
            allowed.append(got | int.from_bytes(buf, "little") if by_r else got)
        self.r_levels = levels
        self.allowed_r = allowed

    def allowed(self, room: int, start: int, size: int) -> int:
        """Bitset of the ids allowed at position ``start`` with ``room`` positions left."""
        i = bisect_right(self.r_levels, room)
        got = self.allowed_r[i - 1] if i else 0
        if self.max_lo > 0:
            late = [i for r, lo, _, ids in self.outs if 0 < lo <= start and r <= room for i in ids]
            if late:
                got |= bitset(late, size)
        return got


class CountedRegions:
    """The counted repetitions of one index build, found on demand from their chain states."""

    def __init__(self, walks: TokenWalks) -> None:
        self.walks = walks
        self.enabled = isinstance(walks.dfa, ByteDFA)
        self.where: dict[int, tuple[_Region, int, int]] = {}  # state -> (region, kind, position)
        self.tried: set[int] = set()  # chain states a region was looked for from
        self._preds: dict[int, dict[int, list[int]]] = {}  # byte -> state -> states it comes from

    def state(self, q: int) -> State | None:
        """``q``'s answer if it lies in a counted region the checks accept, else None."""
        if not self.enabled:
            return None
        got = self.where.get(q)
        if got is None:
            if q in self.tried or not self._looks_chained(q):
                return None
            self._find(q)
            got = self.where.get(q)
            if got is None:
                return None
        region, kind, pos = got
        return self._answer(region, kind, pos)

    # -- finding a region --------------------------------------------------------------------

    def _looks_chained(self, q: int) -> bool:
        """Whether at least ``LOOP_MIN`` ASCII bytes lead from ``q`` to one state that does not
        loop on them (a key being written leads most bytes into its key loop: no chain)."""
        head = self.walks.rows[q][:128]
        if head.count(-1) > 128 - LOOP_MIN or head.count(q) >= LOOP_MIN:  # few live, or a loop
            return False
        t = max(set(head) - {-1}, key=head.count)  # in C: a state's ASCII bytes go to few states
        return head.count(t) >= LOOP_MIN and self.walks.rows[t][head.index(t)] != t

    def _find(self, q: int) -> None:
        row = self.walks.rows[q]
        head = row[:128]
        t = max(set(head) - {-1}, key=head.count)
        plain = bytes(b for b in range(128) if row[b] == t)
        chain = self._chain(q, plain)
        self.tried.update(chain)
        if len(chain) <= _MIN_N:
            return
        region = self._region(chain, plain)
        if region is None:
            return
        for kind, states in enumerate(region.at):
            for pos, x in enumerate(states):
                self.where[x] = (region, kind, pos)

    def _chain(self, q: int, plain: bytes) -> list[int]:
        """``C_0 .. C_N`` through ``q``: back while one state's ``plain`` bytes (exactly those
        of its ASCII bytes) lead to the chain's first, on while they lead to one state."""
        rows = self.walks.rows
        b0 = plain[0]
        preds = self._preds.get(b0)
        if preds is None:
            preds = self._preds[b0] = {}
            for s, r in enumerate(rows):
                if r[b0] >= 0:
                    preds.setdefault(r[b0], []).append(s)
        chain = [q]
        seen = {q}
        while len(chain) < 1 << 16:
            x = chain[-1]
            before = [p for p in preds.get(x, ()) if p not in seen and _reads(rows[p], plain) == x]
            if len(before) != 1:
                break
            chain.append(before[0])
            seen.add(before[0])
        chain.reverse()
        while len(chain) < 1 << 17:
            nxt = _reads(rows[chain[-1]], plain)
            if nxt < 0:
                break
            if nxt in seen:  # a loop: not a counted repetition
                return []
            chain.append(nxt)
            seen.add(nxt)
        return chain

    def _region(self, chain: list[int], plain: bytes) -> _Region | None:
        """The region of ``chain`` if the DFA is its model (see the module docstring)."""
        walks = self.walks
        rows = walks.rows
        on_chain = {x: j for j, x in enumerate(chain)}
        paths = _kind_paths(walks.live, chain[0], chain[1], on_chain)
        where: dict[int, tuple[int, int]] = {x: (0, j) for j, x in enumerate(chain)}
        at = [chain]
        for kind, path in enumerate(paths, 1):
            states = []
            for j, c in enumerate(chain):
                x = walks.dfa.walk(c, path)
                if x < 0:
                    break
                if x in where:
                    return None  # one state, two kinds or positions
                where[x] = (kind, j)
                states.append(x)
            if not states:
                return None
            for c in chain[len(states):]:  # a kind's positions are 0 .. its last
                if walks.dfa.walk(c, path) >= 0:
                    return None
            at.append(states)
        # the moves, from the first position where each byte lives
        moves = [[-1] * 256 for _ in at]
        exits: list[tuple[int, int]] = []
        exit_of: dict[tuple[int, int], int] = {}
        for kind, states in enumerate(at):
            seen_live = b""
            for j, x in enumerate(states):
                r = rows[x]
                live = bytes(compress(range(256), map((-1).__lt__, r)))
                if live == seen_live:
                    continue
                seen_live = live
                m = moves[kind]
                for b in live:
                    if m[b] != -1:
                        continue
                    y = r[b]
                    got = where.get(y)
                    if got is not None:
                        step = got[1] - j
                        if step not in (0, 1):
                            return None
                        m[b] = 2 * got[0] + step
                    else:
                        xi = exit_of.get((y, j))
                        if xi is None:
                            xi = exit_of[(y, j)] = len(exits)
                            exits.append((y, j))
                        m[b] = -2 - xi
        if not _checked(rows, at, moves, exits):
            return None
        move_rows = tuple(tuple(m) for m in moves)
        plain_all = bytes(b for b in range(128) if move_rows[0][b] == 1)
        if plain_all != plain:
            return None
        return _Region(at, move_rows, exits, plain, _chars_step(move_rows))

    # -- answering ----------------------------------------------------------------------------

    def _answer(self, region: _Region, kind: int, pos: int) -> State:
        walks = self.walks
        size = walks.size
        k = region.kinds.get(kind)
        if k is None:
            k = region.kinds[kind] = self._kind(region, kind)
        room = region.n - pos
        at = region.at
        allowed = k.allowed(room, pos, size)
        # (next state, ids, the ids a chain state's row does not answer, None: ask the row)
        groups: list[tuple[int, list[int], list[int] | None]] = []
        for r, kf, d, ids, in_row in k.ins[: bisect_right(k.in_r, room)]:
            groups.append((at[kf][pos + d], ids, in_row))
        for r, lo, nxt, ids in k.outs:
            if r <= room and lo <= pos:
                groups.append((nxt, ids, None if nxt in region.on_chain else ids))
        exc: dict[int, int] = {}
        if k.offset is not None and room > 0:  # tokens of n characters by a row, n - offset on
            chain = at[0]
            row = [-1] * BY_CHARS_WIDTH
            for n in range(max(1, k.offset + 1), min(room + k.offset, MAX_CHARS - 1) + 1):
                row[n] = chain[pos + n - k.offset]
            if kind == 0:  # plain tokens, only the row answers them
                allowed |= self._bulk(region) & self._chars_upto(min(room, MAX_CHARS - 1))
            for nxt, ids, off_row in groups:
                if off_row is None:  # an exit's walk back onto the chain: the row answers some
                    counts = walks.tables.char_count
                    exc.update((i, nxt) for i in ids if row[counts[i]] != nxt)
                else:
                    exc.update(dict.fromkeys(off_row, nxt))
            return allowed, exc, -1, row
        counts_by: Counter[int] = Counter()
        for nxt, ids, _ in groups:
            counts_by[nxt] += len(ids)
        if not counts_by:
            return allowed, exc, -1, None
        default = min(counts_by, key=lambda n: (-counts_by[n], n))
        for nxt, ids, _ in groups:
            if nxt != default:
                exc.update(dict.fromkeys(ids, nxt))
        return allowed, exc, default, None

    def _kind(self, region: _Region, kind: int) -> _Kind:
        """A kind's groups in ``region``: its summary and row (kept per vocabulary), the exits'
        rests walked from the exit states."""
        walks = self.walks
        ins, offset, outs_s = self._grouped(region, kind)
        outs_by: dict[tuple[int, int, int], list[int]] = {}
        walk_rest = walks.walk_rest
        for (xi, d, r, rest), ids in outs_s.items():
            z, first = region.exits[xi]
            nxt = walk_rest(z, rest)
            if nxt >= 0:
                outs_by.setdefault((r, first - d, nxt), []).extend(ids)
        outs = [(r, lo, nxt, ids) for (r, lo, nxt), ids in outs_by.items()]
        return _Kind(ins, self._ins_levels(region, kind, ins), outs, offset, walks.size)

    def _ins_levels(self, region: _Region, kind: int, ins: list[tuple[int, int, int, list[int], list[int]]]
                    ) -> tuple[list[int], list[int]]:
        """(the r levels of ``ins``, per level the bitset of the ids of r at most that):
        kept per vocabulary and moves, as the groups are."""
        key = (*region.key, kind, "levels")
        derived = self.walks.sets.derived
        got: Any = derived.get(key)
        if got is not None:
            return got  # type: ignore[no-any-return]
        by_r: dict[int, list[int]] = {}
        for r, _, _, ids, _ in ins:
            by_r.setdefault(r, []).extend(ids)
        buf = bytearray((self.walks.size + 7) // 8)
        levels: list[int] = []
        allowed: list[int] = []
        for r in sorted(by_r):
            for i in by_r[r]:
                buf[i >> 3] |= 1 << (i & 7)
            levels.append(r)
            allowed.append(int.from_bytes(buf, "little"))
        derived[key] = got = (levels, allowed)
        return got  # type: ignore[no-any-return]

    def _grouped(self, region: _Region, kind: int) -> tuple[
            list[tuple[int, int, int, list[int], list[int]]], int | None,
            dict[tuple[int, int, int, bytes], list[int]]]:
        """(the groups that end in the region (r, kind, positions on, ids, the ids off the
        row) sorted by r, the row's offset or None, the summary's exits); kept per vocabulary
        and moves. The chain kind's row has offset 0; another kind gets a row when enough of
        its tokens end in the chain kind one offset on (after a backslash: ``nabc`` is 4
        characters, 4 positions on; after ``\\u``: ``00e9ab``, 6 characters, 3 on)."""
        key = (*region.key, kind, "grouped")
        derived = self.walks.sets.derived
        got: Any = derived.get(key)
        if got is not None:
            return got  # type: ignore[no-any-return]
        ins_s, outs_s = self._summary(region, kind)
        counts = self.walks.tables.char_count
        offset: int | None = 0
        if kind:
            offsets: Counter[int] = Counter()
            for (kf, d, _), ids in ins_s.items():
                if kf == 0:
                    offsets.update(counts[i] - d for i in ids if counts[i] < MAX_CHARS)
            best = offsets.most_common(1)
            offset = best[0][0] if best and best[0][1] >= _ROW_MIN and best[0][0] >= 0 else None
        ins = []
        for (kf, d, r), ids in ins_s.items():
            n = d + (offset or 0)
            if offset is not None and kf == 0 and 0 < n < MAX_CHARS:
                off_row = [i for i in ids if counts[i] != n]
            else:
                off_row = ids
            ins.append((r, kf, d, ids, off_row))
        ins.sort(key=itemgetter(0))
        derived[key] = got = (ins, offset, outs_s)
        return got  # type: ignore[no-any-return]

    def _summary(self, region: _Region, kind: int
                 ) -> tuple[dict[tuple[int, int, int], list[int]], dict[tuple[int, int, int, bytes], list[int]]]:
        """Every token that lives from ``kind`` for some position, walked once through the
        moves: (kind it ends in, positions on, r) -> ids and (exit class, positions before
        it, r, rest after the exit byte) -> ids. Kept per vocabulary and moves."""
        walks = self.walks
        key = (*region.key, kind)
        derived = walks.sets.derived
        got: Any = derived.get(key)
        if got is not None:
            return got  # type: ignore[no-any-return]
        moves, e, plain = region.moves, region.e, region.plain
        first = bytes(b for b in range(256) if moves[kind][b] != -1)
        ins: dict[tuple[int, int, int], list[int]] = {}
        outs: dict[tuple[int, int, int, bytes], list[int]] = {}
        check = walks.sets.check
        if kind == 0:  # the tokens the row does not answer
            ids = bits_of(walks.first(first) & ~self._bulk(region))
            memo: dict[bytes, tuple[Any, ...] | None] = {}
            token_bytes = walks.token_bytes
            for n, i in enumerate(ids):
                if n & 4095 == 4095:
                    check()
                data = token_bytes[i]
                res = memo.get(data, ())
                if res == ():
                    res = memo[data] = _walk(moves, e, plain, kind, data)
                if res is not None:
                    (ins if len(res) == 3 else outs).setdefault(res, []).append(i)
        else:
            texts = walks.tables.texts
            text_ids = walks.tables.text_ids
            n = 0
            for b in first:
                lo, hi = subrange(texts, 0, len(texts), b"", b)
                for t in range(lo, hi):
                    n += 1
                    if n & 4095 == 4095:
                        check()
                    res = _walk(moves, e, plain, kind, texts[t])
                    if res is not None:
                        (ins if len(res) == 3 else outs).setdefault(res, []).extend(text_ids[t])  # type: ignore[arg-type]
        derived[key] = (ins, outs)
        return ins, outs

    def _bulk(self, region: _Region) -> int:
        """Bitset of the tokens the chain state's row answers: plain bytes (and whole
        characters) under ``MAX_CHARS`` characters."""
        return self.walks.tokens_of(region.plain, region.chars) & self._chars_upto(MAX_CHARS - 1)

    def _chars_upto(self, n: int) -> int:
        """Bitset of the whole-UTF-8 tokens of 1 .. n characters (kept per vocabulary)."""
        derived = self.walks.sets.derived
        got: list[int] | None = derived.get(("chars upto",))
        if got is None:
            got = [0]
            for bits in self.walks.tables.by_chars[1:]:
                got.append(got[-1] | bits)
            derived[("chars upto",)] = got
        return got[n]


def _reads(row: list[int], plain: bytes) -> int:
    """The state all of ``plain`` lead to from ``row`` if they agree and no other ASCII byte
    leads there, else -1."""
    t = row[plain[0]]
    if t < 0:
        return -1
    if bytes(b for b in range(128) if row[b] == t) != plain:
        return -1
    return t


def _kind_paths(live: Callable[[int], list[tuple[int, int]]], c0: int, c1: int,
                on_chain: dict[int, int]) -> list[bytes]:
    """The first path from ``c0`` of each state (not a chain state) reachable from it without
    passing a chain state that leads on to ``c1`` without passing one either, shortest and
    smallest first (none: the items are single bytes); ``live``: a state's (byte, next state)
    pairs that do not die."""
    paths: dict[int, bytes] = {c0: b""}
    order = [c0]
    into_c1: set[int] = set()
    parents: dict[int, list[int]] = {}
    i = 0
    while i < len(order):
        x = order[i]
        i += 1
        p = paths[x]
        if len(p) >= _DEPTH:
            continue
        for b, y in live(x):
            if y == c1:
                into_c1.add(x)
            if y in on_chain:
                continue
            parents.setdefault(y, []).append(x)
            if y not in paths and len(paths) < _MAX_SEEN:
                paths[y] = p + bytes((b,))
                order.append(y)
    # the states that lead on to c1: backwards from the ones reading into it
    inside = set(into_c1)
    todo = list(into_c1)
    while todo:
        y = todo.pop()
        for x in parents.get(y, ()):
            if x not in inside:
                inside.add(x)
                todo.append(x)
    inside.discard(c0)
    return sorted((paths[x] for x in inside if x in paths), key=lambda p: (len(p), p))


def _checked(rows: list[list[int]], at: list[list[int]], moves: list[list[int]],
             exits: list[tuple[int, int]]) -> bool:
    """Whether every byte of every state of the region goes where the moves say."""
    top = [len(states) - 1 for states in at]
    for kind, states in enumerate(at):
        by_move: dict[int, list[int]] = {}
        for b, m in enumerate(moves[kind]):
            by_move.setdefault(m, []).append(b)
        classes = []
        for m, bs in by_move.items():
            if len(bs) == 1:
                bs = bs * 2  # itemgetter of one index returns the item, of two a tuple
            classes.append((itemgetter(*bs), m, len(bs)))
        for j, x in enumerate(states):
            row = rows[x]
            for get, m, count in classes:
                if m == -1:
                    want = -1
                elif m >= 0:
                    p = j + (m & 1)
                    want = at[m >> 1][p] if p <= top[m >> 1] else -1
                else:
                    z, first = exits[-2 - m]
                    want = z if j >= first else -1
                if get(row) != (want,) * count:
                    return False
    return True


def _chars_step(moves: tuple[tuple[int, ...], ...]) -> bool:
    """Whether every whole UTF-8 character read from the chain kind goes one position on to
    the chain kind (then the row answers tokens of whole characters)."""
    for seq in _MULTIBYTE:
        cur = {(0, 0)}
        for lo, hi in seq:
            nxt = set()
            for kind, d in cur:
                for b in range(lo, hi + 1):
                    m = moves[kind][b]
                    if m < 0:
                        return False
                    nxt.add((m >> 1, d + (m & 1)))
            cur = nxt
        if cur != {(0, 1)}:
            return False
    return True


def _walk(moves: tuple[tuple[int, ...], ...], e: tuple[int, ...], plain: bytes, kind: int,
          data: bytes) -> tuple[int, int, int] | tuple[int, int, int, bytes] | None:
    """``data`` walked through the moves from ``kind``: None (dies at every position),
    (kind it ends in, positions on, r) or (exit class, positions before it, r, rest)."""
    i, n = 0, len(data)
    d = 0
    r = e[kind]
    while i < n:
        if kind == 0:  # plain bytes each one position on (e of the chain is 0)
            rest = n - len(data[i:].lstrip(plain)) if data[i] in plain else i
            if rest != i:
                d += rest - i
                i = rest
                if d > r:
                    r = d
                if i == n:
                    break
        m = moves[kind][data[i]]
        i += 1
        if m >= 0:
            kind = m >> 1
            d += m & 1
            if d + e[kind] > r:
                r = d + e[kind]
        elif m == -1:
            return None
        else:
            return -2 - m, d, r, data[i:]
    return kind, d, r

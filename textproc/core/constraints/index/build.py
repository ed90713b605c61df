"""Byte DFA x vocabulary -> :class:`TokenIndex` (the index builder).

Owns the build loop: the states in reachability order from the start (each state's tokens
from :class:`~textproc.core.constraints.index.states.StateTokens`), the packed masks, the
renumbered exceptions and the shortest completions. Every index state allows something, or the
compile fails ("this vocabulary cannot express ...") instead of stalling a request later.
Every loop checks the compile's :class:`Budget` (deadline, states, index bytes so far, the
exception entries counted too).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from textproc.core.constraints.automaton.dfa import ByteDFA
from textproc.core.constraints.automaton.lazy import LazyDFA
from textproc.core.constraints.budget import Budget
from textproc.core.constraints.index.states import State, StateTokens
from textproc.core.constraints.index.table import BY_CHARS_WIDTH, TokenIndex
from textproc.core.constraints.index.vocab import TokenVocabulary
from textproc.errors import InvalidInput

__all__ = ["build_index", "build_partial"]

_NONZERO = re.compile(rb"[^\x00]")


def build_index(dfa: ByteDFA | LazyDFA, vocab: TokenVocabulary, budget: Budget, *, what: str) -> TokenIndex:
    """The token index of ``dfa`` over ``vocab``; ``what`` names the constraint in errors.

    Every loop here checks ``budget`` (the deadline, the states, the index bytes so far)."""
    order, index_of, per_state, n_exceptions = _index_states(dfa, vocab, budget, what)
    if isinstance(dfa, ByteDFA) and len(order) == dfa.n_states:
        # every state of the minimal DFA is an index state (a byte-level vocabulary reaches
        # them all): numbered as the DFA numbers them, the exceptions need no renumbering (a
        # dict per state: 950 K entries and ~0.3 s for 20 tools with open objects)
        by_state: list[State | None] = [None] * len(order)
        for q, answer in zip(order, per_state):
            by_state[q] = answer
        order = list(range(len(order)))
        index_of = dict(zip(order, order))
        per_state = [answer for answer in by_state if answer is not None]
    return _assemble(dfa, vocab, budget, what, order, index_of, per_state, n_exceptions)


def build_partial(dfa: ByteDFA | LazyDFA, vocab: TokenVocabulary, budget: Budget, *, what: str,
                  seconds: float) -> TokenIndex:
    """The first states of ``dfa``'s token index (reachability order from the start): the start
    state, then more until ``seconds`` have passed or every state is built. A
    partial index (``TokenIndex.partial``) when states are left: their ids are numbered (the
    built states' transitions name them) but they have no masks, and no state has a shortest
    completion yet; ``build_index`` of the same DFA makes the whole index."""
    stop_at = time.monotonic() + seconds
    order, index_of, per_state, n_exceptions = _index_states(
        dfa, vocab, budget, what, lambda: time.monotonic() > stop_at)
    if len(per_state) == len(order):
        return _assemble(dfa, vocab, budget, what, order, index_of, per_state, n_exceptions)
    masks, mask_of = _pack_masks(per_state, [dfa.accepting[q] for q in order[: len(per_state)]],
                                 _end_bits(vocab), vocab.size, budget, 8 * n_exceptions, what)
    rows: list[list[int] | None] = [None if r is None else [index_of[t] if t >= 0 else -1 for t in r]
                                    for _, _, _, r in per_state]
    has_rows = any(row is not None for row in rows)
    n = len(per_state)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=[index_of[d] if d >= 0 else -1 for _, _, d, _ in per_state],
                      exceptions=[{t: index_of[x] for t, x in exc.items()} for _, exc, _, _ in per_state],
                      accepting=[dfa.accepting[q] for q in order[:n]], steer=[-1] * n,
                      distance=[1 << 30] * n, by_chars=rows if has_rows else None,
                      char_count=vocab.tables().char_count if has_rows else b"", n_known=len(order))


def _end_bits(vocab: TokenVocabulary) -> int:
    end_bits = 0
    for e in vocab.end_ids:
        end_bits |= 1 << e
    return end_bits


def _index_states(dfa: ByteDFA | LazyDFA, vocab: TokenVocabulary, budget: Budget, what: str,
                  stop: Callable[[], bool] = lambda: False
                  ) -> tuple[list[int], dict[int, int], list[State], int]:
    """The states' tokens in reachability order from the start, until done or ``stop()`` (asked
    after each state): (DFA states in index order, DFA state -> index state, per built state
    (allowed bitset, exceptions, default, next by characters) in DFA numbers, exception count)."""
    if dfa.start < 0:
        raise InvalidInput(f"{what} matches nothing")
    index_of = {dfa.start: 0}
    order = [dfa.start]
    per_state: list[State] = []  # (allowed bitset, exceptions, default, next by characters)
    builder = StateTokens(dfa, vocab.tables(), vocab.all_token_bytes(),
                          lambda: budget.check_time("deriving token sets over the vocabulary"))
    n_exceptions = 0
    i = 0
    while i < len(order):
        budget.check_time(f"indexing the vocabulary, state {i} of {len(order)} found so far")
        budget.check_states(len(order), "index states")
        q = order[i]
        allowed, exc, default, by_chars = builder.state(q)
        if not allowed and not dfa.accepting[q]:
            raise InvalidInput(
                f"this vocabulary cannot express {what}: after some allowed tokens no token "
                f"continues and the output is not complete (a byte sequence no token writes)"
            )
        n_exceptions += len(exc) + (BY_CHARS_WIDTH // 2 if by_chars is not None else 0)
        _check_bytes(budget, 8 * n_exceptions, what)
        # the next states in order of first appearance (deduplicated in C: ~380 exceptions
        # per state lead to a few states)
        for t in dict.fromkeys([*dict.fromkeys(exc.values()), default, *(by_chars or ())]):
            if t >= 0 and t not in index_of:
                index_of[t] = len(order)
                order.append(t)
        per_state.append((allowed, exc, default, by_chars))
        i += 1
        if stop():
            break
    return order, index_of, per_state, n_exceptions


def _assemble(dfa: ByteDFA | LazyDFA, vocab: TokenVocabulary, budget: Budget, what: str, order: list[int],
              index_of: dict[int, int], per_state: list[State], n_exceptions: int) -> TokenIndex:
    """The whole index from every state's tokens: packed masks, renumbered exceptions and
    rows, the shortest completions."""
    end_bits = _end_bits(vocab)
    accepting = [dfa.accepting[q] for q in order]
    masks, mask_of = _pack_masks(per_state, accepting, end_bits, vocab.size, budget, 8 * n_exceptions, what)
    exceptions = []
    defaults = []
    rows: list[list[int] | None] = []
    # per state (token, next state) for the tokens not in its exceptions: one token per next
    # state they reach (for the shortest completions)
    plain_edges: list[list[tuple[int, int]]] = []
    by_chars_bits = vocab.tables().by_chars
    ends = frozenset(vocab.end_ids)
    identity = order == list(range(len(order)))  # states numbered as the DFA numbers them
    for s, (allowed, exc, d, by_chars) in enumerate(per_state):
        if s % 64 == 63:
            budget.check_time("renumbering the index states")
        exceptions.append(exc if identity else dict(zip(exc, map(index_of.__getitem__, exc.values()))))
        defaults.append(index_of[d] if d >= 0 else -1)
        edges = []
        if by_chars is None:
            rows.append(None)
            plain = _lowest_outside(masks[mask_of[s]], exc, ends) if d >= 0 else -1
            if plain >= 0:
                edges.append((plain, defaults[-1]))
        else:
            rows.append([index_of[t] if t >= 0 else -1 for t in by_chars])
            for n, t in enumerate(by_chars):
                if t >= 0 and n < len(by_chars_bits):
                    token_id = _lowest_outside_bits(allowed & by_chars_bits[n], exc, ends)
                    if token_id >= 0:
                        edges.append((token_id, index_of[t]))
        plain_edges.append(edges)
    steer, distance = _shortest_completions(exceptions, plain_edges, accepting, budget)
    has_rows = any(row is not None for row in rows)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=defaults, exceptions=exceptions, accepting=accepting,
                      steer=steer, distance=distance, by_chars=rows if has_rows else None,
                      char_count=vocab.tables().char_count if has_rows else b"")


# (1 << k) - 1 for growing k: the low bits of an int are looked at first, so finding its
# lowest set bit costs about the bits below it, not the int's length (negating a 150 K-bit int
# for ``x & -x`` costs ~16 us)
_LOW_MASKS = [(1 << k) - 1 for k in (64, 512, 4096, 32768)]


def _lowest_bit(x: int) -> int:
    """The lowest set bit of ``x`` > 0."""
    for low_mask in _LOW_MASKS:
        low = x & low_mask
        if low:
            return (low & -low).bit_length() - 1
    return (x & -x).bit_length() - 1


def _lowest_outside_bits(bits: int, exc: dict[int, int], ends: frozenset[int]) -> int:
    """The lowest id set in ``bits`` that is neither a key of ``exc`` nor one of the ``ends``
    (-1: none)."""
    while bits:
        i = _lowest_bit(bits)
        if i not in exc and i not in ends:
            return i
        bits = bits >> (i + 1) << (i + 1)
    return -1


def _lowest_outside(mask: bytes, exc: dict[int, int], ends: frozenset[int]) -> int:
    """The lowest id set in the packed ``mask`` that is neither a key of ``exc`` nor one of
    the ``ends`` (-1: none); scans the set bits from the lowest, so it costs about the
    exceptions below the answer."""
    for m in _NONZERO.finditer(mask):
        base = m.start() * 8
        byte = mask[m.start()]
        for j in range(8):
            if byte >> j & 1 and base + j not in exc and base + j not in ends:
                return base + j
    return -1


def _check_bytes(budget: Budget, n: int, what: str) -> None:
    if n > budget.max_bytes:
        raise InvalidInput(f"{what} needs an index over {budget.max_bytes:,} bytes, the index "
                           f"size budget; simplify it (smaller counted repetitions such as maxLength)")


def _pack_masks(per_state: list[State], accepting: list[bool], end_bits: int,
                size: int, budget: Budget, total: int, what: str) -> tuple[list[bytes], list[int]]:
    """(distinct masks, mask number per state); ``total``: index bytes counted before."""
    width = (size + 31) // 32 * 4
    masks: list[bytes] = []
    mask_ids: dict[bytes, int] = {}
    mask_of: list[int] = []
    # states often share one allowed int (a region's kinds, the derived sets): each object
    # packed once (~30 us a 150 K-bit int), alive in ``per_state`` while its id is a key
    by_object: dict[tuple[int, bool], int] = {}
    for s, ((allowed, _, _, _), is_accepting) in enumerate(zip(per_state, accepting)):
        if s % 64 == 63:
            budget.check_time("packing the masks")
        got = by_object.get((id(allowed), is_accepting))
        if got is None:
            data = (allowed | end_bits if is_accepting else allowed).to_bytes(width, "little")
            got = mask_ids.get(data)
            if got is None:
                got = mask_ids[data] = len(masks)
                masks.append(data)
                total += width
                _check_bytes(budget, total, what)
            by_object[id(allowed), is_accepting] = got
        mask_of.append(got)
    return masks, mask_of


def _shortest_completions(exceptions: list[dict[int, int]], plain_edges: list[list[tuple[int, int]]],
                          accepting: list[bool], budget: Budget) -> tuple[list[int], list[int]]:
    """Per state, a token on a shortest way to an accepting state and that way's length
    (backward BFS over the index graph: exceptions, and ``plain_edges`` for the other tokens)."""
    n = len(accepting)
    into: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {predecessor: a token}
    for s, exc in enumerate(exceptions):
        if s % 64 == 63:
            budget.check_time("finding the shortest completions")
        for token_id, t in plain_edges[s]:
            if t >= 0 and t != s:
                into[t][s] = token_id
        # per next state its first exception in order (zip in C: the last write wins)
        for t, token_id in dict(zip(reversed(exc.values()), reversed(exc.keys()))).items():
            if t != s and s not in into[t]:
                into[t][s] = token_id
    steer = [-1] * n
    distance = [0 if a else -1 for a in accepting]
    frontier = [s for s in range(n) if accepting[s]]
    while frontier:
        budget.check_time("finding the shortest completions")
        nxt = []
        for t in frontier:
            for s, token_id in into[t].items():
                if distance[s] < 0:
                    distance[s] = distance[t] + 1
                    steer[s] = token_id
                    nxt.append(s)
        frontier = nxt
    return steer, [d if d >= 0 else 1 << 30 for d in distance]



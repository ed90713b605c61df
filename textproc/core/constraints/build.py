"""Byte DFA x vocabulary -> :class:`TokenIndex` (the index builder).

Owns the build loop: the states in reachability order from the start (each state's tokens
from :class:`~textproc.core.constraints.index_states.StateTokens`), the packed masks, the
renumbered exceptions and the shortest completions. Every index state allows something, or the
compile fails ("this vocabulary cannot express ...") instead of stalling a request later.
Every loop checks the compile's :class:`Budget` (deadline, states, index bytes so far, the
exception entries counted too).
"""

from __future__ import annotations

from textproc.core.constraints.automaton import ByteDFA
from textproc.core.constraints.budget import Budget
from textproc.core.constraints.index import TokenIndex
from textproc.core.constraints.index_states import StateTokens
from textproc.core.constraints.vocab import TokenVocabulary, bitset
from textproc.errors import InvalidInput

__all__ = ["build_index"]


def build_index(dfa: ByteDFA, vocab: TokenVocabulary, budget: Budget, *, what: str) -> TokenIndex:
    """The token index of ``dfa`` over ``vocab``; ``what`` names the constraint in errors.

    Every loop here checks ``budget`` (the deadline, the states, the index bytes so far)."""
    if dfa.start < 0:
        raise InvalidInput(f"{what} matches nothing")
    index_of = {dfa.start: 0}
    order = [dfa.start]
    per_state: list[tuple[int, dict[int, int], int]] = []  # (allowed bitset, exceptions, default)
    builder = StateTokens(dfa, vocab.tables(), vocab.all_token_bytes())
    n_exceptions = 0
    i = 0
    while i < len(order):
        budget.check_time(f"indexing the vocabulary, state {i} of {len(order)} found so far")
        budget.check_states(len(order), "index states")
        q = order[i]
        allowed, exc, default = builder.state(q)
        if not allowed and not dfa.accepting[q]:
            raise InvalidInput(
                f"this vocabulary cannot express {what}: after some allowed tokens no token "
                f"continues and the output is not complete (a byte sequence no token writes)"
            )
        n_exceptions += len(exc)
        _check_bytes(budget, 8 * n_exceptions, what)
        for t in set(exc.values()) | ({default} if default >= 0 else set()):
            if t not in index_of:
                index_of[t] = len(order)
                order.append(t)
        per_state.append((allowed, exc, default))
        i += 1
    end_bits = 0
    for e in vocab.end_ids:
        end_bits |= 1 << e
    accepting = [dfa.accepting[q] for q in order]
    masks, mask_of = _pack_masks(per_state, accepting, end_bits, vocab.size, budget, 8 * n_exceptions, what)
    exceptions = []
    defaults = []
    via_default = []  # one token per state that takes the default transition (shortest completions)
    for s, (allowed, exc, d) in enumerate(per_state):
        if s % 64 == 63:
            budget.check_time("renumbering the index states")
        exceptions.append({t: index_of[n] for t, n in exc.items()})
        defaults.append(index_of[d] if d >= 0 else -1)
        rest = allowed & ~end_bits & ~bitset(exc, vocab.size) if d >= 0 else 0
        via_default.append((rest & -rest).bit_length() - 1 if rest else -1)
    steer, distance = _shortest_completions(exceptions, defaults, via_default, accepting, budget)
    return TokenIndex(vocab_size=vocab.size, end_ids=vocab.end_ids, masks=masks, mask_of=mask_of,
                      default_next=defaults, exceptions=exceptions, accepting=accepting,
                      steer=steer, distance=distance)


def _check_bytes(budget: Budget, n: int, what: str) -> None:
    if n > budget.max_bytes:
        raise InvalidInput(f"{what} needs an index over {budget.max_bytes:,} bytes, the index "
                           f"size budget; simplify it (smaller counted repetitions such as maxLength)")


def _pack_masks(per_state: list[tuple[int, dict[int, int], int]], accepting: list[bool], end_bits: int,
                size: int, budget: Budget, total: int, what: str) -> tuple[list[bytes], list[int]]:
    """(distinct masks, mask number per state); ``total``: index bytes counted before."""
    width = (size + 31) // 32 * 4
    masks: list[bytes] = []
    mask_ids: dict[bytes, int] = {}
    mask_of: list[int] = []
    for s, ((allowed, _, _), is_accepting) in enumerate(zip(per_state, accepting)):
        if s % 64 == 63:
            budget.check_time("packing the masks")
        data = (allowed | end_bits if is_accepting else allowed).to_bytes(width, "little")
        got = mask_ids.get(data)
        if got is None:
            got = mask_ids[data] = len(masks)
            masks.append(data)
            total += width
            _check_bytes(budget, total, what)
        mask_of.append(got)
    return masks, mask_of


def _shortest_completions(exceptions: list[dict[int, int]], defaults: list[int], via_default: list[int],
                          accepting: list[bool], budget: Budget) -> tuple[list[int], list[int]]:
    """Per state, a token on a shortest way to an accepting state and that way's length
    (backward BFS over the index graph: exceptions, and defaults through ``via_default``)."""
    n = len(accepting)
    into: list[dict[int, int]] = [{} for _ in range(n)]  # state -> {predecessor: a token}
    for s, exc in enumerate(exceptions):
        if s % 64 == 63:
            budget.check_time("finding the shortest completions")
        t = defaults[s]
        if t >= 0 and t != s and via_default[s] >= 0:
            into[t][s] = via_default[s]
        for token_id, t in exc.items():
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



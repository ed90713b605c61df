"""Regex tree -> byte DFA built on demand (:func:`lazy_dfa`): a state's row is made when first read.

Owns :class:`LazyDFA`. The NFA is built whole (at most linear in the regex) and pruned to the
states that can still reach the final state, so an empty subset is exactly the dead state -1
and every other DFA state can still reach an accepting state: "never reaches -1" is "is a prefix
of some match", as in the minimal DFA of :func:`~textproc.core.constraints.automaton.dfa.build_dfa`,
without exploring (or minimising) the whole automaton first. States are numbered as they are
discovered; equivalent states may stay apart (minimising is an optimisation the index does not
need: equal masks are shared anyway).

``rows`` is a plain list whose not yet expanded entries are :class:`_Pending` rows: the first
read of one runs the subset construction for that state and puts the real row in its place,
so the hot loops (``rows[q][b]``) index plain lists once a state is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, SupportsIndex, overload

from textproc.core.constraints.automaton.dfa import NFA, walk_rows
from textproc.core.constraints.budget import Budget
from textproc.core.constraints.regex.syntax import Node

__all__ = ["LazyDFA", "lazy_dfa"]


class _Pending(list[int]):
    """The row of a state not expanded yet: any read expands it (and replaces it in ``rows``)."""

    __slots__ = ("dfa", "q")

    def __init__(self, dfa: LazyDFA, q: int) -> None:
        super().__init__()
        self.dfa = dfa
        self.q = q

    @overload
    def __getitem__(self, i: SupportsIndex) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: Any) -> Any:
        return self.dfa.expand(self.q)[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.dfa.expand(self.q))

    def __len__(self) -> int:
        return 256


class LazyDFA:
    """A byte DFA whose rows are made on first read: ``rows[q][b]`` (-1: dead), ``accepting``,
    ``start`` (-1 when nothing matches), ``byte_class`` (bytes every state treats alike share
    a class: the NFA's byte classes). ``n_states`` counts the states discovered so far."""

    def __init__(self, nfa: NFA, start: int, final: int, budget: Budget) -> None:
        self.budget = budget
        self.nfa = (nfa, start, final)  # read, never changed: build_dfa takes it for the whole DFA
        self._eps = nfa.eps
        self._final = final
        live = _coaccessible(nfa, final)
        cuts = {0, 256}
        for edges in nfa.edges:
            for lo, hi, _ in edges:
                cuts.add(lo)
                cuts.add(hi + 1)
        bounds = sorted(cuts)
        class_of = [0] * 256
        for c, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            class_of[lo:hi] = [c] * (hi - lo)
        self.byte_class = bytes(class_of)
        self._class_of = class_of
        self._n_classes = len(bounds) - 1
        # NFA state -> [(first class, last class, target)], live targets only
        self._moves = [[(class_of[lo], class_of[hi], t) for lo, hi, t in edges if live[t]]
                       for edges in nfa.edges]
        self._has_edges = [bool(m) or q == final for q, m in enumerate(self._moves)]
        self._live = live
        self._closures: dict[int, frozenset[int]] = {}
        self._ids: dict[frozenset[int], int] = {}
        self._sets: list[frozenset[int]] = []
        self.rows: list[list[int]] = []
        self.accepting: list[bool] = []
        first = self._closure(start) if live[start] else frozenset()
        self.start = self._state(first) if first else -1

    @property
    def n_states(self) -> int:
        return len(self.rows)

    def walk(self, state: int, data: bytes) -> int:
        """The state after ``data`` from ``state`` (-1 once dead); a row not made yet makes
        itself when indexed (``_Pending``)."""
        return walk_rows(self.rows, state, data)

    def _closure(self, s: int) -> frozenset[int]:
        got = self._closures.get(s)
        if got is None:
            seen = {s}
            todo = [s]
            eps, live = self._eps, self._live
            while todo:
                for t in eps[todo.pop()]:
                    if t not in seen and live[t]:
                        seen.add(t)
                        todo.append(t)
            has_edges = self._has_edges
            got = self._closures[s] = frozenset(q for q in seen if has_edges[q])
        return got

    def _state(self, members: frozenset[int]) -> int:
        d = self._ids.get(members)
        if d is None:
            d = self._ids[members] = len(self._sets)
            self._sets.append(members)
            self.rows.append(_Pending(self, d))
            self.accepting.append(self._final in members)
            if d % 64 == 63:
                self.budget.check_states(d, "automaton states (DFA)")
                self.budget.check_time("determinising")
        return d

    def expand(self, q: int) -> list[int]:
        """State ``q``'s row (256 next states), made now if it was not."""
        row = self.rows[q]
        if not isinstance(row, _Pending):
            return row
        targets: dict[int, set[int]] = {}
        for s in self._sets[q]:
            for c_lo, c_hi, t in self._moves[s]:
                for c in range(c_lo, c_hi + 1):
                    got = targets.get(c)
                    if got is None:
                        targets[c] = {t}
                    else:
                        got.add(t)
        by_class = [-1] * self._n_classes
        memo: dict[frozenset[int], int] = {}
        for c, ts in targets.items():
            key = frozenset(ts)
            d = memo.get(key)
            if d is None:
                merged: set[int] = set()
                for t in ts:
                    merged |= self._closure(t)
                d = memo[key] = self._state(frozenset(merged)) if merged else -1
            by_class[c] = d
        real = [by_class[c] for c in self._class_of]
        self.rows[q] = real
        return real

    def expand_all(self) -> None:
        """Make every reachable state's row (a whole DFA, as far as ``budget`` allows)."""
        q = 0
        while q < len(self.rows):
            self.expand(q)
            q += 1


def _coaccessible(nfa: NFA, final: int) -> list[bool]:
    """Per NFA state: whether it can reach ``final``."""
    back: list[list[int]] = [[] for _ in nfa.eps]
    for q, (eps, edges) in enumerate(zip(nfa.eps, nfa.edges)):
        for t in eps:
            back[t].append(q)
        for _, _, t in edges:
            back[t].append(q)
    live = [False] * len(back)
    live[final] = True
    todo = [final]
    while todo:
        for p in back[todo.pop()]:
            if not live[p]:
                live[p] = True
                todo.append(p)
    return live


def lazy_dfa(tree: Node, budget: Budget) -> LazyDFA:
    """The byte DFA of ``tree`` (whole-output match), its rows made as they are read."""
    nfa = NFA(budget)
    start = nfa.state()
    final = nfa.build(tree, start)
    budget.check_time("building the NFA")
    return LazyDFA(nfa, start, final, budget)

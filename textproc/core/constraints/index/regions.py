"""States on short cycles answered from a template kept per vocabulary (:class:`Regions`): a
JSON string's loop, its escapes, the ``\\uXXXX`` digits and UTF-8 continuation bytes, free
text's marker prefixes.

A *region* is found around the first state of it the build meets that loops (a string's loop
before its escapes): the states within ``REGION_DEPTH`` bytes of it that lead back to it
through such states (not the whole output, which a list of calls or free text makes one
cycle), less the states many tokens leave it from (an array's next value, a number's digits:
every delimiter) until at most ``EXIT_TOKENS_MAX`` tokens hold a byte that leaves it.
Numbered breadth first in byte order, its rows (per byte: a region state by number, dead, or an
*exit*: a state outside the region) are its key, the same wherever such a region recurs: every
string property of every tool of every schema, in every compile. A state's key is (its
region's key, its number). A token walked from a state reads only the region's rows until it
takes an exit, so:

- a token without a byte that some exit is taken on never takes one: it is allowed iff it is
  allowed from the first state met with that key, and goes to the region state of the same
  number (the template, made once per key from the walk definition's answer);
- a token that takes an exit does so at the same region state, byte and position from every
  state with the key; the template groups these by (region state, byte, rest after it), and
  each state walks each group's rest from the state its exit leads to (walks kept: the same
  rests from every state of one region).

So a state's answer is its walk definition's, at the cost of dict and bitset operations in C
plus one walk per distinct rest (a string region: ~600 rests of the ~1,300 Qwen3 tokens holding
a quote). The answer's exceptions are in the template's order (ids ascending, then the exits'
groups), whichever state made the template, so an index does not depend on what was compiled
before it. Not used on a DFA built on demand (a first mask's few states), for states a
counted repetition moves (:mod:`textproc.core.constraints.index.shift`), for a state reading
one byte (its literal run answers it), or where a template would walk many rests
(``EXIT_GROUPS_MAX``) or the answer is a counted one (a row by characters).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import compress

from textproc.core.constraints.automaton.dfa import ByteDFA
from textproc.core.constraints.index.parts import State
from textproc.core.constraints.index.shift import CountedShift
from textproc.core.constraints.index.vocab import bits_of, bitset
from textproc.core.constraints.index.walks import TokenWalks

__all__ = ["Regions", "Region", "Template", "REGION_DEPTH"]

REGION_DEPTH = 8  # bytes from a loop state that its region's states lie within
REGION_MAX = 64  # states in a region (a key spends one byte per row entry)
BALL_MAX = 128  # states within REGION_DEPTH bytes looked at to find a region
EXIT_TOKENS_MAX = 4096  # tokens that may take an exit, past which a region gets no template
EXIT_GROUPS_MAX = 1024  # distinct (exit, rest) walks per state, past which ... (a digit loop)
_EXIT = 254  # a key's row entry for a byte leading out of the region
_DEAD = 255  # ... for a dead byte


class Template:
    """One region key's answer in region numbers: the tokens that stay in the region (their
    bitset, the exceptions by region number, the default's region number or -1), the tokens
    that take an exit grouped by (region number, byte, rest) and their bitset."""

    __slots__ = ("allowed", "exc_ids", "exc_to", "default", "groups", "exit_bits")

    def __init__(self, allowed: int, exc_ids: tuple[int, ...], exc_to: tuple[int, ...], default: int,
                 groups: list[tuple[int, int, bytes, tuple[int, ...]]], exit_bits: int) -> None:
        self.allowed = allowed
        self.exc_ids = exc_ids
        self.exc_to = exc_to
        self.default = default
        self.groups = groups
        self.exit_bits = exit_bits


class Region:
    """A region's states numbered breadth first in byte order from the state it was found
    around (``order``; ``code``: state -> number) and its key (per state its row's shape and its
    targets by number, ``_EXIT``, ``_DEAD``): a state's key is (the region's key, its number)."""

    __slots__ = ("order", "code", "key", "_rows")

    def __init__(self, order: list[int], code: dict[int, int], key: tuple[object, ...]) -> None:
        self.order = order
        self.code = code
        self.key = key
        self._rows: list[bytes] | None = None

    @classmethod
    def around(cls, q: int, inside: frozenset[int], regions: Regions) -> Region:
        """The region of the states ``inside``, numbered from ``q``."""
        order = [q]
        seen = {q}
        for x in order:  # breadth first, a state's successors in byte order
            for y in regions.shape(x)[1]:
                if y in inside and y not in seen:
                    seen.add(y)
                    order.append(y)
        code = {x: i for i, x in enumerate(order)}
        parts: list[object] = ["region"]
        for x in order:
            shape, targets = regions.shape(x)
            parts.append(shape)
            parts.append(tuple(code.get(y, _EXIT if y >= 0 else _DEAD) for y in targets))
        return cls(order, code, tuple(parts))

    def rows(self, dfa_rows: list[list[int]]) -> list[bytes]:
        """Per region state, its row in region numbers (``_EXIT``, ``_DEAD``)."""
        if self._rows is None:
            out = []
            for x in self.order:
                row = dfa_rows[x]
                to = {y: self.code.get(y, _EXIT if y >= 0 else _DEAD) for y in set(row)}
                out.append(bytes(map(to.__getitem__, row)))
            self._rows = out
        return self._rows


class Regions:
    """Region templates for one index build (``walks``: its token walks); the templates live
    in the vocabulary's derived sets, across compiles. A new key's template is made from the
    walk definition's answer (``exact_state``: ``StateTokens.exact_state``); a state the
    ``counted`` repetitions move is left to them."""

    def __init__(self, walks: TokenWalks, counted: CountedShift,
                 exact_state: Callable[[int], tuple[State, str]]) -> None:
        self.walks = walks
        self.counted = counted
        self.exact_state = exact_state
        self.enabled = isinstance(walks.dfa, ByteDFA)
        self.rows = walks.dfa.rows
        self._succ: dict[int, tuple[int, ...]] = {}
        self._shapes: dict[int, tuple[bytes, tuple[int, ...]]] = {}
        # state -> the region found around a state of it (one search per region; None: a
        # region without templates)
        self._regions: dict[int, Region | None] = {}

    def succ(self, x: int) -> tuple[int, ...]:
        """The distinct states ``x`` reads into."""
        got = self._succ.get(x)
        if got is None:
            got = self._succ[x] = tuple(y for y in self.shape(x)[1] if y >= 0)
        return got

    def state(self, q: int) -> State | None:
        """``q``'s answer from its region's template (made now from the walk definition's
        answer when the key is new), or None: compute it."""
        if not self.enabled or len(self.walks.live(q)) < 2:  # a literal's state: cheap anyway
            return None
        if any(r.sigma.get(q, q) != q for r in self.counted.regions):
            return None
        region = self.region(q)
        if region is None:
            return None
        position = region.code[q]
        key = (region.key, position)
        derived = self.walks.sets.derived
        template: Template | None
        if key in derived:
            template = derived[key]
            if template is None:
                return None
        else:
            answer, shape_name = self.exact_state(q)
            template = derived[key] = self._template(answer, region, position)
            if template is None:
                self.counted.keep(q, answer, shape_name)
                return answer
        return self._answer(template, region.order)

    def shape(self, x: int) -> tuple[bytes, tuple[int, ...]]:
        """``x``'s row as (per byte the number of its target among the distinct ones, the
        distinct targets in byte order)."""
        got = self._shapes.get(x)
        if got is None:
            row = self.rows[x]
            targets = tuple(dict.fromkeys(row))
            number = {t: i for i, t in enumerate(targets)}
            got = self._shapes[x] = (bytes(map(number.__getitem__, row)), targets)
        return got

    def region(self, q: int) -> Region | None:
        """The region ``q`` is in: found around the first state of it the build meets that
        loops (a string's loop before its escapes); None when there is none, or when many
        tokens may leave it (no state of it gets a template)."""
        if q in self._regions:
            return self._regions[q]
        if q not in self.succ(q):
            return None
        found = self._search(q)
        if found is None:
            return None
        inside = self._tight(q, found)
        region = Region.around(q, inside, self) if inside is not None else None
        self._regions.update(dict.fromkeys(inside or found, region))
        return region

    def _search(self, q: int) -> frozenset[int] | None:
        """The states within ``REGION_DEPTH`` bytes of ``q`` that lead back to it through such
        states (None: none, or too many)."""
        succ = self.succ
        ahead = {q}  # the states within REGION_DEPTH bytes of q
        frontier = [q]
        for _ in range(REGION_DEPTH):
            nxt = []
            for x in frontier:
                for y in succ(x):
                    if y not in ahead:
                        ahead.add(y)
                        nxt.append(y)
                if len(ahead) > BALL_MAX:
                    return None
            frontier = nxt
        inside = self._leading_to(q, ahead)  # ... that reach q through those states
        if inside is None:
            return None
        return frozenset(inside) if len(inside) <= REGION_MAX else None

    def _tight(self, q: int, inside: frozenset[int]) -> frozenset[int] | None:
        """``inside`` less the states many tokens may leave it from (an array's next value, a
        number's digits: every delimiter), one at a time, the most leaving first, keeping what
        still leads from ``q`` back to ``q``, until at most ``EXIT_TOKENS_MAX`` tokens hold a
        byte that leaves it (a string's: the ~1,300 Qwen3 tokens holding a quote); None when
        only ``q`` would stay and that is still too many."""
        counts = self._counts()
        contains = self.walks.tables.contains
        while True:
            leaving = {x: self._leaving(x, inside) for x in inside}
            total = 0
            for b in set().union(*leaving.values()):
                total |= contains[b]
            if total.bit_count() <= EXIT_TOKENS_MAX:
                return inside
            worst = max((x for x in inside if x != q), key=lambda x: (sum(counts[b] for b in leaving[x]), -x),
                        default=None)
            if worst is None:
                return None
            inside = self._cycle(q, inside - {worst})

    def _leaving(self, x: int, inside: frozenset[int]) -> list[int]:
        """The bytes that lead from ``x`` out of ``inside``."""
        shape, targets = self.shape(x)
        out = bytes(1 if t >= 0 and t not in inside else 0 for t in targets) + bytes(256 - len(targets))
        return list(compress(range(256), shape.translate(out)))

    def _counts(self) -> list[int]:
        """Byte -> how many tokens hold it (kept per vocabulary)."""
        derived = self.walks.sets.derived
        got: list[int] | None = derived.get(("region-counts",))
        if got is None:
            got = derived[("region-counts",)] = [bits.bit_count() for bits in self.walks.tables.contains]
        return got

    def _cycle(self, q: int, states: frozenset[int]) -> frozenset[int]:
        """The states of ``states`` on cycles through ``q`` within them (and ``q``)."""
        succ = self.succ
        ahead = {q}
        frontier = [q]
        while frontier:
            nxt = []
            for x in frontier:
                for y in succ(x):
                    if y in states and y not in ahead:
                        ahead.add(y)
                        nxt.append(y)
            frontier = nxt
        return frozenset(self._leading_to(q, ahead) or (q,))

    def _leading_to(self, q: int, ahead: set[int]) -> set[int] | None:
        """``q`` and the states of ``ahead`` that lead to it through states of ``ahead``; None
        when no state of ``ahead`` goes to ``q``."""
        succ = self.succ
        preds: dict[int, list[int]] = {}
        for x in ahead:
            for y in succ(x):
                if y in ahead:
                    preds.setdefault(y, []).append(x)
        if q not in preds:
            return None
        back = {q}
        frontier = [q]
        while frontier:
            nxt = []
            for y in frontier:
                for x in preds.get(y, ()):
                    if x not in back:
                        back.add(x)
                        nxt.append(x)
            frontier = nxt
        return back

    def _template(self, answer: State, region: Region, position: int) -> Template | None:
        """The template of the region state numbered ``position`` (its key) from that state's
        answer; None: no template, see the module docstring."""
        allowed, exc, default, by_chars = answer
        if by_chars is not None:
            return None
        walks = self.walks
        tables = walks.tables
        key_rows = region.rows(self.rows)
        code = region.code
        exit_bytes = {b for row in key_rows for b, c in enumerate(row) if c == _EXIT}
        candidates = 0
        for b in exit_bytes:
            candidates |= tables.contains[b]
        if candidates.bit_count() > EXIT_TOKENS_MAX:
            return None
        token_bytes = walks.token_bytes
        by_exit: dict[tuple[int, int, bytes], list[int]] = {}
        for n, token_id in enumerate(bits_of(candidates)):
            if n % 4096 == 4095:
                walks.sets.check()
            data = token_bytes[token_id]
            i = position
            for pos, byte in enumerate(data):
                c = key_rows[i][byte]
                if c == _DEAD:
                    break
                if c == _EXIT:
                    by_exit.setdefault((i, byte, data[pos + 1 :]), []).append(token_id)
                    break
                i = c
            if len(by_exit) > EXIT_GROUPS_MAX:
                return None
        exit_ids = [token_id for ids in by_exit.values() for token_id in ids]
        exit_bits = bitset(exit_ids, walks.size)
        inside = allowed & ~exit_bits
        # the tokens that stay: each goes to a region state (exceptions by region number); one
        # that does not (a walk leaving by a long way round) leaves the region untemplated
        leaving = set(exit_ids)
        stay = {token_id: n for token_id, n in exc.items() if token_id not in leaving}
        implicit = inside.bit_count() - len(stay)  # tokens going to the answer's default
        if not set(stay.values()) <= code.keys() or (implicit and default not in code):
            return None
        own = {token_id: code[n] for token_id, n in stay.items()}
        counts = Counter(own.values())
        if implicit:
            counts[code[default]] += implicit
        best = min(counts, key=lambda n: (-counts[n], n)) if counts else -1
        if implicit and best != code[default]:  # a tie broken by region number: name them all
            own.update(dict.fromkeys(bits_of(inside & ~bitset(own, walks.size)), code[default]))
        ids = sorted(token_id for token_id, n in own.items() if n != best)
        groups = [(i, byte, rest, tuple(ids_)) for (i, byte, rest), ids_ in sorted(by_exit.items())]
        return Template(inside, tuple(ids), tuple(own[token_id] for token_id in ids), best, groups, exit_bits)

    def _answer(self, template: Template, order: list[int]) -> State:
        """The answer of the state ``order[0]`` (its region in region numbers) from its key's
        template."""
        walks = self.walks
        rows = self.rows
        exc = dict(zip(template.exc_ids, map(order.__getitem__, template.exc_to)))
        default = order[template.default] if template.default >= 0 else -1
        walk_rest = walks.walk_rest
        dead: list[int] = []
        for i, byte, rest, ids in template.groups:
            e = rows[order[i]][byte]
            n = walk_rest(e, rest)
            if n < 0:
                dead.extend(ids)
            elif n != default:
                exc.update(dict.fromkeys(ids, n))
        allowed = template.allowed | (template.exit_bits & ~bitset(dead, walks.size))
        return allowed, exc, default, None

"""A small random sampler of strings matching a Python regex (for constraint tests).

Walks the parse tree of ``re._parser``: literals, classes (negated ones by rejection from a
pool of characters), branches, groups and repeats (unbounded repeats stop after a few
rounds). Every string it returns is checked with ``fullmatch`` by the caller.
"""

from __future__ import annotations

import random
import re
import re._constants as C
import re._parser as P
from typing import Any

__all__ = ["sample"]

_POOL = (
    [chr(c) for c in range(0x20, 0x7F)]
    + ["\x00", "\x1f", "\n", "\t", "é", "ß", "中", "😀", "\u2028", "\u0085", "\ufeff", "\U0010fffd"]
)
_CACHE: dict[str, Any] = {}  # pattern -> parse tree (kept alive, so ids below stay valid)
_ALLOWED: dict[int, list[str]] = {}  # id(negated class items) -> pool characters it allows


def sample(pattern: str, rng: random.Random, *, max_extra: int = 3) -> str:
    """One random string that the regex ``pattern`` matches in full."""
    tree = _CACHE.get(pattern)
    if tree is None:
        tree = _CACHE[pattern] = P.parse(pattern)
    out: list[str] = []
    _walk(tree, rng, out, max_extra)
    return "".join(out)


def _in_set(items: Any, ch: str) -> bool:
    code = ord(ch)
    for op, av in items:
        if op is C.LITERAL and av == code:
            return True
        if op is C.RANGE and av[0] <= code <= av[1]:
            return True
        if op is C.CATEGORY and re.fullmatch(_CATEGORY[av], ch):
            return True
    return False


_CATEGORY = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_SPACE: r"\s", C.CATEGORY_WORD: r"\w",
             C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_NOT_WORD: r"\W"}  # fmt: skip


def _walk(tree: Any, rng: random.Random, out: list[str], max_extra: int) -> None:
    for op, av in tree:
        if op is C.LITERAL:
            out.append(chr(av))
        elif op is C.NOT_LITERAL:
            out.append(rng.choice([c for c in _POOL if ord(c) != av]))
        elif op is C.ANY:
            out.append(rng.choice([c for c in _POOL if c != "\n"]))
        elif op is C.IN:
            negated = bool(av) and av[0][0] is C.NEGATE
            items = av[1:] if negated else av
            if negated:
                allowed = _ALLOWED.get(id(av))
                if allowed is None:
                    allowed = _ALLOWED[id(av)] = [c for c in _POOL if not _in_set(items, c)]
                out.append(rng.choice(allowed))
            else:
                op2, av2 = rng.choice(items)
                if op2 is C.LITERAL:
                    out.append(chr(av2))
                elif op2 is C.RANGE:
                    out.append(chr(rng.randint(av2[0], av2[1])))
                else:
                    out.append(rng.choice([c for c in _POOL if _in_set([(op2, av2)], c)]))
        elif op is C.BRANCH:
            _walk(rng.choice(av[1]), rng, out, max_extra)
        elif op is C.SUBPATTERN:
            _walk(av[3], rng, out, max_extra)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            top = lo + max_extra if hi is C.MAXREPEAT else min(hi, lo + max_extra)
            for _ in range(rng.randint(lo, top)):
                _walk(sub, rng, out, max_extra)
        elif op is C.AT:
            continue
        else:
            raise NotImplementedError(f"sampler: regex op {op}")

"""Python ``re`` syntax -> a small regex tree over code point sets (the compiler's front end).

Owns the parse of a structured-output regex: literals, ``.``, classes with ranges and
negation, ``\\d \\D \\w \\W \\s \\S`` with Python's Unicode meaning, ``\\p{..}`` / ``\\P{..}``
general categories, escapes (``\\n \\t \\xhh \\uhhhh \\Uhhhhhhhh \\N{name}`` and octal),
groups (capturing, ``(?:``, ``(?P<name>``), calls of a named group closed before (``(?&name)``,
as the ``regex`` module writes them, and its ``(?(DEFINE)...)`` of named groups that match
nothing where they stand: the call is the group's tree again, so the regex stays regular),
alternation, greedy / lazy ``* + ? {m,n}``, and
``^`` / ``$`` / ``\\A`` / ``\\Z`` at the ends (the whole output must match, so they are
no-ops there). Everything that is not a regular language or changes matching
(lookarounds, backreferences, inline flags, possessive quantifiers, ``\\b``, anchors in the
middle) is an ``InvalidInput`` naming the construct and its position.

The tree only says which strings match; greedy and lazy quantifiers are the same language.
Surrogate code points never match (output is UTF-8).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import regex

from textproc.core.constraints.budget import MAX_REGEX_CHARS, Budget, regex_too_long
from textproc.errors import InvalidInput, short

__all__ = ["Node", "CharSet", "Concat", "Alt", "Repeat", "parse_regex", "merge", "subtract", "normalise", "negate",
           "MAX_REPEAT", "MAX_CODE"]

MAX_CODE = sys.maxunicode
MAX_REPEAT = 1 << 16  # largest {m,n} count (the budget caps the automaton long before)
Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent code point ranges


@dataclass(frozen=True)
class CharSet:
    ranges: Ranges


@dataclass(frozen=True)
class Concat:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    item: Node
    lo: int
    hi: int | None  # None: unbounded


Node = CharSet | Concat | Alt | Repeat


def parse_regex(pattern: str, budget: Budget | None = None) -> Node:
    """The tree of ``pattern`` (Python ``re`` syntax, matched against the whole output).

    Bounded by ``budget`` (its regex size limit up front, its deadline while parsing); without
    one, patterns over ``MAX_REGEX_CHARS`` are refused.

    >>> parse_regex("a|b")
    Alt(items=(CharSet(ranges=((97, 97),)), CharSet(ranges=((98, 98),))))
    """
    if not isinstance(pattern, str):
        raise InvalidInput(f"regex {short(pattern)} must be a string")
    if budget is None:
        if len(pattern) > MAX_REGEX_CHARS:
            raise InvalidInput(regex_too_long(f"regex {short(pattern)} is {len(pattern):,} characters", MAX_REGEX_CHARS))
    else:
        budget.check_regex_chars(len(pattern))
    return _Parser(pattern, budget).parse()


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges with overlapping and adjacent ones merged."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def subtract(ranges: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted disjoint ``ranges`` minus sorted disjoint ``holes``."""
    out = []
    for lo, hi in ranges:
        for h_lo, h_hi in holes:
            if h_hi < lo or h_lo > hi:
                continue
            if lo < h_lo:
                out.append((lo, h_lo - 1))
            lo = max(lo, h_hi + 1)
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


def normalise(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges with the surrogates removed."""
    return tuple(subtract(merge(ranges), [(0xD800, 0xDFFF)]))


def negate(ranges: Ranges) -> Ranges:
    """The code points (surrogates excluded) not in ``ranges``."""
    return tuple(subtract([(0, MAX_CODE)], merge([*ranges, (0xD800, 0xDFFF)])))


@lru_cache(maxsize=64)
def _category(name: str) -> Ranges:
    """Code point ranges of a Python class escape ("d", "w", "s": what ``re`` matches) or of a
    Unicode general category ("L", "Lu", "Nd", ...: what ``regex``'s ``\\p{..}`` matches)."""
    pattern = re.compile(rf"\{name}+") if name in ("d", "w", "s") else regex.compile(rf"\p{{{name}}}+")
    return normalise([(m.start(), m.end() - 1) for m in pattern.finditer(_all_chars())])


@lru_cache(maxsize=1)
def _all_chars() -> str:
    # every code point at its own index; surrogates replaced by NUL (which no class here holds
    # except Cc, and normalise() drops the surrogate range anyway)
    chars = [chr(c) for c in range(MAX_CODE + 1)]
    chars[0xD800:0xE000] = ["\x00"] * 0x800
    return "".join(chars)


_CATEGORIES = {
    "L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc",
    "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp",
    "C", "Cc", "Cf", "Co", "Cn",
}  # fmt: skip
_CHAR_ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
_DOT = ((0, 9), (11, MAX_CODE))


class _Parser:
    def __init__(self, src: str, budget: Budget | None = None) -> None:
        self.src = src
        self.pos = 0
        self.budget = budget
        self.atoms = 0
        # name -> (its text, its tree) of the named groups closed so far; None: defined twice
        # with different texts (a reference to it is ambiguous)
        self.named: dict[str, tuple[str, Node] | None] = {}

    def fail(self, what: str, pos: int | None = None) -> InvalidInput:
        at = self.pos if pos is None else pos
        return InvalidInput(
            f"regex {short(self.src)}: {what} at position {at} is not supported "
            f"(regular constructs only: literals, classes, escapes, groups, |, * + ? {{m,n}})"
        )

    def parse(self) -> Node:
        src = self.src
        if src.startswith("^") or src.startswith("\\A"):
            self.pos = 1 if src.startswith("^") else 2
        end = len(src)
        for anchor in ("$", "\\Z"):
            if src.endswith(anchor) and not src.endswith("\\" + anchor) and end - len(anchor) >= self.pos:
                end -= len(anchor)
                break
        node = self.alternation(end)
        if self.pos != end:
            if src[self.pos] == ")":
                raise self.fail("an unbalanced ')'")
            raise self.fail(f"unexpected {src[self.pos]!r}")
        return node

    def alternation(self, end: int) -> Node:
        branches = [self.sequence(end)]
        while self.pos < end and self.src[self.pos] == "|":
            self.pos += 1
            branches.append(self.sequence(end))
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self, end: int) -> Node:
        items: list[Node] = []
        while self.pos < end and self.src[self.pos] not in "|)":
            start = self.pos
            atom = self.atom(end)
            if atom is None:
                continue
            items.append(self.quantified(atom, end, start))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def quantified(self, atom: Node, end: int, start: int) -> Node:
        src = self.src
        if self.pos >= end:
            return atom
        c = src[self.pos]
        if c in "*+?":
            self.pos += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{":
            counts = self.counts(end)
            if counts is None:
                return atom  # a literal '{' (Python reads it so); the next atom takes it
            lo, hi = counts
        else:
            return atom
        if self.pos < end and src[self.pos] == "?":
            self.pos += 1  # lazy: the same language
        elif self.pos < end and src[self.pos] == "+":
            raise self.fail("a possessive quantifier")
        if self.pos < end and (src[self.pos] in "*+?" or (src[self.pos] == "{" and self.counts_ahead(end))):
            raise self.fail("a quantifier after a quantifier")
        return Repeat(atom, lo, hi)

    def counts(self, end: int) -> tuple[int, int | None] | None:
        src = self.src
        close = src.find("}", self.pos)
        if close < 0 or close >= end:
            return None
        inner = src[self.pos + 1 : close]
        parts = inner.split(",")
        if len(parts) > 2 or not all(p.isdigit() or p == "" for p in parts) or parts[0] == "" and len(parts) == 1:
            return None
        if not all(p.isascii() for p in parts):
            return None
        lo = int(parts[0]) if parts[0] else 0
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if max(lo, hi or 0) > MAX_REPEAT:
            raise self.fail(f"a repetition count above {MAX_REPEAT}")
        if hi is not None and hi < lo:
            raise self.fail(f"a quantifier {{{inner}}} with min > max")
        self.pos = close + 1
        return lo, hi

    def atom(self, end: int) -> Node | None:
        self.atoms += 1
        if self.atoms % 512 == 0 and self.budget is not None:
            self.budget.check_time("parsing the regex")
        src = self.src
        c = src[self.pos]
        if c == "(":
            return self.group(end)
        if c == "[":
            return CharSet(self.char_class(end))
        if c == ".":
            self.pos += 1
            return CharSet(normalise(list(_DOT)))
        if c in "*+?":
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        if c == "{" and self.counts_ahead(end):
            raise self.fail("a quantifier '{' with nothing to repeat")
        if c in "^$":
            raise self.fail(f"the anchor {c!r} inside the pattern")
        if c == "\\":
            return CharSet(self.escape(in_class=False))
        self.pos += 1
        return CharSet(normalise([(ord(c), ord(c))]))

    def counts_ahead(self, end: int) -> bool:
        saved = self.pos
        try:
            return self.counts(end) is not None
        finally:
            self.pos = saved

    def group(self, end: int) -> Node:
        src = self.src
        start = self.pos
        name = None
        if src.startswith("(?", self.pos):
            rest = src[self.pos + 2 : self.pos + 4]
            if rest.startswith(":"):
                self.pos += 3
            elif rest.startswith("P<"):
                close = src.find(">", self.pos)
                if close < 0:
                    raise self.fail("an unterminated group name")
                name = src[self.pos + 4 : close]
                self.pos = close + 1
            elif rest.startswith("&"):
                return self.reference(end)
            elif src.startswith("(?(DEFINE)", self.pos):
                return self.definitions(end)
            else:
                kinds = {"=": "a lookahead", "!": "a negative lookahead", "<=": "a lookbehind",
                         "<!": "a negative lookbehind", "P=": "a backreference", "#": "a comment group",
                         ">": "an atomic group", "(": "a conditional group"}  # fmt: skip
                what = next((v for k, v in kinds.items() if rest.startswith(k)), "inline flags")
                raise self.fail(f"{what} '(?{rest}'", start)
        else:
            self.pos += 1
        inner = self.alternation(end)
        if self.pos >= end or src[self.pos] != ")":
            raise self.fail("an unclosed group", start)
        self.pos += 1
        if name is not None:
            text = src[start : self.pos]
            known = self.named.get(name, (text, inner))
            self.named[name] = known if known is not None and known[0] == text else None
        return inner

    def definitions(self, end: int) -> Node:
        """``(?(DEFINE)(?P<name>...)...)``: named groups that match nothing here, for
        ``(?&name)`` to use (as the ``regex`` module reads it)."""
        start = self.pos
        self.pos += len("(?(DEFINE)")
        while self.pos < end and self.src.startswith("(?P<", self.pos):
            self.group(end)
        if self.pos >= end or self.src[self.pos] != ")":
            raise self.fail("a DEFINE group holding anything but named groups", start)
        self.pos += 1
        return Concat(())

    def reference(self, end: int) -> Node:
        """``(?&name)``: the tree of the named group ``name`` closed earlier (one tree, shared:
        the automaton builder numbers equal subtrees alike)."""
        start = self.pos
        close = self.src.find(")", self.pos, end)
        if close < 0:
            raise self.fail("an unclosed group reference", start)
        name = self.src[self.pos + 3 : close]
        if name not in self.named:
            raise self.fail(f"a reference to {name!r}, no named group closed before it", start)
        known = self.named[name]
        if known is None:
            raise self.fail(f"a reference to {name!r}, two different groups of that name", start)
        self.pos = close + 1
        return known[1]

    def escape(self, *, in_class: bool) -> Ranges:
        src = self.src
        start = self.pos
        if self.pos + 1 >= len(src):
            raise self.fail("a trailing backslash")
        c = src[self.pos + 1]
        self.pos += 2
        if c in "dws":
            return _category(c)
        if c in "DWS":
            return negate(_category(c.lower()))
        if c in "pP":
            name = ""
            if src.startswith("{", self.pos):
                close = src.find("}", self.pos)
                name = src[self.pos + 1 : close] if close > 0 else ""
                self.pos = close + 1 if close > 0 else self.pos
            if name not in _CATEGORIES:
                raise self.fail(f"the Unicode class \\{c}{{{name}}} (general categories only)", start)
            ranges = _category(name)
            return ranges if c == "p" else negate(ranges)
        if c in _CHAR_ESCAPES:
            code = _CHAR_ESCAPES[c]
        elif c == "b" and in_class:
            code = 8
        elif c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits = src[self.pos : self.pos + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"a malformed \\{c} escape", start)
            self.pos += width
            code = int(digits, 16)
            if code > MAX_CODE:
                raise self.fail(f"the code point \\{c}{digits} above U+10FFFF", start)
        elif c == "N":
            close = src.find("}", self.pos)
            if not src.startswith("{", self.pos) or close < 0:
                raise self.fail("a malformed \\N{name} escape", start)
            try:
                code = ord(unicodedata.lookup(src[self.pos + 1 : close]))
            except KeyError:
                raise self.fail(f"an unknown character name {src[self.pos + 1 : close]!r}", start) from None
            self.pos = close + 1
        elif c == "0" or (c in "1234567" and in_class):
            digits = c
            while len(digits) < 3 and self.pos < len(src) and src[self.pos] in "01234567":
                digits += src[self.pos]
                self.pos += 1
            code = int(digits, 8)
        elif c.isdigit():
            raise self.fail(f"a backreference \\{c}", start)
        elif c in "bBAZ":
            raise self.fail(f"the assertion \\{c}", start)
        elif c.isascii() and c.isalpha():
            raise self.fail(f"the escape \\{c}", start)
        else:
            code = ord(c)
        return normalise([(code, code)])

    def char_class(self, end: int) -> Ranges:
        src = self.src
        start = self.pos
        self.pos += 1
        negated = src.startswith("^", self.pos)
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.pos >= end:
                raise self.fail("an unclosed '['", start)
            c = src[self.pos]
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            if c == "[" and src.startswith(("[:", "[=", "[."), self.pos):
                raise self.fail("a POSIX class or nested set")
            at = self.pos
            if c == "\\":
                got = self.escape(in_class=True)
                if len(got) != 1 or got[0][0] != got[0][1]:
                    ranges.extend(got)
                    continue
                lo = got[0][0]
            else:
                lo = ord(c)
                self.pos += 1
            if src.startswith("-", self.pos) and self.pos + 1 < end and src[self.pos + 1] != "]":
                self.pos += 1
                if src[self.pos] == "\\":
                    got = self.escape(in_class=True)
                    if len(got) != 1 or got[0][0] != got[0][1]:
                        raise self.fail("a class escape as a range end", at)
                    hi = got[0][0]
                else:
                    hi = ord(src[self.pos])
                    self.pos += 1
                if hi < lo:
                    raise self.fail("a range out of order", at)
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        result = normalise(ranges)
        return negate(result) if negated else result

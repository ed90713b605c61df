"""Regex building blocks for constraints: JSON string characters, literal text, integer
ranges, the translation of a JSON Schema ``pattern`` into a regex over serialised JSON, and
whether two ``patternProperties`` patterns may match a common key.

Split out of :mod:`textproc.core.constraints.schema.to_regex` (which owns the schema walk). Every function here
returns regex text in the common subset of Python ``re``/``regex`` syntax (no lookarounds, no
backreferences), and keeps the invariant that what it matches is exactly (or a subset of)
what it describes, written as ``json.dumps(ensure_ascii=False)`` writes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import regex as re_

from textproc.core.constraints.regex.syntax import MAX_REPEAT, merge, subtract
from textproc.errors import InvalidInput, short

__all__ = ["MAX_COUNT", "MAX_EXACT_COUNT", "CHAR", "CANON_CHAR", "lit", "group", "repeat", "upper_bound", "int_range",
           "translate_pattern", "key_except", "may_overlap", "Shared"]

# largest lower bound (minLength, minItems, a pattern's {m,}): a lower bound is kept exact (a
# looser one would let a value end early, invalid), and each repetition is automaton states
MAX_COUNT = MAX_REPEAT
# largest upper bound written as a count; a larger one (maxLength, maxItems, a pattern's {m,n})
# is written unbounded. Each position of a counted JSON string is ~14 DFA states and ~150 KB of
# index on the Qwen3 vocabulary: maxLength 256 compiles in ~2 s of CPU to 38 MB, 320 to 46 MB,
# 1,000 to 136 MB (past the service's 48 MiB index budget), 5,000 passes the state budget
MAX_EXACT_COUNT = 256
# one character inside a JSON string: unescaped, a short escape or a non-surrogate \\u escape
CHAR = (
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]'
    r"|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"
)

_META = set(".^$*+?{}[]\\|()")


def lit(text: str) -> str:
    """Regex for literal text (escapes only regex metacharacters, so it stays readable)."""
    return "".join("\\" + c if c in _META else ("\\n" if c == "\n" else c) for c in text)


def group(alternatives: Sequence[str]) -> str:
    """One regex matching any of the alternatives (no group for a single one)."""
    if len(alternatives) == 1:
        return alternatives[0]
    return "(?:" + "|".join(alternatives) + ")"


class Shared:
    """Sub-regexes written once, in a ``(?(DEFINE)(?P<name>...))`` block ahead of the regex, and
    called as ``(?&name)`` wherever they recur (the ``regex`` module's syntax, which the token
    compiler reads as the group's one tree: parsed once, its automaton built once per place it
    leads to): those longer than ``from_chars`` (None: none). Names are content hashes, so two
    blocks defining one name define it alike.

    >>> shared = Shared(3)
    >>> a = shared.call("abcd")
    >>> shared.block() + a + shared.call("xy") + a
    '(?(DEFINE)(?P<df021be6e492f0427>abcd))(?&df021be6e492f0427)xy(?&df021be6e492f0427)'
    """

    def __init__(self, from_chars: int | None) -> None:
        self.from_chars = from_chars
        self.defined: dict[str, str] = {}  # name -> regex, each after the ones it calls
        self.chars = 0  # characters the block will take

    def call(self, regex: str) -> str:
        """``regex``, or a call of its definition when it is long."""
        if self.from_chars is None or len(regex) <= self.from_chars:
            return regex
        name = "d" + hashlib.blake2b(regex.encode(), digest_size=8).hexdigest()
        if name not in self.defined:
            self.defined[name] = regex
            self.chars += len(regex) + len(name) + 6
        return f"(?&{name})"

    def block(self) -> str:
        """The ``(?(DEFINE)...)`` block the calls need ("" when there are none)."""
        if not self.defined:
            return ""
        return "(?(DEFINE)" + "".join(f"(?P<{n}>{r})" for n, r in self.defined.items()) + ")"


def upper_bound(lo: int, hi: int | None) -> int | None:
    """The upper bound of ``lo..hi`` repetitions as a regex enforces it: ``hi``, or None
    (unbounded) when it is over ``MAX_EXACT_COUNT`` and above ``lo`` (an exact count costs its
    states whether or not it is written so).

    >>> upper_bound(0, 256), upper_bound(0, 100_000), upper_bound(300, 300)
    (256, None, 300)
    """
    return None if hi is not None and hi > MAX_EXACT_COUNT and hi > lo else hi


def repeat(lo: int, hi: int | None) -> str:
    """The quantifier for lo..hi repetitions (hi None: unbounded; ``upper_bound`` applies: a
    ``hi`` over ``MAX_EXACT_COUNT`` is unbounded too); "" for exactly one."""
    hi = upper_bound(lo, hi)
    if hi is None:
        return "*" if lo == 0 else ("+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return "" if lo == 1 else f"{{{lo}}}"
    return "?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}"


def translate_pattern(pattern: str, path: str) -> str:
    """A plain regex over decoded text -> a regex over its JSON-serialised form (no quotes);
    InvalidInput naming ``path`` for anything that is not plain."""
    return _PatternTranslator(pattern, path).translate()


# -- integer ranges ------------------------------------------------------------------------


def int_range(lo: int | None, hi: int | None) -> list[str]:
    """Alternatives matching exactly the canonical integers in [lo, hi] (None: unbounded)."""
    out: list[str] = []
    if lo is None or lo < 0:  # negative part: "-" and a magnitude in [max(1, -hi), -lo]
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        out.append("-" + group(_nonneg_range(mag_lo, None if lo is None else -lo)))
    if hi is None or hi >= 0:
        out.extend(_nonneg_range(max(lo or 0, 0), hi))
    return out


def _nonneg_range(lo: int, hi: int | None) -> list[str]:
    if hi is None:
        digits = len(str(lo))
        return _nonneg_range(lo, 10**digits - 1) + [f"[1-9][0-9]{{{digits},}}"]
    out: list[str] = []
    while lo <= hi:
        top = min(hi, 10 ** len(str(lo)) - 1)  # same number of digits
        out.extend(_same_length(str(lo), str(top)))
        lo = top + 1
    return out


def _digit(a: str, b: str) -> str:
    return a if a == b else f"[{a}-{b}]"


def _same_length(a: str, b: str) -> list[str]:
    """Alternatives for the numbers a..b, strings of the same length, a <= b."""
    n = len(a)
    if n == 1:
        return [_digit(a, b)]
    if a[0] == b[0]:
        return [a[0] + group(_same_length(a[1:], b[1:]))]
    out = []
    first = int(a[0])
    if a[1:] != "0" * (n - 1):
        out.append(a[0] + group(_same_length(a[1:], "9" * (n - 1))))
        first += 1
    last = int(b[0])
    tail = None
    if b[1:] != "9" * (n - 1):
        tail = b[0] + group(_same_length("0" * (n - 1), b[1:]))
        last -= 1
    if first <= last:
        out.append(_digit(str(first), str(last)) + f"[0-9]{repeat(n - 1, n - 1)}")
    if tail is not None:
        out.append(tail)
    return out


# -- string patterns -----------------------------------------------------------------------

# whitespace for \s: in both ECMA-262 and Python's str regex (jsonschema checks with Python re)
_SPACE_BOTH = [(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]  # fmt: skip
# whitespace in either (complement is \S in both)
_SPACE_ANY = _SPACE_BOTH + [(0x1C, 0x1F), (0x85, 0x85), (0xFEFF, 0xFEFF)]
_DOT_EXCLUDED = [(10, 10), (13, 13), (0x2028, 0x2029)]
_CLASS_ESCAPES = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (95, 95), (97, 122)], "s": _SPACE_BOTH}
CHAR_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "0": 0}


class _PatternTranslator:
    """A plain regex over decoded text -> a regex over its JSON-serialised form (no quotes)."""

    def __init__(self, pattern: str, path: str) -> None:
        self.src = pattern
        self.path = path
        self.pos = 0

    def fail(self, what: str) -> InvalidInput:
        return InvalidInput(
            f"pattern {short(self.src)} at {self.path}: {what} at offset {self.pos} is not supported "
            f"(plain regexes only: literals, classes, ., \\d \\w \\s \\S, groups, |, quantifiers)"
        )

    def translate(self) -> str:
        src = self.src
        start = src.startswith("^")
        end = src.endswith("$") and not src.endswith("\\$")
        self.pos = 1 if start else 0
        stop = len(src) - 1 if end else len(src)
        body = self.alternation(stop)
        if self.pos != stop:
            raise self.fail(f"unexpected {src[self.pos]!r}")
        prefix = "" if start else f"{CHAR}*"
        suffix = "" if end else f"{CHAR}*"
        return f"{prefix}(?:{body}){suffix}"

    def alternation(self, stop: int) -> str:
        branches = [self.sequence(stop)]
        while self.pos < stop and self.src[self.pos] == "|":
            self.pos += 1
            branches.append(self.sequence(stop))
        return "|".join(branches)

    def sequence(self, stop: int) -> str:
        items = []
        src = self.src
        while self.pos < stop and src[self.pos] not in "|)":
            atom = self.atom(stop)
            quantifier = self.quantifier(stop)
            # an atom can be several regex units (an escape like \\" is two): group it
            items.append(f"(?:{atom}){quantifier}" if quantifier and len(atom) > 1 else atom + quantifier)
        return "".join(items)

    def quantifier(self, stop: int) -> str:
        src = self.src
        if self.pos >= stop:
            return ""
        c = src[self.pos]
        if c in "*+?":
            self.pos += 1
            q = c
        elif c == "{":
            close = src.find("}", self.pos)
            inner = src[self.pos + 1 : close] if close != -1 and close < stop else ""
            parts = inner.split(",")
            if not (inner.isascii() and 1 <= len(parts) <= 2 and parts[0].isdigit()
                    and all(p.isdigit() for p in parts[1:] if p)):
                raise self.fail("'{' that is not a {n}, {n,} or {n,m} quantifier")
            # (a count of more than 12 digits is past any limit: not converted, Python refuses
            # ints of over 4,300 digits)
            counts = [int(p) if len(p) <= 12 else 10**12 for p in parts if p]
            if counts[0] > MAX_COUNT or (len(counts) == 2 and counts[0] > counts[1]):
                raise self.fail(f"a quantifier {{{inner}}} with min > max or a minimum above {MAX_COUNT}")
            self.pos = close + 1
            lo = counts[0]
            hi = lo if len(parts) == 1 else (counts[1] if parts[1] else None)
            q = repeat(lo, hi)  # an upper count over MAX_EXACT_COUNT: unbounded
        else:
            return ""
        if self.pos < stop and src[self.pos] == "?":
            self.pos += 1  # lazy: same language
        elif self.pos < stop and src[self.pos] in "*+?{":
            raise self.fail("a quantifier after a quantifier")
        return q

    def atom(self, stop: int) -> str:
        src = self.src
        c = src[self.pos]
        if c == "(":
            if src.startswith("(?:", self.pos):
                self.pos += 3
            elif src.startswith("(?", self.pos):
                raise self.fail("a group with '(?' (lookaround, named group or flags)")
            else:
                self.pos += 1
            inner = self.alternation(stop)
            if self.pos >= stop or src[self.pos] != ")":
                raise self.fail("an unclosed group")
            self.pos += 1
            return f"(?:{inner})"
        if c == "[":
            ranges, negated = self.char_class(stop)
            return _emit_set(ranges, negated)
        if c == ".":
            self.pos += 1
            return _emit_set(_DOT_EXCLUDED, True)
        if c in "*+?{":
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        if c in "^$":
            raise self.fail(f"an anchor {c!r} inside the pattern")
        if c == "\\":
            ranges, negated = self.escape(in_class=False)
            return _emit_set(ranges, negated)
        self.pos += 1
        return _emit_set([(ord(c), ord(c))], False)

    def escape(self, *, in_class: bool) -> tuple[list[tuple[int, int]], bool]:
        src = self.src
        if self.pos + 1 >= len(src):
            raise self.fail("a trailing backslash")
        c = src[self.pos + 1]
        self.pos += 2
        if c in _CLASS_ESCAPES:
            return list(_CLASS_ESCAPES[c]), False
        if c == "S":
            return list(_SPACE_ANY), True
        if c in CHAR_ESCAPES:
            code = CHAR_ESCAPES[c]
            return [(code, code)], False
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = src[self.pos : self.pos + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"a malformed \\{c} escape")
            self.pos += width
            code = int(digits, 16)
            return [(code, code)], False
        if c.isalnum():
            self.pos -= 2
            raise self.fail(f"the escape \\{c}")
        return [(ord(c), ord(c))], False

    def char_class(self, stop: int) -> tuple[list[tuple[int, int]], bool]:
        src = self.src
        self.pos += 1
        negated = src.startswith("^", self.pos)
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.pos >= stop:
                raise self.fail("an unclosed '['")
            c = src[self.pos]
            if c == "]" and not first:
                self.pos += 1
                return ranges, negated
            first = False
            if c == "\\":
                got, neg = self.escape(in_class=True)
                if neg or len(got) != 1 or got[0][0] != got[0][1]:
                    if neg:
                        raise self.fail("\\S inside a character class")
                    ranges.extend(got)
                    continue
                lo = got[0][0]
            elif c == "[":
                raise self.fail("a nested '[' (set operations)")
            else:
                lo = ord(c)
                self.pos += 1
            if src.startswith("-", self.pos) and self.pos + 1 < stop and src[self.pos + 1] != "]":
                self.pos += 1
                if src[self.pos] == "\\":
                    got, neg = self.escape(in_class=True)
                    if neg or len(got) != 1 or got[0][0] != got[0][1]:
                        raise self.fail("a class escape as a range end")
                    hi = got[0][0]
                else:
                    hi = ord(src[self.pos])
                    self.pos += 1
                if hi < lo:
                    raise self.fail("a range out of order")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))


def _contains(ranges: list[tuple[int, int]], code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


_NEEDS_ESCAPE = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # what json.dumps escapes


def _class_char(code: int) -> str:
    c = chr(code)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    if not c.isprintable():
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return "\\" + c if c in "\\]^-[" else c


def _emit_set(ranges: list[tuple[int, int]], negated: bool) -> str:
    """Regex over JSON-serialised text for one decoded character in the set (or its complement),
    each character written as json.dumps(ensure_ascii=False) writes it."""
    ranges = merge(ranges)
    escapes = [c for c in [*range(0x20), 0x22, 0x5C] if _contains(ranges, c) != negated]
    alternatives = []
    if negated:
        excluded = merge(ranges + _NEEDS_ESCAPE)
        body = "".join(
            _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in excluded
        )
        alternatives.append(f"[^{body}]")
    else:
        safe = subtract(ranges, _NEEDS_ESCAPE)  # minus the characters json.dumps escapes
        if len(safe) == 1 and safe[0][0] == safe[0][1]:
            alternatives.append(lit(chr(safe[0][0])))
        elif safe:
            body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in safe)
            alternatives.append(f"[{body}]")
    alternatives.extend(lit(json.dumps(chr(c))[1:-1]) for c in escapes)
    if not alternatives:
        raise InvalidInput(f"a character set {ranges!r} that no JSON string character fits")
    return group(alternatives)


# -- object keys ---------------------------------------------------------------------------

# one character inside a JSON string written as json.dumps writes it (the canonical escapes):
# a key written this way decodes to exactly one text, so "not one of these names" is exact
CANON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))'


def key_except(names: Sequence[str]) -> str:
    """Regex of a JSON string body (no quotes, canonical escapes) whose text is none of ``names``."""
    if not names:
        return f"{CANON_CHAR}*"
    trie: dict[str, Any] = {}
    for name in names:
        node = trie
        for c in name:
            node = node.setdefault(c, {})
        node[""] = {}
    return _trie_complement(trie)


def _trie_complement(node: dict[str, Any]) -> str:
    alternatives = []
    children = [c for c in node if c]
    for c in children:
        alternatives.append(lit(json.dumps(c, ensure_ascii=False)[1:-1]) + _trie_complement(node[c]))
    if any(c in '"\\' or ord(c) < 0x20 for c in children):
        other = _emit_set([(ord(c), ord(c)) for c in children], True)
    elif children:
        plain = "".join(_class_char(ord(c)) for c in sorted(children))
        other = rf'(?:[^"\\\x00-\x1f{plain}]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))'
    else:
        other = CANON_CHAR
    alternatives.append(f"{other}{CANON_CHAR}*")
    body = group(alternatives)
    if "" in node:  # the text so far is a name: at least one more character
        return body if len(alternatives) > 1 or body.startswith("(?:") else f"(?:{body})"
    return f"(?:{body})?"


def may_overlap(a: str, b: str) -> bool:
    """False when two patterns provably match no common key: both anchored at the start, and
    their literal prefixes diverge or their first characters come from disjoint sets."""
    if not (a.startswith("^") and b.startswith("^")):
        return True
    pa, pb = _literal_prefix(a[1:]), _literal_prefix(b[1:])
    if pa and pb:
        return pa.startswith(pb) or pb.startswith(pa)
    fa, fb = _first_chars(a[1:]), _first_chars(b[1:])
    return fa is None or fb is None or bool(fa & fb)


def _literal_prefix(pattern: str) -> str:
    out: list[str] = []
    for c in pattern:
        if c in "\\.[](){}*+?|^$":
            if c in "*+?{" and out:
                out.pop()  # the last literal is repeated: not fixed
            break
        out.append(c)
    return "".join(out)


def _first_chars(pattern: str) -> set[int] | None:
    """Code points a match must start with, when the pattern starts with a literal or a plain
    class (no quantifier that allows zero), else None."""
    m = re_.match(r"\[([^\]\\^][^\]\\]*)\]|([^\\.\[\](){}*+?|^$])", pattern)
    if m is None or pattern[m.end():m.end() + 1] in ("*", "?", "{"):
        return None
    if m.group(2):
        return {ord(m.group(2))}
    chars: set[int] = set()
    body = m.group(1)
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.update(range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.add(ord(body[i]))
            i += 1
    return chars

"""Regexes of free text that does not contain given markers (the complement a strict tool call
or a free reasoning block needs), built from the markers' own automaton.

``without(markers)`` matches exactly the strings in which no marker occurs: the Aho-Corasick
automaton of the markers over code points (every state is a proper prefix of a marker; reading
a marker's last character is the dead state), turned into a regex by state elimination, deepest
states first, so the regex grows linearly with the markers' length. Over tokens this is exact at
the byte level: UTF-8 is self-synchronising, so a byte string contains a marker's bytes iff its
text contains the marker, whether the marker is a special token's one id or text split over
several tokens.

``without(markers, first_excluded=...)``: the same strings, minus those whose first character
(after any whitespace) is one of the given characters (a format whose calls may start the answer
with ``{`` or ``[``).

Markers that overlap (a proper suffix of one is a prefix of one: ``abab``) are refused: free text
followed by such a marker could hold an earlier occurrence that starts in the free text.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from textproc.errors import InvalidInput, short

__all__ = ["without", "check_markers"]

SPACE = " \t\r\n"


def _char(c: str) -> str:
    code = ord(c)
    if code < 0x80:
        return c if c.isalnum() or c in " _" else f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _class(chars: set[str], negated: bool) -> str:
    inner = "".join(_char(c) for c in sorted(chars))
    if negated:
        return f"[^{inner}]"
    return inner if len(chars) == 1 and len(inner) == 1 else f"[{inner}]"


def check_markers(markers: Sequence[str]) -> None:
    """InvalidInput unless every marker is non-empty and none overlaps itself or another (a
    proper suffix of one being a prefix of one) or contains another."""
    for a in markers:
        if not a:
            raise InvalidInput("an empty marker cannot delimit free text")
        for b in markers:
            if a != b and b in a:
                raise InvalidInput(f"marker {short(a)} contains marker {short(b)}")
            for k in range(1, len(a)):
                if b.startswith(a[k:]):
                    raise InvalidInput(
                        f"markers {short(a)} and {short(b)} overlap ({short(a[k:])}): free text "
                        "before one could hold an earlier occurrence")


class _Automaton:
    """States: the proper prefixes of the markers (0 is the empty one); ``step`` -> state, or
    -1 when a marker just completed."""

    def __init__(self, markers: Sequence[str]) -> None:
        prefixes = sorted({m[:i] for m in markers for i in range(len(m))}, key=lambda p: (len(p), p))
        self.prefixes = prefixes
        self.number = {p: i for i, p in enumerate(prefixes)}
        self.markers = tuple(markers)
        self.alphabet = sorted({c for m in markers for c in m})

    def step(self, state: int, c: str) -> int:
        text = self.prefixes[state] + c
        if any(text.endswith(m) for m in self.markers):
            return -1
        for start in range(len(text) + 1):
            got = self.number.get(text[start:])
            if got is not None:
                return got
        raise AssertionError("the empty prefix is always a state")

    def edges(self, state: int) -> dict[int, str]:
        """Target state -> regex of the characters that lead there (the dead state omitted)."""
        by_target: dict[int, set[str]] = {}
        special = set()
        for c in self.alphabet:
            t = self.step(state, c)
            if t != 0:
                special.add(c)
            if t >= 0:
                by_target.setdefault(t, set()).add(c)
        out = {t: _class(cs, False) for t, cs in by_target.items() if t != 0}
        out[0] = _class(special, True)  # every character the markers do not continue
        if by_target.get(0):
            out[0] = f"(?:{out[0]}|{_class(by_target[0], False)})"
        return out


def _alt(a: str | None, b: str) -> str:
    return b if a is None else f"(?:{a}|{b})"


def _eliminate(auto: _Automaton, start: int) -> str:
    """The regex of every string read from ``start`` without completing a marker."""
    n = len(auto.prefixes)
    final = n  # a super-final state: every state accepts
    edge: dict[tuple[int, int], str] = {}
    for s in range(n):
        for t, label in auto.edges(s).items():
            edge[(s, t)] = label
        edge[(s, final)] = ""
    # eliminate every state but start, deepest (longest prefix) first
    for q in sorted((s for s in range(n) if s != start), key=lambda s: -len(auto.prefixes[s])):
        loop = edge.pop((q, q), None)
        star = f"(?:{loop})*" if loop else ""
        ins = [(s, r) for (s, t), r in edge.items() if t == q]
        outs = [(t, r) for (s, t), r in edge.items() if s == q]
        for (s, t) in [k for k in edge if q in k]:
            del edge[(s, t)]
        for s, r_in in ins:
            for t, r_out in outs:
                path = f"{r_in}{star}{r_out}"
                old = edge.get((s, t))
                edge[(s, t)] = path if old is None else _alt(old, path)
    loop = edge.get((start, start))
    tail = edge.get((start, final), "")
    return (f"(?:{loop})*" if loop else "") + (f"(?:{tail})" if tail else "")


def without(markers: Sequence[str], *, first_excluded: str = "") -> str:
    """Regex of the strings in which none of ``markers`` occurs; with ``first_excluded``, also
    not those whose first non-whitespace character is one of its characters.

    >>> import re
    >>> r = without(["<tool_call>"])
    >>> bool(re.fullmatch(r, "a <tool_cal> b")), bool(re.fullmatch(r, "a <tool_call> b"))
    (True, False)
    """
    return _without(tuple(markers), first_excluded)


@lru_cache(maxsize=256)
def _without(markers: tuple[str, ...], first_excluded: str) -> str:
    check_markers(markers)
    auto = _Automaton(markers)
    body = _eliminate(auto, 0)
    if not first_excluded:
        return body
    # whitespace, then nothing, or a first character that is neither space nor excluded
    banned = set(first_excluded) | set(SPACE)
    options = [_class(banned | set(auto.alphabet), True) + body]
    for c in auto.alphabet:
        if c in banned:
            continue
        t = auto.step(0, c)
        if t >= 0:
            options.append(_class({c}, False) + (body if t == 0 else _eliminate(auto, t)))
    return f"[{''.join(_char(c) for c in SPACE)}]*(?:{'|'.join(options)})?"

"""tokenizer.json normalizers -> ``str -> str`` functions, exactly as HF ``tokenizers`` applies them.

Supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence. Anything else
(Precompiled, BertNormalizer, StripAccents, ...) is refused with the JSON path.
Unicode normalization uses Python's ``unicodedata`` (Unicode 14 in Python 3.11), corrected
to the reference where the two disagree: every code point was normalized with ``tokenizers``
0.23 in all four forms; 73 characters with a newer compatibility decomposition (and U+11938
for NFD) are left alone by the reference, so they are kept as they are here too, and so are 98
combining marks the reference's tables do not reorder.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any, Literal

import regex

from textproc.core.tok.jsonpath import Ctx
from textproc.core.tok.uchars import LOWER_EXTRA, WHITESPACE

__all__ = ["Normalizer", "build_normalizer", "SUPPORTED_NORMALIZERS", "compile_pattern"]

Normalizer = Callable[[str], str]

SUPPORTED_NORMALIZERS = "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence"


def compile_pattern(ctx: Ctx, obj: Any, path: str) -> regex.Pattern[str]:
    """A tokenizer.json pattern ``{"String": s}`` or ``{"Regex": r}`` as a compiled regex."""
    pat = ctx.obj(obj, path)
    if "String" in pat:
        text: str = ctx.get(pat, "String", path, str)
        return regex.compile(regex.escape(text))
    if "Regex" in pat:
        source: str = ctx.get(pat, "Regex", path, str)
        try:
            return regex.compile(source)
        except regex.error as e:
            ctx.fail(f"invalid regex {source!r} ({e})", f"{path}.Regex")
    ctx.fail(f"expected {{'String': ...}} or {{'Regex': ...}}, got {pat!r}", path)


# Characters whose decomposition the reference's tables lack but Python's unicodedata has
# (found by normalizing every code point with tokenizers 0.23): the reference leaves them
# as they are, and they neither compose nor reorder with neighbours there, so the text is
# normalized around them.
_COMPAT_KEPT = (
    [0x32FF, 0xA7F2, 0xA7F3, 0xA7F4, 0xAB69, 0x1F16C]
    + [c for c in range(0x10781, 0x107BB) if c not in (0x10786, 0x107B1)]
    + list(range(0x1FBF0, 0x1FBFA))
)
# combining marks the reference's tables treat as class 0 (no reordering)
_MARKS_KEPT = [
    2045, 2200, 2201, 2202, 2203, 2204, 2205, 2206, 2207, 2250, 2251, 2252, 2253, 2254, 2255,
    2256, 2257, 2258, 2259, 2558, 3132, 3387, 3388, 3770, 5909, 6847, 6848, 6849, 6850, 6851,
    6852, 6853, 6854, 6855, 6856, 6857, 6858, 6859, 6860, 6861, 6862, 7670, 7671, 7672, 7673,
    7674, 43052, 68900, 68901, 68902, 68903, 69291, 69292, 69446, 69447, 69448, 69449, 69450,
    69451, 69452, 69453, 69454, 69455, 69456, 69506, 69507, 69508, 69509, 69744, 70459, 70750,
    71737, 71738, 71997, 71998, 72003, 72160, 72244, 72263, 72345, 73026, 73028, 73029, 73111,
    94192, 94193, 123184, 123185, 123186, 123187, 123188, 123189, 123190, 123566, 123628, 123629,
    123630, 123631,
]
_KEPT: dict[str, list[int]] = {
    "NFC": _MARKS_KEPT,
    "NFD": [0x11938] + _MARKS_KEPT,
    "NFKC": _COMPAT_KEPT + _MARKS_KEPT,
    "NFKD": _COMPAT_KEPT + [0x11938] + _MARKS_KEPT,
}


def _unicode(form: Literal["NFC", "NFD", "NFKC", "NFKD"]) -> Normalizer:
    kept = _KEPT[form]
    kept_set = frozenset(chr(c) for c in kept)
    splitter = re.compile("([" + "".join(sorted(kept_set)) + "])")
    # prefilter: a BMP class is a bitmap test in re; astral characters go to the exact set test
    maybe = re.compile("[" + "".join(chr(c) for c in kept if c < 0x10000) + "\U00010000-\U0010ffff]")

    def norm(text: str) -> str:
        if text.isascii():
            return text
        if maybe.search(text) is not None and not kept_set.isdisjoint(text):
            parts = splitter.split(text)
            return "".join(p if i % 2 else unicodedata.normalize(form, p) for i, p in enumerate(parts))
        return unicodedata.normalize(form, text)

    return norm


def _lowercase(text: str) -> str:
    # Rust lowercases char by char: no final-sigma context rule (Python's str.lower has one);
    # and its tables know case pairs Python 3.11's do not (LOWER_EXTRA)
    if text.isascii():
        return text.lower()
    text = text.translate(LOWER_EXTRA)
    if "Σ" not in text:
        return text.lower()
    return "".join([c.lower() for c in text])


def _strip(left: bool, right: bool) -> Normalizer:
    ws = "".join(WHITESPACE)

    def norm(text: str) -> str:
        if left:
            text = text.lstrip(ws)
        if right:
            text = text.rstrip(ws)
        return text

    return norm


def build_normalizer(ctx: Ctx, spec: Any, path: str, *, depth: int = 0) -> Normalizer | None:
    """The normalizer at ``path`` (None for null / no-op)."""
    if spec is None:
        return None
    ctx.nesting(depth, path)
    obj = ctx.obj(spec, path)
    kind = ctx.get(obj, "type", path, str)
    if kind == "NFC" or kind == "NFD" or kind == "NFKC" or kind == "NFKD":
        return _unicode(kind)
    if kind == "Lowercase":
        return _lowercase
    if kind == "Sequence":
        items = ctx.get(obj, "normalizers", path, list)
        parts = [build_normalizer(ctx, s, f"{path}.normalizers[{i}]", depth=depth + 1) for i, s in enumerate(items)]
        funcs = [p for p in parts if p is not None]
        if not funcs:
            return None
        if len(funcs) == 1:
            return funcs[0]

        def seq(text: str) -> str:
            for f in funcs:
                text = f(text)
            return text

        return seq
    if kind == "Replace":
        pat = ctx.get(obj, "pattern", path, dict)
        content: str = ctx.get(obj, "content", path, str)
        if "String" in pat:
            literal: str = ctx.get(pat, "String", f"{path}.pattern", str)
            if not literal:
                return None
            return lambda text: text.replace(literal, content)
        pattern = compile_pattern(ctx, pat, f"{path}.pattern")
        sub = pattern.sub
        return lambda text: sub(lambda _m: content, text)
    if kind == "Prepend":
        prefix: str = ctx.get(obj, "prepend", path, str)
        return lambda text: prefix + text if text else text
    if kind == "Strip":
        left = ctx.get(obj, "strip_left", path, bool, False)
        right = ctx.get(obj, "strip_right", path, bool, False)
        return _strip(left, right)
    ctx.unsupported("normalizer", kind, path, SUPPORTED_NORMALIZERS)

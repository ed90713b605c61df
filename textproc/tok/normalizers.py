"""tokenizer.json normalizers -> ``str -> str`` functions, exactly as HF ``tokenizers`` applies them.

Supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence. Anything else
(Precompiled, BertNormalizer, StripAccents, ...) is refused with the JSON path.
Unicode normalization uses Python's ``unicodedata`` (Unicode 14 in Python 3.11); characters
assigned later have no decompositions there (they are rare and documented in the tokenizer
module docstring).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any, Literal

import regex

from textproc.tok.jsonpath import Ctx
from textproc.tok.uchars import WHITESPACE

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


def _unicode(form: Literal["NFC", "NFD", "NFKC", "NFKD"]) -> Normalizer:
    def norm(text: str) -> str:
        if text.isascii():
            return text
        return unicodedata.normalize(form, text)

    return norm


def _lowercase(text: str) -> str:
    # Rust lowercases char by char: no final-sigma context rule (Python's str.lower has one)
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


def build_normalizer(ctx: Ctx, spec: Any, path: str) -> Normalizer | None:
    """The normalizer at ``path`` (None for null / no-op)."""
    if spec is None:
        return None
    obj = ctx.obj(spec, path)
    kind = ctx.get(obj, "type", path, str)
    if kind == "NFC" or kind == "NFD" or kind == "NFKC" or kind == "NFKD":
        return _unicode(kind)
    if kind == "Lowercase":
        return _lowercase
    if kind == "Sequence":
        items = ctx.get(obj, "normalizers", path, list)
        parts = [build_normalizer(ctx, s, f"{path}.normalizers[{i}]") for i, s in enumerate(items)]
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

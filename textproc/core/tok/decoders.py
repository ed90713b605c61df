"""tokenizer.json decoders -> ``decode_chain(tokens) -> tokens`` functions, as HF applies them.

Supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence.
HF's ``decode`` joins the chain's output with ``""`` (with ``" "`` when there is no decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex

from textproc.core.tok.bytelevel import byte_level_bytes
from textproc.core.tok.jsonpath import Ctx
from textproc.core.tok.normalizers import compile_pattern

__all__ = ["Decoder", "Chain", "build_decoder", "SUPPORTED_DECODERS", "byte_level_token_bytes"]

Chain = Callable[[list[str]], list[str]]
SUPPORTED_DECODERS = "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence"


def byte_level_token_bytes(token: str) -> bytes:
    """HF ByteLevel decoder for one token: mapped bytes, or the raw UTF-8 if any char is outside."""
    data = byte_level_bytes(token)
    return token.encode("utf-8", "surrogatepass") if data is None else data


def _byte_level(tokens: list[str]) -> list[str]:
    data = b"".join([byte_level_token_bytes(t) for t in tokens])
    return [data.decode("utf-8", "replace")]


def _metaspace(replacement: str, prepend: bool) -> Chain:
    def chain(tokens: list[str]) -> list[str]:
        out = []
        for i, tok in enumerate(tokens):
            if i == 0 and prepend:
                out.append(tok.replace(replacement, ""))
            else:
                out.append(tok.replace(replacement, " "))
        return out

    return chain


def _byte_fallback(tokens: list[str]) -> list[str]:
    out: list[str] = []
    pending = bytearray()
    count = 0

    def flush() -> None:
        nonlocal count
        try:
            out.append(pending.decode("utf-8"))
        except UnicodeDecodeError:
            out.extend(["\ufffd"] * count)
        pending.clear()
        count = 0

    for tok in tokens:
        byte = _byte_token(tok)
        if byte is not None:
            pending.append(byte)
            count += 1
            continue
        if count:
            flush()
        out.append(tok)
    if count:
        flush()
    return out


def _byte_token(tok: str) -> int | None:
    """The byte of a ``<0xNN>`` token (hex digits in either case, like u8::from_str_radix)."""
    if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
        digits = tok[3:5]
        if all(c in "0123456789abcdefABCDEF" for c in digits):
            return int(digits, 16)
    return None


def _fuse(tokens: list[str]) -> list[str]:
    return ["".join(tokens)]


def _strip(content: str, start: int, stop: int) -> Chain:
    def chain(tokens: list[str]) -> list[str]:
        out = []
        for tok in tokens:
            n = len(tok)
            a = 0
            while a < min(start, n) and tok[a] == content:
                a += 1
            b = n
            for i in range(min(stop, n)):
                if tok[n - i - 1] == content:
                    b = n - i - 1
                else:
                    break
            out.append(tok[a:b] if a <= b else "")
        return out

    return chain


def _replace(pattern: regex.Pattern[str], literal: str | None, content: str) -> Chain:
    if literal is not None:
        return lambda tokens: [t.replace(literal, content) for t in tokens]
    return lambda tokens: [pattern.sub(lambda _m: content, t) for t in tokens]


def _bpe_suffix(suffix: str) -> Chain:
    def chain(tokens: list[str]) -> list[str]:
        last = len(tokens) - 1
        return [t.replace(suffix, "" if i == last else " ") for i, t in enumerate(tokens)]

    return chain


@dataclass
class Decoder:
    """The decoder chain plus facts the tokenizer uses for fast paths and token_bytes."""

    chain: list[Chain] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    # Metaspace replacement / Replace("▁", " ") source char, when present
    space_char: str | None = None
    strip_leading: int = 0

    def decode(self, tokens: list[str]) -> str:
        if not self.chain:
            return " ".join(tokens)
        for f in self.chain:
            tokens = f(tokens)
        return "".join(tokens)

    @property
    def is_byte_level(self) -> bool:
        return self.kinds == ["ByteLevel"]


def _collect(ctx: Ctx, spec: Any, path: str, dec: Decoder, depth: int = 0) -> None:
    ctx.nesting(depth, path)
    obj = ctx.obj(spec, path)
    kind = ctx.get(obj, "type", path, str)
    if kind == "Sequence":
        for i, item in enumerate(ctx.get(obj, "decoders", path, list)):
            _collect(ctx, item, f"{path}.decoders[{i}]", dec, depth + 1)
        return
    dec.kinds.append(kind)
    if kind == "ByteLevel":
        dec.chain.append(_byte_level)
    elif kind == "Metaspace":
        replacement = ctx.char(obj, "replacement", path, "▁")
        scheme = obj.get("prepend_scheme")
        if scheme is None:
            scheme = "always" if ctx.get(obj, "add_prefix_space", path, bool, True) else "never"
        scheme = ctx.check(scheme, str, f"{path}.prepend_scheme").lower()
        if scheme not in ("always", "first", "never"):
            ctx.fail(f"unknown prepend_scheme {scheme!r}; allowed: always, first, never", f"{path}.prepend_scheme")
        dec.chain.append(_metaspace(replacement, scheme != "never"))
        dec.space_char = replacement
        if scheme != "never":
            dec.strip_leading = max(dec.strip_leading, 1)
    elif kind == "ByteFallback":
        dec.chain.append(_byte_fallback)
    elif kind == "Fuse":
        dec.chain.append(_fuse)
    elif kind == "Strip":
        content = ctx.char(obj, "content", path)
        start = ctx.get(obj, "start", path, int)
        stop = ctx.get(obj, "stop", path, int)
        if start < 0 or stop < 0:
            ctx.fail(f"expected non-negative start/stop, got {start}, {stop}", path)
        dec.chain.append(_strip(content, start, stop))
        if content == " ":
            dec.strip_leading = max(dec.strip_leading, start)
    elif kind == "Replace":
        pat = ctx.get(obj, "pattern", path, dict)
        content = ctx.get(obj, "content", path, str)
        literal = ctx.get(pat, "String", f"{path}.pattern", str) if "String" in pat else None
        pattern = compile_pattern(ctx, pat, f"{path}.pattern")
        dec.chain.append(_replace(pattern, literal, content))
        if literal is not None and len(literal) == 1 and content == " ":
            dec.space_char = literal
    elif kind == "BPEDecoder":
        dec.chain.append(_bpe_suffix(ctx.get(obj, "suffix", path, str, "</w>")))
    else:
        ctx.unsupported("decoder", kind, path, SUPPORTED_DECODERS)


def build_decoder(ctx: Ctx, spec: Any, path: str) -> Decoder:
    """The decoder at ``path`` (an empty chain for null: tokens joined with spaces)."""
    dec = Decoder()
    if spec is not None:
        _collect(ctx, spec, path, dec)
    return dec

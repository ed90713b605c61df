"""tokenizer.json pre-tokenizers -> piece-splitting steps, exactly as HF ``tokenizers`` splits.

A step maps ``(pieces, at0)`` to ``(pieces, at0)``: ``pieces`` are the non-empty strings the
model will see, ``at0`` says whether ``pieces[0]`` starts at offset 0 of the original text
(Metaspace's ``prepend_scheme: first`` needs it). Supported: Split (String/Regex pattern,
every behavior, invert), ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
WhitespaceSplit, BertPreTokenizer, Sequence. Others are refused with their JSON path.

:class:`PreTokenizer` also exposes the shape of the common byte-level chains (one regex split,
then the byte mapping) so the tokenizer can run them as a single ``findall``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex

from textproc.core.tok.bytelevel import BYTE_TO_CHAR_TABLE
from textproc.core.tok.fastsplit import VersionedPattern
from textproc.core.tok.jsonpath import Ctx
from textproc.core.tok.normalizers import compile_pattern
from textproc.core.tok.uchars import NUM_CLASS, PUNCT_CLASS, WORD_CLASS, WS_CLASS

__all__ = ["PreTokenizer", "Step", "build_pretokenizer", "BYTE_LEVEL_PATTERN", "SUPPORTED_PRETOKENIZERS"]

Step = Callable[[list[str], bool], tuple[list[str], bool]]
# spans of one string: (start, end, is_match), covering it in order
Spans = list[tuple[int, int, bool]]

SUPPORTED_PRETOKENIZERS = (
    "Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, "
    "BertPreTokenizer, Sequence"
)
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")

# GPT-2's pre-tokenizer regex, as in tokenizers' ByteLevel
BYTE_LEVEL_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)
_WHITESPACE_RE = regex.compile(f"{WORD_CLASS}+|[^{WORD_CLASS}{WS_CLASS}]+", regex.V1)
_WS_CHAR_RE = regex.compile(f"[{WS_CLASS}]")
_DIGIT_RE = regex.compile(NUM_CLASS, regex.V1)
_PUNCT_RE = regex.compile(PUNCT_CLASS, regex.V1)


def _find(pattern: regex.Pattern[str] | VersionedPattern, text: str, invert: bool) -> Spans:
    """tokenizers' Pattern::find_matches: matches and the gaps between them."""
    if not text:
        return [(0, 0, False)]
    spans: Spans = []
    prev = 0
    for m in pattern.finditer(text):
        start, end = m.span()
        if prev != start:
            spans.append((prev, start, invert))
        spans.append((start, end, not invert))
        prev = end
    if prev != len(text):
        spans.append((prev, len(text), invert))
    return spans


def _apply_behavior(spans: Spans, behavior: str) -> list[tuple[int, int]]:
    if behavior == "Isolated":
        return [(s, e) for s, e, _ in spans]
    if behavior == "Removed":
        return [(s, e) for s, e, m in spans if not m]
    out: list[list[int]] = []
    if behavior == "Contiguous":
        prev_match = False
        for s, e, m in spans:
            if m == prev_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = m
    elif behavior == "MergedWithPrevious":
        prev_match = False
        for s, e, m in spans:
            if m and not prev_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = m
    else:  # MergedWithNext
        prev_match = False
        for s, e, m in reversed(spans):
            if m and not prev_match and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            prev_match = m
        out.reverse()
    return [(s, e) for s, e in out]


def _split_step(pattern: regex.Pattern[str] | VersionedPattern, behavior: str, invert: bool) -> Step:
    def step(pieces: list[str], at0: bool) -> tuple[list[str], bool]:
        out: list[str] = []
        new_at0 = False
        for k, piece in enumerate(pieces):
            for s, e in _apply_behavior(_find(pattern, piece, invert), behavior):
                if s < e:
                    if not out:
                        new_at0 = at0 and k == 0 and s == 0
                    out.append(piece[s:e])
        return out, new_at0

    return step


def _byte_map_step(pieces: list[str], at0: bool) -> tuple[list[str], bool]:
    table = BYTE_TO_CHAR_TABLE
    return [p.encode("utf-8").decode("latin-1").translate(table) for p in pieces], at0


def _prefix_space_step(pieces: list[str], at0: bool) -> tuple[list[str], bool]:
    return [p if p.startswith(" ") else " " + p for p in pieces], at0


def _metaspace_step(replacement: str, scheme: str, split: bool) -> Step:
    pattern = regex.compile(regex.escape(replacement))

    def step(pieces: list[str], at0: bool) -> tuple[list[str], bool]:
        out: list[str] = []
        new_at0 = False
        for k, piece in enumerate(pieces):
            piece = piece.replace(" ", replacement)
            if not piece.startswith(replacement) and (
                scheme == "always" or (scheme == "first" and k == 0 and at0)
            ):
                piece = replacement + piece
            if split:
                for s, e in _apply_behavior(_find(pattern, piece, False), "MergedWithNext"):
                    if s < e:
                        if not out:
                            new_at0 = at0 and k == 0 and s == 0
                        out.append(piece[s:e])
            elif piece:
                if not out:
                    new_at0 = at0 and k == 0
                out.append(piece)
        return out, new_at0

    return step


@dataclass
class PreTokenizer:
    """A chain of steps; ``byte_level`` is True when the last step is the byte mapping.

    ``simple_pattern`` is set when the whole chain is "one Isolated regex split (after an
    optional prefix space) then the byte mapping": the tokenizer then uses ``findall``.
    """

    steps: list[Step] = field(default_factory=list)
    byte_level: bool = False
    simple_pattern: str | None = None
    prefix_space: bool = False
    # shape of the chain for the fast path: list of (kind, info)
    shape: list[tuple[str, Any]] = field(default_factory=list)

    def split(self, text: str, at0: bool) -> list[str]:
        """The pieces of one normalized segment, before any byte mapping (see ``byte_level``)."""
        pieces = [text] if text else []
        steps = self.steps[:-1] if self.byte_level else self.steps
        for step in steps:
            if not pieces:
                break
            pieces, at0 = step(pieces, at0)
        return pieces


def _collect(ctx: Ctx, spec: Any, path: str, pre: PreTokenizer, depth: int = 0) -> None:
    ctx.nesting(depth, path)
    obj = ctx.obj(spec, path)
    kind = ctx.get(obj, "type", path, str)
    steps = pre.steps
    if pre.byte_level and kind != "Sequence":
        # a step after the byte mapping sees byte-level characters: keep it explicit
        pre.byte_level = False
    if kind == "Sequence":
        items = ctx.get(obj, "pretokenizers", path, list)
        for i, item in enumerate(items):
            _collect(ctx, item, f"{path}.pretokenizers[{i}]", pre, depth + 1)
        return
    if kind == "Split":
        pat = ctx.get(obj, "pattern", path, dict)
        pattern = compile_pattern(ctx, pat, f"{path}.pattern")
        versioned = VersionedPattern(pattern)
        behavior = ctx.get(obj, "behavior", path, str)
        if behavior not in BEHAVIORS:
            ctx.fail(f"unknown behavior {behavior!r}; allowed: {', '.join(BEHAVIORS)}", f"{path}.behavior")
        invert = ctx.get(obj, "invert", path, bool, False)
        steps.append(_split_step(versioned, behavior, invert))
        pre.shape.append(("split", (pattern.pattern, behavior, invert)))
        return
    if kind == "ByteLevel":
        add_prefix_space = ctx.get(obj, "add_prefix_space", path, bool, True)
        use_regex = ctx.get(obj, "use_regex", path, bool, True)
        if add_prefix_space:
            steps.append(_prefix_space_step)
            pre.shape.append(("prefix_space", None))
        if use_regex:
            steps.append(_split_step(VersionedPattern(regex.compile(BYTE_LEVEL_PATTERN)), "Isolated", False))
            pre.shape.append(("split", (BYTE_LEVEL_PATTERN, "Isolated", False)))
        steps.append(_byte_map_step)
        pre.shape.append(("byte_map", None))
        pre.byte_level = True
        return
    if kind == "Metaspace":
        replacement = ctx.char(obj, "replacement", path, "▁")
        scheme = obj.get("prepend_scheme")
        if scheme is None:
            aps = ctx.get(obj, "add_prefix_space", path, bool, True)
            scheme = "always" if aps else "never"
        scheme = ctx.check(scheme, str, f"{path}.prepend_scheme").lower()
        if scheme not in ("always", "first", "never"):
            ctx.fail(f"unknown prepend_scheme {scheme!r}; allowed: always, first, never", f"{path}.prepend_scheme")
        split = ctx.get(obj, "split", path, bool, True)
        steps.append(_metaspace_step(replacement, scheme, split))
        pre.shape.append(("other", kind))
        return
    if kind == "Digits":
        individual = ctx.get(obj, "individual_digits", path, bool, False)
        steps.append(_split_step(_DIGIT_RE, "Isolated" if individual else "Contiguous", False))
    elif kind == "Punctuation":
        behavior = ctx.get(obj, "behavior", path, str, "Isolated")
        if behavior not in BEHAVIORS:
            ctx.fail(f"unknown behavior {behavior!r}; allowed: {', '.join(BEHAVIORS)}", f"{path}.behavior")
        steps.append(_split_step(_PUNCT_RE, behavior, False))
    elif kind == "Whitespace":
        steps.append(_split_step(_WHITESPACE_RE, "Removed", True))
    elif kind == "WhitespaceSplit":
        steps.append(_split_step(_WS_CHAR_RE, "Removed", False))
    elif kind == "BertPreTokenizer":
        steps.append(_split_step(_WS_CHAR_RE, "Removed", False))
        steps.append(_split_step(_PUNCT_RE, "Isolated", False))
    else:
        ctx.unsupported("pre_tokenizer", kind, path, SUPPORTED_PRETOKENIZERS)
    pre.shape.append(("other", kind))


def build_pretokenizer(ctx: Ctx, spec: Any, path: str) -> PreTokenizer:
    """The pre-tokenizer at ``path`` (an empty chain for null)."""
    pre = PreTokenizer()
    if spec is not None:
        _collect(ctx, spec, path, pre)
    shape = pre.shape
    if pre.byte_level and shape and shape[-1][0] == "byte_map":
        body = shape[:-1]
        prefix = False
        if body and body[0][0] == "prefix_space":
            prefix = True
            body = body[1:]
        if len(body) == 1 and body[0][0] == "split" and body[0][1][1] == "Isolated" and not body[0][1][2]:
            pre.simple_pattern = body[0][1][0]
            pre.prefix_space = prefix
    return pre

"""Cutting one long text into parts that encode independently, and joining their ids.

A worker pool can share one long prompt only where the ids of the parts, encoded apart and
concatenated, are exactly the ids of the whole. ``Tokenizer.encode`` works in three layers, and
each gives such cuts:

1. **Between added tokens** (always). The text is split at its non-normalized added tokens
   first; each stretch between them is normalized, split at normalized added tokens, and
   encoded by a function of that stretch and of whether it starts the text only (see
   ``segments.py``). The units a plan hands out hold no added token: normalized text (the
   plan normalizes and splits at normalized added tokens), or raw text when the tokenizer has
   no normalized added token and its normalizer keeps "pieces" cuts
   (:func:`normalizer_keeps_cuts`: none or Unicode forms), so the normalizing runs in parallel
   too. ``Tokenizer.encode_units`` encodes them.
2. **Inside a unit, between pre-tokenizer pieces** (``Cutter.kind == "pieces"``): the model
   runs on each piece alone, so a cut where the pre-tokenizer would start a new piece whatever
   the context is exact. Proven for the split regexes in :data:`PROVEN_PATTERNS` (GPT-2's,
   Qwen2/3's, cl100k/Llama 3's as tokenizer.json writes it, DeepSeek-V3's three) and the
   ``Digits`` split, with the cut *before a space followed by an ASCII letter* (and then an
   ASCII character or the end, so that no normalizer composes the letter). Proof, for each
   such regex R (leftmost-first alternation, no lookbehind, no anchors): (a) no match of R can
   contain that space past its first character (every alternative that takes a space takes it
   first: `` ?X``, ``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+``; a whitespace run before it is matched by
   ``\\s+(?!\\S)``, which gives the space back because the letter after it is ``\\S``, so the
   final ``\\s+`` is never tried there; ``\\s*[\\r\\n]+`` needs a newline after it); so every
   split of the whole text has a boundary there, and from a boundary R reads only what
   follows it. (b) The left part alone splits as the whole does up to the cut: R's only
   look-ahead is ``(?!\\S)``, which succeeds on that space and at the end of a string alike, so
   cutting the string there only removes search branches that consume the space, and by (a)
   every such branch fails in the whole text anyway; leftmost-first matching picks the same
   branch. Each step of a chain maps pieces one by one, so a cut that holds for every step
   holds for the chain (a non-covering split's gap pieces never contain a space). The byte
   mapping and the prefix space are per piece too (the right part starts with its space).
3. **Inside a unit of a pre-tokenizer-less BPE** (``kind == "words"``, Mistral's
   SentencePiece layout: the normalizer writes ``▁`` for spaces, the whole stretch is one BPE
   word): cut before a ``▁`` that follows another character. Checked at load: when no token of
   the vocabulary has that other-character-then-``▁`` inside it, no merge can ever join the
   two sides (a merge's result is a vocabulary token spanning the cut), and BPE without a
   crossing merge is each side's own BPE interleaved. Needs ``ignore_merges`` off and no
   subword prefix / suffix (those look at the whole word).

Anything else (Metaspace or other pre-tokenizers, unproven regexes) gets layer 1 only.
The plan also reads and fills the tokenizer's segment cache exactly as ``encode`` does.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

from textproc.core.tok.pretokenizers import BYTE_LEVEL_PATTERN, PreTokenizer
from textproc.core.tok.segments import SegmentCache

__all__ = ["Cutter", "PartPlan", "plan_parts", "normalizer_keeps_cuts", "PROVEN_PATTERNS",
           "UNICODE_FORMS", "MIN_PART_CHARS", "CUT_SEARCH_CHARS"]

# split regexes whose cut before " [A-Za-z]" is proven exact (module docstring)
PROVEN_PATTERNS = frozenset({
    BYTE_LEVEL_PATTERN,
    # Qwen2 / Qwen3 (tokenizer.json)
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # cl100k / Llama 3 as tokenizer.json writes them
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    # DeepSeek-V3's three splits
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
})
MIN_PART_CHARS = 8_192  # a part smaller than this is not worth a round trip to a peer
CUT_SEARCH_CHARS = 4_096  # how far from the ideal place a cut is looked for, each way
_WORD_MARK = "\u2581"

# a space, an ASCII letter, then an ASCII character or the end: no normalizer in
# UNICODE_FORMS changes or composes any of them, so the cut holds before or after normalizing
_PIECE_CUT = re.compile(r" (?=[A-Za-z](?:[\x00-\x7f]|\Z))")
UNICODE_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
_WORD_CUT = re.compile(f"(?<=[^{_WORD_MARK}]){_WORD_MARK}")
_WORD_SPLIT = re.compile(f"(?<=[^{_WORD_MARK}])(?={_WORD_MARK})")


class Cutter:
    """Where a unit (normalized text with no added token) may be cut: decided once per tokenizer.

    ``kind`` is "pieces", "words" or "segments" (no cut inside a unit). ``cut_near(text,
    target)`` gives an exact cut position within :data:`CUT_SEARCH_CHARS` of ``target`` (the
    nearest after it, else the nearest before), or None.

    >>> Cutter("pieces").cut_near("hello big world", 7)
    9
    """

    __slots__ = ("kind", "_pattern")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._pattern = _PIECE_CUT if kind == "pieces" else _WORD_CUT if kind == "words" else None

    @classmethod
    def for_components(cls, pre: PreTokenizer, model: Any) -> Cutter:
        """The cutter a tokenizer's pre-tokenizer and model allow (see the module docstring)."""
        if pre.shape:
            for kind, info in pre.shape:
                if kind == "split":
                    pattern, behavior, invert = info
                    if pattern not in PROVEN_PATTERNS or behavior != "Isolated" or invert:
                        return cls("segments")
                elif kind not in ("prefix_space", "byte_map") and info != "Digits":
                    return cls("segments")
            return cls("pieces")
        if _words_cut_is_exact(model):
            return cls("words")
        return cls("segments")

    def words(self) -> Callable[[str], list[str]] | None:
        """For "words": text -> its pieces at every exact cut (BPE of each alone, joined, is
        BPE of the whole, and far cheaper than one giant word); None for other kinds."""
        return _WORD_SPLIT.split if self.kind == "words" else None

    def cut_near(self, text: str, target: int) -> int | None:
        pattern = self._pattern
        if pattern is None:
            return None
        # no endpos: the look-ahead must read the real text, not an end put there
        for m in pattern.finditer(text, target):
            if m.start() > target + CUT_SEARCH_CHARS:
                break
            if m.start() > 0:
                return m.start()
        best = None
        for m in pattern.finditer(text, max(1, target - CUT_SEARCH_CHARS)):
            if m.start() >= target:
                break
            best = m.start()
        return best


def normalizer_keeps_cuts(spec: Any) -> bool:
    """True when the tokenizer.json normalizer ``spec`` (already validated) normalizes the two
    sides of a "pieces" cut to the two sides of the normalized whole: none, a Unicode form or a
    Sequence of them. (A space is a starter no character composes with; an ASCII letter before
    an ASCII character composes with nothing; decomposition is per character, and reordering
    stops at a starter.) Then units can be raw text that their worker normalizes."""
    if spec is None:
        return True
    if not isinstance(spec, dict):
        return False
    kind = spec.get("type")
    if kind == "Sequence":
        return all(normalizer_keeps_cuts(s) for s in spec.get("normalizers") or [])
    return kind in UNICODE_FORMS


def _words_cut_is_exact(model: Any) -> bool:
    """True when the model is a BPE whose vocabulary never joins a character and a later ``▁``."""
    if type(model).__name__ != "BPE":
        return False
    if model.ignore_merges or model.prefix or model.suffix:
        return False
    vocab: dict[str, int] = model.vocab
    if not any(t.startswith(_WORD_MARK) for t in vocab):
        return False
    return not any(_WORD_CUT.search(t) for t in vocab if _WORD_MARK in t)


class PartPlan:
    """One text cut into parts: ``parts[k]`` is a list of unit texts, in order.

    The worker encodes each part's units (``Tokenizer.encode_units``; part 0's first unit starts
    the text when ``at_start``), anywhere, and :meth:`assemble` joins the per-unit ids of all
    parts, in order, into the ids of the whole: equal to ``Tokenizer.encode(text,
    add_special_tokens=...)``. Assembling also fills the segment cache like ``encode`` would.
    """

    __slots__ = ("parts", "at_start", "_layout", "_fills", "_cache", "_framing")

    def __init__(self, parts: list[list[str]], at_start: bool, layout: list[list[int] | None],
                 fills: list[tuple[tuple[str, bool], int, int]], cache: SegmentCache,
                 framing: tuple[list[int], list[int]]) -> None:
        self.parts = parts
        self.at_start = at_start
        self._layout = layout  # ids known at planning (added tokens, cached segments) or None: a unit
        self._fills = fills  # (segment cache key, first layout entry, end layout entry)
        self._cache = cache
        self._framing = framing  # post-processor ids before / after

    @property
    def n_chars(self) -> int:
        """Characters of unit text to encode, over all parts."""
        return sum(len(t) for part in self.parts for t in part)

    def assemble(self, unit_ids: Sequence[Sequence[list[int]]]) -> list[int]:
        """The ids of the whole text from ``unit_ids[k][u]``, the ids of unit u of part k."""
        if len(unit_ids) != len(self.parts) or any(
                len(got) != len(part) for got, part in zip(unit_ids, self.parts)):
            raise ValueError("unit results do not match the plan's parts")
        results = iter([ids for got in unit_ids for ids in got])
        prefix, suffix = self._framing
        out: list[int] = list(prefix)
        starts: list[int] = []
        for entry in self._layout:
            starts.append(len(out))
            out += next(results) if entry is None else entry
        starts.append(len(out))
        for key, a, b in self._fills:
            self._cache.put(key, out[starts[a]:starts[b]])
        out += suffix
        return out


def plan_parts(text: str, n_parts: int, *, split_raw: Callable[[str], list[tuple[str, int, bool]]] | None,
               split_normalized: Callable[[str, bool], list[tuple[str, int, bool]]] | None,
               normalizer: Callable[[str], str] | None, cutter: Cutter, cache: SegmentCache,
               framing: tuple[list[int], list[int]],
               min_part_chars: int = MIN_PART_CHARS) -> PartPlan:
    """Cut ``text`` into at most ``n_parts`` parts of about equal work (see :class:`PartPlan`)."""
    layout: list[list[int] | None] = []
    units: list[str] = []
    fills: list[tuple[tuple[str, bool], int, int]] = []
    first_at_start = False
    segments = split_raw(text) if split_raw is not None else [(text, -1, True)] if text else []
    use_cache = split_raw is not None and len(segments) > 1  # encode() caches only then
    min_cached = cache.min_chars
    for seg, token_id, at0 in segments:
        if token_id >= 0:
            layout.append([token_id])
            continue
        fill = use_cache and len(seg) >= min_cached
        if fill:
            hit = cache.get((seg, at0))
            if hit is not None:
                layout.append(hit)
                continue
        start = len(layout)
        norm = normalizer(seg) if normalizer is not None else seg
        subs = split_normalized(norm, at0) if split_normalized is not None else [(norm, -1, at0)]
        for sub, sub_id, sub_at0 in subs:
            if sub_id >= 0:
                layout.append([sub_id])
            elif sub:
                if not units:
                    first_at_start = sub_at0
                layout.append(None)
                units.append(sub)
        if fill:
            fills.append(((seg, at0), start, len(layout)))
    total = sum(map(len, units))
    n = max(1, min(n_parts, total // max(1, min_part_chars)))
    if n == 1:
        return PartPlan([units] if units else [], first_at_start, layout, fills, cache, framing)
    offsets = _cuts(units, n, total, cutter)
    # the layout gets one slot per piece of a cut unit; fills move with it
    new_index: list[int] = []
    new_layout: list[list[int] | None] = []
    u = 0
    for entry in layout:
        new_index.append(len(new_layout))
        if entry is None:
            new_layout.extend([None] * (1 + sum(1 for cut in offsets[u] if cut > 0)))
            u += 1
        else:
            new_layout.append(entry)
    new_index.append(len(new_layout))
    fills = [(key, new_index[a], new_index[b]) for key, a, b in fills]
    parts: list[list[str]] = [[]]
    for unit, cuts in zip(units, offsets):
        prev = 0
        for cut in cuts:
            if cut > 0:
                parts[-1].append(unit[prev:cut])
                prev = cut
            if parts[-1]:
                parts.append([])
        parts[-1].append(unit[prev:])
    return PartPlan([p for p in parts if p], first_at_start, new_layout, fills, cache, framing)


def _cuts(units: list[str], n: int, total: int, cutter: Cutter) -> list[list[int]]:
    """Per unit, the sorted offsets where a part ends inside or before it: 0 = before the
    unit, else an exact cut ``cutter`` found near the ideal boundary ``k * total / n``. A
    boundary that falls in a unit with no exact cut nearby moves to the nearer end of it."""
    starts = [0]
    for unit in units:
        starts.append(starts[-1] + len(unit))
    found: set[tuple[int, int]] = set()
    for k in range(1, n):
        goal = k * total // n
        u = bisect_right(starts, goal) - 1
        if u >= len(units):
            continue
        off = goal - starts[u]
        if off:
            cut = cutter.cut_near(units[u], off)
            if cut is not None:
                found.add((u, cut))
                continue
            if off > len(units[u]) // 2:
                u, off = u + 1, 0
            else:
                off = 0
        if 0 < u < len(units):
            found.add((u, 0))
    offsets: list[list[int]] = [[] for _ in units]
    for u, off in sorted(found):
        offsets[u].append(off)
    return offsets

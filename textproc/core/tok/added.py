"""Added tokens of tokenizer.json: ids, flags, and splitting text around them like HF does.

HF matches added tokens before anything else, leftmost-longest, in two passes: tokens with
``normalized: false`` on the raw text, then tokens with ``normalized: true`` (their content
normalized) on each normalized gap. ``single_word`` discards a match touching a word
character (the regex crate's ``\\w``), ``lstrip``/``rstrip`` swallow White_Space next to it.
Ids follow HF's ``AddedVocabulary::add_tokens``: a content already in the model vocabulary
keeps that id; a new one gets ``max(added ids) + 1`` if that is past the model vocabulary,
else the model vocabulary size (the ``id`` field of the file is ignored for those).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re

from textproc.core.tok.jsonpath import MAX_ID, Ctx, id_limit_reason
from textproc.core.tok.uchars import WHITESPACE, WORD_CHAR

__all__ = ["AddedToken", "AddedVocab", "Segment"]

# a piece of input: (text, token id or -1 for ordinary text, starts at original offset 0)
Segment = tuple[str, int, bool]


@dataclass(frozen=True)
class AddedToken:
    content: str
    special: bool = False
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = True


def _matcher(contents: list[str]) -> re.Pattern[str] | None:
    if not contents:
        return None
    # longest first: at the leftmost position the longest alternative wins (leftmost-longest)
    ordered = sorted(set(contents), key=lambda c: (-len(c), c))
    return re.compile("|".join(re.escape(c) for c in ordered))


class AddedVocab:
    """The added tokens of one tokenizer and the two leftmost-longest matchers."""

    def __init__(self) -> None:
        self.content_to_id: dict[str, int] = {}
        self.id_to_token: dict[int, AddedToken] = {}
        self.special_contents: set[str] = set()
        # id -> the text HF's id_to_token and decode give (normalized content if normalized)
        self.id_to_text: dict[int, str] = {}
        self._raw_re: Any = None
        self._norm_re: Any = None
        self._raw_ids: dict[str, int] = {}
        self._norm_ids: dict[str, int] = {}

    @classmethod
    def from_json(
        cls,
        ctx: Ctx,
        items: list[Any],
        path: str,
        model_token_to_id: Callable[[str], int | None],
        model_vocab_size: int,
        normalizer: Callable[[str], str] | None,
    ) -> AddedVocab:
        self = cls()
        tokens: list[AddedToken] = []
        for i, item in enumerate(items):
            p = f"{path}[{i}]"
            obj = ctx.obj(item, p)
            tokens.append(
                AddedToken(
                    content=ctx.get(obj, "content", p, str),
                    special=ctx.get(obj, "special", p, bool, False),
                    single_word=ctx.get(obj, "single_word", p, bool, False),
                    lstrip=ctx.get(obj, "lstrip", p, bool, False),
                    rstrip=ctx.get(obj, "rstrip", p, bool, False),
                    normalized=ctx.get(obj, "normalized", p, bool, True),
                )
            )
            if "id" in obj and not 0 <= ctx.get(obj, "id", p, int) <= MAX_ID:
                ctx.fail(f"token id {obj['id']} is {id_limit_reason(obj['id'], 0)}", f"{p}.id")
        for tok in tokens:
            if tok.special and tok.content:
                self.special_contents.add(tok.content)
        for tok in tokens:
            if not tok.content or tok in self.id_to_token.values():
                continue
            new_id = self.content_to_id.get(tok.content)
            if new_id is None:
                new_id = model_token_to_id(tok.content)
            if new_id is None:
                top = max(self.content_to_id.values(), default=None)
                if top is None:
                    new_id = model_vocab_size
                elif top >= model_vocab_size or model_vocab_size == 0:
                    new_id = top + 1
                else:
                    new_id = model_vocab_size
            self.content_to_id[tok.content] = new_id
            self.id_to_token[new_id] = tok
        raw: list[str] = []
        norm: list[str] = []
        # a content added twice keeps only its last flags (HF replaces the AddedToken by id)
        for token_id, tok in self.id_to_token.items():
            if tok.normalized:
                content = normalizer(tok.content) if normalizer is not None else tok.content
                # HF's id_to_token / decode give the normalized content of such a token
                self.id_to_text[token_id] = content
                if content:
                    norm.append(content)
                    self._norm_ids.setdefault(content, token_id)
            else:
                self.id_to_text[token_id] = tok.content
                raw.append(tok.content)
                self._raw_ids.setdefault(tok.content, token_id)
        self._raw_re = _matcher(raw)
        self._norm_re = _matcher(norm)
        return self

    @property
    def raw_search(self) -> Callable[[str], object] | None:
        """``search`` of the non-normalized added tokens' matcher (None when there are none)."""
        return self._raw_re.search if self._raw_re is not None else None

    @property
    def has_raw(self) -> bool:
        return self._raw_re is not None

    @property
    def has_normalized(self) -> bool:
        return self._norm_re is not None

    def _find(self, text: str, pattern: Any, ids: dict[str, int]) -> list[tuple[int, int, int]]:
        """HF find_matches: [(start, end, id)] of accepted matches, with strip extensions."""
        out: list[tuple[int, int, int]] = []
        start_offset = 0
        id_to_token = self.id_to_token
        for m in pattern.finditer(text):
            start, stop = m.span()
            token_id = ids[m.group()]
            tok = id_to_token[token_id]
            if tok.single_word:
                # the regex crate's \w$ / ^\w: only the neighbouring characters matter
                if start and WORD_CHAR.match(text, start - 1):
                    continue
                if stop < len(text) and WORD_CHAR.match(text, stop):
                    continue
            if tok.lstrip:
                new_start = start
                while new_start > 0 and text[new_start - 1] in WHITESPACE:
                    new_start -= 1
                start = max(new_start, start_offset)
            if tok.rstrip:
                n = len(text)
                while stop < n and text[stop] in WHITESPACE:
                    stop += 1
            out.append((start, stop, token_id))
            start_offset = stop
        return out

    def split_raw(self, text: str) -> list[Segment]:
        """Split the raw text around non-normalized added tokens."""
        return self._split(text, self._raw_re, self._raw_ids, True)

    def split_normalized(self, text: str, at0: bool) -> list[Segment]:
        """Split one normalized gap around normalized added tokens."""
        return self._split(text, self._norm_re, self._norm_ids, at0)

    def _split(self, text: str, pattern: Any, ids: dict[str, int], at0: bool) -> list[Segment]:
        if pattern is None or not text:
            return [(text, -1, at0)] if text else []
        matches = self._find(text, pattern, ids)
        if not matches:
            return [(text, -1, at0)]
        out: list[Segment] = []
        prev = 0
        for start, stop, token_id in matches:
            if prev < start:
                out.append((text[prev:start], -1, at0 and prev == 0))
            # like HF: a match inside whitespace a previous rstrip took is emitted again
            # (rstrip only), or becomes an empty slice that is dropped (with lstrip)
            if start < stop:
                out.append((text[start:stop], token_id, at0 and start == 0))
            prev = stop
        if prev < len(text):
            out.append((text[prev:], -1, at0 and prev == 0))
        return out

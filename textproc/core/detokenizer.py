"""Incremental detokenization: token ids in, new text out, O(new tokens) per call.

Owns turning a stream of generated token ids into text exactly as
``tokenizer.decode(all ids)`` would, one delta at a time. It works on token
bytes (``tokenizer.token_bytes``) with an incremental UTF-8 decoder, so it never
re-decodes history and never prints a U+FFFD for a character that is merely
split across tokens. It must not import the process layer and keeps no
per-request state beyond a few pending bytes.

Invariant (tested as a property on every vocabulary): for any split of any id
sequence into steps, the concatenated ``feed()`` deltas plus ``finish()`` equal
``tokenizer.decode(all ids, skip_special_tokens=...)`` when ``at_start=True``;
with ``at_start=False`` they equal it except that the leading space(s) the
decoder strips at the very start of a text are kept (text after a prompt).

Two replacement rules, because ``tokenizers`` has two:

* byte-level and plain vocabularies: the concatenated token bytes are decoded
  with ``errors="replace"`` (one U+FFFD per maximal invalid subpart, the rule of
  Python and of Rust's ``from_utf8_lossy``); an incomplete character at the end
  is held until it completes or ``finish()`` is called;
* the ``ByteFallback`` decoder (SentencePiece ``<0xNN>`` tokens): a maximal run
  of byte tokens is decoded as a whole; if the run is not valid UTF-8 *every
  token of the run* becomes one U+FFFD. A later byte can therefore turn an
  already complete character of the run into U+FFFD, so a run is held back until
  a non-byte token ends it (or ``finish()``). Skipped special tokens do not end a
  run (the decoder never sees them).
"""

from __future__ import annotations

import codecs
import operator
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from textproc.errors import InvalidInput, short

__all__ = ["DetokenizerVocab", "IncrementalDetokenizer", "prepare", "special_byte_table"]

_REPLACEMENT_BYTES = "\ufffd".encode()
_utf8_decode = codecs.utf_8_decode  # (data, errors, final) -> (text, bytes consumed)


class DetokenizerVocab(Protocol):
    """What the detokenizer needs from a tokenizer (``textproc.Tokenizer`` has it all).

    ``vocab_bytes()`` is optional: when present it is used to build the id -> bytes
    table in one call instead of ``vocab_size`` calls of ``token_bytes``.
    """

    @property
    def vocab_size(self) -> int: ...

    @property
    def special_ids(self) -> frozenset[int]: ...

    @property
    def decode_strip_leading(self) -> int: ...

    @property
    def byte_fallback_ids(self) -> frozenset[int]: ...

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes: ...


@dataclass(frozen=True, slots=True)
class _Tables:
    """Per-tokenizer lookup tables, built once and shared by every detokenizer."""

    skip: list[bytes]  # token id -> bytes, special tokens b""
    keep: list[bytes]  # token id -> bytes, special tokens their content
    byte_fallback: frozenset[int]  # ids of "<0xNN>" tokens (ByteFallback decoder)
    special: frozenset[int]
    strip: int  # leading " " a decode from the very start strips
    # token id -> text when its bytes are complete valid UTF-8 (most tokens), else None: with no
    # pending bytes such a token's text is its own decode, whatever comes before or after
    skip_str: list[str | None]
    keep_str: list[str | None]
    # special token texts kept while skipping the others -> (table, strs, skipped ids)
    kept: dict[frozenset[str], tuple[list[bytes], list[str | None], frozenset[int]]] = field(
        default_factory=dict)

    def keeping(self, names: frozenset[str]) -> tuple[list[bytes], list[str | None], frozenset[int]]:
        """The skip tables, except that the special tokens spelled ``names`` keep their text
        (built once per set of names: what a tool-call format needs, see parsing.formats)."""
        got = self.kept.get(names)
        if got is None:
            ids = [i for i in self.special if 0 <= i < len(self.keep) and self.keep_str[i] in names]
            table, strs = list(self.skip), list(self.skip_str)
            for i in ids:
                table[i], strs[i] = self.keep[i], self.keep_str[i]
            if len(self.kept) >= 16:
                self.kept.clear()
            got = self.kept[names] = (table, strs, self.special - frozenset(ids))
        return got


# tokenizer -> tables; building them costs one vocab_bytes() call (~0.1-1 s for 150k ids)
_TABLES: weakref.WeakKeyDictionary[object, _Tables] = weakref.WeakKeyDictionary()
_STRONG: dict[int, tuple[object, _Tables]] = {}  # for tokenizers without weakref support
_STRONG_MAX = 8


def _build_tables(tokenizer: DetokenizerVocab) -> _Tables:
    n = int(tokenizer.vocab_size)
    vocab_bytes = getattr(tokenizer, "vocab_bytes", None)
    skip: list[bytes]
    if callable(vocab_bytes):
        skip = list(vocab_bytes())
    else:
        skip = []
        for token_id in range(n):
            try:
                skip.append(tokenizer.token_bytes(token_id, skip_special_tokens=True))
            except (KeyError, IndexError, ValueError):
                skip.append(b"")  # a gap in the ids: decode ignores unknown ids
    # padding ids of the model's embedding past the tokenizer's last id decode to nothing
    skip += [b""] * (int(getattr(tokenizer, "model_vocab_size", 0)) - len(skip))
    keep = list(skip)
    special = frozenset(tokenizer.special_ids)
    for token_id in special:
        if 0 <= token_id < len(keep):
            keep[token_id] = tokenizer.token_bytes(token_id, skip_special_tokens=False)
    skip_str = [_as_text(b) for b in skip]
    keep_str = list(skip_str)
    for token_id in special:
        if 0 <= token_id < len(keep):
            keep_str[token_id] = _as_text(keep[token_id])
    return _Tables(
        skip=skip,
        keep=keep,
        byte_fallback=frozenset(tokenizer.byte_fallback_ids),
        special=special,
        strip=int(tokenizer.decode_strip_leading),
        skip_str=skip_str,
        keep_str=keep_str,
    )


def _as_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _tables_for(tokenizer: DetokenizerVocab) -> _Tables:
    try:
        tables = _TABLES.get(tokenizer)
    except TypeError:  # not weak-referenceable or not hashable: keep a few by identity
        entry = _STRONG.get(id(tokenizer))
        if entry is not None and entry[0] is tokenizer:
            return entry[1]
        tables = _build_tables(tokenizer)
        if len(_STRONG) >= _STRONG_MAX:
            _STRONG.pop(next(iter(_STRONG)))
        _STRONG[id(tokenizer)] = (tokenizer, tables)
        return tables
    if tables is None:
        tables = _TABLES[tokenizer] = _build_tables(tokenizer)
    return tables


def prepare(tokenizer: DetokenizerVocab) -> None:
    """Build ``tokenizer``'s shared tables now: a process that serves should pay them before
    it is ready, not on its first request (0.29 s for Qwen3's 151,669 ids, idle box)."""
    _tables_for(tokenizer)


def special_byte_table(tokenizer: DetokenizerVocab) -> list[bytes]:
    """Token id -> bytes with special tokens spelled out (shared, built once per tokenizer):
    how a logprob alternative that is a special token is shown."""
    return _tables_for(tokenizer).keep


class IncrementalDetokenizer:
    """Turns generated token ids into text deltas; ``feed()`` returns what is ready now.

    Contract: the chunks from ``feed()`` and ``finish()`` concatenate to
    ``tokenizer.decode(all ids, skip_special_tokens=skip_special_tokens)`` for
    ``at_start=True``, whatever the split of the ids into calls. With the default
    ``at_start=False`` (output that continues a prompt) the leading space a
    SentencePiece decoder strips at the very start of a text is kept, as
    ``tokenizers.decoders.DecodeStream`` does after prefill ids.

    ``keep_specials``: special tokens (by text) that keep their text even with
    ``skip_special_tokens``: a tool-call format spelled in special tokens needs them in the
    parser's input (the parser strips them from what the client sees).

    Held back: the bytes of an incomplete UTF-8 character, and for byte-fallback
    vocabularies an open run of ``<0xNN>`` tokens (see the module docstring).

    >>> from textproc.core.tokenizer import Tokenizer
    >>> tok = Tokenizer.from_dir(".cache/models/gpt2")
    >>> d = IncrementalDetokenizer(tok)
    >>> d.feed([47249]), d.feed([222]), d.finish()  # "😀" is two GPT-2 tokens
    ('', '😀', '')
    """

    __slots__ = ("_table", "_strs", "_n", "_bf", "_skipped", "_pending", "_run", "_strip")

    def __init__(
        self,
        tokenizer: DetokenizerVocab,
        *,
        skip_special_tokens: bool = True,
        at_start: bool = False,
        keep_specials: Collection[str] = (),
    ) -> None:
        tables = _tables_for(tokenizer)
        self._table = tables.skip if skip_special_tokens else tables.keep
        self._strs = tables.skip_str if skip_special_tokens else tables.keep_str
        # skipped special tokens are invisible to the decoder: they don't end a byte run
        self._skipped = tables.special if skip_special_tokens else frozenset()
        if skip_special_tokens and keep_specials:
            self._table, self._strs, self._skipped = tables.keeping(frozenset(keep_specials))
        self._n = len(self._table)
        self._bf: frozenset[int] | None = tables.byte_fallback or None
        self._pending = b""  # bytes of an incomplete UTF-8 character
        self._run = bytearray()  # open run of byte-fallback bytes, one per token
        self._strip = tables.strip if at_start else 0

    @classmethod
    def for_prompt(
        cls,
        tokenizer: DetokenizerVocab,
        prompt_ids: Sequence[int],
        *,
        skip_special_tokens: bool = True,
    ) -> IncrementalDetokenizer:
        """A detokenizer for output that follows ``prompt_ids``.

        ``at_start`` is True when the prompt contributes no text (empty, or only
        skipped special tokens such as BOS): then ``decode(prompt + output)``
        strips the output's leading space and so do the deltas. Costs O(number of
        leading textless prompt tokens), usually one or two lookups.
        """
        tables = _tables_for(tokenizer)
        table = tables.skip if skip_special_tokens else tables.keep
        at_start = True
        for token_id in prompt_ids:
            try:
                if token_id.__class__ is bool:
                    raise TypeError("bool")
                token_id = operator.index(token_id)  # ints and numpy integers, not floats/str
            except TypeError as e:
                raise InvalidInput(
                    f"prompt token id {short(token_id)} in IncrementalDetokenizer.for_prompt is "
                    f"not an int; allowed: ints 0..{len(table) - 1}"
                ) from e
            if not (0 <= token_id < len(table)) or table[token_id]:
                at_start = False
                break
        return cls(tokenizer, skip_special_tokens=skip_special_tokens, at_start=at_start)

    @property
    def byte_table(self) -> list[bytes]:
        """Token id -> the bytes ``feed`` adds for it (b"" for a skipped special token)."""
        return self._table

    @property
    def held_bytes(self) -> int:
        """How many fed bytes are held back (an incomplete character, an open byte run)."""
        return len(self._pending) + len(self._run)

    @property
    def is_holding(self) -> bool:
        """True while bytes of an incomplete character or an open byte run are held."""
        return bool(self._run) or bool(self._pending)

    @property
    def text_table(self) -> list[str | None] | None:
        """Token id -> text (None for a token that is not complete UTF-8 by itself), usable
        while this returns it: nothing is held, no leading space to strip, no byte-fallback
        runs. Then ``feed([i])`` for an int ``0 <= i < len(table)`` with ``table[i]`` not None
        is exactly ``table[i]`` and changes no state (the pipeline's fast path)."""
        if self._pending or self._strip or self._bf is not None:
            return None
        return self._strs

    def feed(self, token_ids: Sequence[int]) -> str:
        """Feed newly generated ids; return the text they complete (maybe "")."""
        if len(token_ids) == 1 and not self._pending and not self._strip and self._bf is None:
            # nothing held: a token that is complete UTF-8 by itself decodes on its own (several
            # ids: one bytes join and one C decode is cheaper than a lookup per id)
            token_id = token_ids[0]
            if token_id.__class__ is int and token_id >= 0:
                try:
                    text = self._strs[token_id]
                except IndexError:
                    pass  # the general path below reports it
                else:
                    if text is not None:
                        return text
        table = self._table
        # negative ids would index from the end and bools as 0/1: both are refused, not decoded
        if len(token_ids) == 1 and self._bf is None:  # the common step: one id
            token_id = token_ids[0]
            try:
                data = table[token_id]
            except (IndexError, TypeError) as e:
                self._raise_bad_ids(token_ids, e)
            if token_id < 0 or token_id.__class__ is bool:
                self._raise_bad_ids(token_ids, None)
        else:
            try:
                if self._bf is not None:
                    data = self._add_byte_fallback(token_ids)
                else:
                    data = b"".join([table[i] for i in token_ids])
            except (IndexError, TypeError) as e:
                self._raise_bad_ids(token_ids, e)
            if token_ids and (min(token_ids) < 0 or bool in map(type, token_ids)):
                self._raise_bad_ids(token_ids, None)
        if self._pending:
            data = self._pending + data
        # the C decoder behind codecs' incremental one: "replace" per maximal invalid subpart,
        # an incomplete character at the end is left unconsumed (final=False)
        text, used = _utf8_decode(data, "replace", False)
        self._pending = data[used:] if used < len(data) else b""
        if self._strip and text:
            return self._strip_leading(text)
        return text


    def finish(self) -> str:
        """Return the held-back rest: a closed byte run and/or U+FFFD for an incomplete tail.

        The detokenizer can be used again afterwards; it continues as a new text
        segment (no character joins across a finish).
        """
        data = self._pending + self._close_run() if self._run else self._pending
        self._pending = b""
        text = _utf8_decode(data, "replace", True)[0]
        if self._strip and text:
            return self._strip_leading(text)
        return text


    def _add_byte_fallback(self, token_ids: Sequence[int]) -> bytes:
        table, bf, run = self._table, self._bf, self._run
        assert bf is not None
        out = bytearray()
        for i in token_ids:
            if i in bf:
                run += table[i]
            elif run and i in self._skipped:
                continue
            else:
                if run:
                    out += self._close_run()
                out += table[i]
        return bytes(out)

    def _close_run(self) -> bytes:
        # ByteFallback decoder: a valid run is its text, an invalid one is one U+FFFD per token
        run = bytes(self._run)
        self._run.clear()
        try:
            run.decode("utf-8")
        except UnicodeDecodeError:
            return _REPLACEMENT_BYTES * len(run)
        return run

    def _strip_leading(self, text: str) -> str:
        # the Strip / Metaspace decoder removes up to `strip` spaces at the very start
        i = 0
        while i < self._strip and i < len(text) and text[i] == " ":
            i += 1
        self._strip = 0 if i < len(text) else self._strip - i
        return text[i:]

    def _raise_bad_ids(self, token_ids: Sequence[int], cause: BaseException | None) -> NoReturn:
        bad = [i for i in token_ids
               if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self._n]
        raise InvalidInput(
            f"token id {short(bad[0] if bad else token_ids)} out of range in "
            f"IncrementalDetokenizer.feed({short(list(token_ids))}); "
            f"allowed: ints 0..{self._n - 1}"
        ) from cause

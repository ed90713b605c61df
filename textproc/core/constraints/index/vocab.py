"""The vocabulary for constrained decoding: the exact bytes of every token id.

Owns :class:`TokenVocabulary`. Token strings are not text: byte-level strings (GPT-2
alphabet), SentencePiece ``▁`` and byte-fallback ``<0xNN>`` are turned into the bytes the
token writes (the tokenizer's own ``token_bytes``, or the byte-level alphabet for a bare
``vocab.json``); added tokens that are not special are their text. Special tokens are never
text: their bytes are ``b""`` and a constraint never allows them, except the end ids
(:attr:`TokenVocabulary.end_ids`) where the constraint is complete, and the markers a tool-call
format is spelled in when the vocabulary is built with them as ``text_specials``. An id with no bytes (a
hole in the id range, an empty token) is never allowed.

It also keeps the per-vocabulary tables the compiler reuses (sorted distinct byte strings and
bitsets over ids), built once on first use.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_left
from itertools import compress
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from textproc.core.tok.bytelevel import byte_level_bytes
from textproc.errors import InvalidInput, TokenizerFileError, short

__all__ = ["TokenVocabulary", "SourceTokenizer", "VocabTables", "bits_of", "bitset", "subrange"]

MAX_CHARS = 48  # tokens grouped by character count up to this (longer ones are walked)


class SourceTokenizer(Protocol):
    """What :meth:`TokenVocabulary.from_tokenizer` reads (``textproc.Tokenizer`` has it)."""

    special_ids: frozenset[int]
    added_tokens: dict[str, int]
    eos_token_id: int | None

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes: ...

    def id_to_token(self, token_id: int) -> str | None: ...


@dataclass
class VocabTables:
    """Built once per vocabulary: what the index builder scans instead of the vocabulary."""

    texts: list[bytes]  # sorted distinct non-empty token bytes
    text_ids: list[tuple[int, ...]]  # ids of texts[i]
    contains: list[int]  # byte -> bitset over ids of the tokens containing it
    contains_tail: list[int]  # byte -> bitset over ids of the tokens containing it after their first byte
    first: list[int]  # byte -> bitset over ids of the tokens starting with it
    not_utf8: int  # bitset over ids of the tokens that are not whole UTF-8 text
    nonempty: int  # bitset over ids of the tokens a constraint may allow
    by_chars: list[int]  # n -> bitset of the whole-UTF-8 tokens of n characters (n < MAX_CHARS)
    char_count: bytes  # id -> its characters (whole UTF-8 tokens under MAX_CHARS), else MAX_CHARS
    longest: int  # the longest token's bytes
    # what the index builder derives from these per byte set (token sets, their rests), kept
    # across compiles: the same string states recur in every schema
    derived: dict[tuple[Any, ...], Any] = field(default_factory=dict)


class TokenVocabulary:
    """Exact bytes of every token id, which ids are special, and which ids end the output.

    >>> v = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    >>> v.tokens_continuing("abc")
    [0, 2]
    >>> v.tokens_continuing("abc", written="a")
    [1]
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        *,
        end_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        source: str = "<vocabulary>",
    ) -> None:
        self.source = source
        self.special_ids = frozenset(special_ids)
        self.end_ids = tuple(sorted(set(end_ids)))
        never = self.special_ids | set(self.end_ids)
        self._bytes = [b"" if (t is None or i in never) else bytes(t) for i, t in enumerate(token_bytes)]
        self._by_bytes: dict[bytes, list[int]] | None = None
        self._max_len = 0
        self._tables: VocabTables | None = None
        self._fingerprint: str | None = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_tokenizer(cls, tok: SourceTokenizer, *, end_ids: Iterable[int] | None = None,
                       text_specials: Iterable[str] = ()) -> TokenVocabulary:
        """The vocabulary of a :class:`textproc.Tokenizer` (or anything with ``token_bytes``).

        End ids must be the ids the engine stops the request on: the service passes the
        model's EOS ids (the tokenizer's EOS and its generation config's ``eos_token_id``,
        ``textproc.service.sampling_defaults``); the default is the tokenizer's EOS alone,
        what vLLM stops on for a model with no generation config.
        ``text_specials``: special tokens (by content) a constraint may write as their text,
        the markers a tool-call format is spelled in (``[TOOL_CALLS]``, ``<|python_tag|>``).
        """
        keep = {tok.added_tokens[c]: c for c in text_specials if c in tok.added_tokens}
        special = set(tok.special_ids) - set(keep)
        size = _size(tok)
        data = [tok.token_bytes(i) for i in range(size)]
        for token_id, content in keep.items():
            if token_id < size:
                data[token_id] = content.encode("utf-8")
        if end_ids is None:
            end_ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
        return cls(data, end_ids=end_ids, special_ids=special, source=getattr(tok, "source", "<tokenizer>"))

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TokenVocabulary:
        """A model directory: tokenizer.json (with its config), or else a bare vocab.json."""
        path = Path(model_dir)
        if (path / "tokenizer.json").is_file():
            # here: an engine reads the vocabulary's tables without the tokenizer modules
            from textproc.core.tokenizer import Tokenizer

            return cls.from_tokenizer(Tokenizer.from_dir(path))
        if (path / "vocab.json").is_file():
            return cls.from_vocab_json(path / "vocab.json")
        raise TokenizerFileError(f"no tokenizer.json or vocab.json in {path}")

    @classmethod
    def from_vocab_json(cls, path: str | Path) -> TokenVocabulary:
        """A byte-level ``vocab.json`` (token string -> id, as Qwen ships it).

        ``tokenizer_config.json`` beside it gives the added tokens (``added_tokens_decoder``:
        special ones are never text, others are their text) and ``eos_token``, the end id (as
        :meth:`from_tokenizer`'s default). The merges in
        ``merges.txt`` change how text is split, not which bytes an id writes, so they are not
        needed here.
        """
        path = Path(path)
        try:
            forward = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerFileError(f"cannot read {path}: {e}") from e
        if not isinstance(forward, dict):
            raise TokenizerFileError(f"{path} must map token strings to ids, got {short(forward)}")
        texts: dict[int, bytes] = {}
        for token, token_id in forward.items():  # forward: several strings may share an id
            if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
                raise TokenizerFileError(f"id {short(token_id)} of token {short(token)} in {path} must be an int >= 0")
            data = byte_level_bytes(token)
            texts[token_id] = token.encode("utf-8", "surrogatepass") if data is None else data
        special: set[int] = set()
        ends: set[int] = set()
        config_path = path.parent / "tokenizer_config.json"
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise TokenizerFileError(f"cannot read {config_path}: {e}") from e
            names: dict[str, int] = {}
            for key, spec in (config.get("added_tokens_decoder") or {}).items():
                if not (isinstance(spec, dict) and isinstance(spec.get("content"), str) and key.isdigit()):
                    raise TokenizerFileError(
                        f"added_tokens_decoder[{key!r}] in {config_path} must be {{'content': str, ...}}")
                token_id = int(key)
                names[spec["content"]] = token_id
                if spec.get("special"):
                    special.add(token_id)
                texts[token_id] = spec["content"].encode("utf-8")
            eos = config.get("eos_token")
            eos = eos.get("content") if isinstance(eos, dict) else eos
            eos_id = names.get(eos, forward.get(eos, -1)) if isinstance(eos, str) else -1
            ends = {eos_id if isinstance(eos_id, int) else -1}
            ends.discard(-1)
        size = max(texts, default=-1) + 1
        return cls([texts.get(i) for i in range(size)], end_ids=ends, special_ids=special, source=str(path))

    # -- queries -----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of ids (the highest id + 1); masks have ceil(size / 32) words."""
        return len(self._bytes)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes id ``token_id`` writes (b"" for special tokens, holes and unknown ids)."""
        if 0 <= token_id < len(self._bytes):
            return self._bytes[token_id]
        return b""

    def all_token_bytes(self) -> Sequence[bytes]:
        """The bytes of every id, indexed by id (the vocabulary's own list: do not modify)."""
        return self._bytes

    @property
    def fingerprint(self) -> str:
        """A hash of the bytes, specials and end ids: the vocabulary's part of a cache key."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for data in self._bytes:
                h.update(len(data).to_bytes(4, "little"))
                h.update(data)
            h.update(repr((sorted(self.special_ids), self.end_ids)).encode())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def tokens_continuing(self, target: str | bytes, written: str | bytes = "") -> list[int]:
        """Sorted ids whose bytes are a non-empty prefix of what remains of ``target`` after
        ``written`` (UTF-8), in time proportional to the remaining length (at most the longest
        token), not the vocabulary size."""
        t = target.encode("utf-8") if isinstance(target, str) else target
        w = written.encode("utf-8") if isinstance(written, str) else written
        if not t.startswith(w):
            raise InvalidInput(f"written {short(w)} is not a prefix of target {short(t)}")
        by_bytes = self._prefix_map()
        rest = t[len(w):]
        out: list[int] = []
        for n in range(1, min(len(rest), self._max_len) + 1):
            ids = by_bytes.get(rest[:n])
            if ids:
                out.extend(ids)
        return sorted(out)

    def _prefix_map(self) -> dict[bytes, list[int]]:
        # the byte trie, flattened: token bytes -> ids (a walk down the trie is one dict
        # lookup per prefix length)
        if self._by_bytes is None:
            by_bytes: dict[bytes, list[int]] = {}
            for i, data in enumerate(self._bytes):
                if data:
                    by_bytes.setdefault(data, []).append(i)
            self._by_bytes = by_bytes
            self._max_len = max(map(len, by_bytes), default=0)
        return self._by_bytes

    def tables(self) -> VocabTables:
        """The compiler's per-vocabulary tables (built on first use, about 1 s for 150k ids)."""
        if self._tables is None:
            self._tables = _build_tables(self._bytes, self._prefix_map())
        return self._tables


def _size(tok: Any) -> int:
    size = 0
    probe = getattr(tok, "_tokens", None)
    if callable(probe):
        size = len(probe())
    if not size:
        size = int(getattr(tok, "vocab_size", 0))
    return size


_NONZERO = re.compile(rb"[^\x00]")


def bits_of(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, ascending (cost ~ the set bytes)."""
    if mask.bit_count() * 16 > mask.bit_length():  # dense: one pass in C over the binary digits
        digits = bin(mask)[:1:-1].encode().translate(_DIGIT_BITS)
        return list(compress(range(len(digits)), digits))
    data = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
    out: list[int] = []
    for m in _NONZERO.finditer(data):
        pos = m.start()
        base = pos * 8
        byte = data[pos]
        out.extend([base + j for j in _BITS[byte]])
    return out


_BITS = [[j for j in range(8) if v >> j & 1] for v in range(256)]
_DIGIT_BITS = bytes.maketrans(b"01", b"\x00\x01")


def bitset(ids: Iterable[int], size: int) -> int:
    """The int with bits ``ids`` set (ids below ``size``)."""
    if isinstance(ids, Sized) and len(ids) <= 16:  # a few: shifts (~5 us) beat the buffer (~20 us)
        out = 0
        for i in ids:
            out |= 1 << i
        return out
    buf = bytearray((size + 7) // 8)
    for i in ids:
        buf[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(buf, "little")


def _build_tables(token_bytes: list[bytes], by_bytes: dict[bytes, list[int]]) -> VocabTables:
    size = len(token_bytes)
    texts = sorted(by_bytes)
    contains: list[list[int]] = [[] for _ in range(256)]
    contains_tail: list[list[int]] = [[] for _ in range(256)]
    first: list[list[int]] = [[] for _ in range(256)]
    bad_utf8: list[int] = []
    nonempty: list[int] = []
    by_chars: list[list[int]] = [[] for _ in range(MAX_CHARS)]
    char_count = bytearray([MAX_CHARS]) * size
    for i, data in enumerate(token_bytes):
        if not data:
            continue
        nonempty.append(i)
        first[data[0]].append(i)
        for b in set(data):
            contains[b].append(i)
        for b in set(data[1:]):
            contains_tail[b].append(i)
        n = len(data)
        if not data.isascii():
            try:
                n = len(data.decode("utf-8"))
            except UnicodeDecodeError:
                bad_utf8.append(i)
                continue
        if n < MAX_CHARS:
            by_chars[n].append(i)
            char_count[i] = n
    return VocabTables(
        texts=texts,
        text_ids=[tuple(by_bytes[t]) for t in texts],
        contains=[bitset(c, size) for c in contains],
        contains_tail=[bitset(c, size) for c in contains_tail],
        first=[bitset(f, size) for f in first],
        not_utf8=bitset(bad_utf8, size),
        nonempty=bitset(nonempty, size),
        by_chars=[bitset(ids, size) for ids in by_chars],
        char_count=bytes(char_count),
        longest=max(map(len, texts), default=0),
    )


def subrange(texts: list[bytes], lo: int, hi: int, prefix: bytes, b: int) -> tuple[int, int]:
    """The range of ``texts[lo:hi]`` (all starting with ``prefix``, all longer) whose next byte
    is ``b``."""
    start = bisect_left(texts, prefix + bytes((b,)), lo, hi)
    end = hi if b == 255 else bisect_left(texts, prefix + bytes((b + 1,)), start, hi)
    return start, end

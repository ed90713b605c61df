"""Tokenizer: Hugging Face tokenizer.json -> the exact ids and text of HF ``tokenizers``, in pure Python.

Owns the public :class:`Tokenizer` facade; the components live in ``textproc.tok``. It never
does I/O except reading the files it was handed, and never returns ids that differ from the
reference silently: unsupported components (and malformed files) raise
:class:`TokenizerFileError` naming the component type, its JSON path, the file and what is
supported.

Decisions kept here (each has a test):

- **Unicode version.** Pre-tokenizer regexes run on the ``regex`` module, whose tables are
  newer (Unicode 17) than the reference's (Oniguruma in ``tokenizers``, Unicode 16).
  Characters first assigned in Unicode 17 would split differently, so for regex pieces they
  are treated as unassigned (``Cn``), as the reference sees them: a pattern's ``\\p{L}``,
  ``\\p{N}`` ... become ``[\\p{L}--\\p{Age=17.0}]`` when the text contains such a character.
  Normalizers use Python's ``unicodedata`` (Unicode 14 on 3.11): characters added later have
  no decomposition there (none of them has one in NFC-stable text used by real models).
- **Lone surrogates** (``"\\ud800"``) raise :class:`InvalidInput`, as the reference does
  (it cannot take them as a Rust ``str``).
- **Unknown ids** in ``decode`` are skipped, like the reference; ``token_bytes`` gives ``b""``.
- **Speed.** Byte-level BPE pipelines of the common shape (one regex split, then the byte
  mapping) run as one ``findall`` whose pieces go through a bounded piece -> ids cache
  (a ``dict`` subclass whose ``__missing__`` runs BPE), so a hit costs one C-level lookup.
  On pure-ASCII text a known split regex runs on the standard library ``re`` with explicit
  ASCII classes, which gives the same pieces (tested) about twice as fast.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

from textproc.errors import InvalidInput, TokenizerFileError, short
from textproc.tok.added import AddedVocab
from textproc.tok.bpe import BPE
from textproc.tok.decoders import Decoder, build_decoder, byte_level_token_bytes
from textproc.tok.fastsplit import Splitter, make_splitter
from textproc.tok.jsonpath import Ctx
from textproc.tok.loader import DirConfig, read_dir_config, read_json
from textproc.tok.normalizers import Normalizer, build_normalizer
from textproc.tok.postprocessors import build_postprocessor
from textproc.tok.pretokenizers import PreTokenizer, build_pretokenizer
from textproc.tok.unigram import Unigram

__all__ = ["Tokenizer"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# pieces at most this long are cached freely; the cache is cleared when it passes _CACHE_MAX entries
_CACHE_PIECE_MAX = 128
_CACHE_MAX = 200_000
# longer pieces are cached too, up to this size and this many characters in all
_LONG_PIECE_MAX = 1 << 16
_LONG_CHARS_MAX = 4_000_000
_LATIN1 = "latin-1"


class _PieceCache(dict[str, list[int]]):
    """piece -> ids; a miss runs the model (after the byte mapping when ``table`` is set)."""

    def __init__(self, model: BPE | Unigram, table: dict[int, str] | None) -> None:
        super().__init__()
        self._word_ids = model.word_ids
        self._table = table
        self._long_chars = 0  # characters held in cached pieces longer than _CACHE_PIECE_MAX

    def __missing__(self, piece: str) -> list[int]:
        table = self._table
        word = piece.encode("utf-8").decode(_LATIN1).translate(table) if table is not None else piece
        ids = self._word_ids(word)
        size = len(piece)
        if size <= _CACHE_PIECE_MAX:
            if len(self) >= _CACHE_MAX:
                self.clear()
                self._long_chars = 0
            self[piece] = ids
        elif size <= _LONG_PIECE_MAX:
            # long pieces (runs of one character, minified code) are costly to merge again
            self._long_chars += size
            if self._long_chars > _LONG_CHARS_MAX:
                self.clear()
                self._long_chars = size
            self[piece] = ids
        return ids


class Tokenizer:
    """A tokenizer.json tokenizer with HF ``tokenizers``' ids and decoded text.

    >>> tok = Tokenizer.from_dir("path/to/qwen3")          # doctest: +SKIP
    >>> tok.encode("Hello world")                           # doctest: +SKIP
    [9707, 1879]
    >>> tok.decode([9707, 1879])                            # doctest: +SKIP
    'Hello world'
    """

    def __init__(
        self,
        *,
        source: str,
        model: BPE | Unigram,
        normalizer: Normalizer | None,
        pre_tokenizer: PreTokenizer,
        added: AddedVocab,
        decoder: Decoder,
        post: tuple[list[int], list[int]],
        config: DirConfig,
    ) -> None:
        self.source = source
        self._model = model
        self._normalizer = normalizer
        self._pre = pre_tokenizer
        self._added = added
        self._decoder = decoder
        self._post_prefix, self._post_suffix = post
        self._config = config
        from textproc.tok.bytelevel import BYTE_TO_CHAR_TABLE

        self._cache = _PieceCache(model, BYTE_TO_CHAR_TABLE if pre_tokenizer.byte_level else None)
        self._splitter: Splitter | None = (
            make_splitter(pre_tokenizer.simple_pattern) if pre_tokenizer.simple_pattern is not None else None
        )
        self._cache_get = self._cache.__getitem__
        self._added_search = added.raw_search
        # encode() inlines the common shape: no normalized added tokens, one findall split
        self._fast_split = self._splitter if not added.has_normalized else None
        self._id_to_token: list[str | None] | None = None
        self._token_bytes: list[bytes] | None = None
        self._token_bytes_skip: list[bytes] | None = None
        self.added_tokens: dict[str, int] = dict(added.content_to_id)
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in added.id_to_token.items() if t.special
        )
        self.chat_template: str | dict[str, str] | None = config.chat_template
        self.special_tokens_map: dict[str, str] = dict(config.special_tokens_map)
        self.eos_token: str | None = config.special_tokens_map.get("eos_token")
        self.bos_token: str | None = config.special_tokens_map.get("bos_token")
        self.pad_token: str | None = config.special_tokens_map.get("pad_token")
        self.unk_token: str | None = config.special_tokens_map.get("unk_token")
        self.eos_token_id: int | None = self.token_to_id(self.eos_token) if self.eos_token else None
        self.bos_token_id: int | None = self.token_to_id(self.bos_token) if self.bos_token else None
        self.decode_strip_leading: int = decoder.strip_leading
        self.byte_fallback_ids: frozenset[int] = frozenset()
        if "ByteFallback" in decoder.kinds:
            self.byte_fallback_ids = frozenset(
                i for t, i in model.vocab.items() if _BYTE_TOKEN.fullmatch(t)
            )
        vocab_tokens = set(model.vocab)
        self.vocab_size: int = len(vocab_tokens) + sum(1 for c in added.content_to_id if c not in vocab_tokens)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Tokenizer:
        """tokenizer.json plus tokenizer_config.json / special_tokens_map.json / chat_template.jinja."""
        path = Path(model_dir)
        tok_path = path / "tokenizer.json"
        if not tok_path.is_file():
            raise TokenizerFileError(f"no tokenizer.json in {path}")
        return cls.from_json(read_json(tok_path), source=str(tok_path), config=read_dir_config(path))

    @classmethod
    def from_file(cls, tokenizer_json_path: str | Path) -> Tokenizer:
        """One tokenizer.json file (no config: special token names come from nowhere)."""
        path = Path(tokenizer_json_path)
        return cls.from_json(read_json(path), source=str(path))

    @classmethod
    def from_tiktoken(
        cls, path: str | Path, pattern: str, special_tokens: dict[str, int], *, nfc: bool = False
    ) -> Tokenizer:
        """A tiktoken rank file (``base64-token rank`` lines) with its split ``pattern``."""
        from textproc.convert import load_tiktoken_ranks, tiktoken_to_tokenizer_json

        ranks = load_tiktoken_ranks(path)
        obj = tiktoken_to_tokenizer_json(ranks, pattern, special_tokens, nfc=nfc)
        return cls.from_json(obj, source=str(path))

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, source: str = "<json>", config: DirConfig | None = None) -> Tokenizer:
        """A parsed tokenizer.json object; ``source`` names it in errors."""
        ctx = Ctx(source)
        root = ctx.obj(obj, "$")
        for key in ("truncation", "padding"):
            if root.get(key) is not None:
                ctx.fail(
                    f"{key} settings change encode() ids and are not supported; allowed: null", f"$.{key}"
                )
        model_spec = ctx.get(root, "model", "$", dict)
        kind = model_spec.get("type")
        if kind is None:
            kind = "BPE" if "merges" in model_spec else "Unigram" if isinstance(model_spec.get("vocab"), list) else None
        model: BPE | Unigram
        if kind == "BPE":
            model = BPE.from_json(ctx, model_spec, "$.model")
        elif kind == "Unigram":
            model = Unigram.from_json(ctx, model_spec, "$.model")
        else:
            ctx.unsupported("model", kind, "$.model", "BPE, Unigram")
        normalizer = build_normalizer(ctx, root.get("normalizer"), "$.normalizer")
        pre = build_pretokenizer(ctx, root.get("pre_tokenizer"), "$.pre_tokenizer")
        decoder = build_decoder(ctx, root.get("decoder"), "$.decoder")
        post = build_postprocessor(ctx, root.get("post_processor"), "$.post_processor")
        vocab = model.vocab
        vocab_len = len(model.pieces) if isinstance(model, Unigram) else len(vocab)
        added = AddedVocab.from_json(
            ctx,
            ctx.get(root, "added_tokens", "$", list, []),
            "$.added_tokens",
            vocab.get,
            vocab_len,
            normalizer,
        )
        # the BPE merge table is built on first encode (a bad merge raises TokenizerFileError
        # then, naming $.model.merges[i]); call Tokenizer.validate() to do it eagerly
        return cls(
            source=source,
            model=model,
            normalizer=normalizer,
            pre_tokenizer=pre,
            added=added,
            decoder=decoder,
            post=post,
            config=config or DirConfig(),
        )

    def validate(self) -> None:
        """Finish the lazy parts of loading now (the BPE merge table): errors surface here."""
        if isinstance(self._model, BPE):
            self._model.validate()

    # -- encoding ----------------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; equal to HF ``Tokenizer.encode(text, add_special_tokens).ids``.

        Raises InvalidInput for a non-str or text with a lone surrogate.
        """
        if type(text) is not str:
            raise InvalidInput(f"text must be a str, got {type(text).__name__} {short(text)}")
        if not text.isascii() and _SURROGATE.search(text) is not None:
            raise InvalidInput(f"text contains a lone surrogate: {short(text)}; encode it as valid UTF-16/UTF-8 first")
        added_search = self._added_search
        if added_search is not None and added_search(text) is not None:
            ids: list[int] = []
            for seg, token_id, at0 in self._added.split_raw(text):
                if token_id >= 0:
                    ids.append(token_id)
                else:
                    ids += self._encode_gap(seg, at0)
        elif self._fast_split is not None and text:
            # the common shape, inlined: normalizer -> one findall -> piece cache
            if self._normalizer is not None:
                text = self._normalizer(text)
            if self._pre.prefix_space and not text.startswith(" "):
                text = " " + text
            pieces = self._fast_split(text)
            if pieces is None:
                ids = self._encode_segment_general(text, True)
            else:
                ids = list(chain.from_iterable(map(self._cache_get, pieces)))
        else:
            ids = self._encode_gap(text, True)
        if add_special_tokens and (self._post_prefix or self._post_suffix):
            ids = self._post_prefix + ids + self._post_suffix
        return ids

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = False) -> list[list[int]]:
        """``[encode(t) for t in texts]`` (one thread; run workers for parallelism)."""
        encode = self.encode
        return [encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def _encode_gap(self, text: str, at0: bool) -> list[int]:
        """A stretch of raw text with no non-normalized added token: normalize, split, model."""
        if not text:
            return []
        if self._normalizer is not None:
            text = self._normalizer(text)
        added = self._added
        if not added.has_normalized:
            return self._encode_segment(text, at0)
        ids: list[int] = []
        for seg, token_id, seg_at0 in added.split_normalized(text, at0):
            if token_id >= 0:
                ids.append(token_id)
            else:
                ids += self._encode_segment(seg, seg_at0)
        return ids

    def _encode_segment(self, text: str, at0: bool) -> list[int]:
        if not text:
            return []
        splitter = self._splitter
        if splitter is not None:
            if self._pre.prefix_space and not text.startswith(" "):
                text = " " + text
            pieces = splitter(text)
            if pieces is not None:
                return list(chain.from_iterable(map(self._cache_get, pieces)))
        return self._encode_segment_general(text, at0)

    def _encode_segment_general(self, text: str, at0: bool) -> list[int]:
        pieces = self._pre.split(text, at0)
        return list(chain.from_iterable(map(self._cache_get, pieces)))

    # -- vocabulary --------------------------------------------------------------------------

    def _tokens(self) -> list[str | None]:
        table = self._id_to_token
        if table is None:
            size = max(
                max(self._model.vocab.values(), default=-1), max(self._added.id_to_token, default=-1)
            ) + 1
            table = [None] * size
            for token, token_id in self._model.vocab.items():
                if table[token_id] is None or isinstance(self._model, BPE):
                    table[token_id] = token
            if isinstance(self._model, Unigram):
                for token_id, (piece, _score) in enumerate(self._model.pieces):
                    table[token_id] = piece
            for token_id, text in self._added.id_to_text.items():
                table[token_id] = text
            self._id_to_token = table
        return table

    def token_to_id(self, token: str) -> int | None:
        """The id of a token string (added tokens first), or None."""
        token_id = self._added.content_to_id.get(token)
        if token_id is None:
            token_id = self._model.vocab.get(token)
        return token_id

    def id_to_token(self, token_id: int) -> str | None:
        """The token string of an id (as written in tokenizer.json), or None."""
        table = self._tokens()
        if type(token_id) is int and 0 <= token_id < len(table):
            return table[token_id]
        return None

    def _bytes_of(self, token_id: int, token: str) -> bytes:
        if self._decoder.is_byte_level:
            # like HF's ByteLevel decoder, added tokens included: mapped when every character
            # is in the byte alphabet, else their UTF-8
            return byte_level_token_bytes(token)
        m = _BYTE_TOKEN.fullmatch(token)
        if m is not None and "ByteFallback" in self._decoder.kinds:
            return bytes([int(m.group(1), 16)])
        if token_id in self._added.id_to_token:
            return token.encode("utf-8")
        if self._pre.byte_level and "ByteLevel" in self._decoder.kinds:
            return byte_level_token_bytes(token)
        space = self._decoder.space_char
        if space is not None:
            token = token.replace(space, " ")
        return token.encode("utf-8", "surrogatepass")

    def _byte_tables(self) -> tuple[list[bytes], list[bytes]]:
        if self._token_bytes is None or self._token_bytes_skip is None:
            tokens = self._tokens()
            full = [b"" if t is None else self._bytes_of(i, t) for i, t in enumerate(tokens)]
            skip = list(full)
            for token_id in self.special_ids:
                skip[token_id] = b""
            self._token_bytes, self._token_bytes_skip = full, skip
        return self._token_bytes, self._token_bytes_skip

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes:
        """Bytes this token contributes in the middle of a decoded sequence (b"" if unknown)."""
        full, skip = self._byte_tables()
        table = skip if skip_special_tokens else full
        if type(token_id) is int and 0 <= token_id < len(table):
            return table[token_id]
        return b""

    def vocab_bytes(self) -> list[bytes]:
        """``token_bytes(i)`` for every id, special tokens as b""."""
        return list(self._byte_tables()[1])

    # -- decoding ----------------------------------------------------------------------------

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids``; equal to HF ``Tokenizer.decode``. Unknown ids are skipped."""
        if self._decoder.is_byte_level:
            full, skip = self._byte_tables()
            table = skip if skip_special_tokens else full
            try:
                if min(token_ids, default=0) >= 0:
                    return b"".join([table[i] for i in token_ids]).decode("utf-8", "replace")
            except (IndexError, TypeError):
                pass
            n = len(table)
            data = b"".join([table[i] for i in token_ids if type(i) is int and 0 <= i < n])
            return data.decode("utf-8", "replace")
        tokens = self._tokens()
        n = len(tokens)
        special = self.special_ids
        strs: list[str] = []
        for i in token_ids:
            if type(i) is not int or not 0 <= i < n:
                continue
            t = tokens[i]
            if t is None or (skip_special_tokens and i in special):
                continue
            strs.append(t)
        return self._decoder.decode(strs)

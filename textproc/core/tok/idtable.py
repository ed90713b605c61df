"""The id side of a tokenizer: id <-> token string, the bytes each id adds, and decode.

Owns everything :class:`textproc.core.tokenizer.Tokenizer` answers about ids that are already
chosen (``token_to_id``, ``id_to_token``, ``token_bytes``, ``vocab_bytes``, ``decode``); turning
text into ids stays with the tokenizer. The tables (id -> token string; id -> bytes, with and
without special tokens) are built on first use and never change afterwards. Unknown ids decode
to nothing and have ``b""`` bytes, like the reference.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from textproc.core.tok.added import AddedVocab
from textproc.core.tok.bpe import BPE
from textproc.core.tok.decoders import Decoder, byte_level_token_bytes
from textproc.core.tok.unigram import Unigram

__all__ = ["IdTable", "BYTE_TOKEN"]

BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a byte-fallback token, "<0x0A>"


class IdTable:
    """Ids of one tokenizer's model and added tokens -> token strings, bytes and text.

    ``byte_level``: the pre-tokenizer maps bytes to characters (a ByteLevel decoder then maps
    them back); ``special_ids``: the added tokens that ``skip_special_tokens`` drops.
    """

    __slots__ = ("_model", "_added", "_decoder", "_byte_level", "special_ids", "_tokens_table",
                 "_bytes_full", "_bytes_skip")

    def __init__(self, model: BPE | Unigram, added: AddedVocab, decoder: Decoder, *,
                 byte_level: bool, special_ids: frozenset[int]) -> None:
        self._model = model
        self._added = added
        self._decoder = decoder
        self._byte_level = byte_level
        self.special_ids = special_ids
        self._tokens_table: list[str | None] | None = None
        self._bytes_full: list[bytes] | None = None
        self._bytes_skip: list[bytes] | None = None

    def byte_fallback_ids(self) -> frozenset[int]:
        """The ids of ``<0xNN>`` tokens when the decoder has ByteFallback (else none)."""
        if "ByteFallback" not in self._decoder.kinds:
            return frozenset()
        return frozenset(i for t, i in self._model.vocab.items() if BYTE_TOKEN.fullmatch(t))

    def tokens(self) -> list[str | None]:
        """id -> token string as written in tokenizer.json (added tokens win); None: no token."""
        table = self._tokens_table
        if table is None:
            model = self._model
            size = max(
                max(model.vocab.values(), default=-1), max(self._added.id_to_token, default=-1)
            ) + 1
            table = [None] * size
            for token, token_id in model.vocab.items():
                if table[token_id] is None or isinstance(model, BPE):
                    table[token_id] = token
            if isinstance(model, Unigram):
                for token_id, (piece, _score) in enumerate(model.pieces):
                    table[token_id] = piece
            for token_id, text in self._added.id_to_text.items():
                table[token_id] = text
            self._tokens_table = table
        return table

    def token_to_id(self, token: str) -> int | None:
        """The id of a token string (added tokens first), or None."""
        token_id = self._added.content_to_id.get(token)
        if token_id is None:
            token_id = self._model.vocab.get(token)
        return token_id

    def id_to_token(self, token_id: int) -> str | None:
        """The token string of an id (as written in tokenizer.json), or None."""
        table = self.tokens()
        if type(token_id) is int and 0 <= token_id < len(table):
            return table[token_id]
        return None

    def _bytes_of(self, token_id: int, token: str) -> bytes:
        if self._decoder.is_byte_level:
            # like HF's ByteLevel decoder, added tokens included: mapped when every character
            # is in the byte alphabet, else their UTF-8
            return byte_level_token_bytes(token)
        m = BYTE_TOKEN.fullmatch(token)
        if m is not None and "ByteFallback" in self._decoder.kinds:
            return bytes([int(m.group(1), 16)])
        if token_id in self._added.id_to_token:
            return token.encode("utf-8")
        if self._byte_level and "ByteLevel" in self._decoder.kinds:
            return byte_level_token_bytes(token)
        space = self._decoder.space_char
        if space is not None:
            token = token.replace(space, " ")
        return token.encode("utf-8", "surrogatepass")

    def byte_tables(self) -> tuple[list[bytes], list[bytes]]:
        """(id -> bytes, id -> bytes with special tokens as b"")."""
        if self._bytes_full is None or self._bytes_skip is None:
            tokens = self.tokens()
            full = [b"" if t is None else self._bytes_of(i, t) for i, t in enumerate(tokens)]
            skip = list(full)
            for token_id in self.special_ids:
                skip[token_id] = b""
            self._bytes_full, self._bytes_skip = full, skip
        return self._bytes_full, self._bytes_skip

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes:
        """Bytes this token contributes in the middle of a decoded sequence (b"" if unknown)."""
        full, skip = self.byte_tables()
        table = skip if skip_special_tokens else full
        if isinstance(token_id, int) and 0 <= token_id < len(table):
            return table[token_id]
        return b""

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids``; equal to HF ``Tokenizer.decode``. Unknown ids are skipped."""
        if self._decoder.is_byte_level:
            full, skip = self.byte_tables()
            table = skip if skip_special_tokens else full
            try:
                if min(token_ids, default=0) >= 0:
                    return b"".join([table[i] for i in token_ids]).decode("utf-8", "replace")
            except (IndexError, TypeError):
                pass
            n = len(table)
            data = b"".join([table[i] for i in token_ids if isinstance(i, int) and 0 <= i < n])
            return data.decode("utf-8", "replace")
        tokens = self.tokens()
        n = len(tokens)
        special = self.special_ids
        strs: list[str] = []
        for i in token_ids:
            if not isinstance(i, int) or not 0 <= i < n:
                continue
            t = tokens[i]
            if t is None or (skip_special_tokens and i in special):
                continue
            strs.append(t)
        return self._decoder.decode(strs)

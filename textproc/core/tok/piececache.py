"""The piece cache of a tokenizer: one pre-token -> its ids, bounded, filled by the model on a miss."""

from __future__ import annotations

from textproc.core.tok.bpe import BPE
from textproc.core.tok.unigram import Unigram

__all__ = ["PieceCache"]

# pieces at most this long are cached freely; the cache is cleared when it passes _CACHE_MAX entries
_CACHE_PIECE_MAX = 128
_CACHE_MAX = 200_000
# longer pieces are cached too, up to this size and this many characters in all
_LONG_PIECE_MAX = 1 << 16
_LONG_CHARS_MAX = 4_000_000
_LATIN1 = "latin-1"


class PieceCache(dict[str, list[int]]):
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

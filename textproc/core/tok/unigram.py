"""Unigram model of tokenizer.json: Viterbi over piece scores, as HF ``tokenizers`` does it.

Same result as ``Unigram::encode_optimized`` + ``tokenize``: every vocabulary piece is a
candidate (control tokens included), an unknown character costs ``min_score - 10``, runs of
unknown characters are fused into one piece (``fuse_unk``), and a piece missing from the
vocabulary falls back to ``<0xNN>`` byte pieces (``byte_fallback``) or ``unk_id``.
Scores add in the same order as the reference, so float ties resolve the same way; and they
are the reference's f64 values, which are not always Python's: serde_json rounds twice
(``textproc.core.tok.loader.serde_float``), and a score one ulp off turns a tie into a win.
"""

from __future__ import annotations

from typing import Any

from textproc.errors import InvalidInput
from textproc.core.tok.jsonpath import Ctx
from textproc.core.tok.loader import hf_float

__all__ = ["Unigram"]

_UNK_PENALTY = 10.0


class Unigram:
    """A Unigram model; :meth:`word_ids` tokenizes one pre-token."""

    def __init__(self, *, pieces: list[tuple[str, float]], unk_id: int | None, byte_fallback: bool, fuse_unk: bool) -> None:
        self.vocab: dict[str, int] = {}
        for i, (piece, _score) in enumerate(pieces):
            self.vocab[piece] = i  # like HF's HashMap insert: the last duplicate wins
        self.pieces = pieces
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.fuse_unk = fuse_unk
        self.min_score = min((s for _, s in pieces), default=0.0)
        self._max_len = max((len(p) for p in self.vocab), default=0)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_json(cls, ctx: Ctx, model: dict[str, Any], path: str) -> Unigram:
        raw = ctx.get(model, "vocab", path, list)
        pieces: list[tuple[str, float]] = []
        for i, item in enumerate(raw):
            p = f"{path}.vocab[{i}]"
            ctx.check(item, list, p)
            if len(item) != 2:
                ctx.fail(f"expected [piece, score], got {item!r}", p)
            piece = ctx.check(item[0], str, f"{p}[0]")
            # scores as HF's JSON parser reads them: ties depend on the last bit
            score = hf_float(ctx.check(item[1], float, f"{p}[1]"))
            pieces.append((piece, score))
        unk_id = ctx.get(model, "unk_id", path, int, None)
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            ctx.fail(f"unk_id {unk_id} is outside the vocabulary of {len(pieces)} pieces", f"{path}.unk_id")
        return cls(
            pieces=pieces,
            unk_id=unk_id,
            byte_fallback=ctx.get(model, "byte_fallback", path, bool, False),
            fuse_unk=True,
        )

    def _viterbi(self, text: str) -> list[str]:
        n = len(text)
        unk_score = self.min_score - _UNK_PENALTY
        # per end position: (best score, start, id); start -1 means unreached
        best_score = [0.0] * (n + 1)
        best_start = [-1] * (n + 1)
        best_id = [0] * (n + 1)
        vocab = self.vocab
        pieces = self.pieces
        max_len = self._max_len
        unk_id = self.unk_id
        for start in range(n):
            if start and best_start[start] == -1:
                # cannot happen: every character gets at least the unk edge
                continue
            here = best_score[start]
            single = False
            for end in range(start + 1, min(n, start + max_len) + 1):
                pid = vocab.get(text[start:end])
                if pid is not None:
                    cand = pieces[pid][1] + here
                    if best_start[end] == -1 or cand > best_score[end]:
                        best_score[end] = cand
                        best_start[end] = start
                        best_id[end] = pid
                    if end == start + 1:
                        single = True
            if not single:
                if unk_id is None:
                    raise InvalidInput(f"character {text[start]!r} is not in the Unigram vocabulary and the model has no unk_id")
                end = start + 1
                cand = unk_score + here
                if best_start[end] == -1 or cand > best_score[end]:
                    best_score[end] = cand
                    best_start[end] = start
                    best_id[end] = unk_id
        out: list[str] = []
        fused: list[str] = []
        end = n
        while end > 0:
            start = best_start[end]
            if self.fuse_unk and unk_id is not None and best_id[end] == unk_id:
                fused.append(text[start:end])
            else:
                if fused:
                    fused.reverse()
                    out.append("".join(fused))
                    fused = []
                out.append(text[start:end])
            end = start
        if fused:
            fused.reverse()
            out.append("".join(fused))
        out.reverse()
        return out

    def word_ids(self, word: str) -> list[int]:
        """Token ids of one pre-token ``word``."""
        if not word:
            return []
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        ids: list[int] = []
        vocab = self.vocab
        for piece in self._viterbi(word):
            pid = vocab.get(piece)
            if pid is None:
                if self.byte_fallback:
                    byte_ids = [vocab.get(f"<0x{b:02X}>") for b in piece.encode("utf-8", "surrogatepass")]
                    if None not in byte_ids:
                        ids.extend(byte_ids)  # type: ignore[arg-type]
                        continue
                if self.unk_id is None:
                    raise InvalidInput(f"piece {piece!r} is not in the Unigram vocabulary and the model has no unk_id")
                pid = self.unk_id
            ids.append(pid)
        if len(word) < 256:
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[word] = ids
        return ids

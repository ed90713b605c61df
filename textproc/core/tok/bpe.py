"""BPE model of tokenizer.json: one pre-token (in the model's alphabet) -> token ids.

Same result as HF ``tokenizers``' ``BPE::tokenize`` (dropout must be null/0): initial symbols
per character (``continuing_subword_prefix`` / ``end_of_word_suffix``, byte fallback to
``<0xNN>``, unknown characters to ``unk_token``, fused when ``fuse_unk``), then merges applied
lowest rank first, leftmost on ties. ``ignore_merges`` looks the whole piece up first.

Merge table shape: ``(left_id * stride + right_id) -> (rank << 32) | merged_id``, so one
``min()`` over a list of ints picks the lowest-rank, leftmost pair. Short words use that list
(O(n) per merge, in C). Long words are merged in chunks of 32 symbols joined where the two
boundary tokens are *compatible* (BPE of their text alone gives them back unchanged): before
any merge crosses a boundary, each side evolves as if alone, and the pair at the boundary
evolves exactly as in the run on the two tokens alone, so compatible boundaries never merge
and the joined result is exact; incompatible ones are re-merged in a window. A chunk's last
token (cut by the chunk end) is dropped and its text starts the next chunk, so chunks meet
where BPE itself put a boundary and are compatible far more often. HF's own
algorithm (a heap of candidate merges over a linked list of symbols, O(n log n)) is the
fallback. The table is built on first use, so loading stays fast.
"""

from __future__ import annotations

import gc
import heapq
from itertools import repeat
from operator import add, lshift, mul, or_
from typing import Any

from textproc.errors import InvalidInput
from textproc.core.tok.jsonpath import Ctx, id_limit_reason, sparse_id_limit

__all__ = ["BPE"]

_MASK = 0xFFFFFFFF
_INF = 1 << 80
# words at least this long use chunks (or the heap)
_HEAP_FROM = 96
# symbols per chunk of a long word; largest repair window before the whole-word heap
_CHUNK = 32
_WINDOW_MAX = 4096


class BPE:
    """A BPE model; :meth:`word_ids` tokenizes one pre-token."""

    def __init__(
        self,
        *,
        vocab: dict[str, int],
        merges: list[Any],
        ctx: Ctx,
        path: str,
        unk_token: str | None,
        byte_fallback: bool,
        fuse_unk: bool,
        ignore_merges: bool,
        prefix: str | None,
        suffix: str | None,
    ) -> None:
        self.vocab = vocab
        self._raw_merges = merges
        self._ctx = ctx
        self._path = path
        self.unk_token = unk_token
        self.byte_fallback = byte_fallback
        self.fuse_unk = fuse_unk
        self.ignore_merges = ignore_merges
        self.prefix = prefix
        self.suffix = suffix
        self._merges: dict[int, int] | None = None
        self._get: Any = None  # the merge table's bound get, once built
        self._stride = max(vocab.values(), default=0) + 1
        self._char_ids: dict[str, int] | None = None
        # (left * stride + right) -> whether BPE(text(left) + text(right)) == [left, right]
        self._compat: dict[int, bool] = {}
        # chunk text -> its exact BPE ids (long words only)
        self._chunk_cache: dict[str, list[int]] = {}
        self._id_text: list[str] | None = None

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def from_json(cls, ctx: Ctx, model: dict[str, Any], path: str) -> BPE:
        dropout = model.get("dropout")
        if dropout is not None:
            ctx.check(dropout, float, f"{path}.dropout")
            if dropout != 0:
                ctx.fail(
                    f"BPE dropout {dropout!r} is random and not supported; allowed: null or 0",
                    f"{path}.dropout",
                )
        vocab = ctx.get(model, "vocab", path, dict)
        # C-level checks first; the slow loop only runs to name the bad entry
        if not set(map(type, vocab.values())) <= {int} or min(vocab.values(), default=0) < 0:
            for token, token_id in vocab.items():
                if type(token_id) is not int or token_id < 0:
                    ctx.fail(f"expected a non-negative integer id, got {token_id!r}", f"{path}.vocab[{token!r}]")
        top = max(vocab.values(), default=-1)
        if top > sparse_id_limit(len(vocab)):
            token = next(t for t, i in vocab.items() if i == top)
            ctx.fail(
                f"token id {top} is {id_limit_reason(top, len(vocab))}", f"{path}.vocab[{token!r}]"
            )
        merges = ctx.get(model, "merges", path, list, [])
        unk = ctx.get(model, "unk_token", path, str, None)
        return cls(
            vocab=vocab,
            merges=merges,
            ctx=ctx,
            path=path,
            unk_token=unk,
            byte_fallback=ctx.get(model, "byte_fallback", path, bool, False),
            fuse_unk=ctx.get(model, "fuse_unk", path, bool, False),
            ignore_merges=ctx.get(model, "ignore_merges", path, bool, False),
            prefix=ctx.get(model, "continuing_subword_prefix", path, str, None),
            suffix=ctx.get(model, "end_of_word_suffix", path, str, None),
        )

    def validate(self) -> None:
        """Build the merge table now (raises TokenizerFileError for a bad merge)."""
        self._table()

    def _table(self) -> dict[int, int]:
        table = self._merges
        if table is None:
            table = self._merges = self._build_table()
        return table

    def _build_table(self) -> dict[int, int]:
        gc_was_enabled = gc.isenabled()
        gc.disable()  # ~150k new ints and tuples: nothing to collect, no need to scan
        try:
            table = self._build_table_fast()
            if table is None:
                table = self._build_table_checked()
        finally:
            if gc_was_enabled:
                gc.enable()
        self._raw_merges = []
        return table

    def _build_table_fast(self) -> dict[int, int] | None:
        """The table built with C-level maps; None if anything is off (then the checked path names it)."""
        merges = self._raw_merges
        if not merges:
            return {}
        kinds = set(map(type, merges))
        if kinds == {str}:
            pairs = list(map(str.split, merges, repeat(" ")))
        elif kinds == {list}:
            pairs = merges
        else:
            return None
        if set(map(len, pairs)) != {2}:
            return None
        left, right = zip(*pairs)
        if not set(map(type, left)) | set(map(type, right)) <= {str}:
            return None
        vocab = self.vocab
        plen = len(self.prefix) if self.prefix else 0
        merged = map(add, left, right) if not plen else (a + b[plen:] for a, b in pairs)
        try:
            ids_left = list(map(vocab.__getitem__, left))
            ids_right = list(map(vocab.__getitem__, right))
            ids_new = list(map(vocab.__getitem__, merged))
        except KeyError:
            return None
        keys = map(add, map(mul, ids_left, repeat(self._stride)), ids_right)
        values = map(or_, map(lshift, range(len(pairs)), repeat(32)), ids_new)
        return dict(zip(keys, values))

    def _build_table_checked(self) -> dict[int, int]:
        vocab = self.vocab
        stride = self._stride
        plen = len(self.prefix) if self.prefix else 0
        table: dict[int, int] = {}
        ctx, path = self._ctx, f"{self._path}.merges"
        for rank, merge in enumerate(self._raw_merges):
            if type(merge) is str:
                parts = merge.split(" ")
            elif type(merge) is list:
                parts = merge
            else:
                ctx.fail(f"expected 'a b' or ['a', 'b'], got {merge!r}", f"{path}[{rank}]")
            if len(parts) != 2 or type(parts[0]) is not str or type(parts[1]) is not str:
                ctx.fail(f"expected a pair of tokens, got {merge!r}", f"{path}[{rank}]")
            a, b = parts
            ia = vocab.get(a)
            ib = vocab.get(b)
            new = vocab.get(a + b[plen:])
            if ia is None or ib is None or new is None:
                missing = a if ia is None else b if ib is None else a + b[plen:]
                ctx.fail(f"merge {merge!r} uses token {missing!r} missing from the vocab", f"{path}[{rank}]")
            table[ia * stride + ib] = (rank << 32) | new
        return table

    # -- tokenizing --------------------------------------------------------------------------

    def _initial(self, word: str) -> list[int]:
        """HF ``merge_word`` before merging: one symbol per character (or fallback)."""
        vocab = self.vocab
        ids: list[int] = []
        unk: int | None = None
        prefix, suffix = self.prefix, self.suffix
        last = len(word) - 1
        for i, c in enumerate(word):
            s = c
            if i and prefix:
                s = prefix + s
            if i == last and suffix:
                s = s + suffix
            token_id = vocab.get(s)
            if token_id is not None:
                if unk is not None:
                    ids.append(unk)
                    unk = None
                ids.append(token_id)
                continue
            if self.byte_fallback:
                byte_ids = [vocab.get(f"<0x{b:02X}>") for b in s.encode("utf-8", "surrogatepass")]
                if None not in byte_ids:
                    # like HF, a pending unk is only flushed by the next vocab symbol
                    ids.extend(byte_ids)  # type: ignore[arg-type]
                    continue
            if self.unk_token is not None:
                unk_id = vocab.get(self.unk_token)
                if unk_id is None:
                    raise InvalidInput(
                        f"unk_token {self.unk_token!r} is not in the vocabulary; cannot encode {c!r}"
                    )
                if unk is not None and not self.fuse_unk:
                    ids.append(unk)
                unk = unk_id
        if unk is not None:
            ids.append(unk)
        return ids

    def word_ids(self, word: str) -> list[int]:
        """Token ids of one pre-token ``word`` (already in the model's alphabet)."""
        if not word:
            return []
        if self.ignore_merges:
            whole = self.vocab.get(word)
            if whole is not None:
                return [whole]
        char_ids = self._char_ids
        if char_ids is None:
            char_ids = self._char_ids = self._make_char_ids()
        try:
            ids = list(map(char_ids.__getitem__, word))
        except KeyError:
            ids = self._initial(word)
            one_to_one = False
        else:
            one_to_one = True
        if len(ids) < 2:
            return ids
        if len(ids) < _HEAP_FROM:
            return self._merge_small(ids)
        if one_to_one:
            chunked = self._merge_chunked(word, ids)
            if chunked is not None:
                return chunked
        return self._merge_heap(ids)

    def _make_char_ids(self) -> dict[str, int]:
        if self.prefix or self.suffix:
            return {}  # symbols depend on position: always take the general path
        return {t: i for t, i in self.vocab.items() if len(t) == 1}

    def _merge_small(self, ids: list[int]) -> list[int]:
        get = self._get
        if get is None:
            get = self._get = self._table().get
        stride = self._stride
        if len(ids) == 2:
            v = get(ids[0] * stride + ids[1])
            return ids if v is None else [v & _MASK]
        ranks = list(map(get, map(add, map(mul, ids[:-1], repeat(stride)), ids[1:]), repeat(_INF)))
        while ranks:
            best = min(ranks)
            if best == _INF:
                break
            i = ranks.index(best)
            new = best & _MASK
            ids[i] = new
            del ids[i + 1]
            del ranks[i]
            if i:
                ranks[i - 1] = get(ids[i - 1] * stride + new, _INF)
            if i < len(ranks):
                ranks[i] = get(new * stride + ids[i + 1], _INF)
        return ids

    def _compatible(self, left: int, right: int) -> bool:
        """True when BPE of the two tokens' text gives exactly ``[left, right]``.

        Then no merge crosses a boundary where chunk results end in ``left`` and start with
        ``right``: before the first crossing merge both chunks evolve as if alone, and the
        pair at the boundary evolves exactly as in the run on ``left + right`` alone.
        """
        key = left * self._stride + right
        known = self._compat.get(key)
        if known is None and key in self._table():
            known = False  # the pair itself merges
        if known is None:
            text = self._token_text()
            char_ids = self._char_ids
            if char_ids is None:
                char_ids = self._char_ids = self._make_char_ids()
            ids = list(map(char_ids.__getitem__, text[left] + text[right]))
            known = self._merge_small(ids) == [left, right]
            if len(self._compat) > 100_000:
                self._compat.clear()
            self._compat[key] = known
        return known

    def _token_text(self) -> list[str]:
        text = self._id_text
        if text is None:
            text = [""] * self._stride
            for token, token_id in self.vocab.items():
                text[token_id] = token
            self._id_text = text
        return text

    def _merge_chunked(self, word: str, ids: list[int]) -> list[int] | None:
        """Exact BPE of a long 1:1 word, chunk by chunk, repairing incompatible boundaries.

        A contiguous run of tokens of an exact result is the exact BPE of its text, and
        results whose boundaries are all compatible concatenate to the exact result (see
        :meth:`_compatible`). So each chunk of ``_CHUNK`` symbols is merged alone; at an
        incompatible boundary the last ``t`` tokens before it and the first ``t`` after it
        are merged again as one window, growing ``t`` until both window edges are
        compatible. Returns None (use the heap) when windows grow past ``_WINDOW_MAX`` symbols
        or re-merging passes 8x the word (so the worst case stays O(n log n)).
        """
        n = len(ids)
        text = self._token_text()
        merge_small = self._merge_small
        compatible = self._compatible
        cache = self._chunk_cache
        if len(cache) > 50_000:
            cache.clear()

        budget = [8 * n]  # symbols merged again in windows, before giving up on chunks

        def merged(start: int, stop: int) -> list[int]:
            # chunks of repetitive words ("=====", "字字字") repeat: cache by their text
            key = word[start:stop]
            result = cache.get(key)
            if result is None:
                part = ids[start:stop]
                result = merge_small(part) if len(part) < _HEAP_FROM else self._merge_heap(part)
                cache[key] = result
                budget[0] -= len(part)
            return result

        out: list[int] = []
        pos = 0
        while pos < n:
            end = min(pos + _CHUNK, n)
            right = merged(pos, end)
            if end < n and len(right) > 1:
                # the last token was cut by the chunk end: leave its text to the next chunk,
                # which then starts where BPE put a boundary (so compatible far more often)
                end -= len(text[right[-1]])
                right = right[:-1]
            if out and not compatible(out[-1], right[0]):
                t = 1
                while True:
                    nl = min(t, len(out))
                    nr = min(t, len(right))
                    start = pos - sum([len(text[x]) for x in out[-nl:]])
                    stop = pos + sum([len(text[x]) for x in right[:nr]])
                    if budget[0] < 0 or stop - start > _WINDOW_MAX:
                        return None
                    window = merged(start, stop)
                    if (nl == len(out) or compatible(out[-nl - 1], window[0])) and (
                        nr == len(right) or compatible(window[-1], right[nr])
                    ):
                        del out[-nl:]
                        out += window
                        right = right[nr:]
                        break
                    t *= 2
            out += right
            pos = end
        return out

    def _merge_heap(self, ids: list[int]) -> list[int]:
        """HF's Word::merge_all: a heap of (rank, position) over a linked list of symbols.

        ``pair[i]`` is the table value of the pair starting at symbol ``i`` (``_INF`` when
        there is none or ``i`` was merged away), so a stale heap entry is one whose rank no
        longer equals ``pair[i] >> 32``: one list lookup instead of a dict lookup.
        """
        get = self._table().get
        stride = self._stride
        n = len(ids)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        pair = list(map(get, map(add, map(mul, ids[:-1], repeat(stride)), ids[1:]), repeat(_INF)))
        pair.append(_INF)
        # heap item: rank << 32 | position (rank first, then leftmost)
        heap = [((v >> 32) << 32) | i for i, v in enumerate(pair) if v != _INF]
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            item = pop(heap)
            pos = item & _MASK
            v = pair[pos]
            if (v ^ item) >> 32:
                continue  # stale: the pair at pos changed or pos was merged away
            new = v & _MASK
            ids[pos] = new
            right = nxt[pos]
            pair[right] = _INF
            after = nxt[right]
            nxt[pos] = after
            if after != -1:
                prv[after] = pos
                w = get(new * stride + ids[after], _INF)
                pair[pos] = w
                if w != _INF:
                    push(heap, ((w >> 32) << 32) | pos)
            else:
                pair[pos] = _INF
            before = prv[pos]
            if before != -1:
                w = get(ids[before] * stride + new, _INF)
                pair[before] = w
                if w != _INF:
                    push(heap, ((w >> 32) << 32) | before)
        out = []
        i = 0
        while i != -1:
            out.append(ids[i])
            i = nxt[i]
        return out

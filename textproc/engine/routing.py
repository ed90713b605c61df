"""One engine step split by owner shard: what ``EngineLink`` sends to which detokenizer.

Owns, for a link connected to ``N > 1`` detokenizer shards (``textproc serve --detokenizers
N``): the owner of each request id (:class:`Owners`, a bounded cache of
:func:`textproc.sharding.shard_of`, the one routing function workers and clients use too) and
the split of one step's columns (:func:`split_columns`) or entries (:func:`split_entries`) into
one part per shard, each an ordinary step frame's content. Never used with one shard: that
path sends the step as it is. The work is C-level iteration (map, compress, array) plus one
dict lookup per request; a request's owner never changes, so a cleared cache only costs the
hash again.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any

from textproc.engine.requests import unpack_array
from textproc.protocol import StepOutput
from textproc.sharding import shard_of

__all__ = ["Owners", "Part", "split_cached", "split_columns", "split_entries", "entry_ids"]

_BIG_ENDIAN = array("I", [1]).tobytes()[0] == 0
MAX_OWNERS_CACHED = 1 << 18  # request ids whose owner is cached (then the cache starts over)
_FIRST = itemgetter(0)


class Owners:
    """request id -> owner shard, cached; ``of`` computes what the cache lacks."""

    def __init__(self, n_shards: int) -> None:
        self.n_shards = n_shards
        self._cache: dict[str, int] = {}

    def note(self, request_id: str, shard: int) -> None:
        """A request arrived from ``shard`` (its owner: workers send it to ``shard_of``)."""
        cache = self._cache
        if len(cache) >= MAX_OWNERS_CACHED:
            cache.clear()
        cache[request_id] = shard

    def forget(self, request_ids: Iterable[str]) -> None:
        pop = self._cache.pop
        for rid in request_ids:
            pop(rid, None)

    def of(self, request_ids: Sequence[str]) -> list[int]:
        """The owner of each id, in order."""
        owners: list[Any] = list(map(self._cache.get, request_ids))
        if None in owners:
            n, note = self.n_shards, self.note
            for i, k in enumerate(owners):
                if k is None:
                    rid = request_ids[i]
                    owners[i] = k = shard_of(rid, n)
                    note(rid, k)
        return owners

    def __len__(self) -> int:
        return len(self._cache)


def _packed(values: Iterable[int]) -> bytes:
    out = array("I", values)
    if _BIG_ENDIAN:
        out.byteswap()
    return out.tobytes()


def _positions(owners: Sequence[int], n_shards: int) -> list[list[int]]:
    """For each shard the indices (ascending) of the entries it owns.

    A stable sort by owner and one count per shard: C-level work, ~3x less than a compress
    per shard with ``int.__eq__`` (1,024 requests, 2 shards: ~55 vs ~215 us here).
    """
    order = sorted(range(len(owners)), key=owners.__getitem__)
    out = []
    start = 0
    for k in range(n_shards):
        end = start + owners.count(k)
        out.append(order[start:end])
        start = end
    return out


def _pick(seq: Sequence[Any], index: list[int]) -> Sequence[Any]:
    """``[seq[i] for i in index]`` in C (itemgetter of one index gives the item, not a tuple)."""
    if len(index) == 1:
        return (seq[index[0]],)
    return itemgetter(*index)(seq)  # type: ignore[no-any-return]


Part = tuple[list[str], bytes, bytes, dict[int, str], bytes, bytes]


def split_columns(owners: Sequence[int], n_shards: int, request_ids: Sequence[str],
                  tokens: bytes, counts: bytes, finished: Mapping[int, str],
                  logprobs: bytes = b"", top_ids: bytes = b"") -> list[Part | None]:
    """One step's columns (as ``EngineStepPacked`` holds them) split by ``owners``: per shard
    its request ids, packed new ids, packed counts (``b""`` stays ``b""``), finish reasons
    re-indexed and its tokens' logprob / top_ids rows (``b""`` stays ``b""``), or None for a
    shard with no entry in this step. Order within a shard is kept."""
    positions = _positions(owners, n_shards)
    token_ids = unpack_array(tokens)
    per_count = unpack_array(counts) if counts else None
    if per_count is not None:
        offsets = list(accumulate(per_count, initial=0))
    row = len(logprobs) // len(token_ids) if logprobs and token_ids else 0  # bytes per token
    alt_row = row - 4
    parts: list[Part | None] = []
    for index in positions:
        if not index:
            parts.append(None)
            continue
        ids = list(_pick(request_ids, index))
        if per_count is None:
            part_tokens = _packed(_pick(token_ids, index))
            part_counts = b""
            token_index: Sequence[int] = index
        else:
            spans = list(map(range, _pick(offsets, index), _pick(offsets, [i + 1 for i in index])))
            token_index = list(chain.from_iterable(spans))
            part_tokens = _packed(_pick(token_ids, token_index)) if token_index else b""
            part_counts = _packed(_pick(per_count, index))
        part_logprobs = part_top = b""
        if row:  # rows of the shard's tokens, in order (only steps with logprobs)
            part_logprobs = b"".join([logprobs[row * t:row * (t + 1)] for t in token_index])
            part_top = b"".join([top_ids[alt_row * t:alt_row * (t + 1)] for t in token_index])
        parts.append((ids, part_tokens, part_counts, {}, part_logprobs, part_top))
    for i, reason in finished.items():
        k = owners[i]
        part = parts[k]
        assert part is not None
        part[3][bisect_left(positions[k], i)] = reason
    return parts


def split_cached(owners: Owners, cached_tokens: Mapping[str, int]) -> list[dict[str, int]]:
    """A step's ``cached_tokens`` (request id -> count) split by owner shard (empty dicts when
    it is empty: the common step)."""
    parts: list[dict[str, int]] = [{} for _ in range(owners.n_shards)]
    if cached_tokens:
        rids = list(cached_tokens)
        for rid, shard in zip(rids, owners.of(rids)):
            parts[shard][rid] = cached_tokens[rid]
    return parts


def entry_ids(outputs: Sequence[Any]) -> list[str]:
    """The request id of each ``send_outputs`` entry (tuples or ``StepOutput``)."""
    try:
        return list(map(_FIRST, outputs))
    except TypeError:
        return [e.request_id if isinstance(e, StepOutput) else e[0] for e in outputs]


def split_entries(owners: Sequence[int], n_shards: int,
                  outputs: Sequence[Any]) -> list[list[Any] | None]:
    """``send_outputs`` entries split by ``owners``: per shard its entries in order, or None."""
    return [list(_pick(outputs, index)) if index else None
            for index in _positions(owners, n_shards)]

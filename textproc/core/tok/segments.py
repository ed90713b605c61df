"""A content-addressed cache of encoded segments: the text between two added tokens -> its ids.

Why it is exact: ``Tokenizer.encode`` splits a text at its added tokens first (as HF
``tokenizers`` does) and encodes each stretch between them with a function of that stretch and
of whether it starts the text (``_encode_gap(text, at_start)``: normalizer, pre-tokenizer,
model) and nothing else. So ``(text, at_start) -> ids`` can be remembered, and a chat prompt
that comes back with one more turn (agents resend the whole conversation) costs only its new
segments: in ChatML every message body sits between ``<|im_start|>`` and ``<|im_end|>``.

Bounded by bytes (an estimate of the key's and the ids' memory), oldest-used dropped first.
Only segments of at least ``min_chars`` characters are kept: shorter ones are cheap to encode
(the piece cache already holds their words) and would only churn the cache.
"""

from __future__ import annotations

import sys

__all__ = ["SegmentCache", "DEFAULT_SEGMENT_CACHE_BYTES", "SEGMENT_MIN_CHARS"]

DEFAULT_SEGMENT_CACHE_BYTES = 64 << 20  # per tokenizer (so per worker process)
SEGMENT_MIN_CHARS = 256
_ENTRY_OVERHEAD = 200  # the tuple, the dict slot, the list header


class SegmentCache:
    """``(segment text, at_start) -> ids``, least recently used dropped past ``max_bytes``.

    ``get`` returns the cached list itself: callers must not change it.

    >>> c = SegmentCache(max_bytes=1 << 20, min_chars=4)
    >>> c.put(("hello world", True), [1, 2]); c.get(("hello world", True)), c.hits
    ([1, 2], 1)
    """

    __slots__ = ("max_bytes", "min_chars", "nbytes", "hits", "misses", "_entries")

    def __init__(self, max_bytes: int = DEFAULT_SEGMENT_CACHE_BYTES, *,
                 min_chars: int = SEGMENT_MIN_CHARS) -> None:
        self.max_bytes = max_bytes
        self.min_chars = min_chars
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: dict[tuple[str, bool], tuple[list[int], int]] = {}  # key -> (ids, cost)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, bool]) -> list[int] | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            self.misses += 1
            return None
        self._entries[key] = entry  # most recently used last
        self.hits += 1
        return entry[0]

    def put(self, key: tuple[str, bool], ids: list[int]) -> None:
        cost = sys.getsizeof(key[0]) + 8 * len(ids) + _ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        self._entries[key] = (ids, cost)
        self.nbytes += cost
        entries = self._entries
        while self.nbytes > self.max_bytes:
            oldest = next(iter(entries))
            self.nbytes -= entries.pop(oldest)[1]

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def counters(self) -> dict[str, int]:
        """hits, misses, entries and bytes, for a worker's Stats."""
        return {"segment_cache_hits": self.hits, "segment_cache_misses": self.misses,
                "segment_cache_entries": len(self._entries), "segment_cache_bytes": self.nbytes}

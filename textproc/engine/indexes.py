"""The engine-side cache of compiled constraint indexes (what ``EngineIndex`` frames carry).

Owns unpacking an index table (a copy into lists and dicts: no compile, regex or vocabulary
scan), the evictions textproc names (it mirrors this cache, see ``service/constraints.py``),
and a byte cap that drops the oldest first. A partial index (a progressive compile's first
states) is followed by the whole one under the same key: it replaces the partial one here and
becomes its ``successor``, which moves the requests walking the partial one onto it. Imports the text core's ``TokenIndex`` only when
the first index arrives, so an engine that never sees a constraint never loads it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec

__all__ = ["IndexCache", "MAX_PARTIALS"]

MAX_PARTIALS = 256  # partial indexes kept for their whole ones (a few states each)


class IndexCache:
    """key -> TokenIndex, oldest first; ``nbytes`` is what the held tables take."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._indexes: OrderedDict[str, Any] = OrderedDict()  # key -> TokenIndex
        self.nbytes = 0
        self.received = 0
        # partial indexes by key until their whole one arrives, evicted or not (requests may
        # still walk them); the oldest dropped past MAX_PARTIALS
        self._partials: OrderedDict[str, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._indexes)

    def keys(self) -> list[str]:
        return list(self._indexes)

    def get(self, key: str) -> Any:
        """The index for ``key``, or None when this cache does not hold it."""
        return self._indexes.get(key)

    def put(self, table: Any, evict: list[str]) -> str | None:
        """Drop ``evict``, then store ``table`` (an ``IndexTable``); returns what was wrong with
        a table that does not unpack (nothing stored), else None."""
        # here (start-up time): an engine that never gets a constrained request never loads
        # the index (the table-only index and guide: ~20 ms of CPU, no compiler or parser)
        from textproc.core.constraints.index.table import TokenIndex

        for key in evict:
            old = self._indexes.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
        try:
            index = TokenIndex.unpack(**msgspec.structs.asdict(table))
        except (TypeError, ValueError, IndexError) as exc:
            return repr(exc)
        old_index = self._indexes.pop(table.key, None)
        if old_index is not None:
            self.nbytes -= old_index.nbytes
        if index.partial:
            self._partials[table.key] = index
            while len(self._partials) > MAX_PARTIALS:
                self._partials.popitem(last=False)
        else:
            partial = self._partials.pop(table.key, None)
            if partial is not None:
                partial.successor = index  # the guides on the partial index move onto it
        self._indexes[table.key] = index
        self.nbytes += index.nbytes
        self.received += 1
        while self.nbytes > self.max_bytes and len(self._indexes) > 1:
            _, old = self._indexes.popitem(last=False)
            self.nbytes -= old.nbytes
        return None

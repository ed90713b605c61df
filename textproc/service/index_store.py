"""A directory of compiled constraint indexes, shared by the workers and kept across restarts.

Owns :class:`IndexStore`: one file per index key (``<key>.index``, the msgpack encoding of its
``IndexTable``), so a constraint any worker compiled before (the same tools on every request
of an agent loop, a server restart) costs a file read and a table copy instead of a compile.

- Writes go to a temporary name in the directory and are renamed into place: a reader sees a
  whole file or none, and workers writing the same key at once leave one whole file.
- A file is read back through ``TokenIndex.unpack``'s checks; one that does not decode or fit
  together (a torn disk, another version's format) is deleted and the constraint compiled again.
- The directory is trimmed to ``max_bytes``, least recently written or read first.
- The key is the content address (vocabulary fingerprint + regex): a file is trusted to be the
  index of its key, so the directory must be private to the server (created ``0o700``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import msgspec

from textproc.core.constraints import TokenIndex
from textproc.protocol import IndexTable

__all__ = ["IndexStore", "STORE_BYTES"]

_log = logging.getLogger("textproc.worker")
STORE_BYTES = 2 << 30  # index files one store keeps (oldest dropped past it)
_SUFFIX = ".index"
_KEY_CHARS = frozenset("0123456789abcdef")


class IndexStore:
    """Index tables by key in ``directory`` (created if missing), at most ``max_bytes``."""

    def __init__(self, directory: str | Path, *, max_bytes: int = STORE_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder(IndexTable).decode
        self.hits = 0
        self.misses = 0

    def start(self) -> None:
        """Create the directory (private to this user) if it does not exist."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, key: str) -> Path | None:
        if not key or len(key) > 64 or not set(key) <= _KEY_CHARS:
            return None  # only content addresses name files
        return self.directory / f"{key}{_SUFFIX}"

    def get(self, key: str) -> TokenIndex | None:
        """The index stored under ``key``, or None (missing, or unreadable and now deleted)."""
        path = self._path(key)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            table = self._decode(data)
            if table.key != key:
                raise ValueError(f"file holds key {table.key!r}")
            index = TokenIndex.unpack(**msgspec.structs.asdict(table))
        except (msgspec.DecodeError, TypeError, ValueError, IndexError) as e:
            _log.warning("dropping unreadable constraint index %s: %s", path, e)
            path.unlink(missing_ok=True)
            self.misses += 1
            return None
        try:
            os.utime(path)  # recently used: trimmed last
        except OSError:
            pass
        self.hits += 1
        return index

    def put(self, table: IndexTable) -> None:
        """Store ``table`` under its key (a failed write is logged, never raised: the store
        is an optimisation)."""
        path = self._path(table.key)
        if path is None or path.exists():
            return
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(self._encode(table))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self._trim()
        except OSError as e:
            _log.warning("cannot store constraint index in %s: %s", self.directory, e)

    def _trim(self) -> None:
        files = []
        total = 0
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                st = path.stat()
            except OSError:
                continue
            if path.name.startswith(".tmp-"):
                continue
            files.append((st.st_mtime, st.st_size, path))
            total += st.st_size
        files.sort()
        for _, size, path in files:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

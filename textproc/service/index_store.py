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
- One compile per key across the processes sharing the directory: a worker compiles a key
  while it holds the key's lock (``<key>.lock``, ``flock``: the kernel releases it when the
  process dies); another worker that needs the key meanwhile waits for its file (or its
  failure, ``<key>.fail``, for a failure that repeats under the same budget) instead of
  compiling it again.
- While it compiles, the claim holder publishes the key's first states (``<key>.part``, a
  partial index): a waiting worker starts its requests on them at once and waits for the whole
  file only after that, so a constraint's first requests on every worker start together.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import msgspec

from textproc.core.constraints import TokenIndex
from textproc.protocol import IndexTable

__all__ = ["IndexStore", "STORE_BYTES"]

_log = logging.getLogger("textproc.worker")
STORE_BYTES = 2 << 30  # index files one store keeps (oldest dropped past it)
_SUFFIX = ".index"
_LOCK = ".lock"
_FAIL = ".fail"
_PART = ".part"
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

    def _path(self, key: str, suffix: str = _SUFFIX) -> Path | None:
        if not key or len(key) > 64 or not set(key) <= _KEY_CHARS:
            return None  # only content addresses name files
        return self.directory / f"{key}{suffix}"

    def claim(self, key: str) -> int | None:
        """Take ``key``'s compile lock: a file descriptor to :meth:`release`, or None while
        another process holds it (it compiles the key now)."""
        path = self._path(key, _LOCK)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as e:
            _log.warning("cannot lock constraint index %s: %s", path, e)
            return -1  # no lock to be had: compile without one
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def release(self, fd: int, key: str | None = None) -> None:
        """Give back a lock :meth:`claim` took; with ``key``, whose file is stored now, the
        lock file goes too (whoever takes a lock looks for the key's file first)."""
        if fd < 0:
            return
        if key is not None and self.has(key):
            for suffix in (_LOCK, _PART):
                path = self._path(key, suffix)
                if path is not None:
                    path.unlink(missing_ok=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def fail(self, key: str, budget: str, message: str, *, deadline: bool = False) -> None:
        """Remember that compiling ``key`` under ``budget`` (its limits, as text) fails with
        ``message``: every time, or (``deadline``, an overrun: a quieter machine may pass)
        for the requests that arrived before now."""
        path = self._path(key, _FAIL)
        if path is None:
            return
        part = self._path(key, _PART)
        if part is not None:
            part.unlink(missing_ok=True)
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_FAIL)
            with os.fdopen(fd, "w") as f:
                json.dump({"budget": budget, "message": message,
                           "deadline_at": time.time() if deadline else None}, f)
            os.replace(tmp, path)
        except OSError as e:
            _log.warning("cannot store a constraint failure in %s: %s", self.directory, e)

    def failure(self, key: str, budget: str, arrived: float = 0.0) -> str | None:
        """The message :meth:`fail` kept for ``key`` under the same ``budget``, or None; a
        deadline overrun only for a request that arrived (``time.time()``) before it ended:
        it waited for that compile, which was its own, and its budget is spent too."""
        path = self._path(key, _FAIL)
        if path is None:
            return None
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(kept, dict) or kept.get("budget") != budget:
            return None
        overrun = kept.get("deadline_at")
        if isinstance(overrun, (int, float)) and arrived > overrun:
            return None
        message = kept.get("message")
        return message if isinstance(message, str) else None

    def has(self, key: str) -> bool:
        """Whether a file is stored under ``key`` (not read: :meth:`get` checks it)."""
        path = self._path(key)
        return path is not None and path.exists()

    def get(self, key: str) -> TokenIndex | None:
        """The index stored under ``key``, or None (missing, or unreadable and now deleted)."""
        return self._read(key, _SUFFIX)

    def get_table(self, key: str) -> IndexTable | None:
        """The table stored under ``key`` as written (decoded, not unpacked: for passing on to
        the detokenizer, whose engine unpacks it), or None."""
        path = self._path(key)
        if path is None:
            return None
        try:
            table = self._decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
        return table if table.key == key else None

    def get_partial(self, key: str) -> TokenIndex | None:
        """The first states :meth:`put_partial` published for ``key`` (a partial index), or
        None."""
        path = self._path(key, _PART)
        if path is None or not path.exists():
            return None
        index = self._read(key, _PART)
        return index if index is not None and index.partial else None

    def _read(self, key: str, suffix: str) -> TokenIndex | None:
        path = self._path(key, suffix)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            if suffix == _SUFFIX:
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
            if suffix == _SUFFIX:
                self.misses += 1
            return None
        if suffix != _SUFFIX:
            return index
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
        self._write(path, table)
        self._trim()

    def put_partial(self, table: IndexTable) -> None:
        """Publish the first states of ``table.key``'s compile (a partial index; the claim
        holder calls this), for the workers waiting for its whole file; gone once the whole
        file or a failure is stored."""
        path = self._path(table.key, _PART)
        if path is not None and table.n_known:
            self._write(path, table)

    def _write(self, path: Path, table: IndexTable) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=path.suffix)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(self._encode(table))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
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

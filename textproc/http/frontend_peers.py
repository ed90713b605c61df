"""Frontends sharing one port (``serve --http-workers N``): one ``/metrics`` whichever answers.

A scrape of the shared port lands on any one frontend, so each must show the sum of all of
them (per-process series that change with whoever answers would look like counter resets).
Owns the snapshot files ``<runtime_dir>/http-<i>.metrics.json``: every frontend rewrites its own
every SNAPSHOT_EVERY_S (atomically, a few KB); the one answering a scrape adds the others' last
snapshots to its own live numbers. So the sums are up to SNAPSHOT_EVERY_S old for the other
frontends, and a restarted frontend starts its part from 0 (a counter reset to Prometheus).
Must not block the loop for long: small local files, read only on a scrape.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import msgspec

from textproc.http.metrics import Metrics

__all__ = ["Peers", "SNAPSHOT_EVERY_S", "snapshot_file"]

_log = logging.getLogger("textproc.http")
SNAPSHOT_EVERY_S = 1.0


def snapshot_file(index: int) -> str:
    return f"http-{index}.metrics.json"


class Peers:
    """This frontend (``index`` of ``n``) and the others' metric snapshots in ``runtime_dir``
    (``n`` 1, ``runtime_dir`` None: a frontend alone, nothing written or read)."""

    def __init__(self, runtime_dir: Path | None, index: int, n: int, metrics: Metrics) -> None:
        self.runtime_dir = runtime_dir
        self.index = index
        self.n = n
        self.metrics = metrics

    def own_snapshot(self, queue_depths: Mapping[str, int],
                     worker_requests: Sequence[int]) -> dict[str, Any]:
        return {"pid": os.getpid(), "metrics": self.metrics.snapshot(),
                "queue_depths": dict(queue_depths), "worker_requests": list(worker_requests)}

    def write(self, snap: Mapping[str, Any]) -> None:
        if self.runtime_dir is None:
            return
        path = self.runtime_dir / snapshot_file(self.index)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(msgspec.json.encode(snap))
        os.replace(tmp, path)

    async def publish(self, backend: Any) -> None:
        """Until cancelled: write this frontend's snapshot every SNAPSHOT_EVERY_S."""
        while True:
            await asyncio.sleep(SNAPSHOT_EVERY_S)
            try:
                self.write(self.own_snapshot(backend.queue_depths(), backend.worker_requests()))
            except OSError as e:  # the runtime dir is going away (shutdown)
                _log.debug("metrics snapshot not written: %s", e)

    def remove(self) -> None:
        if self.runtime_dir is not None:
            (self.runtime_dir / snapshot_file(self.index)).unlink(missing_ok=True)

    def merged(self, queue_depths: Mapping[str, int], worker_requests: Sequence[int]
               ) -> tuple[Metrics, dict[str, int], list[int], list[tuple[int, int, int]]]:
        """(summed metrics, summed queue depths, summed worker requests, per-frontend
        (index, pid, requests served)) over this frontend's live numbers and the others'
        last snapshots; a frontend without a readable snapshot yet is left out."""
        own = self.own_snapshot(queue_depths, worker_requests)
        total = Metrics()
        depths: dict[str, int] = {}
        shares: list[int] = []
        frontends = []
        for index in range(self.n):
            snap: Any = own
            if index != self.index:
                if self.runtime_dir is None:
                    continue
                try:
                    snap = msgspec.json.decode((self.runtime_dir / snapshot_file(index))
                                               .read_bytes())
                except (OSError, msgspec.DecodeError):
                    continue  # not written yet (starting) or being replaced
            try:
                total.add(snap["metrics"])
                for name, depth in snap["queue_depths"].items():
                    depths[name] = depths.get(name, 0) + int(depth)
                for i, n in enumerate(snap["worker_requests"]):
                    if i < len(shares):
                        shares[i] += int(n)
                    else:
                        shares.append(int(n))
                served = sum(int(n) for _, _, n in snap["metrics"]["requests"])
                frontends.append((index, int(snap["pid"]), served))
            except (KeyError, TypeError, ValueError) as e:
                _log.warning("frontend %d's metrics snapshot is malformed: %s", index, e)
        return total, depths, shares, frontends

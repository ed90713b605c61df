"""An engine's stats file: the link's counters and an atomic write (what ``engine_stub`` and
``engine_vllm`` write with ``--stats-file``; tests and benchmarks read it while it runs)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textproc.engine.link import EngineLink

__all__ = ["link_counters", "write_stats_file"]


def link_counters(link: EngineLink) -> dict[str, int]:
    """The link's counters: frames it could not decode, requests it refused, steps dropped and
    sent, hellos sent."""
    return {"malformed_frames": link.malformed_frames,
            "rejected_requests": link.rejected_requests,
            "dropped_steps": link.dropped_steps,
            "hellos_sent": link.hellos_sent,
            "steps_sent": link.steps_sent}


def write_stats_file(path: str, stats: dict[str, Any]) -> None:
    """Write ``stats`` as JSON to ``path`` atomically (a reader never sees half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(stats, fh)
    os.replace(tmp, path)

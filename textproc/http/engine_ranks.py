"""Which of several engines serve, for ``/health``: the ranks the vLLM front writes into the
engine's stats file (``textproc.vllm_front.front``, every 0.5 s), read again only when the
file changed (a ``stat`` per probe otherwise)."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["EngineRanks"]


class EngineRanks:
    """``check()``: (some rank serves, the ranks that do not, named), from ``path``."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._answer: tuple[bool, str] = (True, "")
        self.stats: dict[str, Any] = {}  # the file as last read

    def check(self) -> tuple[bool, str]:
        """``(True, "")`` without a file or ranks in it (one engine: its link says it all)."""
        if self.path is None:
            return True, ""
        try:
            st = os.stat(self.path)
        except OSError:
            return True, ""
        seen = (st.st_mtime_ns, st.st_size)
        if seen != self._seen:
            try:
                with open(self.path, encoding="utf-8") as f:
                    stats = json.load(f)
            except (OSError, ValueError):
                return self._answer  # written at this moment (atomically): the last answer holds
            self._seen = seen
            self.stats = stats if isinstance(stats, dict) else {}
            self._answer = _judge(stats.get("engines") if isinstance(stats, dict) else None)
        return self._answer


def _judge(engines: Any) -> tuple[bool, str]:
    if not isinstance(engines, list) or not engines:
        return True, ""
    down = [e for e in engines if isinstance(e, dict) and e.get("state") != "ready"]
    if not down:
        return True, ""
    named = "; ".join(_name(e) for e in down)
    if len(down) == len(engines):
        return False, f"no engine is ready: {named}"
    return True, f"{len(engines) - len(down)} of {len(engines)} engines ready; {named}"


def _name(engine: dict[str, Any]) -> str:
    state = str(engine.get("state"))
    what = {"waiting": "has not connected", "connected": "is loading its model",
            "suspect": "lost its connection; waiting for it to dial again",
            "dead": "is dead"}.get(state, state)
    text = f"engine rank {engine.get('rank')} {what}"
    since = engine.get("state_for_s")
    if isinstance(since, (int, float)):
        text += f" (for {since:.0f} s)"
    if state == "dead" and engine.get("died"):
        text += f": {engine['died']}"
    return text

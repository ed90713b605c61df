"""The stop-string contract written literally, as the reference StopChecker is tested against."""

from __future__ import annotations

__all__ = ["reference"]


def reference(
    text: str, stops: list[str], *, include_stop: bool, eligible_from: int = 0
) -> tuple[str, str | None]:
    """The contract, literally: read character by character; the first stop to complete wins,
    among those completing at the same character the one that starts first (the longest)."""
    for end in range(1, len(text) + 1):
        if end - 1 < eligible_from:
            continue
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            stop = max(done, key=len)
            return (text[:end] if include_stop else text[: end - len(stop)]), stop
    return text, None

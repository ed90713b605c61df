"""``--engine external``: textproc starts no engine; serve prints the two endpoints the user's
engine connects its ``EngineLink`` to, and waits for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textproc.config import ServeConfig

__all__ = ["ADAPTER"]


@dataclass(frozen=True)
class ExternalAdapter:
    name: str = "external"
    summary: str = "start no engine: print the endpoints your engine's EngineLink connects to"
    startup_timeout_s: float = 0.0
    stop_timeout_s: float = 0.0
    takes_curve_keys: bool = True  # the user's engine brings its own keys

    def command(self, config: ServeConfig, engine_in: list[str], engine_out: list[str]) -> None:
        return None


ADAPTER = ExternalAdapter()

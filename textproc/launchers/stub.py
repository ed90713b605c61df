"""``--engine stub``: ``engine_stub`` (echo / replay / random) as a child of the service."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textproc.launchers import curve_flags

if TYPE_CHECKING:
    from textproc.config import ServeConfig

__all__ = ["ADAPTER"]


@dataclass(frozen=True)
class StubAdapter:
    name: str = "stub"
    summary: str = "run engine_stub, the fake engine (--stub-mode echo / replay / random)"
    startup_timeout_s: float = 0.0  # starts in under a second: the service's timeout
    stop_timeout_s: float = 0.0
    takes_curve_keys: bool = True

    def command(self, config: ServeConfig, engine_in: list[str], engine_out: list[str]) -> list[str]:
        service = config.service
        command = [sys.executable, "-m", "engine_stub"]
        for address_in, address_out in zip(engine_in, engine_out):  # one pair per shard
            command += ["--engine-in", address_in, "--engine-out", address_out]
        command += ["--model-dir", service.model_dir, "--mode", config.stub_mode]
        if config.stub_stats_file:
            command += ["--stats-file", config.stub_stats_file]
        command += curve_flags(config)
        return command + list(config.stub_args) + list(config.engine_args)


ADAPTER = StubAdapter()

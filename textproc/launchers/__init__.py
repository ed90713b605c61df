"""Engine launchers by name: how ``textproc serve --engine NAME`` starts an engine beside the service.

Owns the registry of engine adapters. An adapter is one module in this package with one
``ADAPTER`` (an :class:`EngineAdapter`): its name, what it is, how long it may take to start,
and the command line of its process (``None``: textproc starts nothing and waits for the
user's engine). The engine process itself runs the engine's own loop with
:class:`textproc.engine.EngineLink` (``engine_stub`` for the stub, ``engine_vllm`` for vLLM's
engine core); textproc never imports an engine.

Adding an engine: a module here with ``ADAPTER`` and its name in ``textproc.config.ENGINES``
(the settings check a name against it); nothing else names it (``serve --engine`` offers
:func:`engine_names`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from textproc.config import ENGINES, ServeConfig

__all__ = ["EngineAdapter", "curve_flags", "engine_adapter", "engine_names"]



class EngineAdapter(Protocol):
    """How one engine is started by ``textproc serve``."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str:
        """One line for ``serve --help``."""
        ...

    @property
    def startup_timeout_s(self) -> float:
        """How long serve waits for the engine's first ``EngineHello`` (0: the service's
        ``--startup-timeout``); a slow engine is waited for with a progress line."""
        ...

    @property
    def stop_timeout_s(self) -> float:
        """How long serve waits for the engine to exit after SIGTERM before it kills it (0:
        the service's ``stop_timeout_s``; the longer of the two applies)."""
        ...

    @property
    def takes_curve_keys(self) -> bool:
        """Whether its process connects with CURVE keys (``--curve-dir``)."""
        ...

    def command(self, config: ServeConfig, engine_in: list[str], engine_out: list[str]) -> list[str] | None:
        """The engine process's command line (shard k's addresses at k), or None when textproc
        starts nothing (the user runs the engine)."""
        ...


def engine_names() -> tuple[str, ...]:
    """Every registered engine name."""
    return ENGINES


def engine_adapter(name: str) -> EngineAdapter:
    """The adapter registered as ``name`` (``KeyError`` naming the choices if none)."""
    if name not in ENGINES:
        raise KeyError(f"no engine {name!r}; registered: {', '.join(ENGINES)}")
    adapter: EngineAdapter = importlib.import_module(f"textproc.launchers.{name}").ADAPTER
    return adapter


def curve_flags(config: ServeConfig) -> list[str]:
    """The service's own key pair for an engine that connects with CURVE (``--curve-dir``)."""
    # here, not at the top (start-up time): textproc.curve imports zmq, which the processes
    # that only read the registry (``serve --help``) need not load
    from textproc.curve import CURVE_FILES

    curve_dir = config.service.curve_dir
    if curve_dir is None:
        return []
    return ["--curve-client-key", str(Path(curve_dir) / CURVE_FILES["server_secret"]),
            "--curve-server-key", str(Path(curve_dir) / CURVE_FILES["server_public"])]

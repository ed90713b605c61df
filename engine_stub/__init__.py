"""engine_stub: a fake LLM engine process for textproc's tests and benchmarks.

Built only on ``textproc.engine.EngineLink`` and, for the echo and replay modes, the text core's
tokenizer: exactly what a real engine imports. Run it with ``python -m engine_stub --help``.
textproc never imports this package.
"""

from __future__ import annotations

from engine_stub.settings import StubSettings, parse_args
from engine_stub.stub import StubEngine, main

__all__ = ["StubEngine", "StubSettings", "main", "parse_args"]

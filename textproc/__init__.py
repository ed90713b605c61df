"""textproc: the text boundary of an LLM server, out of the engine's process.

Public names of the text core are exported lazily here, so importing
``textproc`` (or any core module) never imports the process layer
(zmq, msgspec, asyncio). Process-layer names live in their modules:
``textproc.client.TextClient``, ``textproc.engine.EngineLink``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "TextprocError",
    "InvalidInput",
    "TokenizerFileError",
    "TemplateError",
    "ProtocolError",
    "WorkerDied",
    "StartupTimeout",
    "Tokenizer",
    "IncrementalDetokenizer",
    "StopChecker",
    "OutputPipeline",
    "render_chat",
    "ChatTemplate",
    "CHATML_TEMPLATE",
    "RenderLimits",
    "prompt_starts_in_reasoning",
    "TagStreamer",
    "OutputParser",
    "parse_tool_calls",
    "openai_tool_call",
    "merge_deltas",
    "parse_output",
    "json_schema_to_regex",
    "tool_call_pattern",
]

# public name -> module that defines it
_WHERE = {
    "TextprocError": "textproc.errors",
    "InvalidInput": "textproc.errors",
    "TokenizerFileError": "textproc.errors",
    "TemplateError": "textproc.errors",
    "ProtocolError": "textproc.errors",
    "WorkerDied": "textproc.errors",
    "StartupTimeout": "textproc.errors",
    "Tokenizer": "textproc.tokenizer",
    "IncrementalDetokenizer": "textproc.detokenizer",
    "StopChecker": "textproc.stops",
    "OutputPipeline": "textproc.pipeline",
    "render_chat": "textproc.chat",
    "ChatTemplate": "textproc.chat",
    "CHATML_TEMPLATE": "textproc.chat",
    "RenderLimits": "textproc.chat",
    "prompt_starts_in_reasoning": "textproc.chat",
    "TagStreamer": "textproc.parsing",
    "OutputParser": "textproc.parsing",
    "parse_tool_calls": "textproc.parsing",
    "openai_tool_call": "textproc.parsing",
    "merge_deltas": "textproc.parsing",
    "parse_output": "textproc.parsing",
    "json_schema_to_regex": "textproc.constraints",
    "tool_call_pattern": "textproc.constraints",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'textproc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

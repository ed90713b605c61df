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
    "TokenVocabulary",
    "TokenIndex",
    "compile_constraint",
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
    "Tokenizer": "textproc.core.tokenizer",
    "IncrementalDetokenizer": "textproc.core.detokenizer",
    "StopChecker": "textproc.core.stops",
    "OutputPipeline": "textproc.core.pipeline",
    "render_chat": "textproc.core.chat",
    "ChatTemplate": "textproc.core.chat",
    "CHATML_TEMPLATE": "textproc.core.chat",
    "RenderLimits": "textproc.core.chat",
    "prompt_starts_in_reasoning": "textproc.core.chat",
    "TagStreamer": "textproc.core.parsing",
    "OutputParser": "textproc.core.parsing",
    "parse_tool_calls": "textproc.core.parsing",
    "openai_tool_call": "textproc.core.parsing",
    "merge_deltas": "textproc.core.deltas",
    "parse_output": "textproc.core.parsing",
    "json_schema_to_regex": "textproc.core.constraints",
    "tool_call_pattern": "textproc.core.constraints",
    "TokenVocabulary": "textproc.core.constraints",
    "TokenIndex": "textproc.core.constraints",
    "compile_constraint": "textproc.core.constraints",
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

"""textproc: the text boundary of an LLM server, out of the engine's process.

Public names of the text core are exported lazily here, so importing
``textproc`` (or any core module) never imports the process layer
(zmq, msgspec, asyncio). Process-layer names live in their modules:
``textproc.client.TextClient``, ``textproc.engine.EngineLink``.
"""

from __future__ import annotations

import importlib
from typing import Any

# module -> the public names it defines, written once; ``__all__`` is their list
_PUBLIC = {
    "textproc.errors": ("TextprocError", "InvalidInput", "TokenizerFileError", "TemplateError",
                        "ProtocolError", "WorkerDied", "StartupTimeout"),
    "textproc.options": ("SamplingOptions", "OutputOptions", "ParseOptions"),
    "textproc.core.tokenizer": ("Tokenizer",),
    "textproc.core.detokenizer": ("IncrementalDetokenizer",),
    "textproc.core.stops": ("StopChecker",),
    "textproc.core.pipeline": ("OutputPipeline",),
    "textproc.core.chat": ("render_chat", "ChatTemplate", "CHATML_TEMPLATE", "RenderLimits",
                           "prompt_starts_in_reasoning"),
    "textproc.core.parsing": ("TagStreamer", "OutputParser", "parse_tool_calls",
                              "openai_tool_call", "parse_output"),
    "textproc.core.deltas": ("merge_deltas",),
    "textproc.core.constraints": ("json_schema_to_regex", "tool_call_pattern", "TokenVocabulary",
                                  "TokenIndex", "compile_constraint"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'textproc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""Streaming reasoning / tool-call parsers: model text -> OpenAI chat delta fragments.

One file per concern: ``tags`` (TagStreamer, the holdback rule for tags), ``json_scan``
(incremental JSON validator), ``hermes`` (Qwen/Hermes ``<tool_call>`` bodies), ``mistral``
(``[TOOL_CALLS][...]`` lists of call bodies), ``output``
(OutputParser and the one-shot forms). Imports only the standard library and ``regex``.
"""

from __future__ import annotations

from textproc.core.parsing.output import (
    TOOL_FORMATS,
    OutputParser,
    merge_deltas,
    openai_tool_call,
    parse_output,
    parse_tool_calls,
)
from textproc.core.parsing.tags import TagStreamer

__all__ = [
    "TagStreamer",
    "OutputParser",
    "parse_output",
    "parse_tool_calls",
    "openai_tool_call",
    "merge_deltas",
    "TOOL_FORMATS",
]

"""Streaming reasoning / tool-call parsers: model text -> OpenAI chat deltas.

One file per concern: ``tags`` (TagStreamer, the holdback rule for tags), ``json_scan``
(incremental JSON validator), ``json_args`` (JSON arguments and call objects in a section),
``section`` (what every tool-call format shares: buffering, call deltas, malformed calls),
``raw_values`` (typing raw values by schema), ``declaration`` (what a format declares: markers,
parser, detection, call spelling, specials), ``families/`` (one module per format family, each
holding its parser and its declarations), ``formats`` (the registry: a scan of ``families``),
``detect`` (the format a model's files call for), ``output`` (OutputParser), ``oneshot`` (its
one-shot forms: ``parse_output``, ``parse_tool_calls``, ``openai_tool_call``). Imports only the standard library, ``regex`` and other core modules.
"""

from __future__ import annotations

from textproc.core.deltas import merge_deltas
from textproc.core.parsing.formats import REASONING_FORMATS, TOOL_FORMATS
from textproc.core.parsing.oneshot import openai_tool_call, parse_output, parse_tool_calls
from textproc.core.parsing.output import OutputParser
from textproc.core.parsing.tags import TagStreamer

__all__ = [
    "TagStreamer",
    "OutputParser",
    "parse_output",
    "parse_tool_calls",
    "openai_tool_call",
    "merge_deltas",
    "TOOL_FORMATS",
    "REASONING_FORMATS",
]

"""Granite 3.x: tool calls as a JSON list after ``<|tool_call|>`` (3.0) or ``<tool_call>`` (3.1),
and reasoning between "Here is my thought process:" and "Here is my response:".

Granite 4 writes Hermes calls (:mod:`textproc.core.parsing.families.hermes`). The list is read by
``json_args.json_list_body``; generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ReasoningFormat, ToolFormat
from textproc.core.parsing.json_args import json_list_body

__all__ = ["FORMATS"]

FORMATS = (
    ToolFormat(
        "granite", ("<|tool_call|>", "<tool_call>"), json_list_body,
        CallSpelling((Lit('{"name": '), Name(quoted=True), Lit(', "arguments": '), JsonArgs(), Lit("}")),
                     begin="<|tool_call|>[", sep=", ", end="]"),
        specials=("<|tool_call|>",),
        detect=(Detect(90, ("<|tool_call|>",), "<|tool_call|> followed by a JSON list"),), listed=80,
    ),
    ReasoningFormat(
        "granite", ("Here is my thought process:", "Here's my thought process:"),
        ("Here is my response:", "Here's my response:"),
        detect=(Detect(40, ("Here is my thought process:",), "'Here is my thought process:'"),), listed=30,
    ),
)

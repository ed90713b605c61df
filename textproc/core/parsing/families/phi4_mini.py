"""Phi-4-mini (Microsoft) tool calls: ``functools`` followed by a JSON list of calls.

As Phi-4-mini writes them (vLLM's ``phi4_mini_json`` parser reads the same)::

    functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "ping", "arguments": {}}]

``functools`` is ordinary text, so a section opens at the word and a call needs ``[`` right
after it: anything else is content again (``import functools`` stays prose). Read by
``json_args.json_list``.

Phi-4-mini's own chat template (fetched from the npm package ``@huggingface/ollama-utils``)
declares the tools of a system message between its ``<|tool|>`` and ``<|/tool|>`` tokens and
renders no assistant tool calls (only ``content``), so it is detected by those tokens (in the
template or the added tokens; ranked before Granite's ``<|tool_call|>``, which Phi-4-mini's
vocabulary also holds) and there is no rendering to parse back: the vectors follow the
reference parser's. FireFunction v2's template asks for the same spelling and renders it.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ToolFormat
from textproc.core.parsing.json_args import json_list
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["FORMATS", "phi4_mini_body"]

OPEN = "functools"


def phi4_mini_body(s: Section) -> Wait:
    """The text after ``functools``: a JSON list of call objects."""
    if (yield from s.peek()) != "[":
        raise Malformed(s.at())
    result = yield from json_list(s)
    return result


FORMATS = (ToolFormat(
    "phi4_mini", (OPEN,), phi4_mini_body,
    CallSpelling((Lit('{"name": '), Name(quoted=True), Lit(', "arguments": '), JsonArgs(), Lit("}")),
                 begin=OPEN + "[", sep=", ", end="]"),
    listed=179,
    detect=(Detect(89, ("<|tool|>", "<|/tool|>"), "Phi-4-mini's <|tool|>...<|/tool|> tools (calls: functools[...])"),
            Detect(96, ("functools[",), "functools[...] JSON call list")),
),)

"""Nemotron Nano v2 (NVIDIA) tool calls: a JSON list between ``<TOOLCALL>`` tags.

As the Nemotron-Nano-v2 chat template renders calls::

    <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "ping", "arguments": {}}]</TOOLCALL>

Read by ``json_args.json_list``; the close tag may be missing at the very end after the list.
Reasoning is ``<think>...</think>`` (the prompt opens ``<think>``). Nemotron 3 Nano writes
Qwen3-Coder calls (:mod:`textproc.core.parsing.families.qwen3_coder`).
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ToolFormat
from textproc.core.parsing.json_args import json_list
from textproc.core.parsing.section import Section, Wait

__all__ = ["FORMATS"]

OPEN, CLOSE = "<TOOLCALL>", "</TOOLCALL>"


def nemotron_body(s: Section) -> Wait:
    """The text after ``<TOOLCALL>``."""
    result = yield from json_list(s, close=CLOSE)
    return result


FORMATS = (ToolFormat(
    "nemotron_json", (OPEN,), nemotron_body,
    CallSpelling((Lit('{"name": '), Name(quoted=True), Lit(', "arguments": '), JsonArgs(), Lit("}")),
                 begin=OPEN + "[", sep=", ", end="]" + CLOSE),
    specials=(OPEN, CLOSE), listed=172,
    detect=(Detect(19, (OPEN, CLOSE), "<TOOLCALL>[...]</TOOLCALL> JSON list"),),
),)

"""Cohere Command (R7B, Command A) tool calls and reasoning.

As the Command templates render calls::

    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},
        {"tool_call_id": "1", "tool_name": "ping", "parameters": {}}
    ]<|END_ACTION|>

Read by ``json_args.json_list`` (``tool_call_id`` read and dropped: ids are the server's).
Reasoning (``cohere``) is ``<|START_THINKING|>...<|END_THINKING|>``; Command A's prompt opens it.
The answer's ``<|START_RESPONSE|>`` / ``<|END_RESPONSE|>`` are special tokens the detokenizer
drops like any other.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ReasoningFormat, Slot, ToolFormat
from textproc.core.parsing.json_args import json_list
from textproc.core.parsing.section import Section, Wait

__all__ = ["FORMATS"]

OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
THINK_OPEN, THINK_CLOSE = "<|START_THINKING|>", "<|END_THINKING|>"


def cohere_body(s: Section) -> Wait:
    """The text after ``<|START_ACTION|>``."""
    result = yield from json_list(s, name_key="tool_name", args_keys=("parameters",),
                                  ignored_keys=("tool_call_id",), close=CLOSE)
    return result


FORMATS = (
    ToolFormat(
        "cohere", (OPEN,), cohere_body,
        CallSpelling((Lit('{"tool_call_id": "'), Slot("(?:0|[1-9][0-9]*)", "0"), Lit('", "tool_name": '),
                      Name(quoted=True), Lit(', "parameters": '), JsonArgs(), Lit("}")),
                     begin=OPEN + "[\n    ", sep=",\n    ", end="\n]" + CLOSE),
        specials=(OPEN, CLOSE), listed=174,
        detect=(Detect(19, (OPEN, CLOSE), "<|START_ACTION|>[...]<|END_ACTION|>"),),
    ),
    ReasoningFormat(
        "cohere", (THINK_OPEN,), (THINK_CLOSE,), specials=(THINK_OPEN, THINK_CLOSE), close_text=THINK_CLOSE,
        listed=170, detect=(Detect(23, (THINK_OPEN, THINK_CLOSE), "<|START_THINKING|>...<|END_THINKING|>"),),
    ),
)

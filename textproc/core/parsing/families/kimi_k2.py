"""Kimi K2 tool calls: ``functions.NAME:IDX`` ids and JSON arguments.

Owns the text after ``<|tool_calls_section_begin|>`` (also spelled
``<|tool_call_section_begin|>``)::

    <|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{...}<|tool_call_end|>

repeated, then ``<|tool_calls_section_end|>``. The ``functions.NAME:IDX`` string is the call's
id (clients send it back with the tool result, and the template renders it again); the name
is what lies between ``functions.`` and the last ``:``. The section-begin token also ends an
open reasoning block. Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, Slot, ToolFormat
from textproc.core.parsing.json_args import json_args
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["kimi_k2_body", "kimi_name", "SECTION_BEGIN", "SECTION_BEGIN_ALT", "FORMATS"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_BEGIN_ALT = "<|tool_call_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
SECTION_END_ALT = "<|tool_call_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_MAX_ID = 256


def kimi_name(call_id: str) -> str:
    """``functions.get_weather:0`` -> ``get_weather``."""
    name = call_id[len("functions."):] if call_id.startswith("functions.") else call_id
    head, sep, tail = name.rpartition(":")
    return head if sep and tail.isdigit() else name


def kimi_k2_body(s: Section) -> Wait:
    """The text after the section-begin token."""
    n_read = 0  # calls read, declared or not
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(CALL_BEGIN, SECTION_END, SECTION_END_ALT)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None
            raise Malformed(s.at())
        if tag != CALL_BEGIN:
            return None
        call_id, _ = yield from s.until(ARGS_BEGIN, max_len=_MAX_ID)
        call_id = call_id.strip()
        name = kimi_name(call_id)
        if not name:
            raise Malformed(s.at())
        s.header(name, call_id=call_id)
        yield from s.skip_ws()
        yield from json_args(s)
        yield from s.skip_ws()
        yield from s.lit(CALL_END)
        s.end_call()
        n_read += 1


FORMATS = (ToolFormat(
    "kimi_k2", (SECTION_BEGIN, SECTION_BEGIN_ALT), kimi_k2_body,
    CallSpelling((Lit(f"{CALL_BEGIN}functions."), Name(), Lit(":"), Slot("(?:0|[1-9][0-9]*)", "0"), Lit(ARGS_BEGIN),
                  JsonArgs(), Lit(CALL_END)), begin=SECTION_BEGIN, end=SECTION_END),
    ends_reasoning=True,
    specials=(SECTION_BEGIN, SECTION_BEGIN_ALT, SECTION_END, SECTION_END_ALT, CALL_BEGIN, ARGS_BEGIN, CALL_END),
    detect=(Detect(40, (SECTION_BEGIN,), "<|tool_calls_section_begin|>"),), listed=60,
),)

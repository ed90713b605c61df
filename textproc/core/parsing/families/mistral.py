"""Mistral tool calls (the list form and the v11+ form) and reasoning (``[THINK]...[/THINK]``).

Owns the text after ``[TOOL_CALLS]``:

* list form (Mistral before tokenizer v11; ``json_args.json_list_body``): whitespace, then ``[`` call objects
  ``{"name": ..., "arguments": {...}}`` separated by ``,`` and ``]``, or a single object
  without brackets. Anything else after a complete object ends the list leniently (what
  follows is ordinary text); anything else before the first object makes it malformed.
* v11+ (Mistral Small 3.2, Magistral, Devstral): ``NAME[ARGS]{...}``, optionally
  ``NAME[CALL_ID]ID[ARGS]{...}`` (the id is the call's id), one call per ``[TOOL_CALLS]``.
  ``[ARGS]`` is a control token some decoders drop, so ``NAME{...}`` parses too. The
  arguments may be a JSON string holding the object (Mistral Small 3.2's template writes
  ``arguments|tojson``).

``[TOOL_CALLS]`` is a special token in Mistral vocabularies: the detokenizer keeps the specials
a format needs (see :mod:`textproc.core.parsing.formats`). Generic rules:
:mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

import re

from textproc.core.parsing.declaration import (
    CallSpelling, Detect, JsonArgs, Lit, Name, ReasoningFormat, Slot, ToolFormat,
)
from textproc.core.parsing.json_args import json_args, json_list_body
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["mistral_body", "FORMATS"]

_MAX_NAME = 256
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.\-]*")


def mistral_body(s: Section) -> Wait:
    """The text after ``[TOOL_CALLS]``: the list form or ``NAME[ARGS]{...}``."""
    c = yield from s.peek(skip_ws=True)
    if c is None:
        raise Malformed(s.at())
    if c in "[{":
        result = yield from json_list_body(s)
        return result
    s.begin_call()
    name = yield from s.run_of(_NAME_CHARS, max_len=_MAX_NAME)
    if not name:
        raise Malformed(s.at())
    call_id = None
    if (yield from s.match("[CALL_ID]")) is not None:
        call_id = (yield from s.run_of(_NAME_CHARS, max_len=_MAX_NAME)) or None
    yield from s.match("[ARGS]")
    if (yield from s.peek()) not in ("{", '"'):
        raise Malformed(s.at())
    s.header(name, call_id=call_id)
    yield from json_args(s)
    s.end_call()
    return None


_ID = "[A-Za-z0-9]{9}"
# v11+: ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` as Mistral Small 3.2 renders it (the id
# optional); or the list form of earlier models (``"id"`` optional, as Nemo renders it)
_LIST = CallSpelling((Lit('{"name": '), Name(quoted=True), Lit(', "arguments": '), JsonArgs(),
                      Slot(f'(?:, "id": "{_ID}")?', ""), Lit("}")), begin="[TOOL_CALLS][", sep=", ", end="]")
FORMATS = (
    ToolFormat(
        "mistral", ("[TOOL_CALLS]",), mistral_body,
        CallSpelling((Lit("[TOOL_CALLS]"), Name(), Slot(f"(?:\\[CALL_ID\\]{_ID})?", ""), Lit("[ARGS]"),
                      JsonArgs()), alternatives=(_LIST,)),
        specials=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
        detect=(Detect(80, ("[TOOL_CALLS]",), "[TOOL_CALLS]"),), listed=40,
    ),
    ReasoningFormat("mistral", ("[THINK]",), ("[/THINK]",), specials=("[THINK]", "[/THINK]"),
                    close_text="[/THINK]", detect=(Detect(20, ("[THINK]", "[/THINK]"), "[THINK]...[/THINK]"),), listed=20),
)

"""Mistral tool calls: the list form and the v11+ form; also Granite 3's list.

Owns the text after ``[TOOL_CALLS]`` (Granite 3: after ``<|tool_call|>``):

* list form (Mistral before tokenizer v11, Granite 3.x): whitespace, then ``[`` call objects
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

from textproc.core.parsing.json_args import json_args, json_call
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["json_list_body", "mistral_body"]

_MAX_NAME = 256
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.\-]*")


def json_list_body(s: Section) -> Wait:
    """A list of call objects, or a single one."""
    c = yield from s.peek(skip_ws=True)
    if c == "[":
        s.pos += 1
        yield from s.skip_ws()
        while True:
            s.begin_call()
            yield from json_call(s, ignored_keys=("id",))
            s.end_call()
            c = yield from s.peek(skip_ws=True)
            if c == ",":
                s.pos += 1
                yield from s.skip_ws()
                s.skip_markup()
                continue
            if c == "]":
                s.pos += 1
                s.skip_markup()
            return None
    s.begin_call()
    yield from json_call(s, ignored_keys=("id",))
    s.end_call()
    return None


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

"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``.

Owns the calls a Llama 3 model writes for custom tools, as its template asks: a JSON object
with ``name`` and ``parameters`` (``arguments`` is accepted too), either after the
``<|python_tag|>`` special token or as the very start of the answer (leading whitespace
allowed). Several calls are separated by ``;`` or a line break. After the last object anything
else is ordinary text; so is a JSON object later in the answer (the template asks for the call
as the whole answer, so a model quoting a call in prose is not making one). A built-in tool call (``<|python_tag|>brave_search.call(...)``) is not JSON and
comes back as content. Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

import re

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ToolFormat
from textproc.core.parsing.json_args import json_call
from textproc.core.parsing.section import Section, Wait

__all__ = ["llama3_json_body", "FORMATS"]

_SPACE = re.compile(r"[ \t\r\n]*")
_MAX_GAP = 256  # whitespace between two calls


def llama3_json_body(s: Section) -> Wait:
    """The text after ``<|python_tag|>`` (or the answer itself, starting with ``{``)."""
    yield from s.skip_ws()
    while True:
        s.begin_call()
        yield from json_call(s, args_keys=("parameters", "arguments"))
        s.end_call()
        end = s.at()
        gap = yield from s.run_of(_SPACE, max_len=_MAX_GAP)
        c = yield from s.peek()
        if c == ";":
            s.pos += 1
            c = yield from s.peek(skip_ws=True)
        elif "\n" not in gap:
            return end
        if c != "{":
            return end


FORMATS = (ToolFormat(
    "llama3_json", ("<|python_tag|>",), llama3_json_body,
    CallSpelling((Lit('{"name": '), Name(quoted=True), Lit(', "parameters": '), JsonArgs(), Lit("}")), sep="; "),
    start_chars="{", specials=("<|python_tag|>",),
    detect=(Detect(110, ("<|python_tag|>",), "<|python_tag|> / {\"name\", \"parameters\"}"),
            Detect(120, ('"parameters": ', "Respond in the format {\"name\""), "{\"name\", \"parameters\"} JSON calls")),
    listed=20,
),)

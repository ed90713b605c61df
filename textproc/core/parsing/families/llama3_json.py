"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``.

Owns the calls a Llama 3 model writes for custom tools, as its template asks: a JSON object
with ``name`` and ``parameters`` (``arguments`` is accepted too), either after the
``<|python_tag|>`` special token or as the very start of the answer (leading whitespace
allowed). Several calls are separated by ``;``. After the last object anything else is
ordinary text. A built-in tool call (``<|python_tag|>brave_search.call(...)``) is not JSON and
comes back as content. Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ToolFormat
from textproc.core.parsing.json_args import json_call
from textproc.core.parsing.section import Section, Wait

__all__ = ["llama3_json_body", "FORMATS"]


def llama3_json_body(s: Section) -> Wait:
    """The text after ``<|python_tag|>`` (or the answer itself, starting with ``{``)."""
    yield from s.skip_ws()
    while True:
        s.begin_call()
        yield from json_call(s, args_keys=("parameters", "arguments"))
        s.end_call()
        end = s.at()
        c = yield from s.peek(skip_ws=True)
        if c != ";":
            return end
        s.pos += 1
        c = yield from s.peek(skip_ws=True)
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

"""Hermes / Qwen tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Owns the body of one call, from just after the open tag to just after the close tag. The
object is validated incrementally (:meth:`Section.json_call`), so a ``</tool_call>`` inside an
argument string does not end the call. Members are exactly ``name`` and ``arguments`` (an
object, or a string holding a JSON object, as some models write it), each at most once;
``arguments`` written before ``name`` are kept for the header, and a call without
``arguments`` gets ``{}``.

After the object: whitespace, then the close tag. Anything else ends the call leniently at
the object (it is valid, and what follows the whitespace is ordinary text); so does the end
of the output (the close tag missing at the end, or only partly there: that part is content).
Generic rules (malformed calls, ids, undeclared names): :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ToolFormat
from textproc.core.parsing.json_args import json_call
from textproc.core.parsing.section import Body, Section, Wait

__all__ = ["hermes_body", "hermes_format", "FORMATS"]


def hermes_body(close_tag: str = "</tool_call>") -> Body:
    """The body of a Hermes call ending with ``close_tag``."""

    def body(s: Section) -> Wait:
        yield from s.skip_ws()
        s.begin_call()
        yield from json_call(s)
        yield from s.skip_ws()
        yield from s.match(close_tag)
        s.end_call()
        return None

    return body


def hermes_format(open_tag: str = "<tool_call>", close_tag: str = "</tool_call>") -> ToolFormat:
    """The Hermes format with its tags (custom tags give the same format with others)."""
    calls = CallSpelling((Lit(f'{open_tag}\n{{"name": '), Name(quoted=True), Lit(', "arguments": '), JsonArgs(),
                          Lit(f"}}\n{close_tag}")), sep="\n")
    return ToolFormat(
        "hermes", (open_tag,), hermes_body(close_tag), calls, specials=(open_tag, close_tag),
        detect=(Detect(130, ("<tool_call>",), "<tool_call> with a JSON object"),),
        retag=hermes_format, is_default=True,
    )


FORMATS = (hermes_format(),)

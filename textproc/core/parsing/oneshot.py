"""One-shot forms of the output parser: a complete answer -> its message, its tool calls, and
one OpenAI tool call object.

Each is what :class:`~textproc.core.parsing.output.OutputParser` streams, merged: the same
options give the same result in any split.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from textproc.core.deltas import merge_deltas
from textproc.core.parsing.formats import TOOL_FORMATS
from textproc.core.parsing.output import OutputParser
from textproc.errors import InvalidInput, short
from textproc.options import OutputOptions, ParseOptions

__all__ = ["openai_tool_call", "parse_output", "parse_tool_calls"]


def parse_output(
    text: str,
    parse: ParseOptions | None = None,
    output: OutputOptions | None = None,
    *,
    think_tags: tuple[str, str] | None = None,
    tool_tags: tuple[str, str] | None = None,
    request_id: str = "",
    **options: Any,
) -> dict[str, Any]:
    """One-shot parse of a complete answer: ``merge_deltas`` of an :class:`OutputParser` with
    the same options fed the text in any split. A call that is malformed or cut off is content,
    not a call.
    """
    parser = OutputParser(parse, output, think_tags=think_tags, tool_tags=tool_tags,
                          request_id=request_id, **options)
    return merge_deltas(parser.feed(text) + parser.finish())


def parse_tool_calls(
    text: str,
    *,
    tool_tags: tuple[str, str] | None = None,
    tool_format: str = "",
    tool_schemas: Sequence[Mapping[str, Any]] | None = None,
    request_id: str = "",
) -> tuple[str, list[dict[str, Any]]]:
    """One-shot: ``(content, tool calls)`` of a complete output (no reasoning split).

    >>> parse_tool_calls('hi<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    ('hi', [{'id': 'call_0', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"a": 1}'}}])
    """
    merged = parse_output(
        text, tools=True, tool_tags=tool_tags,
        tool_format=tool_format or TOOL_FORMATS.default,
        tool_schemas=tool_schemas, request_id=request_id,
    )
    return merged["content"], merged["tool_calls"]


def openai_tool_call(name: str, arguments: str | Mapping[str, Any], *, id: str | None = None) -> dict[str, Any]:
    """An OpenAI tool call ``{"id", "type": "function", "function": {"name", "arguments"}}``.

    ``arguments`` given as a mapping is serialised with ``json.dumps(ensure_ascii=False)``;
    a string is kept as is. Without ``id`` it is derived from name and arguments
    (``call_`` + 24 hex digits), so the same call always gets the same id.

    >>> openai_tool_call("f", {"a": 1}, id="call_1")
    {'id': 'call_1', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"a": 1}'}}
    """
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"tool call name {short(name)} must be a non-empty string")
    if isinstance(arguments, str):
        args_text = arguments
    elif isinstance(arguments, Mapping):
        args_text = json.dumps(dict(arguments), ensure_ascii=False)
    else:
        raise InvalidInput(
            f"tool call arguments {short(arguments)} for {name!r} must be a JSON string or a mapping"
        )
    if id is None:
        digest = hashlib.sha256(f"{name}\x00{args_text}".encode("utf-8", "surrogatepass"))
        id = "call_" + digest.hexdigest()[:24]
    return {"id": id, "type": "function", "function": {"name": name, "arguments": args_text}}

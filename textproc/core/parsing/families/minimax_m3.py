"""MiniMax M3 tool calls and reasoning: namespaced invoke blocks whose parameters are tags.

As the MiniMax-M3 chat template renders calls (``NS`` is its namespace token ``]<]minimax[>[``,
written before every structural tag; no line breaks but the ones shown)::

    NS<tool_call>
    NS<invoke name="get_weather">NS<city>ParisNS</city>NS<days>3NS</days>NS</invoke>
    NS<invoke name="ping">NS</invoke>
    NS</tool_call>

A parameter is an element named by its key. A string is written raw, a number as it prints,
a boolean as JSON; an object is one element per member and a list one ``<item>`` element per
entry, recursively (``NS<opts>NS<unit>cNS</unit>NS</opts>``); None is left out, and an empty
object or list is an empty element. Read back: a value the tool declares as text is raw text
read as it arrives (up to its exact close tag); any other value is read when its close
tag arrives: a leaf typed by its schema (``raw_values.typed_json``; an empty leaf of an array
or object schema is ``[]`` / ``{}``), nested elements an array when the schema says array (or,
without one, when every child is an ``<item>``), else an object (a repeated child collects
its values in a list). Whitespace between tags is formatting; text beside child elements, a
close tag naming another element, or nesting past 16 levels is malformed. The block's end may
be missing at the very end after a complete invoke; a call cut off inside an invoke is
malformed (:mod:`textproc.core.parsing.section`).

Reasoning (``minimax_m3``) is ``<mm:think>...</mm:think>``. The template's thinking modes:
enabled opens ``<mm:think>`` in the generation prompt; disabled writes ``</mm:think>`` there;
adaptive writes nothing, and the model opens a block or writes ``</mm:think>`` first, as the
template renders every past turn without reasoning. A ``</mm:think>`` in content closes no
block and is dropped (``hidden_tags``).

Forced calls spell non-string values as JSON inside their element (``{key}`` in the declared
value close), which the parser reads as a leaf.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from textproc.core.parsing.declaration import (
    CallSpelling, Detect, Lit, Name, RawArgs, ReasoningFormat, ToolFormat,
)
from textproc.core.parsing.raw_values import property_schema, schema_types, string_only, typed_json
from textproc.core.parsing.section import Malformed, Section, Wait
from textproc.core.parsing.xml_invoke import attribute

__all__ = ["FORMATS", "minimax_m3_body", "NS"]

NS = "]<]minimax[>["
BEGIN, END = f"{NS}<tool_call>", f"{NS}</tool_call>"
INVOKE, INVOKE_CLOSE = f"{NS}<invoke", "/invoke"
THINK_OPEN, THINK_CLOSE = "<mm:think>", "</mm:think>"
ITEM = "item"  # the element of one list entry
_MAX_TAG = 512  # characters of a tag's name or attributes
_MAX_DEPTH = 16  # nesting of elements inside a parameter


def _tag(s: Section) -> Wait:
    """The name inside the ``<...>`` after a namespace token (consumed): ``/name`` closes."""
    yield from s.lit("<")
    name, _ = yield from s.until(">", max_len=_MAX_TAG)
    if not name or name == "/":
        raise Malformed(s.at())
    return name


def _kind(schema: Any) -> str | None:
    # "array" / "object" when the schema says which container a value with children is
    types = schema_types(schema) or set()
    if "array" in types and "object" not in types:
        return "array"
    if "object" in types and "array" not in types:
        return "object"
    return None


def _container(kind: str | None, children: list[tuple[str, str]]) -> str:
    # JSON text of nested elements [(name, value JSON)]
    if kind == "array" or (kind is None and all(name == ITEM for name, _ in children)):
        return _list([v for _, v in children])
    members: dict[str, list[str]] = {}
    for name, value in children:
        members.setdefault(name, []).append(value)
    return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + (vs[0] if len(vs) == 1 else _list(vs))
                           for k, vs in members.items()) + "}"


def _list(values: list[str]) -> str:
    return "[" + ", ".join(values) + "]"


def _value(s: Section, name: str, schema: Any, depth: int) -> Wait:
    """The JSON text of element ``name``'s value (its open tag read) up to its close tag
    (consumed)."""
    close = f"{NS}</{name}>"
    if string_only(schema):
        text, _ = yield from s.until(close)
        return json.dumps(text, ensure_ascii=False)
    kind = _kind(schema)
    leaf = None  # the text before the first child element or the close tag
    children: list[tuple[str, str]] = []
    while True:
        text, _ = yield from s.until(NS)
        if leaf is None:
            leaf = text
        elif text.strip():  # text beside child elements
            raise Malformed(s.at())
        tag = yield from _tag(s)
        if tag == "/" + name:
            break
        if tag.startswith("/") or depth >= _MAX_DEPTH or (not children and leaf.strip()):
            raise Malformed(s.at())
        if kind == "array":
            child_schema = schema.get("items") if isinstance(schema, Mapping) else None
        else:
            child_schema = property_schema(schema, tag) if kind == "object" else None
        children.append((tag, (yield from _value(s, tag, child_schema, depth + 1))))
    if children:
        return _container(kind, children)
    assert leaf is not None
    if kind is not None and not leaf.strip():
        return "[]" if kind == "array" else "{}"
    return typed_json(leaf, schema)


def _invoke(s: Section) -> Wait:
    """One invoke after its ``NS<invoke`` (consumed), up to ``NS</invoke>`` (consumed)."""
    attrs, _ = yield from s.until(">", max_len=_MAX_TAG)
    name = (attribute(attrs, "name") or "").strip()
    if not name:
        raise Malformed(s.at())
    s.header(name)
    params = s.schemas.get(name)
    while True:
        yield from s.skip_ws()
        yield from s.lit(NS)
        key = yield from _tag(s)
        if key == INVOKE_CLOSE:
            break
        if key.startswith("/"):
            raise Malformed(s.at())
        if s.is_string_argument(key):  # text: read as it arrives
            yield from s.string_member(key, f"{NS}</{key}>", strip_newlines=False)
        else:
            s.json_member(key, (yield from _value(s, key, property_schema(params, key), 0)))
    s.end_members()


def minimax_m3_body(s: Section) -> Wait:
    """The text after ``NS<tool_call>``: invokes until ``NS</tool_call>``."""
    n_read = 0
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(INVOKE, END)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None  # the block's end missing at the very end
            raise Malformed(s.at())
        if tag == END:
            return None
        yield from _invoke(s)
        s.end_call()
        n_read += 1


FORMATS = (
    ToolFormat(
        "minimax_m3", (BEGIN,), minimax_m3_body,
        CallSpelling((Lit(f'{NS}<invoke name="'), Name(), Lit('">'),
                      RawArgs(f"{NS}<", ">", f"{NS}</{{key}}>", item=ITEM), Lit(f"{NS}</invoke>\n")),
                     begin=BEGIN + "\n", end=END),
        specials=(NS,), raw_values=True, listed=163, reasoning="minimax_m3",
        detect=(Detect(16, (NS,), "]<]minimax[>[-prefixed invoke blocks (MiniMax M3)"),),
    ),
    ReasoningFormat(
        "minimax_m3", (THINK_OPEN,), (THINK_CLOSE,), specials=(THINK_OPEN, THINK_CLOSE), close_text=THINK_CLOSE,
        hidden_tags=(THINK_CLOSE,), listed=163,
        detect=(Detect(24, (THINK_OPEN, THINK_CLOSE), "<mm:think>...</mm:think>"),),
    ),
)

"""Kimi K3 (Moonshot) tool calls and reasoning: XTML channels.

The Kimi K3 chat template writes an assistant turn as channels between the special tokens
``<|open|>``, ``<|sep|>`` and ``<|close|>``::

    <|open|>think<|sep|>REASONING<|close|>think<|sep|>
    <|open|>response<|sep|>CONTENT<|close|>response<|sep|>
    <|open|>tools<|sep|>
    <|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>
    <|close|>call<|sep|>
    <|close|>tools<|sep|>

(without the line breaks). The generation prompt opens ``think`` (or ``response`` with
thinking off). Reasoning (``kimi_k3``) is the think channel; the response channel's tags are
dropped from content (``hidden_tags``); the tools channel is the call section. An argument
typed ``string`` is raw text read as it arrives, any other type JSON; a ``json`` block
holds the arguments as one JSON object. Attribute values are HTML-escaped by the template.
The tools channel's end may be missing at the very end after a complete call.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import (
    CallSpelling, Detect, Lit, Name, RawArgs, ReasoningFormat, Slot, ToolFormat,
)
from textproc.core.parsing.json_args import json_args
from textproc.core.parsing.section import Malformed, Section, Wait
from textproc.core.parsing.xml_invoke import attribute

__all__ = ["FORMATS", "kimi_k3_body"]

OPEN, SEP, CLOSE, END_OF_MSG = "<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
CALL_OPEN, CALL_CLOSE = f"{OPEN}call", f"{CLOSE}call{SEP}"
ARG_OPEN, ARG_CLOSE = f"{OPEN}argument", f"{CLOSE}argument{SEP}"
JSON_OPEN, JSON_CLOSE = f"{OPEN}json", f"{CLOSE}json{SEP}"
THINK_OPEN, THINK_CLOSE = f"{OPEN}think{SEP}", f"{CLOSE}think{SEP}"
_HIDDEN = (f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}", END_OF_MSG)
_MAX_ATTRS = 512


def _arguments(s: Section) -> Wait:
    # a call's argument blocks (or one json block) up to <|close|>call<|sep|>, then the call ends
    while True:
        yield from s.skip_ws()
        tag = yield from s.match(ARG_OPEN, JSON_OPEN, CALL_CLOSE)
        if tag is None:
            raise Malformed(s.at())
        if tag == CALL_CLOSE:
            s.end_members()
            break
        attrs, _ = yield from s.until(SEP, max_len=_MAX_ATTRS)
        if tag == JSON_OPEN:  # the arguments as one JSON object: nothing else in the call
            if s.n_members:
                raise Malformed(s.at())
            yield from s.skip_ws()
            yield from json_args(s)
            yield from s.skip_ws()
            yield from s.lit(JSON_CLOSE)
            yield from s.skip_ws()
            yield from s.lit(CALL_CLOSE)
            break
        key = attribute(attrs, "key")
        if not key:
            raise Malformed(s.at())
        if attribute(attrs, "type") == "string":
            yield from s.string_member(key, ARG_CLOSE, strip_newlines=False)
            continue
        value, _ = yield from s.until(ARG_CLOSE)
        s.raw_member(key, value)
    s.end_call()


def kimi_k3_body(s: Section) -> Wait:
    """The text after ``<|open|>tools<|sep|>``."""
    n_read = 0
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(CALL_OPEN, TOOLS_CLOSE)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None  # the channel's end missing at the very end
            raise Malformed(s.at())
        if tag == TOOLS_CLOSE:
            return None
        attrs, _ = yield from s.until(SEP, max_len=_MAX_ATTRS)
        name = (attribute(attrs, "tool") or "").strip()
        if not name:
            raise Malformed(s.at())
        s.header(name)
        yield from _arguments(s)
        n_read += 1


_SPECIALS = (OPEN, SEP, CLOSE, END_OF_MSG)
FORMATS = (
    ToolFormat(
        "kimi_k3", (TOOLS_OPEN,), kimi_k3_body,
        CallSpelling((Lit(f'{CALL_OPEN} tool="'), Name(), Lit('" index="'), Slot("[1-9][0-9]*", "1"), Lit(f'"{SEP}'),
                      RawArgs(f'{ARG_OPEN} key="', f'" type="{{type}}"{SEP}', ARG_CLOSE), Lit(CALL_CLOSE)),
                     begin=TOOLS_OPEN, end=TOOLS_CLOSE),
        specials=_SPECIALS, raw_values=True, hidden_tags=_HIDDEN, listed=161, reasoning="kimi_k3",
        detect=(Detect(13, ("open_tag('tools')", "<|open|>"), "XTML channels (<|open|>tools<|sep|>)"),
                Detect(13, (TOOLS_OPEN,), "<|open|>tools<|sep|>")),
    ),
    ReasoningFormat(
        "kimi_k3", (THINK_OPEN,), (THINK_CLOSE,), specials=_SPECIALS, close_text=THINK_CLOSE, hidden_tags=_HIDDEN,
        listed=155, detect=(Detect(13, ("open_tag('think')", "<|open|>"), "the XTML think channel"),),
    ),
)

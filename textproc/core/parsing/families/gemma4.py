"""Gemma 4 tool calls and reasoning.

As the Gemma 4 chat template renders calls (``<|tool_call>``, ``<tool_call|>`` and ``<|"|>``
are special tokens)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{hours:[1,2]}}<tool_call|>

one block per call, back to back. The arguments are a JSON-like dialect: bare keys (sorted),
strings raw between ``<|"|>`` delimiters, numbers as written, ``true`` / ``false``, lists and
objects spelled the same way. Owns the body after ``<|tool_call>``: it converts the dialect to
JSON as it arrives (a string piece by piece; a number, boolean or null when it ends),
accepts ``True`` / ``False`` / ``None`` / ``null`` and quoted keys, and makes anything else
malformed. The closing ``<tool_call|>`` may be missing at the very end after the complete
object. Reasoning (``gemma4``) is the thought channel ``<|channel>thought ... <channel|>``;
with thinking off the template closes an empty one in the prompt.
"""

from __future__ import annotations

import json
import re

from textproc.core.parsing.declaration import (
    CallSpelling, DelimitedArgs, Detect, Lit, Name, ReasoningFormat, ToolFormat,
)
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["FORMATS", "gemma4_body"]

CALL_OPEN, CALL_CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"
_MAX_NAME = 256
_MAX_SCALAR = 64
_MAX_DEPTH = 64
_SCALAR = re.compile(r"[^,}\]<]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORDS = {"true": "true", "false": "false", "True": "true", "False": "false", "null": "null", "None": "null"}


def _string(s: Section) -> Wait:
    # after the opening <|"|>: the raw text up to the closing one, piece by piece as a JSON string
    s.args('"')

    def piece(text: str) -> None:
        s.args(json.dumps(text, ensure_ascii=False)[1:-1])

    yield from s.until(QUOTE, on_piece=piece)
    s.args('"')


def _value(s: Section, depth: int) -> Wait:
    if depth > _MAX_DEPTH:
        raise Malformed(s.at())
    c = yield from s.peek(skip_ws=True)
    if c == "<":
        yield from s.lit(QUOTE)
        yield from _string(s)
    elif c == "{":
        s.pos += 1
        yield from _items(s, "}", depth + 1, keyed=True)
    elif c == "[":
        s.pos += 1
        yield from _items(s, "]", depth + 1, keyed=False)
    else:
        at = s.at()
        word = (yield from s.run_of(_SCALAR, max_len=_MAX_SCALAR)).strip()
        if word in _WORDS:
            s.args(_WORDS[word])
        elif _NUMBER.fullmatch(word):
            s.args(word)
        else:
            raise Malformed(at)


def _key(s: Section) -> Wait:
    c = yield from s.peek(skip_ws=True)
    if c == "<":
        yield from s.lit(QUOTE)
        key, _ = yield from s.until(QUOTE, max_len=_MAX_NAME)
        yield from s.skip_ws()
        yield from s.lit(":")
    else:
        key, _ = yield from s.until(":", max_len=_MAX_NAME)
        key = key.strip()
        if not key or any(ch in key for ch in ',{}[]<"'):
            raise Malformed(s.at())
    return key


def _items(s: Section, close: str, depth: int, *, keyed: bool) -> Wait:
    # after "{" or "[": items up to the matching close, written as JSON
    s.args("{" if keyed else "[")
    c = yield from s.peek(skip_ws=True)
    if c == close:
        s.pos += 1
        s.args("}" if keyed else "]")
        return
    first = True
    while True:
        prefix = "" if first else ", "
        first = False
        if keyed:
            key = yield from _key(s)
            s.args(prefix + json.dumps(key, ensure_ascii=False) + ": ")
        elif prefix:
            s.args(prefix)
        yield from _value(s, depth)
        c = yield from s.peek(skip_ws=True)
        if c == ",":
            s.pos += 1
            continue
        if c != close:
            raise Malformed(s.at())
        s.pos += 1
        s.args("}" if keyed else "]")
        return


def gemma4_body(s: Section) -> Wait:
    """The text after ``<|tool_call>``."""
    s.begin_call()
    yield from s.lit("call:")
    name, _ = yield from s.until("{", max_len=_MAX_NAME, consume=False)
    name = name.strip()
    if not name or any(ch in name for ch in "<>,:"):
        raise Malformed(s.at())
    s.header(name)
    s.pos += 1
    yield from _items(s, "}", 1, keyed=True)
    yield from s.skip_ws()
    yield from s.match(CALL_CLOSE)
    s.end_call()
    return None


FORMATS = (
    ToolFormat(
        "gemma4", (CALL_OPEN,), gemma4_body,
        CallSpelling((Lit(CALL_OPEN + "call:"), Name(), Lit("{"), DelimitedArgs(QUOTE, QUOTE), Lit("}" + CALL_CLOSE))),
        specials=(CALL_OPEN, CALL_CLOSE, QUOTE), listed=164,
        detect=(Detect(17, (CALL_OPEN, CALL_CLOSE), "<|tool_call>call:NAME{...}<tool_call|>"),),
    ),
    ReasoningFormat(
        "gemma4", (CHANNEL_OPEN + "thought",), (CHANNEL_CLOSE,), specials=(CHANNEL_OPEN, CHANNEL_CLOSE), listed=150,
        detect=(Detect(22, (CHANNEL_OPEN + "thought", CHANNEL_CLOSE), "the thought channel <|channel>thought"),
                Detect(23, (CHANNEL_OPEN, CHANNEL_CLOSE), "the <|channel> / <channel|> tokens")),
    ),
)

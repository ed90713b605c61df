"""Pythonic tool calls (Llama 4 and others): ``[get_weather(city='Paris', days=3), ping()]``.

Owns the text of a Python list of calls with keyword arguments, at the start of the answer or
after ``<|python_start|>`` (then ``<|python_end|>`` may close it). Argument values are Python
literals (strings, numbers, ``True``/``False``/``None``, lists, tuples, dicts) read with
``ast.literal_eval``: nothing is ever evaluated, and anything else (a name other than JSON's
``true`` / ``false`` / ``null``, a call, an operator, positional arguments) makes the call
malformed. Each call goes out, its arguments as a JSON object, when its ``)`` closes. Generic
rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, PythonArgs, ToolFormat
from textproc.core.parsing.raw_values import python_value_json
from textproc.core.parsing.section import Body, Malformed, Section, Wait

__all__ = ["pythonic_body", "python_list_body", "python_call", "PYTHON_START", "PYTHON_END", "FORMATS"]

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
_MAX_NAME = 256
_NAME_CHARS = re.compile(r"[\w.]*")
_PLAIN = re.compile(r"[^'\"()\[\]{}]*")  # outside strings
_IN_STRING = re.compile(r"[^'\"\\]*")  # inside a string, no escape pending


def _name(s: Section) -> Wait:
    # identifier characters (and dots), then "(": anything else is malformed
    name = yield from s.run_of(_NAME_CHARS, max_len=_MAX_NAME)
    if not name or not (name[0].isalpha() or name[0] == "_") or (yield from s.peek()) != "(":
        raise Malformed(s.at())
    s.pos += 1
    return name


def _call_args(s: Section) -> Wait:
    # the text up to the ")" that closes the call (consumed), skipping strings and brackets
    pieces: list[str] = []
    depth = 1
    quote = ""  # the open string's quote ("'", '"', "'''" or '"""')
    escaped = False
    while True:
        buf, i = s.buf, s.pos
        n = len(buf)
        start = i
        while i < n:
            # runs of characters that change nothing: one regex step each
            i = (_IN_STRING if quote and not escaped else _PLAIN).match(buf, i).end()  # type: ignore[union-attr]
            if i >= n:
                break
            c = buf[i]
            if quote:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif buf.startswith(quote, i):
                    i += len(quote)
                    quote = ""
                    continue
                elif len(quote) == 3 and c == quote[0] and n - i < 3:
                    break  # maybe the start of the closing triple quote: wait
            elif c in "'\"":
                if n - i < 3 and buf[i:] == c * (n - i):
                    break  # one or two quotes at the end: a triple quote may follow
                quote = c * 3 if buf.startswith(c * 3, i) else c
                i += len(quote)
                continue
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    pieces.append(buf[start:i])
                    s.pos = i + 1
                    return "".join(pieces)
            i += 1
        pieces.append(buf[start:i])
        s.pos = i
        yield from s.wait()


class _JsonNames(ast.NodeTransformer):
    # JSON's true / false / null inside a literal (templates write dicts with tojson)
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


_JSON_NAMES = {"true": True, "false": False, "null": None}


def _arguments_json(args_text: str, at: int) -> str:
    try:
        tree = ast.parse("f(" + args_text + ")", mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise Malformed(at) from e
    node = tree.body
    if not isinstance(node, ast.Call) or node.args:
        raise Malformed(at)
    members = []
    for keyword in node.keywords:
        if keyword.arg is None:  # **kwargs
            raise Malformed(at)
        try:
            literal = ast.literal_eval(_JsonNames().visit(keyword.value))  # a node: literals only, never evaluated
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
            raise Malformed(at) from e
        value = python_value_json(literal)
        if value is None:
            raise Malformed(at)
        members.append(json.dumps(keyword.arg, ensure_ascii=False) + ": " + value)
    return "{" + ", ".join(members) + "}"


def python_call(s: Section) -> Wait:
    """One ``name(key=value, ...)`` at the read position: a complete call, or Malformed."""
    s.begin_call()
    name = yield from _name(s)
    s.header(name)
    start = s.at()
    args_text = yield from _call_args(s)
    s.args(_arguments_json(args_text, start))
    s.end_call()


def python_list_body(closes: Mapping[str, str]) -> Body:
    """A list of calls; after an open tag of ``closes``, its close tag may follow the list."""

    def body(s: Section) -> Wait:
        yield from _calls(s)
        close = closes.get(s.open_tag)
        if close is not None:
            yield from s.skip_ws()
            yield from s.match(close)
        return None

    return body


def _calls(s: Section) -> Wait:
    yield from s.skip_ws()
    yield from s.lit("[")
    while True:
        yield from s.skip_ws()
        yield from python_call(s)
        c = yield from s.peek(skip_ws=True)
        if c == ",":
            s.pos += 1
            continue
        if c == "]":
            s.pos += 1
            break
        raise Malformed(s.at())


pythonic_body = python_list_body({PYTHON_START: PYTHON_END})


FORMATS = (ToolFormat(
    "pythonic", (PYTHON_START,), pythonic_body,
    CallSpelling((Name(), Lit("("), PythonArgs(), Lit(")")), begin="[", sep=", ", end="]"),
    start_chars="[", specials=(PYTHON_START, PYTHON_END),
    detect=(Detect(100, (PYTHON_START,), "<|python_start|> (Python call list)"),),
    listed=30,
),)

"""Checks of a JSON request body's raw bytes, before anything decodes (and so recurses) into it.

Owns the limits every JSON value entering the HTTP API shares, whatever field it sits in
(typed, ``Any``-typed like ``chat_template_kwargs`` and tool ``parameters``, or unknown and
ignored): nesting at most ``protocol.MAX_JSON_DEPTH`` levels, integers that fit the wire
(64 bits, what MessagePack carries), and strings that are valid Unicode (no lone UTF-16
surrogate escape such as ``"\\ud800"``). A body that breaks one gets an :class:`ApiError` (400)
naming the rule, the JSON path and the byte offset.

The common case costs a few C-level passes over the bytes (a regex that blanks strings, a
translate, a running sum); only a body that breaks a rule is walked token by token to say where.
Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate

import regex

from textproc.errors import short
from textproc.http.api_types import ApiError
from textproc.protocol import MAX_JSON_DEPTH

__all__ = ["check_body", "INT_RANGE"]

INT_RANGE = (-(2**63), 2**63 - 1)  # JSON integers anywhere in a body (MessagePack int64)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# an integer literal of 19+ digits (2**63 has 19): not inside a fraction or an exponent
_LONG_INT = re.compile(rb"(?<![\d.eE+-])-?\d{19,}(?![\d.eE])")
# a high surrogate escape not followed by a low one, or a low one not right after a high one.
# An escape is a backslash after an even run of them: text such as "\\ud83d" (an escaped
# backslash, then "ud83d") is no escape (taking it for one sent a 38k-token conversation down
# the slow walk, ~10 ms). The `regex` module: the last branch looks behind a variable length.
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = regex.compile(
    rb"(?<!\\)(?:\\\\)*" + _HIGH + rb"(?!" + _LOW + rb")"  # a high, no low after it
    + rb"|(?<!\\)(?:\\\\)+" + _LOW  # a low after escaped backslashes
    + rb"|(?=" + _LOW + rb")(?<!\\)(?<!(?:^|[^\\])(?:\\\\)*" + _HIGH + rb")" + _LOW
)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(c for c in range(256) if c not in _BRACKETS)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]|-?\d[\d.eE+-]*')


def check_body(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ApiError (400) if ``body`` nests deeper than ``max_depth``, holds an integer
    outside :data:`INT_RANGE` or a lone surrogate escape; otherwise return (the body may still
    be invalid JSON: the decoder reports that).

    >>> check_body(b'{"a": [1, {"b": 2}]}')
    >>> try:
    ...     check_body(b'{"a": [[[1]]]}', max_depth=3)
    ... except ApiError as e:
    ...     print(e.message)
    JSON nested deeper than 3 levels at a[0][0] (byte 8); send flatter data
    """
    blanked = _STRING.sub(b'""', body)
    brackets = blanked.translate(None, _NOT_BRACKETS)
    too_deep = len(brackets) > max_depth and _max_depth(brackets) > max_depth
    big_int = any(not INT_RANGE[0] <= int(m.group()) <= INT_RANGE[1]
                  for m in _LONG_INT.finditer(blanked))
    lone = b"\\u" in body and _LONE_SURROGATE.search(body) is not None
    if too_deep or big_int or lone:
        _locate(body, max_depth)


def _max_depth(brackets: bytes) -> int:
    steps = array("b")
    steps.frombytes(brackets.translate(_STEPS))
    return max(accumulate(steps))


def _locate(body: bytes, max_depth: int) -> None:
    """Walk the tokens of ``body`` up to the first broken rule and raise naming its path."""
    stack: list[list[object]] = []  # per open container: [kind, key or index]
    last_string: bytes | None = None
    for m in _TOKEN.finditer(body):
        token = m.group()
        first = token[:1]
        if first in (b"[", b"{"):
            stack.append([first, 0 if first == b"[" else None])
            if len(stack) > max_depth:
                _fail(f"JSON nested deeper than {max_depth} levels", stack[:-1], m.start(),
                      "send flatter data")
        elif first in (b"]", b"}"):
            if stack:
                stack.pop()
        elif first == b",":
            if stack and stack[-1][0] == b"[":
                stack[-1][1] = int(stack[-1][1]) + 1  # type: ignore[call-overload]
            elif stack:
                stack[-1][1] = None
        elif first == b":":
            if stack and last_string is not None:
                stack[-1][1] = _text(last_string)
        elif first == b'"':
            last_string = token
            if b"\\u" in token and _LONE_SURROGATE.search(token):
                text = _text(token)
                if any("\ud800" <= c <= "\udfff" for c in text):
                    bad = next(c for c in text if "\ud800" <= c <= "\udfff")
                    _fail(f"string has a lone UTF-16 surrogate \\u{ord(bad):04x}", stack,
                          m.start(), "JSON strings must be valid Unicode (escape a character "
                          "outside the BMP as a surrogate pair)")
            continue
        elif token.lstrip(b"-").isdigit():  # an integer (other numbers are floats)
            value = int(token)
            if not INT_RANGE[0] <= value <= INT_RANGE[1]:
                _fail(f"integer {short(value, 40)} is out of range", stack, m.start(),
                      f"integers must be within [{INT_RANGE[0]}, {INT_RANGE[1]}] (64 bits)")
        last_string = None


def _text(token: bytes) -> str:
    try:
        value = json.loads(token)
    except ValueError:
        return token.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _fail(what: str, stack: list[list[object]], offset: int, allowed: str) -> None:
    path = _path(stack)
    if len(path) > 80:  # 64 levels of a path say no more than its start
        path = path[:77] + "..."
    where = f"at {path} (byte {offset})" if path else f"at byte {offset}"
    raise ApiError(f"{what} {where}; {allowed}", param=path or None,
                   code="invalid_request_body")


def _path(stack: list[list[object]]) -> str:
    out = ""
    for kind, key in stack:
        if kind == b"[":
            out += f"[{key}]"
        elif key is not None:
            out += f".{key}" if out else str(key)
    return out

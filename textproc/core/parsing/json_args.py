"""JSON inside tool-call sections: an arguments object, or a whole ``{"name", "arguments"}`` call.

Owns the two JSON readers the format bodies share, as generator functions over a
:class:`~textproc.core.parsing.section.Section` (``yield from json_call(s)``). The text is
validated incrementally by :class:`~textproc.core.parsing.json_scan.JsonScanner`, so a close
tag inside a JSON string never ends a call, and added to the call's arguments while it is
validated (the work per chunk is proportional to the chunk).
"""

from __future__ import annotations

import json

from textproc.core.parsing.json_scan import DONE, ERROR, KEY, NEED_MORE, VALUE, VALUE_END, JsonScanner
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["json_args", "json_call", "json_list_body", "json_list"]


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def json_args(s: Section) -> Wait:
    """A JSON object of arguments (or a JSON string holding one), added to the call's
    arguments while it is validated; Malformed at the first bad character."""
    c = yield from s.peek()
    if c == '"':
        scanner = JsonScanner()
        text = yield from _scan_raw(s, scanner)
        s.args(text)
        return
    if c != "{":
        raise Malformed(s.at())
    scanner = JsonScanner()
    while True:
        start = s.pos
        event, pos = scanner.scan(s.buf, start)
        if pos > start:
            s.pos = pos
            s.args(s.buf[start:pos])
        if event == DONE:
            return
        if event == ERROR:
            raise Malformed(s.offset(pos))
        if event == NEED_MORE:
            yield from s.wait()


def _scan_raw(s: Section, scanner: JsonScanner) -> Wait:
    # a JSON string at the read position holding an object: its decoded text
    start = s.at()
    prime = '{"v": '  # put the scanner inside a member value, so it captures the string
    event, p = scanner.scan(prime, 0)
    while event != NEED_MORE:
        event, p = scanner.scan(prime, p)
    while True:
        p0 = s.pos
        event, pos = scanner.scan(s.buf, p0)
        s.pos = pos
        if event == VALUE_END:
            value = scanner.string
            if not _is_json_object(value):
                raise Malformed(start)
            return value
        if event == ERROR:
            raise Malformed(s.offset(pos))
        if event == NEED_MORE:
            yield from s.wait()
        elif event != VALUE:
            raise Malformed(s.offset(pos))

def json_call(s: Section, *, args_keys: tuple[str, ...] = ("arguments",),
              ignored_keys: tuple[str, ...] = (), name_key: str = "name") -> Wait:
    """``{"name": ..., "arguments": {...}}`` (members in any order, each once; ``args_keys``
    name the arguments member, ``name_key`` the name member, ``ignored_keys`` are read and
    dropped): the header when the name is complete, the arguments as they are validated; no
    arguments member gives ``{}``."""
    c = yield from s.peek()
    if c != "{":
        raise Malformed(s.at())
    scanner = JsonScanner()
    seen: set[str] = set()
    key = ""
    in_args = False
    held: list[str] = []  # arguments text before the name
    has_args = False
    while True:
        start = s.pos
        event, pos = scanner.scan(s.buf, start)
        s.pos = pos
        if in_args and pos > start:
            if s.call_name is None:
                held.append(s.buf[start:pos])
            else:
                s.args(s.buf[start:pos])
        bad = s.offset(pos)
        if event == NEED_MORE:
            yield from s.wait()
        elif event == ERROR:
            raise Malformed(bad)
        elif event == KEY:
            key = scanner.string
            allowed = key == name_key or key in args_keys or key in ignored_keys
            if not allowed or key in seen or (key in args_keys and has_args):
                raise Malformed(bad)
            seen.add(key)
        elif event == VALUE:
            c = s.buf[pos]
            if key == name_key and c != '"':
                raise Malformed(bad)
            if key in args_keys:
                has_args = True
                if c == "{":
                    in_args = True
                elif c != '"':
                    raise Malformed(bad)
        elif event == VALUE_END:
            if key in args_keys and not in_args:
                if not _is_json_object(scanner.string):
                    raise Malformed(bad)
                if s.call_name is None:
                    held.append(scanner.string)
                else:
                    s.args(scanner.string)
            elif key in args_keys:
                in_args = False
            elif key == name_key:
                if not scanner.string:
                    raise Malformed(bad)
                s.header(scanner.string)
                if held:
                    s.args("".join(held))
        elif event == DONE:
            if s.call_name is None:
                raise Malformed(bad - 1)
            if not has_args:
                s.args("{}")
            return


def json_list_body(s: Section) -> Wait:
    """A list of call objects ``{"name", "arguments"}`` (ids ignored), or a single one."""
    result = yield from json_list(s)
    return result


def json_list(s: Section, *, name_key: str = "name", args_keys: tuple[str, ...] = ("arguments",),
              ignored_keys: tuple[str, ...] = ("id",), close: str | None = None) -> Wait:
    """A JSON list of call objects (or a single one) with these member names; ``close``: a tag
    that may follow (whitespace before it allowed), consumed when present."""
    c = yield from s.peek(skip_ws=True)
    if c == "[":
        s.pos += 1
        yield from s.skip_ws()
        while True:
            s.begin_call()
            yield from json_call(s, name_key=name_key, args_keys=args_keys, ignored_keys=ignored_keys)
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
            break
    else:
        s.begin_call()
        yield from json_call(s, name_key=name_key, args_keys=args_keys, ignored_keys=ignored_keys)
        s.end_call()
    if close is not None:
        end = s.at()
        yield from s.skip_ws()
        if (yield from s.match(close)) is None:
            return end
        s.skip_markup()
    return None

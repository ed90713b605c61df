"""Hermes / Qwen tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Owns the body of one call, from just after the open tag to just after the close tag. The
body is validated incrementally by :class:`JsonScanner`, so a ``</tool_call>`` inside an
argument string does not end the call and the work per chunk is proportional to the chunk.

Streaming rule (the one-shot parse is the same code fed once, so both agree):

* Until the name string is complete, everything is held. If the body turns out malformed
  first, the client gets the original text, open tag included, as content.
* When the name is complete, the header delta goes out (id, type, name, arguments ``""``),
  then the raw JSON text of the ``arguments`` object streams as it is validated (held
  ``arguments`` text goes out with the header if the model wrote it before ``name``).
  A call without ``arguments`` gets ``"{}"`` when its object closes.
* If the body turns out malformed after the header, the call keeps what it streamed and the
  text not yet represented in the stream (from the end of the name or of the streamed
  arguments up to the bad character) comes back as content; parsing resumes as ordinary
  text at the bad character. The same happens for an unterminated call at the end.
* After the object closes, whitespace and then the close tag are expected; anything else
  ends the call leniently (it is valid) and the text continues as ordinary text.

With an empty ``close_tag`` the call ends with its object (used inside other formats).
Accepted members are exactly ``name`` (a non-empty string) and ``arguments`` (an object,
or a string holding a JSON object, as some models write it: that one is sent decoded, in
one fragment, once the string is complete), each at most once; any other key is malformed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from textproc.core.parsing.json_scan import DONE, ERROR, KEY, NEED_MORE, VALUE, VALUE_END, JsonScanner

__all__ = ["CallStep", "HermesCall", "header_delta", "arguments_delta"]


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False

_WS = " \t\n\r"


def header_delta(index: int, call_id: str, name: str) -> dict[str, Any]:
    """The first streamed fragment of a call: id, type, name and empty arguments."""
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    }


def arguments_delta(index: int, fragment: str) -> dict[str, Any]:
    """A later fragment of a call: more argument text."""
    return {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}


@dataclass
class CallStep:
    """What one chunk did to a call.

    ``deltas``: tool-call fragments; ``content``: text that goes back to the client as content
    (a malformed call's text); ``rest``: text after the call, to parse as ordinary text;
    ``is_closed``: the call is over (valid or not) and ``rest`` is meaningful.
    """

    deltas: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""
    rest: str = ""
    is_closed: bool = False


class HermesCall:
    """The body of one ``<tool_call>``: ``feed`` the text after the open tag, then ``finish``."""

    def __init__(self, *, index: int, call_id: str, open_tag: str, close_tag: str) -> None:
        self.index = index
        self.call_id = call_id
        self.open_tag = open_tag
        self.close_tag = close_tag
        self.name: str | None = None
        self.has_header = False
        self._scanner = JsonScanner()
        self._raw: list[str] = []  # every chunk fed, for a malformed call's content
        self._offset = 0  # length of the body fed before the current chunk
        self._represented = 0  # body position up to which the stream already shows the text
        self._key = ""  # current top-level key
        self._seen: set[str] = set()
        self._in_args = False
        self._has_args = False
        self._held_args: list[str] = []  # arguments text seen before the name
        self._object_done = False
        self._close_matched = 0  # characters of the close tag seen after the object

    def feed(self, text: str) -> CallStep:
        """Consume the next chunk of the body."""
        step = CallStep()
        base = self._offset
        self._offset += len(text)
        self._raw.append(text)
        if self._object_done:
            return self._after_object(text, 0, step)
        scanner = self._scanner
        pos = 0
        while True:
            start = pos
            event, pos = scanner.scan(text, pos)
            if self._in_args and pos > start:
                self._emit_args(text[start:pos], base + pos, step)
            if event == NEED_MORE:
                return step
            if event == ERROR:
                return self._fail(base + pos, step)
            if event == KEY:
                key = scanner.string
                if key not in ("name", "arguments") or key in self._seen:
                    return self._fail(base + pos, step)
                self._seen.add(key)
                self._key = key
            elif event == VALUE:
                c = text[pos]
                if self._key == "name" and c != '"':
                    return self._fail(base + pos, step)
                if self._key == "arguments":
                    if c == '"':  # arguments as a JSON string: checked and sent when complete
                        self._has_args = True
                    elif c != "{":
                        return self._fail(base + pos, step)
                    else:
                        self._in_args = True
                        self._has_args = True
            elif event == VALUE_END:
                if self._key == "arguments" and not self._in_args:
                    if not _is_json_object(scanner.string):
                        return self._fail(base + pos, step)
                    self._emit_args(scanner.string, base + pos, step)
                elif self._key == "arguments":
                    self._in_args = False
                elif self._key == "name":
                    if not scanner.string:
                        return self._fail(base + pos, step)
                    self._send_header(scanner.string, base + pos, step)
            elif event == DONE:
                if self.name is None:
                    return self._fail(base + pos - 1, step)
                if not self._has_args:
                    step.deltas.append(arguments_delta(self.index, "{}"))
                self._object_done = True
                return self._after_object(text, pos, step)

    def finish(self) -> CallStep:
        """The text ended inside this call."""
        step = CallStep(is_closed=True)
        if self._object_done:
            step.content = self.close_tag[: self._close_matched]
            return step
        body = "".join(self._raw)
        step.content = body[self._represented :] if self.has_header else self.open_tag + body
        return step

    def _send_header(self, name: str, end: int, step: CallStep) -> None:
        self.name = name
        self.has_header = True
        self._represented = end
        step.deltas.append(header_delta(self.index, self.call_id, name))
        if self._held_args:
            step.deltas.append(arguments_delta(self.index, "".join(self._held_args)))
            self._held_args = []

    def _emit_args(self, fragment: str, end: int, step: CallStep) -> None:
        if self.has_header:
            step.deltas.append(arguments_delta(self.index, fragment))
            self._represented = end
        else:
            self._held_args.append(fragment)

    def _fail(self, bad: int, step: CallStep) -> CallStep:
        body = "".join(self._raw)
        if self.has_header:
            step.content = body[self._represented : bad]
        else:
            step.content = self.open_tag + body[:bad]
        step.rest = body[bad:]
        step.is_closed = True
        return step

    @property
    def is_complete(self) -> bool:
        """True once the call object closed (the call is valid)."""
        return self._object_done

    @property
    def n_calls(self) -> int:
        """Tool calls this body produced (its header went out)."""
        return 1 if self.has_header else 0

    def _after_object(self, text: str, pos: int, step: CallStep) -> CallStep:
        tag = self.close_tag
        if not tag:  # no close tag in this format: the call ends with its object
            step.rest = text[pos:]
            step.is_closed = True
            return step
        n = len(text)
        while pos < n:
            c = text[pos]
            if self._close_matched == 0 and c in _WS:
                pos += 1
                continue
            if c == tag[self._close_matched]:
                self._close_matched += 1
                pos += 1
                if self._close_matched == len(tag):
                    step.rest = text[pos:]
                    step.is_closed = True
                    return step
                continue
            # not the close tag: the call ends leniently at its object
            step.rest = tag[: self._close_matched] + text[pos:]
            step.is_closed = True
            return step
        return step

"""Section: the text after a tool-call format's open tag, parsed by the format's body generator.

Owns what every tool-call format shares: the streamed text buffer, the wait for more text, the
tool-call deltas in OpenAI's delta shape, the call ids and indices, and the rules for what
goes back to the client as content. A format is a *body*: a generator function that reads the
section with the primitives here (``lit``, ``match``, ``until``, ``peek``; JSON in
:mod:`textproc.core.parsing.json_args`) and reports calls with ``begin_call`` / ``header`` / ``args`` / ``end_call``.
A primitive that needs more text than has arrived suspends the generator (``yield``), so the
body reads like a one-shot parser while the work per ``feed`` is proportional to the new text
(held text is only ever a possible tag prefix, a tool name, or whitespace; the open call's
arguments are held as validated JSON text, see below).

Rules (the same for every format, so a streamed parse equals the one-shot parse of the whole
text for any split):

* A call goes out only once it is complete and valid: its header (index, id, name) and its
  arguments, validated as they arrived, are held until the body ends the call. Until then the
  text may still be cut off or turn out malformed, and the one-shot parse would make it
  content; a client that acted on a streamed header could not take it back.
* A malformed call (``Malformed``) or one cut off by the end of the text: its text comes back
  as content (the open tag too, if no call of the section went out) and parsing resumes as
  ordinary text at the bad character. ``n_calls`` counts the calls that went out: a finish
  reason is "tool_calls" only for those.
* A call naming a tool that is not in ``names``, or one past ``max_calls``, is not a call: its
  whole text comes back as content when it ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from textproc.core.parsing.raw_values import property_schema, string_only, typed_value_json

__all__ = ["CallStep", "Section", "Body", "Malformed", "Wait", "header_delta", "arguments_delta"]

# a body suspends (yields None) until more text arrives; it returns None or the absolute
# offset where the ordinary text after the section starts (default: where it stopped reading)
Wait = Generator[None, None, Any]
Body = Callable[["Section"], Generator[None, None, "int | None"]]

WS = " \t\n\r"
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')  # what json.dumps(ensure_ascii=False) escapes


class Malformed(Exception):
    """The section's text cannot continue its format at absolute offset ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


def header_delta(index: int, call_id: str, name: str) -> dict[str, Any]:
    """The first streamed delta of a call: id, type, name and empty arguments."""
    return {
        "tool_calls": [
            {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        ]
    }


def arguments_delta(index: int, text: str) -> dict[str, Any]:
    """A later delta of a call: more argument text."""
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}


@dataclass
class CallStep:
    """What one chunk did to a section.

    ``deltas``: tool-call deltas; ``content``: text that goes back to the client as content;
    ``rest``: text after the section, to parse as ordinary text; ``is_closed``: the section is
    over (valid or not) and ``rest`` is meaningful.
    """

    deltas: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""
    rest: str = ""
    is_closed: bool = False


def _tail_prefix(buf: str, pos: int, markers: tuple[str, ...], hold: int) -> int:
    # length of the longest tail of buf[pos:] that could still start one of the markers
    if len(buf) <= pos or not any(buf[-1] in m for m in markers):
        return 0
    for k in range(min(hold, len(buf) - pos), 0, -1):
        tail = buf[len(buf) - k:]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


class Section:
    """One tool-call section: ``feed`` the text after the open tag, then ``finish``."""

    def __init__(
        self,
        body: Body,
        *,
        open_tag: str,
        first_index: int,
        make_id: Callable[[int], str],
        names: frozenset[str] | None = None,
        schemas: Mapping[str, Any] | None = None,
        max_calls: int | None = None,
    ) -> None:
        self.open_tag = open_tag
        self.first_index = first_index
        self.make_id = make_id
        self.names = names
        self.schemas: Mapping[str, Any] = schemas or {}  # tool name -> parameters schema
        self.max_calls = max_calls
        self.n_calls = 0  # complete calls, sent
        self.is_final = False
        self.buf = ""  # text not consumed yet (and, before pos, consumed text of this chunk)
        self.pos = 0
        self._base = 0  # absolute offset of buf[0] in the section text
        self._raw: list[str] = []  # every chunk, for the content of a malformed call
        self._represented = 0  # the calls sent show the section text up to here
        self._call_start: int | None = None  # absolute offset where the open call's markup began
        self._index = -1  # index of the open call once its header is known
        self._name: str | None = None
        self._rejected = False
        self._n_members = 0
        self._header: dict[str, Any] | None = None  # the open call's header delta, held
        self._arguments: list[str] = []  # the open call's arguments text so far, held
        self._step = CallStep()
        self._done = False
        self._gen = body(self)

    # -- driving -------------------------------------------------------------------------------

    def feed(self, text: str) -> CallStep:
        """Consume the next chunk."""
        step = self._step = CallStep()
        self._raw.append(text)
        if self.pos:
            self._base += self.pos
            self.buf = self.buf[self.pos :] + text
            self.pos = 0
        else:
            self.buf += text
        self._run(step)
        return step

    def finish(self) -> CallStep:
        """The text ended inside this section."""
        step = self._step = CallStep()
        if self._done:
            step.is_closed = True
            return step
        self.is_final = True
        self._run(step)
        assert step.is_closed
        return step

    def _run(self, step: CallStep) -> None:
        try:
            next(self._gen)
        except StopIteration as stop:
            self._done = True
            step.is_closed = True
            at = stop.value
            step.rest = self._text_from(self.at() if at is None else at)
        except Malformed as e:
            self._done = True
            step.is_closed = True
            # the calls sent show the text up to _represented; the rest up to the bad
            # character (the open call's held header and arguments with it) is content, and
            # the text from there is ordinary text again
            start = self._represented
            prefix = self.open_tag if start == 0 else ""
            text = self._text_from(start)
            step.content += prefix + text[: e.at - start]
            step.rest = text[e.at - start :]
        else:
            if self.is_final:
                raise AssertionError("a section body waited after the end of the text")

    def _text_from(self, at: int) -> str:
        if at >= self._base:
            return self.buf[at - self._base :]
        return "".join(self._raw)[at:]

    # -- reading primitives (generators: ``x = yield from s.until(...)``) ------------------------

    def at(self) -> int:
        """Absolute offset of the read position."""
        return self._base + self.pos

    def offset(self, pos: int) -> int:
        """Absolute offset of position ``pos`` in ``buf``."""
        return self._base + pos

    def wait(self) -> Wait:
        """Suspend until more text arrives; the text ended: Malformed at the end."""
        if self.is_final:
            raise Malformed(self._base + len(self.buf))
        yield

    def peek(self, *, skip_ws: bool = False) -> Wait:
        """The next character (after whitespace, consumed, with ``skip_ws``), None at the end."""
        while True:
            buf = self.buf
            if skip_ws:
                pos, n = self.pos, len(buf)
                while pos < n and buf[pos] in WS:
                    pos += 1
                self.pos = pos
            if self.pos < len(buf):
                return buf[self.pos]
            if self.is_final:
                return None
            yield

    def skip_ws(self) -> Wait:
        """Consume whitespace (waits until a non-space character or the end)."""
        yield from self.peek(skip_ws=True)

    def lit(self, tag: str) -> Wait:
        """Consume ``tag`` exactly, else Malformed where it should start."""
        while True:
            avail = self.buf[self.pos : self.pos + len(tag)]
            if not tag.startswith(avail):
                raise Malformed(self.at())
            if len(avail) == len(tag):
                self.pos += len(tag)
                return
            yield from self.wait()

    def match(self, *tags: str) -> Wait:
        """Consume and return the first of ``tags`` found at the read position, else None
        (nothing consumed); waits while the text could still become one of them."""
        longest = max(len(t) for t in tags)
        while True:
            avail = self.buf[self.pos : self.pos + longest]
            for tag in tags:
                if avail.startswith(tag):
                    self.pos += len(tag)
                    return tag
            if self.is_final or len(avail) >= longest or not any(t.startswith(avail) for t in tags):
                return None
            yield

    def run_of(self, chars: re.Pattern[str], *, max_len: int) -> Wait:
        """The run of characters matching ``chars`` (a pattern for one character, repeated) at
        the read position, consumed; it ends at the first other character (not consumed) or
        the end of the text. Longer than ``max_len``: Malformed. Holds only the run itself."""
        start = self.at()
        pieces: list[str] = []
        size = 0
        while True:
            buf, pos = self.buf, self.pos
            end = chars.match(buf, pos).end()  # type: ignore[union-attr]
            pieces.append(buf[pos:end])
            size += end - pos
            self.pos = end
            if size > max_len:
                raise Malformed(start)
            if end < len(buf) or self.is_final:
                return "".join(pieces)
            yield

    def until(self, *markers: str, max_len: int | None = None, consume: bool = True,
              at_end: bool = False, on_piece: Callable[[str], None] | None = None) -> Wait:
        """``(text, marker)``: the text up to the earliest of ``markers`` (consumed with it
        unless ``consume=False``). Longer than ``max_len`` first: Malformed at its start. The
        end of the text first: Malformed, or ``(text, None)`` with ``at_end``. ``on_piece``
        gets the text in pieces as soon as it is certain to come before the marker (and the
        returned text is then "")."""
        start = self.at()
        hold = max(len(m) for m in markers) - 1
        pieces: list[str] = []
        size = 0
        while True:
            buf, pos = self.buf, self.pos
            best = -1
            found = ""
            for m in markers:
                i = buf.find(m, pos)
                if i >= 0 and (best < 0 or i < best or (i == best and len(m) > len(found))):
                    best, found = i, m
            if best >= 0:
                size += best - pos
                if max_len is not None and size > max_len:
                    raise Malformed(start)
                if on_piece is None:
                    pieces.append(buf[pos:best])
                elif best > pos:
                    self.pos = best
                    on_piece(buf[pos:best])
                self.pos = best + len(found) if consume else best
                return "".join(pieces), found
            cut = len(buf) if self.is_final else len(buf) - _tail_prefix(buf, pos, markers, hold)
            if on_piece is None:
                pieces.append(buf[pos:cut])
            elif cut > pos:
                self.pos = cut  # (on_piece sees the read position after its piece)
                on_piece(buf[pos:cut])
            size += cut - pos
            self.pos = cut
            if max_len is not None and size > max_len:
                raise Malformed(start)
            if self.is_final:
                if at_end:
                    return "".join(pieces), None
                raise Malformed(self.at())
            yield

    # -- reporting calls -----------------------------------------------------------------------

    def begin_call(self) -> None:
        """The markup of a call starts at the read position."""
        self._call_start = self.at()

    def header(self, name: str, *, call_id: str | None = None) -> None:
        """The open call's name is known: hold its header until the call ends (or note that it
        is not a call)."""
        if self._call_start is None:
            self._call_start = self.at()
        self._name = name
        self._n_members = 0
        over = self.max_calls is not None and self.first_index + self.n_calls >= self.max_calls
        self._rejected = over or (self.names is not None and name not in self.names)
        if self._rejected:
            return
        self._index = self.first_index + self.n_calls
        self._header = header_delta(self._index, call_id or self.make_id(self._index), name)

    @property
    def call_name(self) -> str | None:
        """The open call's name, once its header was read."""
        return self._name

    def args(self, text: str) -> None:
        """More argument text of the open call (held with its header until the call ends)."""
        if self._rejected or not text:
            return
        assert self._name is not None
        self._arguments.append(text)

    def raw_member(self, key: str, value: str) -> None:
        """One ``"key": value`` of the open call's arguments object, from a raw-text value typed
        by the tool's schema (the raw-value formats): the object's next member."""
        self.json_member(key, typed_value_json(value, self.schemas.get(self._name or ""), key))

    def json_member(self, key: str, value_json: str) -> None:
        """One ``"key": value`` of the open call's arguments object, the value as JSON text."""
        self.args(("{" if not self._n_members else ", ") + json.dumps(key, ensure_ascii=False)
                  + ": " + value_json)
        self._n_members += 1

    def string_member(self, key: str, close: str, *, strip_newlines: bool) -> Wait:
        """The raw-text value of a string argument, up to ``close`` (consumed), written into the
        next member of the arguments object as it arrives (see :meth:`open_string`)."""
        piece = self.open_string(key, strip_newlines=strip_newlines)
        yield from self.until(close, on_piece=piece)
        self.args('"')

    def open_string(self, key: str, *, strip_newlines: bool) -> Callable[[str], None]:
        """Start the next member ``"key": "...`` of the arguments object; the returned function
        adds pieces of the raw text value (JSON-escaped); ``self.args('"')`` ends it.
        ``strip_newlines``: one newline on each side of the value is formatting (the last
        newline is held until more text shows it is not the last)."""
        self.args(("{" if not self._n_members else ", ") + json.dumps(key, ensure_ascii=False) + ': "')
        self._n_members += 1
        held = ""
        first = True

        def piece(text: str) -> None:
            nonlocal held, first
            if strip_newlines:
                if first:
                    first = False
                    text = text[1:] if text.startswith("\n") else text
                text = held + text
                held = "\n" if text.endswith("\n") else ""
                text = text[:-1] if held else text
            if text:
                self.args(json.dumps(text, ensure_ascii=False)[1:-1] if _NEEDS_ESCAPE.search(text) else text)

        return piece

    def peek_text(self, n: int) -> Wait:
        """The next ``n`` characters, not consumed (fewer at the end of the text); waits until
        they have arrived. Holds at most ``n`` characters."""
        while len(self.buf) - self.pos < n and not self.is_final:
            yield
        return self.buf[self.pos : self.pos + n]

    def is_string_argument(self, key: str) -> bool:
        """True when the open call's tool declares argument ``key`` as text (raw formats)."""
        return string_only(property_schema(self.schemas.get(self._name or ""), key))

    def end_members(self) -> None:
        """The open call's arguments object is complete (``{}`` when it had no member)."""
        self.args("}" if self._n_members else "{}")

    @property
    def n_members(self) -> int:
        """Members :meth:`raw_member` wrote for the open call."""
        return self._n_members

    def end_call(self) -> None:
        """The open call is complete (its markup ends at the read position): send it, its
        header then its arguments, or its text as content when it is not a call."""
        assert self._name is not None
        end = self.at()
        if self._rejected:
            start = self._represented
            prefix = self.open_tag if start == 0 else ""
            self._step.content += prefix + self._text_from(start)[: end - start]
        else:
            assert self._header is not None
            self._step.deltas.append(self._header)
            if self._arguments:
                self._step.deltas.append(arguments_delta(self._index, "".join(self._arguments)))
            self.n_calls += 1
        self._header = None
        self._arguments = []
        self._represented = end
        self._call_start = None
        self._name = None
        self._rejected = False

    def skip_markup(self) -> None:
        """The text read so far is markup that is shown by the calls around it (a section's
        closing tag): it is not content even if a later call turns out malformed."""
        if self._name is None:
            self._represented = self.at()

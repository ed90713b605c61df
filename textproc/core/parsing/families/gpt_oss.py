"""gpt-oss (harmony) output: channels to reasoning, content and tool calls.

Owns the split of a harmony answer into messages. The prompt ends with ``<|start|>assistant``;
the model then writes messages ``HEADER<|message|>BODY`` ended by ``<|end|>``, ``<|call|>``
or ``<|return|>`` (often the stop token, so absent from the text), the next one after
``<|start|>``. The header holds ``<|channel|>CHANNEL``, an optional recipient ``to=...`` (before
or after the channel) and an optional ``<|constrain|>json`` / content type:

* ``analysis`` -> ``reasoning_content``;
* ``commentary`` with recipient ``functions.NAME`` -> a tool call, the body its JSON arguments
  (sent once complete, like every format, :mod:`textproc.core.parsing.section`);
* ``final``, ``commentary`` without a recipient (preambles), any other channel -> ``content``.

Headers are markup and never reach the client. A header that does not end within
``MAX_HEADER_CHARS``, or text that does not start like a header at the start of the answer,
is content. Work per ``feed`` is proportional to the new text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from textproc.core.deltas import Deltas
from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ReasoningFormat, ToolFormat
from textproc.core.parsing.json_args import json_args
from textproc.core.parsing.section import Body, CallStep, Section, Wait
from textproc.core.parsing.tags import TagStreamer

__all__ = ["HarmonyParser", "MAX_HEADER_CHARS", "FORMATS"]

MAX_HEADER_CHARS = 512
START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
_BODY_TAGS = [END, CALL, RETURN, START]
_BETWEEN_TAGS = [START, CHANNEL]
_TO = " to="
_RECIPIENT = re.compile(r"to=(\S+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z0-9_\-]+)")

_HEADER = 0  # reading a message header, up to <|message|>
_BODY = 1  # routing a message body to _key
_BETWEEN = 2  # after a message's end, before the next <|start|>
_CALL = 3  # a tool call's body, in _section


def _call_body(name: str) -> Body:
    # the body of a message to functions.NAME: its JSON arguments, then <|call|> (or nothing)
    def body(s: Section) -> Wait:
        yield from s.skip_ws()
        s.begin_call()
        s.header(name)
        yield from json_args(s)
        yield from s.skip_ws()
        yield from s.match(CALL, END)
        s.end_call()
        return None

    return body


class HarmonyParser:
    """Streams a harmony answer into OpenAI deltas (as :class:`OutputParser`)."""

    def __init__(
        self,
        *,
        tools: bool,
        make_id: Callable[[int], str],
        names: frozenset[str] | None,
        schemas: Mapping[str, Any] | None,
        max_calls: int | None,
    ) -> None:
        self.tools = tools
        self.make_id = make_id
        self.names = names
        self.schemas = schemas
        self.max_calls = max_calls
        self.n_calls = 0
        self._mode = _HEADER
        self._header: list[str] = []
        self._header_chars = 0
        self._key = "content"
        self._streamer = TagStreamer([MESSAGE])
        self._section: Section | None = None
        self._at_start = True
        self._start = ""  # the answer's first characters while they may begin " to="

    @property
    def idle_key(self) -> str | None:
        """The key plain text goes to while nothing is held, else None."""
        if self._mode != _BODY or not self._streamer.is_empty:
            return None
        return self._key

    def feed(self, text: str, out: Deltas) -> None:
        """Route ``text``; the deltas go to ``out``."""
        if self._at_start:
            # the answer may open with its header's recipient: hold a prefix of " to=" until
            # the text says whether it is one (any split of the input parses alike)
            text = self._start + text
            if not text or (text[0] != "<" and len(text) < len(_TO) and _TO.startswith(text)):
                self._start = text
                return
            self._at_start, self._start = False, ""
            if text[0] != "<" and not text.startswith(_TO):
                self._set_mode(_BODY, "content")
        if self._mode == _BODY and self._streamer.is_plain(text):  # most deltas
            out.text(self._key, text)
            return
        while text:
            text = self._feed_mode(text, out)

    def finish(self, out: Deltas) -> None:
        """The answer ended: flush what is held."""
        if self._start:  # a prefix of " to=" and nothing after it: text
            held, self._at_start, self._start = self._start, False, ""
            self._set_mode(_BODY, "content")
            out.text("content", held)
        while self._mode == _CALL:  # the text after a cut-off call may hold more messages
            assert self._section is not None
            rest = self._end_section(self._section.finish(), out)
            self.feed(rest, out)
        rest = self._streamer.take_rest()
        if self._mode == _HEADER:
            out.text("content", "".join(self._header) + rest)
            self._header = []
        elif self._mode == _BODY:
            out.text(self._key, rest)
        else:
            out.text("content", rest)

    def _feed_mode(self, text: str, out: Deltas) -> str:
        if self._mode == _CALL:
            section = self._section
            assert section is not None
            step = section.feed(text)
            if not step.is_closed:
                out.extend(step.deltas)
                out.text("content", step.content)
                return ""
            return self._end_section(step, out)
        streamer = self._streamer
        streamer.push(text)
        while True:
            released, tag = streamer.next_event()
            if self._mode == _HEADER:
                if released:
                    self._header.append(released)
                    self._header_chars += len(released)
                if tag is None:
                    if self._header_chars > MAX_HEADER_CHARS:  # not a header: content
                        out.text("content", "".join(self._header))
                        self._header = []
                        self._set_mode(_BODY, "content")
                    return ""
                rest = streamer.take_rest()
                self._open_message("".join(self._header))
                self._header = []
                return rest
            out.text(self._key if self._mode == _BODY else "content", released)
            if tag is None:
                return ""
            if tag == START or tag == CHANNEL:
                self._set_mode(_HEADER, "content")
                if tag == CHANNEL:
                    self._header = [CHANNEL]
                    self._header_chars = len(CHANNEL)
                streamer.push(streamer.take_rest())
                continue
            self._set_mode(_BETWEEN, "content")  # end of a message body

    def _set_mode(self, mode: int, key: str) -> None:
        self._mode = mode
        self._key = key
        if mode == _HEADER:
            self._header = []
            self._header_chars = 0
            self._streamer.set_tags([MESSAGE])
        elif mode == _BODY:
            self._streamer.set_tags(_BODY_TAGS)
        else:
            self._streamer.set_tags(_BETWEEN_TAGS)

    def _open_message(self, header: str) -> None:
        recipient = _RECIPIENT.search(header.replace(CHANNEL, " " + CHANNEL).replace(CONSTRAIN, " "))
        channel_match = _CHANNEL.search(header)
        channel = channel_match.group(1) if channel_match else ""
        target = recipient.group(1) if recipient else ""
        if target.startswith("functions.") and self.tools and channel != "analysis":
            section = Section(
                _call_body(target[len("functions."):]),
                open_tag="",
                first_index=self.n_calls,
                make_id=self.make_id,
                names=self.names,
                schemas=self.schemas,
                max_calls=self.max_calls,
            )
            self._section = section
            self._mode = _CALL
            return
        self._set_mode(_BODY, "reasoning_content" if channel == "analysis" else "content")

    def _end_section(self, step: CallStep, out: Deltas) -> str:
        assert self._section is not None
        out.extend(step.deltas)
        out.text("content", step.content)
        self.n_calls += self._section.n_calls
        self._section = None
        self._set_mode(_BETWEEN, "content")
        return step.rest


_SPECIALS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
FORMATS = (
    # the prompt ends with ``<|start|>assistant``: a call is the rest of its header and its body
    ToolFormat(
        "gpt_oss", (), None,
        CallSpelling((Lit(" to=functions."), Name(), Lit(f"{CHANNEL}commentary json{MESSAGE}"), JsonArgs()),
                     parallel=False),
        specials=_SPECIALS, reasoning="gpt_oss", whole_parser=HarmonyParser,
        detect=(Detect(10, (CHANNEL, MESSAGE), "harmony channels <|channel|> / <|message|>"),), listed=90,
    ),
    ReasoningFormat("gpt_oss", (), (), specials=_SPECIALS, whole_parser=HarmonyParser,
                    detect=(Detect(10, (CHANNEL, "analysis"), "the analysis channel"),), listed=40),
)

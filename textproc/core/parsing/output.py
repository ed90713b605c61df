"""OutputParser: a model's streamed text -> OpenAI chat delta fragments.

Owns the split of generated text into ``reasoning_content`` (inside ``<think>``...``</think>``),
``content`` and ``tool_calls`` (Hermes/Qwen ``<tool_call>`` blocks, see
:mod:`textproc.core.parsing.hermes`), plus the one-shot forms (fragments are built and merged by
:mod:`textproc.core.deltas`). It takes only the new text each time and keeps its own history; the work per
``feed`` is proportional to the new text (no re-parsing).

Invariant (property-tested): for any split of a text into ``feed`` calls,
``merge_deltas(deltas)`` equals ``parse_output(text)`` with the same options.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from textproc.core.deltas import Fragments, merge_deltas
from textproc.errors import InvalidInput, short
from textproc.core.parsing.hermes import HermesCall
from textproc.core.parsing.mistral import MistralCalls
from textproc.core.parsing.tags import TagStreamer

__all__ = [
    "OutputParser",
    "parse_output",
    "parse_tool_calls",
    "openai_tool_call",
    "merge_deltas",
    "TOOL_FORMATS",
]

# tool_format -> default (open, close) tags
TOOL_FORMATS = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "mistral": ("[TOOL_CALLS]", ""),
}


class OutputParser:
    """Turn streamed model text into OpenAI chat delta fragments.

    ``feed(text)`` returns the fragments ready now, ``finish()`` the rest. Fragments are
    ``{"reasoning_content": s}``, ``{"content": s}``, and for each tool call first
    ``{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}``
    as soon as the name is complete, then ``{"tool_calls": [{"index", "function": {"arguments"}}]}``
    with the raw JSON text of the ``arguments`` object as it arrives.

    - ``reasoning``: recognise ``<think>``/``</think>`` (anywhere in content; several blocks
      are allowed). ``starts_in_reasoning`` (only with ``reasoning``): the prompt ended inside
      an open think block, so the text is reasoning until ``</think>``.
    - ``tools``: recognise tool calls in content (never inside reasoning). A malformed or
      unterminated call comes back as content, see :mod:`textproc.core.parsing.hermes`.
      ``tool_format``: ``"hermes"`` (Qwen, Hermes: ``<tool_call>{...}</tool_call>``) or
      ``"mistral"`` (``[TOOL_CALLS][{...}, ...]``, :mod:`textproc.core.parsing.mistral`);
      ``tool_tags`` defaults to the format's tags.
    - ``request_id``: tool-call ids are ``call_<request_id>_<index>`` (``call_<index>`` if
      empty), so streamed and one-shot parses agree; pass it to keep ids unique across turns.

    Text is held back only while its tail could still start a tag of the current mode.

    >>> p = OutputParser(reasoning=True, tools=True, request_id="r1")
    >>> p.feed("<think>hm</think>ok<tool_call>")
    [{'reasoning_content': 'hm'}, {'content': 'ok'}]
    >>> p.feed('{"name": "f", "arguments": {"x": 1}}</tool_call>')[0]["tool_calls"][0]["id"]
    'call_r1_0'
    """

    def __init__(
        self,
        *,
        reasoning: bool = False,
        tools: bool = False,
        starts_in_reasoning: bool = False,
        think_tags: tuple[str, str] = ("<think>", "</think>"),
        tool_tags: tuple[str, str] | None = None,
        tool_format: str = "hermes",
        request_id: str = "",
    ) -> None:
        if tool_format not in TOOL_FORMATS:
            raise InvalidInput(f"tool_format={short(tool_format)}; supported: {', '.join(TOOL_FORMATS)}")
        if tool_tags is None:
            tool_tags = TOOL_FORMATS[tool_format]
        for label, pair in (("think_tags", think_tags), ("tool_tags", tool_tags)):
            if len(pair) != 2 or not all(isinstance(t, str) for t in pair) or not pair[0]:
                raise InvalidInput(
                    f"{label}={short(pair)} must be a pair of non-empty strings (open, close)"
                )
            if not pair[1] and (label == "think_tags" or tool_format == "hermes"):
                raise InvalidInput(
                    f"{label}={short(pair)} must be a pair of non-empty strings (open, close)"
                )
        self.reasoning = reasoning
        self.tools = tools
        self.think_tags = think_tags
        self.tool_tags = tool_tags
        self.tool_format = tool_format
        self.request_id = request_id
        self._in_reasoning = reasoning and starts_in_reasoning
        self._content_tags: list[str] = []
        if reasoning:
            self._content_tags.append(think_tags[0])
        if tools:
            self._content_tags.append(tool_tags[0])
        self._streamer = TagStreamer(self._mode_tags())
        self._call: HermesCall | MistralCalls | None = None
        self._n_calls = 0
        self._finished = False

    @property
    def has_tool_calls(self) -> bool:
        """True once a tool call's header was sent: the finish reason becomes "tool_calls"."""
        return self._n_calls > 0 or (self._call is not None and self._call.has_header)

    @property
    def idle_key(self) -> str | None:
        """``"content"`` / ``"reasoning_content"`` while nothing is held and no call is open,
        else None. While idle, ``feed(text)`` of a text holding none of :attr:`tag_chars` is
        ``[{idle_key: text}]`` and changes no state (the pipeline's fast path)."""
        if self._call is not None or self._finished or not self._streamer.is_empty:
            return None
        return self._text_key()

    @property
    def tag_chars(self) -> frozenset[str]:
        """The first characters of every tag this parser looks for, in any mode."""
        chars = {t[0] for t in self._content_tags}
        if self.reasoning:
            chars.add(self.think_tags[1][0])
        return frozenset(chars)

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Fragments for the new text (adjacent fragments of one kind are joined)."""
        if self._finished:
            raise InvalidInput("OutputParser.feed() called after finish()")
        if self._call is None and self._streamer.is_plain(text):  # most deltas
            return [{self._text_key(): text}] if text else []
        out = Fragments()
        while True:
            call = self._call
            if call is not None:
                step = call.feed(text)
                out.extend(step.deltas)
                out.text("content", step.content)
                if not step.is_closed:
                    return out.items
                self._end_call(call)
                text = step.rest
            if self._scan_tags(text, out):
                text = self._streamer.take_rest()
                continue
            return out.items

    def finish(self) -> list[dict[str, Any]]:
        """The rest: a held tag prefix, an unterminated call's text."""
        if self._finished:
            return []
        self._finished = True
        out = Fragments()
        call = self._call
        if call is not None:
            step = call.finish()
            out.extend(step.deltas)
            out.text("content", step.content)
            self._end_call(call)
        out.text(self._text_key(), self._streamer.take_rest())
        return out.items

    # -- internals -----------------------------------------------------------------------

    def _mode_tags(self) -> list[str]:
        return [self.think_tags[1]] if self._in_reasoning else self._content_tags

    def _text_key(self) -> str:
        return "reasoning_content" if self._in_reasoning else "content"

    def _scan_tags(self, text: str, out: Fragments) -> bool:
        """Scan text in content/reasoning mode; True when a tool call opened (body follows)."""
        streamer = self._streamer
        streamer.push(text)
        while True:
            released, tag = streamer.next_event()
            out.text(self._text_key(), released)
            if tag is None:
                return False
            if self._in_reasoning:  # tag is the close think tag
                self._in_reasoning = False
                streamer.set_tags(self._content_tags)
            elif tag == self.think_tags[0] and self.reasoning:
                self._in_reasoning = True
                streamer.set_tags([self.think_tags[1]])
            elif self.tool_format == "mistral":
                self._call = MistralCalls(
                    first_index=self._n_calls, make_id=self._call_id, open_tag=self.tool_tags[0]
                )
                return True
            else:
                self._call = HermesCall(
                    index=self._n_calls,
                    call_id=self._call_id(self._n_calls),
                    open_tag=self.tool_tags[0],
                    close_tag=self.tool_tags[1],
                )
                return True

    def _call_id(self, index: int) -> str:
        return f"call_{self.request_id}_{index}" if self.request_id else f"call_{index}"

    def _end_call(self, call: HermesCall | MistralCalls) -> None:
        self._n_calls += call.n_calls
        self._call = None


def parse_output(
    text: str,
    *,
    reasoning: bool = False,
    tools: bool = False,
    starts_in_reasoning: bool = False,
    think_tags: tuple[str, str] = ("<think>", "</think>"),
    tool_tags: tuple[str, str] | None = None,
    tool_format: str = "hermes",
    request_id: str = "",
) -> dict[str, Any]:
    """One-shot parse: what ``merge_deltas`` of a streamed :class:`OutputParser` gives."""
    parser = OutputParser(
        reasoning=reasoning,
        tools=tools,
        starts_in_reasoning=starts_in_reasoning,
        think_tags=think_tags,
        tool_tags=tool_tags,
        tool_format=tool_format,
        request_id=request_id,
    )
    return merge_deltas(parser.feed(text) + parser.finish())


def parse_tool_calls(
    text: str,
    *,
    tool_tags: tuple[str, str] | None = None,
    tool_format: str = "hermes",
    request_id: str = "",
) -> tuple[str, list[dict[str, Any]]]:
    """One-shot: ``(content, tool calls)`` of a complete output (no reasoning split).

    >>> parse_tool_calls('hi<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    ('hi', [{'id': 'call_0', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"a": 1}'}}])
    """
    merged = parse_output(
        text, tools=True, tool_tags=tool_tags, tool_format=tool_format, request_id=request_id
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

"""Anthropic's Messages API, answer shapes: chat deltas -> content blocks and the events.

Owns the ``message`` object (``content`` blocks in order: ``thinking`` with a ``signature``,
``text``, ``tool_use`` with ids ``toolu_...``; ``stop_reason``, ``stop_sequence``, ``usage``)
and the streamed events in Anthropic's order, each an SSE event named by its type::

    message_start, ping,
    per block: content_block_start,
      text:     content_block_delta (text_delta)...
      thinking: content_block_delta (thinking_delta)..., content_block_delta (signature_delta)
      tool_use: content_block_delta (input_json_delta)...
    content_block_stop,
    message_delta (stop_reason, stop_sequence, usage), message_stop

A failure after the stream started is an ``error`` event, and the stream ends there (as
Anthropic's does). A block opens when its first delta arrives and closes when a delta of
another block arrives or the message ends; text that is only whitespace does not open a block
by itself (the gap between ``</think>`` and a tool call is not an answer). The blocks of
``message()`` equal what the events built: the whole answer is the same builder fed the same
deltas. ``usage.input_tokens`` is known when the request finishes: ``message_start`` carries
what is known then (0 before) and ``message_delta`` carries both counts (cumulative, as
Anthropic's do).
Pure: the loops over a run's outputs that feed it are ``events``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

from textproc.http.anthropic.bodies import MessagesRequest, anthropic_error_body
from textproc.http.api_types import ApiError
from textproc.http.backend import Output

__all__ = ["MessageBuilder", "anthropic_id", "thinking_signature", "CONTEXT_STOP"]

CONTEXT_STOP = "model_context_window_exceeded"  # the output reached the end of the context


def anthropic_id(prefix: str) -> str:
    """An id in Anthropic's spelling, ``msg_`` / ``toolu_`` + 24 hex digits."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def thinking_signature(thinking: str) -> str:
    """The ``signature`` of a thinking block: a digest of its text. Anthropic's is an
    encrypted check its server verifies; this server renders handed-back thinking as it is
    and does not check it, so the field is there for clients that require one."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


class _Block:
    """The open content block: its index, kind and what it holds so far."""

    __slots__ = ("index", "kind", "text", "call_index", "call_id", "name")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind  # "text" | "thinking" | "tool_use"
        self.text = ""  # text, thinking, or a call's arguments (JSON text)
        self.call_index = -1
        self.call_id = ""
        self.name = ""


class MessageBuilder:
    """Folds one request's deltas into a Messages ``message`` and its stream events.

    ``start()``, then ``feed(deltas)`` per output, then ``finish(...)`` or ``fail(...)``: each
    returns the events to send now; ``message()`` is the object as it stands.
    """

    def __init__(self, message_id: str, request: MessagesRequest) -> None:
        self.message_id = message_id
        self.request = request
        self.content: list[dict[str, Any]] = []  # closed blocks
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage = {"input_tokens": 0, "output_tokens": 0,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        self._open: _Block | None = None
        self._blank = ""  # whitespace-only text not yet given to a block

    def message(self) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant",
                "model": self.request.chat.model, "content": list(self.content),
                "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence,
                "usage": dict(self.usage)}

    # ------------------------------------------------------------ events

    def start(self, prompt_tokens: int = 0) -> list[dict[str, Any]]:
        self.usage["input_tokens"] = prompt_tokens
        return [{"type": "message_start", "message": self.message()}, {"type": "ping"}]

    def feed(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for delta in deltas:
            if (text := delta.get("content")) is not None:
                self._text(text, events)
            elif (text := delta.get("reasoning_content")) is not None:
                block = self._ensure("thinking", events)
                block.text += text
                events.append(self._delta(block, {"type": "thinking_delta", "thinking": text}))
            for part in delta.get("tool_calls") or ():
                self._call_part(part, events)
        return events

    @staticmethod
    def _delta(block: _Block, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": block.index, "delta": delta}

    def _text(self, text: str, events: list[dict[str, Any]]) -> None:
        block = self._open
        if block is None or block.kind != "text":
            if not (self._blank + text).strip():
                self._blank += text
                return
            text, self._blank = self._blank + text, ""
            block = self._ensure("text", events)
        block.text += text
        events.append(self._delta(block, {"type": "text_delta", "text": text}))

    def _call_part(self, part: dict[str, Any], events: list[dict[str, Any]]) -> None:
        block = self._open
        index = int(part.get("index", 0))
        if block is None or block.kind != "tool_use" or block.call_index != index or \
                "id" in part:
            block = self._ensure("tool_use", events, part=part)
        arguments = (part.get("function") or {}).get("arguments") or ""
        if arguments:
            block.text += arguments
            events.append(self._delta(block, {"type": "input_json_delta",
                                              "partial_json": arguments}))

    def _ensure(self, kind: str, events: list[dict[str, Any]], *,
                part: dict[str, Any] | None = None) -> _Block:
        block = self._open
        if block is not None and block.kind == kind and part is None:
            return block
        self._close(events)
        self._blank = ""  # held whitespace before a thinking or tool_use block: not an answer
        block = _Block(len(self.content), kind)
        self._open = block
        start: dict[str, Any]
        if kind == "tool_use":
            assert part is not None
            block.call_index = int(part.get("index", 0))
            block.call_id = anthropic_id("toolu")  # Anthropic's spelling, whatever the parser's
            block.name = (part.get("function") or {}).get("name") or ""
            start = {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        else:
            start = {"type": "text", "text": ""}
        events.append({"type": "content_block_start", "index": block.index,
                       "content_block": start})
        return block

    def _close(self, events: list[dict[str, Any]]) -> None:
        block, self._open = self._open, None
        if block is None:
            return
        body: dict[str, Any]
        if block.kind == "tool_use":
            body = {"type": "tool_use", "id": block.call_id, "name": block.name,
                    "input": _arguments(block.text)}
        elif block.kind == "thinking":
            signature = thinking_signature(block.text)
            events.append(self._delta(block, {"type": "signature_delta",
                                              "signature": signature}))
            body = {"type": "thinking", "thinking": block.text, "signature": signature}
        else:
            body = {"type": "text", "text": block.text}
        events.append({"type": "content_block_stop", "index": block.index})
        self.content.append(body)

    def finish(self, out: Output, *, context_room: int | None) -> list[dict[str, Any]]:
        """The closing events; ``context_room``: the tokens the context left, when that was
        less than the client's ``max_tokens`` (reaching it is ``model_context_window_exceeded``,
        not ``max_tokens``)."""
        events: list[dict[str, Any]] = []
        if self._blank and not self.content and self._open is None:
            text, self._blank = self._blank, ""  # only whitespace came: it is the answer
            self._text_block(text, events)
        self._close(events)
        self.stop_reason, self.stop_sequence = _stop_reason(out, self.request, context_room)
        # Anthropic's input_tokens leaves out the prompt tokens read from the cache, as vLLM's
        # /v1/messages does with --enable-prompt-tokens-details (their sum is the prompt)
        self.usage["input_tokens"] = out.prompt_tokens - out.cached_tokens
        self.usage["cache_read_input_tokens"] = out.cached_tokens
        self.usage["output_tokens"] = out.completion_tokens
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": self.stop_reason,
                                 "stop_sequence": self.stop_sequence},
                       "usage": dict(self.usage)})
        events.append({"type": "message_stop"})
        return events

    def _text_block(self, text: str, events: list[dict[str, Any]]) -> None:
        block = self._ensure("text", events)
        block.text += text
        events.append(self._delta(block, {"type": "text_delta", "text": text}))

    @staticmethod
    def fail(exc: ApiError) -> list[dict[str, Any]]:
        """The event of a failure after the stream started."""
        return [anthropic_error_body(exc)[1]]


def _arguments(text: str) -> Any:
    """A call's input: its JSON arguments (a call cut off mid-way: what parses, else {})."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _stop_reason(out: Output, request: MessagesRequest,
                 context_room: int | None) -> tuple[str, str | None]:
    reason = out.finish_reason
    if reason == "tool_calls":
        return "tool_use", None
    if reason == "length":
        if context_room is not None and out.completion_tokens >= context_room:
            return CONTEXT_STOP, None
        return "max_tokens", None
    if out.stop is not None and out.stop in request.chat.output.stop:
        return "stop_sequence", out.stop
    return "end_turn", None

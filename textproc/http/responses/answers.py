"""The Responses API's answer shapes: chat deltas -> output items and semantic events.

Owns the ``response`` object (``output`` items: a ``reasoning`` item, a ``message`` item with
one ``output_text`` part, one ``function_call`` item per call; status, usage) and the
streamed events in OpenAI's order, each with a ``sequence_number`` counting from 0::

    response.created, response.in_progress,
    per item: response.output_item.added,
      reasoning: content_part.added, reasoning_text.delta..., reasoning_text.done, content_part.done
      message:   content_part.added, output_text.delta..., output_text.done, content_part.done
      call:      function_call_arguments.delta..., function_call_arguments.done
    response.output_item.done,
    response.completed (response.incomplete when max_output_tokens cut it short)

A failure after the stream started is an ``error`` event then ``response.failed``. An item
opens when its first delta arrives and closes when a delta of another item arrives or
the response ends; content that is only whitespace does not open a message by itself (the gap
between ``</think>`` and a tool call is not an answer). Item text is folded by
``core.deltas.MessageAccumulator``, the one accumulator. With
``include: ["message.output_text.logprobs"]`` an output's logprob entries go on the
``output_text.delta`` of the text it carries and into the part's ``logprobs`` (entries of outputs
that carry only reasoning or calls are not shown: the API has logprobs for output text only).
A call of a namespaced function carries ``namespace`` and the function's own ``name`` (the
model was offered ``<namespace>__<name>``: ``responses.tools``); a finished reasoning item
carries ``encrypted_content`` (its text sealed by the service, ``responses.reasoning``) when the
request included ``reasoning.encrypted_content``, null until then. The request's ``warnings``
(tools not offered, reasoning not restored) are on the response object when there are any.
Pure: the loops over a run's outputs that feed it are ``events``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from textproc.core.deltas import MessageAccumulator
from textproc.http.api_types import ApiError
from textproc.http.openai.answers import new_id, token_logprob
from textproc.http.responses.bodies import ResponsesRequest

__all__ = ["ResponseBuilder", "response_sse"]

_ENCODER = msgspec.json.Encoder()


def response_sse(event: dict[str, Any]) -> bytes:
    """One server-sent event named by its type: ``event: T\\ndata: {json}\\n\\n``."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + _ENCODER.encode(event) + b"\n\n"


class _Item:
    """The open output item: its kind, id, place and the deltas folded so far."""

    __slots__ = ("kind", "item_id", "index", "acc", "call_index", "call_id", "name", "logprobs")

    def __init__(self, kind: str, item_id: str, index: int) -> None:
        self.kind = kind  # "reasoning" | "message" | "function_call"
        self.item_id = item_id
        self.index = index  # output_index
        self.acc = MessageAccumulator()
        self.call_index = -1
        self.call_id = ""
        self.name = ""
        self.logprobs: list[dict[str, Any]] = []  # the message's output_text logprobs


class ResponseBuilder:
    """Folds one request's deltas into a Response object and its stream events.

    ``start()``, then ``feed(deltas)`` per step, then ``finish(...)`` or ``fail(...)``: each
    returns the events to send now; ``response()`` is the object as it stands. The items in
    ``response()["output"]`` after ``finish`` equal what the events built.
    """

    def __init__(self, response_id: str, request: ResponsesRequest, *, created_at: int) -> None:
        self.response_id = response_id
        self.request = request
        self.created_at = created_at
        self.status = "in_progress"
        self.output: list[dict[str, Any]] = []  # finished items
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self.whole = MessageAccumulator()  # the assistant turn, for the store
        self._open: _Item | None = None
        self._blank = ""  # whitespace-only content not yet given to a message
        self._seq = 0
        self._lp_new: list[Any] = []  # logprob entries of the output being fed
        self._lp_held: list[Any] = []  # ... of the whitespace held in _blank

    # ------------------------------------------------------------ the object

    def response(self) -> dict[str, Any]:
        body = {
            "id": self.response_id, "object": "response", "created_at": self.created_at,
            "status": self.status, "error": self.error, "incomplete_details": self.incomplete,
            "model": self.request.chat.model, "output": list(self.output),
            "usage": self.usage, "background": False, **self.request.echo,
        }
        if self.request.warnings:  # what was not offered or not restored (responses_api)
            body["warnings"] = list(self.request.warnings)
        return body

    def assistant_message(self) -> dict[str, Any]:
        """The answer as a chat-body assistant message (what the store adds to the history)."""
        parts = self.whole.parts()
        msg: dict[str, Any] = {"role": "assistant", "content": parts["content"]}
        if parts["reasoning_content"]:
            msg["reasoning_content"] = parts["reasoning_content"]
        if parts["tool_calls"]:
            msg["tool_calls"] = [{"id": c["id"] or new_id("call"), "type": "function",
                                  "function": dict(c["function"])} for c in parts["tool_calls"]]
        return msg

    # ------------------------------------------------------------ events

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        return [self._event("response.created", response=self.response()),
                self._event("response.in_progress", response=self.response())]

    def feed(self, deltas: list[dict[str, Any]],
             logprobs: list[Any] | None = None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        self._lp_new = logprobs or []
        self.whole.feed(deltas)
        for delta in deltas:
            if (text := delta.get("content")) is not None:
                self._content(text, events)
            elif (text := delta.get("reasoning_content")) is not None:
                item = self._ensure("reasoning", events)
                item.acc.feed((delta,))
                events.append(self._event("response.reasoning_text.delta", item_id=item.item_id,
                                          output_index=item.index, content_index=0, delta=text))
            for part in delta.get("tool_calls") or ():
                self._call_part(part, events)
        self._lp_new = []  # not on output text: not shown
        return events

    def _take_logprobs(self, item: _Item) -> list[dict[str, Any]]:
        entries, self._lp_held, self._lp_new = self._lp_held + self._lp_new, [], []
        shown = [token_logprob(e, self.request.chat.output) for e in entries]
        item.logprobs += shown
        return shown

    def _content(self, text: str, events: list[dict[str, Any]]) -> None:
        item = self._open
        if item is None or item.kind != "message":
            if not (self._blank + text).strip():
                self._blank += text
                self._lp_held += self._lp_new
                self._lp_new = []
                return
            text, self._blank = self._blank + text, ""
            item = self._ensure("message", events)
        item.acc.feed(({"content": text},))
        events.append(self._event("response.output_text.delta", item_id=item.item_id,
                                  output_index=item.index, content_index=0, delta=text,
                                  logprobs=self._take_logprobs(item)))

    def _call_part(self, part: dict[str, Any], events: list[dict[str, Any]]) -> None:
        item = self._open
        index = int(part.get("index", 0))
        if item is None or item.kind != "function_call" or item.call_index != index or \
                ("id" in part and part["id"] != item.call_id):
            item = self._ensure("function_call", events, force=True, part=part)
        function = part.get("function") or {}
        arguments = function.get("arguments") or ""
        item.acc.feed(({"tool_calls": [part]},))
        if arguments:
            events.append(self._event("response.function_call_arguments.delta",
                                      item_id=item.item_id, output_index=item.index,
                                      delta=arguments))

    def _ensure(self, kind: str, events: list[dict[str, Any]], *, force: bool = False,
                part: dict[str, Any] | None = None) -> _Item:
        item = self._open
        if item is not None and item.kind == kind and not force:
            return item
        self._close(events)
        if self._blank:  # held whitespace dropped (not an answer): its entries too
            self._blank, self._lp_held = "", []
        prefix = {"reasoning": "rs", "message": "msg", "function_call": "fc"}[kind]
        item = _Item(kind, new_id(prefix), len(self.output))
        self._open = item
        if kind == "function_call":
            assert part is not None
            item.call_index = int(part.get("index", 0))
            item.call_id = part.get("id") or new_id("call")
            item.name = (part.get("function") or {}).get("name") or ""
        events.append(self._event("response.output_item.added", output_index=item.index,
                                  item=self._item_body(item, done=False)))
        if kind != "function_call":
            events.append(self._event("response.content_part.added", item_id=item.item_id,
                                      output_index=item.index, content_index=0,
                                      part=self._part(item, "")))
        return item

    @staticmethod
    def _part(item: _Item, text: str) -> dict[str, Any]:
        if item.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": [],
                "logprobs": list(item.logprobs) if text else []}

    def _item_body(self, item: _Item, *, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        parts = item.acc.parts()
        if item.kind == "function_call":
            calls = parts["tool_calls"]
            namespace, name = self.request.tools.call_name(
                (calls[0]["function"]["name"] if calls else "") or item.name)
            body = {"id": item.item_id, "type": "function_call", "call_id": item.call_id,
                    "name": name,
                    "arguments": calls[0]["function"]["arguments"] if calls and done else "",
                    "status": status}
            return body if namespace is None else {**body, "namespace": namespace}
        key = "reasoning_content" if item.kind == "reasoning" else "content"
        content = [self._part(item, parts[key])] if done else []
        if item.kind == "reasoning":
            seal = self.request.seal
            return {"id": item.item_id, "type": "reasoning", "summary": [], "content": content,
                    "encrypted_content": seal.seal(parts[key]) if seal and done else None,
                    "status": status}
        return {"id": item.item_id, "type": "message", "role": "assistant", "status": status,
                "content": content}

    def _close(self, events: list[dict[str, Any]]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        body = self._item_body(item, done=True)
        where = {"item_id": item.item_id, "output_index": item.index}
        if item.kind == "function_call":
            events.append(self._event("response.function_call_arguments.done", **where,
                                      arguments=body["arguments"]))
        else:
            part = body["content"][0]
            if item.kind == "reasoning":
                events.append(self._event("response.reasoning_text.done", **where,
                                          content_index=0, text=part["text"]))
            else:
                events.append(self._event("response.output_text.done", **where,
                                          content_index=0, text=part["text"],
                                          logprobs=part["logprobs"]))
            events.append(self._event("response.content_part.done", **where, content_index=0,
                                      part=part))
        events.append(self._event("response.output_item.done", output_index=item.index,
                                  item=body))
        self.output.append(body)

    def finish(self, finish_reason: str, *, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int = 0) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._blank and not self.output and self._open is None:
            text, self._blank = self._blank, ""  # only whitespace came: it is the answer
            item = self._ensure("message", events)
            item.acc.feed(({"content": text},))
            events.append(self._event("response.output_text.delta", item_id=item.item_id,
                                      output_index=item.index, content_index=0, delta=text,
                                      logprobs=self._take_logprobs(item)))
        self._close(events)
        self.usage = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": completion_tokens,
            # the service counts generated tokens, not which of them were reasoning
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if finish_reason == "length":
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            events.append(self._event("response.incomplete", response=self.response()))
        else:
            self.status = "completed"
            events.append(self._event("response.completed", response=self.response()))
        return events

    def fail(self, exc: ApiError) -> list[dict[str, Any]]:
        """The events of a failure after the stream started: ``error``, ``response.failed``."""
        self._open = None  # an unfinished item is not part of a failed response
        self.status = "failed"
        self.error = {"code": "server_error" if exc.status >= 500 else "invalid_prompt",
                      "message": exc.message}
        return [self._event("error", code=exc.code or exc.type, message=exc.message,
                            param=exc.param),
                self._event("response.failed", response=self.response())]

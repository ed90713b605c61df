"""OpenAI deltas: the one shape the core streams, and the only code that joins them.

A *delta* is one small dict in OpenAI's chat ``delta`` shape with exactly one key:

- ``{"content": text}`` or ``{"reasoning_content": text}``;
- ``{"tool_calls": [part]}``: one part of one call, ``{"index": i, "id": ..., "type":
  "function", "function": {"name": ..., "arguments": ""}}`` when the call opens, then
  ``{"index": i, "function": {"arguments": text}}`` as its arguments stream.

Everything that produces, regroups or folds deltas uses this module: the output parser
(:class:`Deltas`), the pipeline and the detokenizer process (:func:`join_text`), the client's
per-event delta (:func:`one_delta`) and whole-message accumulation (:class:`MessageAccumulator`,
:func:`merge_deltas`). Invariant: joining never changes what a client gets by concatenating the
deltas in order (texts concatenate; a call's argument parts concatenate by ``index``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["TEXT_KEYS", "Deltas", "join_text", "one_delta", "MessageAccumulator", "merge_deltas"]

TEXT_KEYS = ("content", "reasoning_content")  # the delta kinds that carry plain text


class Deltas:
    """A delta list under construction that joins as it grows.

    ``text(key, s)`` extends the last delta when it has the same text key; ``extend(parts)``
    appends tool-call deltas, folding an argument part into the previous one of the same
    call. The deltas only ever grow at the end, and ``items`` owns every dict it holds.

    >>> f = Deltas(); f.text("content", "a"); f.text("content", "b"); f.items
    [{'content': 'ab'}]
    """

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def text(self, key: str, text: str) -> None:
        if not text:
            return
        items = self.items
        if items and key in items[-1]:
            items[-1][key] += text
        else:
            items.append({key: text})

    def extend(self, deltas: Sequence[dict[str, Any]]) -> None:
        items = self.items
        for delta in deltas:
            call = delta["tool_calls"][0]
            if "id" not in call and items and "tool_calls" in items[-1]:
                last = items[-1]["tool_calls"][-1]
                if last["index"] == call["index"] and "id" not in last:
                    last["function"]["arguments"] += call["function"]["arguments"]
                    continue
            items.append(delta)


def join_text(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join adjacent text deltas of the same kind; tool-call deltas stay as they are.

    Returns ``deltas`` itself when there is nothing to join (fewer than two), else a new
    list (the input dicts are not changed).

    >>> join_text([{"content": "a"}, {"content": "b"}, {"reasoning_content": "c"}])
    [{'content': 'ab'}, {'reasoning_content': 'c'}]
    """
    if len(deltas) < 2:
        return deltas
    out: list[dict[str, Any]] = []
    for delta in deltas:
        if out and len(delta) == 1 and len(out[-1]) == 1:
            (key,) = delta
            if key in TEXT_KEYS and key in out[-1]:
                out[-1] = {key: out[-1][key] + delta[key]}
                continue
        out.append(delta)
    return out


def one_delta(deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One OpenAI ``delta`` dict from deltas: texts concatenated, tool-call parts in order.

    >>> one_delta([{"content": "a"}, {"reasoning_content": "r"}, {"content": "b"}])
    {'content': 'ab', 'reasoning_content': 'r'}
    """
    out: dict[str, Any] = {}
    for delta in deltas:
        for key, value in delta.items():
            if key == "tool_calls":
                out.setdefault("tool_calls", []).extend(value)
            elif isinstance(value, str) and isinstance(out.get(key), str):
                out[key] += value
            else:
                out[key] = value
    return out


class MessageAccumulator:
    """Folds a stream of deltas (one key each, or merged ones) into the message they add up to.

    Equal to concatenating what a streaming client received: content and reasoning joined,
    tool calls merged by ``index`` (the first name and id seen win; arguments concatenated).
    """

    __slots__ = ("content", "reasoning", "calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index -> call in openai_tool_call shape

    def feed(self, deltas: Iterable[Mapping[str, Any]]) -> None:
        calls = self.calls
        for delta in deltas:
            if (text := delta.get("content")) is not None:
                self.content.append(text)
            if (text := delta.get("reasoning_content")) is not None:
                self.reasoning.append(text)
            for part in delta.get("tool_calls") or ():
                index = int(part.get("index", len(calls)))
                function = part.get("function") or {}
                call = calls.get(index)
                if call is None:
                    call = calls[index] = {"id": part.get("id"), "type": part.get("type", "function"),
                                           "function": {"name": function.get("name") or "",
                                                        "arguments": ""}}
                elif part.get("id") and not call["id"]:
                    call["id"] = part["id"]
                if function.get("name") and not call["function"]["name"]:
                    call["function"]["name"] = function["name"]
                call["function"]["arguments"] += function.get("arguments") or ""

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.calls)

    def tool_calls(self) -> list[dict[str, Any]]:
        """The calls so far, ordered by index."""
        return [self.calls[i] for i in sorted(self.calls)]

    def parts(self) -> dict[str, Any]:
        """``{"reasoning_content", "content", "tool_calls"}`` (empty strings and list when absent)."""
        return {"reasoning_content": "".join(self.reasoning), "content": "".join(self.content),
                "tool_calls": self.tool_calls()}

    def message(self, *, new_call_id: Callable[[], str]) -> dict[str, Any]:
        """The assistant message as OpenAI returns it: ``reasoning_content`` only when there was
        reasoning, ``content: null`` beside tool calls with no text, every call with an id
        (``new_call_id()`` for a call that streamed none)."""
        content = "".join(self.content)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            calls = self.tool_calls()
            for call in calls:
                if call["id"] is None:
                    call["id"] = new_call_id()
            msg["tool_calls"] = calls
            if not content.strip():
                msg["content"] = None  # OpenAI sends null content with tool calls
        return msg


def merge_deltas(deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge deltas into ``{"reasoning_content", "content", "tool_calls"}``.

    Tool calls come out whole, ordered by index, in the :func:`~textproc.core.parsing.openai_tool_call` shape.

    >>> merge_deltas([{"content": "a"}, {"content": "b"}])
    {'reasoning_content': '', 'content': 'ab', 'tool_calls': []}
    """
    acc = MessageAccumulator()
    acc.feed(deltas)
    return acc.parts()

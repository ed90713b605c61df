"""OpenAI delta fragments: the one shape the core streams, and the only code that joins them.

A *fragment* is one small dict in OpenAI's chat ``delta`` shape with exactly one key:

- ``{"content": text}`` or ``{"reasoning_content": text}``;
- ``{"tool_calls": [part]}``: one part of one call, ``{"index": i, "id": ..., "type":
  "function", "function": {"name": ..., "arguments": ""}}`` when the call opens, then
  ``{"index": i, "function": {"arguments": text}}`` as its arguments stream.

Everything that produces, regroups or folds fragments uses this module: the output parser
(:class:`Fragments`), the pipeline and the detokenizer process (:func:`join_text`), the client's
per-event delta (:func:`one_delta`) and whole-message accumulation (:class:`MessageAccumulator`,
:func:`merge_deltas`). Invariant: joining never changes what a client gets by concatenating the
fragments in order (texts concatenate; a call's argument parts concatenate by ``index``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["TEXT_KEYS", "Fragments", "join_text", "one_delta", "MessageAccumulator", "merge_deltas"]

TEXT_KEYS = ("content", "reasoning_content")  # the fragment kinds that carry plain text


class Fragments:
    """A fragment list under construction that joins as it grows.

    ``text(key, s)`` extends the last fragment when it has the same text key; ``extend(parts)``
    appends tool-call fragments, folding an argument part into the previous one of the same
    call. The fragments only ever grow at the end, and ``items`` owns every dict it holds.

    >>> f = Fragments(); f.text("content", "a"); f.text("content", "b"); f.items
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

    def extend(self, fragments: Sequence[dict[str, Any]]) -> None:
        items = self.items
        for fragment in fragments:
            call = fragment["tool_calls"][0]
            if "id" not in call and items and "tool_calls" in items[-1]:
                last = items[-1]["tool_calls"][-1]
                if last["index"] == call["index"] and "id" not in last:
                    last["function"]["arguments"] += call["function"]["arguments"]
                    continue
            items.append(fragment)


def join_text(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join adjacent text fragments of the same kind; tool-call fragments stay as they are.

    Returns ``fragments`` itself when there is nothing to join (fewer than two), else a new
    list (the input dicts are not changed).

    >>> join_text([{"content": "a"}, {"content": "b"}, {"reasoning_content": "c"}])
    [{'content': 'ab'}, {'reasoning_content': 'c'}]
    """
    if len(fragments) < 2:
        return fragments
    out: list[dict[str, Any]] = []
    for fragment in fragments:
        if out and len(fragment) == 1 and len(out[-1]) == 1:
            (key,) = fragment
            if key in TEXT_KEYS and key in out[-1]:
                out[-1] = {key: out[-1][key] + fragment[key]}
                continue
        out.append(fragment)
    return out


def one_delta(fragments: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One OpenAI ``delta`` dict from fragments: texts concatenated, tool-call parts in order.

    >>> one_delta([{"content": "a"}, {"reasoning_content": "r"}, {"content": "b"}])
    {'content': 'ab', 'reasoning_content': 'r'}
    """
    out: dict[str, Any] = {}
    for fragment in fragments:
        for key, value in fragment.items():
            if key == "tool_calls":
                out.setdefault("tool_calls", []).extend(value)
            elif isinstance(value, str) and isinstance(out.get(key), str):
                out[key] += value
            else:
                out[key] = value
    return out


class MessageAccumulator:
    """Folds a stream of fragments (or whole deltas) into the message they add up to.

    Equal to concatenating what a streaming client received: content and reasoning joined,
    tool calls merged by ``index`` (the first name and id seen win; arguments concatenated).
    """

    __slots__ = ("content", "reasoning", "calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # index -> call in openai_tool_call shape

    def feed(self, fragments: Iterable[Mapping[str, Any]]) -> None:
        calls = self.calls
        for fragment in fragments:
            if (text := fragment.get("content")) is not None:
                self.content.append(text)
            if (text := fragment.get("reasoning_content")) is not None:
                self.reasoning.append(text)
            for part in fragment.get("tool_calls") or ():
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
    """Merge delta fragments into ``{"reasoning_content", "content", "tool_calls"}``.

    Tool calls come out whole, ordered by index, in the :func:`~textproc.core.parsing.openai_tool_call` shape.

    >>> merge_deltas([{"content": "a"}, {"content": "b"}])
    {'reasoning_content': '', 'content': 'ab', 'tool_calls': []}
    """
    acc = MessageAccumulator()
    acc.feed(deltas)
    return acc.parts()

"""Mistral tool calls: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

Owns the list around the call objects; each object is a :class:`HermesCall` body with no
close tag, so streaming and malformed-call rules are the Hermes ones (see
:mod:`textproc.core.parsing.hermes`): a call streams once its name is complete, text the stream
has not shown comes back as content. ``[TOOL_CALLS]`` is a special token in Mistral
vocabularies, so the detokenizer must keep special tokens for this format to see it. The
v11 form ``[TOOL_CALLS]name[ARGS]{...}`` is not supported.

After the marker: whitespace, then ``[`` objects separated by ``,`` and ``]`` (or a single
object without brackets). Anything else after a complete object ends the list leniently
and is parsed as ordinary text; anything else before the first object returns the marker
and the text as content.
"""

from __future__ import annotations

from collections.abc import Callable

from textproc.core.parsing.hermes import CallStep, HermesCall

__all__ = ["MistralCalls"]

_WS = " \t\n\r"
_START = 0  # after the marker: whitespace, "[" or "{"
_OBJECT = 1  # inside a call object
_BETWEEN = 2  # after an object in the list: whitespace, "," or "]"
_NEXT = 3  # after ",": whitespace, "{"


class MistralCalls:
    """The text after ``[TOOL_CALLS]``: ``feed`` chunks, then ``finish``."""

    def __init__(self, *, first_index: int, make_id: Callable[[int], str], open_tag: str) -> None:
        self.first_index = first_index
        self.make_id = make_id
        self.open_tag = open_tag
        self.n_calls = 0
        self._state = _START
        self._in_list = False
        self._prefix = open_tag  # text not shown yet before the next object
        self._call: HermesCall | None = None

    @property
    def has_header(self) -> bool:
        """True once any call's header went out."""
        return self.n_calls > 0 or (self._call is not None and self._call.has_header)

    def feed(self, text: str) -> CallStep:
        """Consume the next chunk."""
        step = CallStep()
        pos = 0
        while True:
            call = self._call
            if call is not None:
                inner = call.feed(text[pos:] if pos else text)
                step.deltas.extend(inner.deltas)
                step.content += inner.content
                if not inner.is_closed:
                    return step
                self._call = None
                self.n_calls += call.n_calls
                text, pos = inner.rest, 0
                if not call.is_complete:
                    # malformed object: the rest is ordinary text
                    step.rest = text
                    step.is_closed = True
                    return step
                if not self._in_list:
                    step.rest = text
                    step.is_closed = True
                    return step
                self._state = _BETWEEN
            n = len(text)
            while pos < n and text[pos] in _WS:
                if self._state in (_START, _NEXT) and self.n_calls == 0:
                    self._prefix += text[pos]
                pos += 1
            if pos >= n:
                return step
            c = text[pos]
            if self._state == _START and c == "[" and not self._in_list:
                self._in_list = True
                self._prefix += c
                self._state = _NEXT
                pos += 1
                continue
            if c == "{" and (self._state == _NEXT or (self._state == _START and not self._in_list)):
                self._start_object()
                continue
            if self._state == _BETWEEN and c == ",":
                self._state = _NEXT
                pos += 1
                continue
            if self._state == _BETWEEN and c == "]":
                step.rest = text[pos + 1 :]
                step.is_closed = True
                return step
            # anything else: what was not shown goes back as content, the rest is text
            if self._state != _BETWEEN and self.n_calls == 0:
                step.content += self._prefix
            step.rest = text[pos:]
            step.is_closed = True
            return step

    def finish(self) -> CallStep:
        """The text ended inside the list."""
        step = CallStep(is_closed=True)
        if self._call is not None:
            inner = self._call.finish()
            step.deltas.extend(inner.deltas)
            step.content = inner.content
            self.n_calls += self._call.n_calls
            self._call = None
        elif self._state != _BETWEEN and self.n_calls == 0:
            step.content = self._prefix
        return step

    def _start_object(self) -> None:
        self._state = _OBJECT
        index = self.first_index + self.n_calls
        self._call = HermesCall(
            index=index,
            call_id=self.make_id(index),
            open_tag=self._prefix if self.n_calls == 0 else "",
            close_tag="",
        )
        self._prefix = ""

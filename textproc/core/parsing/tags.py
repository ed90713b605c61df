"""TagStreamer: split streamed text at literal tags, holding back only a possible tag start.

Owns the one holdback rule for tags: text is held back only while its tail could still be
the start of one of the current tags (``"<thi"`` at the end while ``<think>`` is a tag) and
is released as soon as it cannot. It never holds more than ``max(len(tag)) - 1`` characters
and searches only the held tail plus the new text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import functools
import re

from textproc.errors import InvalidInput, short

__all__ = ["TagStreamer", "TagEvent"]

# ("text", released text) or ("tag", the tag found)
TagEvent = tuple[Literal["text", "tag"], str]


_Compiled = tuple[tuple[str, ...], "re.Pattern[str] | None", int, str, "re.Pattern[str] | None"]


def _validate_tags(tags: tuple[object, ...]) -> None:
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag:
            raise InvalidInput(f"tag {short(tag)} at tags[{i}] must be a non-empty string")


@functools.lru_cache(maxsize=256)
def _compile_tags(tags: tuple[str, ...]) -> _Compiled:
    # shared by every streamer with these tags: a parser switches tag sets at each mode change
    _validate_tags(tags)
    # longest first, so a tag that is a prefix of another at the same place loses
    ordered = sorted(tags, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(t) for t in ordered)) if ordered else None
    max_hold = max((len(t) for t in tags), default=1) - 1
    first_chars = "".join(sorted({t[0] for t in tags}))
    # a proper prefix of a tag at the very end; the leftmost match is the longest
    prefixes = sorted({t[:k] for t in tags for k in range(1, len(t))}, key=len, reverse=True)
    tail = re.compile("(?:" + "|".join(map(re.escape, prefixes)) + r")\Z") if prefixes else None
    return tags, pattern, max_hold, first_chars, tail


class TagStreamer:
    """Find literal tags in streamed text.

    ``feed(text)`` returns events in order: ``("text", s)`` for text that is safe to release
    and ``("tag", t)`` for each complete tag; ``finish()`` releases the held tail. The tag set
    can change between tags (``set_tags``), which is how a parser switches modes; for that it
    uses ``push`` / ``next_event`` / ``take_rest`` instead of ``feed``.

    Contract: for any split of a text into chunks the events, with adjacent texts joined,
    are the same.

    >>> s = TagStreamer(["<think>", "</think>"])
    >>> s.feed("a<thi")
    [('text', 'a')]
    >>> s.feed("nk>b")
    [('tag', '<think>'), ('text', 'b')]
    """

    def __init__(self, tags: Sequence[str]) -> None:
        self._buf = ""
        self._pos = 0
        self._tags: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._max_hold = 0
        self._first_chars = ""
        self._tail: re.Pattern[str] | None = None
        self.set_tags(tags)

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags currently searched for."""
        return self._tags

    def set_tags(self, tags: Sequence[str]) -> None:
        """Search for ``tags`` from now on (the held tail is re-examined on the next call)."""
        key = tuple(tags)
        try:
            compiled = _compile_tags(key)
        except TypeError:  # an unhashable entry: let validation name it
            _validate_tags(key)
            raise
        self._tags, self._pattern, self._max_hold, self._first_chars, self._tail = compiled

    @property
    def is_empty(self) -> bool:
        """True when no text is buffered (nothing held back, nothing left to scan)."""
        return self._pos >= len(self._buf)

    def is_plain(self, text: str) -> bool:
        """True when nothing is held and ``text`` cannot start a tag: it may be released whole
        without scanning (the fast path of a parser)."""
        if self._pos < len(self._buf):
            return False
        for c in self._first_chars:
            if c in text:
                return False
        return True

    def push(self, text: str) -> None:
        """Append text to scan with ``next_event``."""
        if self._pos:
            self._buf = self._buf[self._pos :]
            self._pos = 0
        self._buf += text

    def next_event(self) -> tuple[str, str | None]:
        """``(released text, tag or None)``: the text up to the next tag and the tag, or, when
        no complete tag is buffered, everything except a tail that could start a tag."""
        buf = self._buf
        pos = self._pos
        if self._pattern is not None:
            match = self._pattern.search(buf, pos)
            if match is not None:
                self._pos = match.end()
                return buf[pos : match.start()], match.group()
        hold = self._hold_length(buf, pos)
        cut = len(buf) - hold
        released = buf[pos:cut]
        self._buf = buf[cut:]
        self._pos = 0
        return released, None

    def take_rest(self) -> str:
        """Remove and return all buffered text not yet released (after the last tag)."""
        rest = self._buf[self._pos :]
        self._buf = ""
        self._pos = 0
        return rest

    def feed(self, text: str) -> list[TagEvent]:
        """Events for ``text`` with the current tags."""
        self.push(text)
        events: list[TagEvent] = []
        while True:
            released, tag = self.next_event()
            if released:
                events.append(("text", released))
            if tag is None:
                return events
            events.append(("tag", tag))

    def finish(self) -> list[TagEvent]:
        """Release the held tail: no tag can complete any more."""
        rest = self.take_rest()
        return [("text", rest)] if rest else []

    def _hold_length(self, buf: str, pos: int) -> int:
        # longest suffix of buf[pos:] that is a proper prefix of a tag
        if self._tail is None:
            return 0
        match = self._tail.search(buf, max(pos, len(buf) - self._max_hold))
        return 0 if match is None else len(buf) - match.start()

"""Stop strings on streamed text: truncate at the first stop, hold back only what could start one.

Owns the stop-string contract of a generation request. It sees text deltas (from the
detokenizer) and returns the part that is safe to release; it must not look at token ids
beyond the count it is given, and it never re-scans released text: each ``feed`` looks only
at the held-back tail (shorter than the longest stop) plus the new delta.

The contract (tested as a property for any text, stop list and split into deltas): reading the
text character by character, the first stop string to complete wins; among several completing
at the same character, the one that starts first (the longest). The output is the text before
it (plus the stop itself with ``include_stop=True``). The answer depends neither on the split
into deltas nor on the order of the stop list, and no character of a stop string that later
completes is ever released (``include_stop=False``).

``min_tokens``: a stop counts only if its last character came from token number
``min_tokens + 1`` or later (vLLM's rule: stops apply once ``min_tokens`` tokens were
generated). A stop may *start* in earlier text. Each character belongs to the ``feed`` that
delivered it, and that feed's text is attributed to its last token; so the result is exact for
any grouping of tokens when text is fed one token at a time up to the ``min_tokens`` boundary,
which is what ``OutputPipeline`` does. Text before the boundary is released as usual (with the
same holdback, since a stop may start there).
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from textproc.errors import InvalidInput, short
from textproc.options import MAX_STOP_CHARS  # characters per stop string (holdback <= this - 1)

__all__ = ["MAX_STOPS", "MAX_STOP_CHARS", "StopChecker"]

MAX_STOPS = 4096  # distinct stop strings per request
# Proper prefixes up to this length are kept in a set (a hash lookup per candidate tail); longer
# tails are looked up by bisection in the sorted stops, so memory stays O(total characters).
_SHORT = 16
_NO_CHARS: frozenset[str] = frozenset()
_TAIL_REGEX_MAX = 1024  # proper prefixes in one tail regex (more: the loop with set/bisect)


@dataclass(frozen=True, slots=True)
class _StopSet:
    """Lookup structures for one stop list, built once and shared by every request using it."""

    stops: frozenset[str]
    by_last: dict[str, tuple[int, ...]]  # last char -> lengths of stops ending with it, longest first
    last_chars: frozenset[str]
    prefixes: frozenset[str]  # proper prefixes of at most _SHORT characters
    ordered: tuple[str, ...]  # the stops sorted: the ones starting with x follow bisect_left(x)
    first_chars: frozenset[str]
    hold_max: int  # longest stop length - 1
    boundary_chars: frozenset[str]  # first_chars | last_chars
    # a proper prefix of a stop at the very end of the text (leftmost match = longest); only
    # when every proper prefix is in ``prefixes`` and there are few of them
    tail: re.Pattern[str] | None
    last_re: re.Pattern[str]  # one character of last_chars


@functools.lru_cache(maxsize=256)
def _compiled(stops: tuple[object, ...], max_stops: int, max_stop_chars: int) -> _StopSet:
    # keyed by the caller's list as given: a repeated stop list costs one tuple hash
    return _compile(_validate(stops, max_stops, max_stop_chars))


def _compile(stops: tuple[str, ...]) -> _StopSet:
    # O(total characters) in time and memory: a set of every prefix would cost O(length**2)
    # per stop (64 stops of 1,024 characters: 38 MB and 0.4 s per distinct stop list)
    by_last: dict[str, set[int]] = {}
    prefixes: set[str] = set()
    for s in stops:
        by_last.setdefault(s[-1], set()).add(len(s))
        prefixes.update(s[:k] for k in range(1, min(len(s), _SHORT + 1)))
    hold_max = max((len(s) for s in stops), default=1) - 1
    tail = None
    if hold_max <= _SHORT and prefixes and len(prefixes) <= _TAIL_REGEX_MAX:
        ordered_prefixes = sorted(prefixes, key=len, reverse=True)
        tail = re.compile("(?:" + "|".join(map(re.escape, ordered_prefixes)) + r")\Z")
    return _StopSet(
        stops=frozenset(stops),
        by_last={c: tuple(sorted(ls, reverse=True)) for c, ls in by_last.items()},
        last_chars=frozenset(by_last),
        prefixes=frozenset(prefixes),
        ordered=tuple(sorted(stops)),
        first_chars=frozenset(s[0] for s in stops),
        hold_max=hold_max,
        boundary_chars=frozenset(s[0] for s in stops) | frozenset(by_last),
        tail=tail,
        last_re=re.compile("[" + "".join(sorted(map(_escape_in_class, by_last))) + "]"),
    )


def _escape_in_class(c: str) -> str:
    return "\\" + c if c in "\\]^-[" else c


def _validate(stops: tuple[object, ...], max_stops: int, max_stop_chars: int) -> tuple[str, ...]:
    items: list[str] = []
    for i, s in enumerate(stops):
        if not isinstance(s, str):
            raise InvalidInput(f"stop string {short(s)} at stop[{i}] is not a string; allowed: str")
        if not s:
            raise InvalidInput(f"empty stop string at stop[{i}]; allowed: 1..{max_stop_chars} characters")
        if len(s) > max_stop_chars:
            raise InvalidInput(
                f"stop string {short(s)} at stop[{i}] has {len(s)} characters; "
                f"allowed: at most {max_stop_chars}"
            )
        items.append(s)
    unique = tuple(sorted(set(items)))
    if len(unique) > max_stops:
        raise InvalidInput(
            f"{len(unique)} distinct stop strings (first {short(unique[0])}); allowed: at most {max_stops}"
        )
    return unique


class StopChecker:
    """Releases streamed text up to the first stop string; ``feed()`` returns what is safe now.

    Contract: the chunks from ``feed()`` and ``finish()`` concatenate to the one-shot truncation
    of the whole text (see the module docstring), for any split into deltas.

    >>> c = StopChecker(["</s>", "\\n\\n"])
    >>> c.feed("Hello</"), c.feed("s> world"), c.matched, c.finish_reason
    ('Hello', '', '</s>', 'stop')

    With ``include_stop=True`` nothing needs to be held back (the stop is part of the output
    either way), so every ``feed`` releases all of its text up to the end of a matched stop.
    After a match, further ``feed`` calls return "" and ``finish()`` returns "".
    """

    __slots__ = (
        "_set",
        "_include_stop",
        "_min_tokens",
        "_held",
        "cut_text",
        "_tokens",
        "_eligible",
        "matched",
        "stop_reason",
        "is_finished",
    )

    def __init__(
        self,
        stops: str | Iterable[str] = (),
        *,
        include_stop: bool = False,
        min_tokens: int = 0,
        max_stops: int = MAX_STOPS,
        max_stop_chars: int = MAX_STOP_CHARS,
    ) -> None:
        if not isinstance(min_tokens, int) or min_tokens < 0:
            raise InvalidInput(f"min_tokens {short(min_tokens)} is invalid; allowed: an int >= 0")
        if isinstance(stops, str):
            stops = (stops,)  # OpenAI's "stop": "text" form
        try:
            key = tuple(stops)
        except TypeError as e:
            raise InvalidInput(
                f"stop strings {short(stops)} are not a list; allowed: a string or a list of strings"
            ) from e
        self._set: _StopSet | None = None
        if key:
            try:
                self._set = _compiled(key, max_stops, max_stop_chars)
            except TypeError:  # an unhashable entry: let validation name it
                _validate(key, max_stops, max_stop_chars)
                raise
        self._include_stop = include_stop
        self._min_tokens = min_tokens
        # the longest suffix so far that is a proper prefix of a stop: held back, or with
        # include_stop already released and kept only as search context
        self._held = ""
        self._tokens = 0  # tokens fed so far (counted until stops become eligible)
        # absolute position of the first character that may end a stop
        # may the characters fed now end a stop? (monotone: once True, stays True)
        self._eligible = min_tokens == 0
        self.cut_text = ""  # after a stop string: the fed text past the end of the output
        self.matched: str | None = None  # the stop string that matched
        self.stop_reason: str | int | None = None  # matched stop string or stop token id
        self.is_finished = False

    @property
    def finish_reason(self) -> str | None:
        """"stop" once a stop string (or a reported stop token) ended the text, else None."""
        return "stop" if self.stop_reason is not None else None

    @property
    def is_idle(self) -> bool:
        """True when ``feed`` of a text holding none of ``boundary_chars`` would return it
        unchanged and change no state: nothing is held (not even search context) and stops
        are eligible (or there are none)."""
        if self._set is None:
            return not self.is_finished
        return not self._held and self._eligible and not self.is_finished

    @property
    def boundary_chars(self) -> frozenset[str]:
        """The characters that start or end some stop string (empty without stops)."""
        return self._set.boundary_chars if self._set is not None else _NO_CHARS

    @property
    def held_text(self) -> str:
        """The text currently held back because it could start a stop string."""
        return "" if self._include_stop else self._held

    def feed(self, text: str, *, n_tokens: int = 0) -> str:
        """Add ``text`` (produced by ``n_tokens`` new tokens); return the text safe to release."""
        if self.is_finished:
            return ""
        stop_set = self._set
        if stop_set is None:
            return text
        held = self._held  # with include_stop this tail was already released
        window = held + text if held else text
        eligible = self._eligible
        if not eligible:
            self._tokens += n_tokens
            eligible = self._eligible = self._tokens > self._min_tokens
        if eligible and not stop_set.last_chars.isdisjoint(text):
            # candidate end indexes (exclusive) in window: only characters this delta added
            # (held characters were checked when they came, or were not eligible then)
            by_last, stops = stop_set.by_last, stop_set.stops
            ends: Iterable[int]
            if len(text) <= 8:
                ends = range(len(held) + 1, len(window) + 1)
            else:  # longer deltas: visit only the characters that end some stop
                ends = (m.end() for m in stop_set.last_re.finditer(window, len(held)))
            for end in ends:
                lengths = by_last.get(window[end - 1])
                if lengths is None:
                    continue
                for n in lengths:  # longest first: among stops ending here, the one starting first
                    if n <= end and window[end - n : end] in stops:
                        return self._stop(window, len(held), end - n, end)
        hold_max = stop_set.hold_max
        # fast path: no character near the end can start a stop
        if not hold_max or stop_set.first_chars.isdisjoint(window[-hold_max:]):
            self._held = ""
            return text if self._include_stop else window
        keep = self._hold_length(window, stop_set)
        self._held = window[len(window) - keep :] if keep else ""
        if self._include_stop:
            return text
        return window[: len(window) - keep]

    def finish(self) -> str:
        """The text ended without a stop string: release the held-back tail."""
        held = "" if self._include_stop else self._held
        self._held = ""
        self.is_finished = True
        return held

    def stopped_by_token(self, token_id: int) -> str:
        """Report a stop token / EOS the engine stopped on; returns the held tail (now final).

        The engine decides on stop token ids and EOS (``ignore_eos``); this records it through
        the same path as a stop string: ``finish_reason == "stop"``, ``stop_reason == token_id``.
        """
        if self.is_finished:
            return ""
        self.stop_reason = token_id
        return self.finish()

    def _stop(self, window: str, n_released: int, start: int, end: int) -> str:
        stop = window[start:end]
        self.matched = stop
        self.stop_reason = stop
        self.is_finished = True
        self._held = ""
        if self._include_stop:  # window[:n_released] went out already
            self.cut_text = window[end:]
            return window[n_released:end]
        self.cut_text = window[start:]
        return window[:start]

    @staticmethod
    def _hold_length(window: str, stop_set: _StopSet) -> int:
        # longest suffix of window that is a proper prefix of some stop (< longest stop)
        start = max(0, len(window) - stop_set.hold_max)
        tail_re = stop_set.tail
        if tail_re is not None:
            match = tail_re.search(window, start)
            return 0 if match is None else len(window) - match.start()
        first_chars, prefixes, ordered = stop_set.first_chars, stop_set.prefixes, stop_set.ordered
        n = len(ordered)
        short_from = len(window) - _SHORT
        for i in range(start, len(window)):
            if window[i] in first_chars:
                tail = window[i:]
                if i >= short_from:
                    if tail in prefixes:
                        return len(window) - i
                    continue
                # the stops starting with tail are contiguous in sorted order, from bisect_left;
                # tail must be a proper prefix: skip a stop equal to it (the next one is longer)
                j = bisect_left(ordered, tail)
                if j < n and ordered[j] == tail:
                    j += 1
                if j < n and ordered[j].startswith(tail):
                    return len(window) - i
        return 0

"""OutputPipeline: one request's generated token ids -> OpenAI deltas, O(delta) per step.

Owns the composition detokenizer -> stop checker -> output parser and the request's finish
reason, matched stop and completion token count. It is what the detokenizer process runs per
request, so construction is cheap (shared per-tokenizer and per-stop-list tables) and each
``feed`` touches only the new ids plus held-back tails. It does no I/O and never imports the
process layer.

One holdback rule for the whole pipeline: text is held back only while its tail could still
become a UTF-8 character (detokenizer; for byte-fallback vocabularies an open ``<0xNN>`` run),
the start of a stop string (stop checker) or the start of a tag (parser), and each stage
releases it as soon as it cannot. Known gap: when a parser-held tag prefix is directly followed
by a stop-held tail (``"<th"`` then ``"x"`` with a stop ``"x!"``), the tag prefix waits until
the stop checker releases ``"x"``; the output is unaffected, only delayed by one delta.

Fast path (most steps): while no stage holds anything, one id whose bytes are complete UTF-8
(the detokenizer's ``text_table``) and whose text has no character that starts or ends a stop
string or could change the parser's state in its mode (``OutputParser.idle_chars``) goes out as
``{key: text}`` without running the stop checker or the
parser (each stage says when it is idle: ``StopChecker.is_idle``, ``OutputParser.idle_key``);
a text with only tag characters skips the stop checker, one with only stop characters the
parser. Each skipped stage would have returned the text unchanged and kept its state.

Contract (property-tested): for any split of the ids into ``feed`` calls the merged deltas,
finish reason and matched stop are the same as for one ``feed`` of all ids; with
``at_start=True`` they equal ``parse_output(truncate(decode(ids)))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textproc.core.deltas import join_text
from textproc.core.detokenizer import DetokenizerVocab, IncrementalDetokenizer
from textproc.errors import InvalidInput, short
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, OutputParser
from textproc.core.stops import StopChecker
from textproc.options import OutputOptions, ParseOptions, split_options

__all__ = ["FINISH_REASONS", "OutputPipeline"]

# what an engine may report when a request ends; "stop" = EOS or a stop token id
# what finish() takes from the engine (an "error" never reaches the text pipeline); finish()
# turns a "stop" after a tool call into "tool_calls", the one place that rule lives
FINISH_REASONS = frozenset({"stop", "length", "abort"})
_OUTPUT = OutputOptions()


class OutputPipeline:
    """Detokenize, stop and parse one request's output; ``feed(ids)`` returns deltas.

    Deltas are ``{"content": s}``, ``{"reasoning_content": s}`` or ``{"tool_calls": [...]}``
    in OpenAI's streaming format (see :class:`textproc.core.parsing.OutputParser`). When a stop
    string completes, ``feed`` returns the text before it, ``is_finished`` becomes True and the
    caller should abort the request in the engine; later ``feed`` calls return ``[]``.

    After the end: ``finish_reason`` is ``"stop"`` (stop string, EOS or stop token),
    ``"length"``, ``"abort"`` or ``"tool_calls"`` (the output made tool calls and ended
    naturally); ``stop_reason`` is the matched stop string or the stop token id;
    ``n_tokens`` counts every token fed until the end (the completion token count, including
    tokens of the final step after a stop string).

    ``output`` (the client's :class:`~textproc.options.OutputOptions`) and ``parse`` (how the
    output is split, :class:`~textproc.options.ParseOptions`; None: plain content) are read
    whole; ``OutputPipeline(tok, stop=[...], tools=True)`` builds them from their field names.

    ``min_tokens``: a stop string counts only if it is completed by token ``min_tokens + 1``
    or later (a character belongs to the token whose arrival released it from the
    detokenizer), whatever the grouping of tokens into ``feed`` calls.

    >>> from textproc.core.tokenizer import Tokenizer
    >>> tok = Tokenizer.from_dir(".cache/models/qwen3")
    >>> p = OutputPipeline(tok, OutputOptions(stop=["\\n\\n"]), at_start=True)
    >>> p.feed(tok.encode("Hi\\n")), p.feed(tok.encode("\\nmore")), p.finish_reason
    ([{'content': 'Hi'}], [], 'stop')
    """

    __slots__ = (
        "_detok",
        "_stops",
        "_parser",
        "_min_tokens",
        "n_tokens",
        "is_finished",
        "finish_reason",
        "stop_reason",
        "_fast_key",
        "_danger",
        "_danger_str",
        "_stop_chars",
        "_tag_chars",
        "_idle_chars",
        "_strs",
    )

    def __init__(
        self,
        tokenizer: DetokenizerVocab,
        output: OutputOptions | None = None,
        parse: ParseOptions | None = None,
        *,
        min_tokens: int = 0,
        at_start: bool = False,
        request_id: str = "",
        **options: Any,
    ) -> None:
        if options:  # keyword convenience: OutputPipeline(tok, stop=["x"], tools=True, ...)
            _, output, parse = split_options(options)
        output = output if output is not None else _OUTPUT
        self._stops = StopChecker(output.stop, include_stop=output.include_stop,
                                  min_tokens=min_tokens)
        keep: set[str] = set()
        if parse is not None and parse.tools:  # the specials a format is spelled in reach
            tool_format = parse.tool_format or TOOL_FORMATS.default  # the parser, which strips
            keep.update(TOOL_FORMATS[tool_format].specials  # them
                        if tool_format in TOOL_FORMATS else ())
        if parse is not None and parse.reasoning:
            reasoning_format = parse.reasoning_format or REASONING_FORMATS.default
            keep.update(REASONING_FORMATS[reasoning_format].specials
                        if reasoning_format in REASONING_FORMATS else ())
        self._detok = IncrementalDetokenizer(
            tokenizer, skip_special_tokens=output.skip_special_tokens, at_start=at_start,
            keep_specials=keep,
        )
        self._parser: OutputParser | None = None
        if parse is not None and (parse.reasoning or parse.tools):
            self._parser = OutputParser(parse, output, request_id=request_id)
        self._min_tokens = min_tokens
        self.n_tokens = 0
        self.is_finished = False
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        # the fast path: while no stage holds anything, a delta that contains none of the
        # characters that could start or end a stop string or start a tag goes out as it is,
        # ``{self._fast_key: text}``; None while some stage holds text (then every stage runs)
        self._idle_chars: frozenset[str] = frozenset()
        self._danger, self._danger_str, self._stop_chars, self._tag_chars = _danger_chars(
            self._stops, self._idle_chars
        )
        self._fast_key: str | None = None
        self._strs: list[str | None] | None = None  # the detokenizer's text_table while usable
        self._update_fast_key()

    @property
    def matched_stop(self) -> str | None:
        """The stop string that ended the output, if one did."""
        return self._stops.matched

    @property
    def byte_table(self) -> list[bytes]:
        """Token id -> the bytes it adds to the output (the detokenizer's table)."""
        return self._detok.byte_table

    def unreleased_bytes(self) -> int:
        """Bytes of the fed ids (as ``byte_table`` spells them) not in the text after stop
        strings: an incomplete character or byte run the detokenizer holds, the tail the stop
        checker holds, and once a stop string matched everything past the cut. The rest went
        to the parser, so per-token logprobs line up with the text (exact while the output is
        valid UTF-8: a U+FFFD in the text stands for one to three fed bytes)."""
        if self._fast_key is not None and self._strs is not None:
            return 0  # the fast path's state: no stage holds anything (see feed)
        stops = self._stops
        tail = stops.cut_text if stops.matched is not None else stops.held_text
        return self._detok.held_bytes + (len(tail.encode()) if tail else 0)

    @property
    def has_tool_calls(self) -> bool:
        """True once the output made a tool call."""
        return self._parser is not None and self._parser.has_tool_calls

    def feed(self, token_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Feed one engine step's new ids; return the deltas ready now."""
        key = self._fast_key  # not None: nothing held anywhere, stops eligible, not finished
        if key is None:
            return self._feed_ids(token_ids)
        n = len(token_ids)
        if n == 1:
            strs = self._strs  # not None: the detokenizer holds nothing either
            if strs is not None:
                token_id = token_ids[0]
                if token_id.__class__ is int and token_id >= 0:
                    try:
                        text = strs[token_id]
                    except IndexError:
                        text = None  # the detokenizer reports it
                    if text is not None:  # one id whose bytes are a complete text
                        self.n_tokens += 1
                        if not text:
                            return []
                        if self._danger.isdisjoint(text):
                            return [{key: text}]
                        return self._feed_text(text, 1, key)
        # every stage idle and min_tokens behind us (no cut): the detokenizer, then one check
        self.n_tokens += n
        text = self._detok.feed(token_ids)
        self._strs = self._detok.text_table
        if not text:
            return []
        danger = self._danger_str
        if danger is None:  # many characters: one set test per character of the text
            if self._danger.isdisjoint(text):
                return [{key: text}]
            return self._feed_text(text, n, key)
        for c in danger:  # few characters (or none): one C substring scan each
            if c in text:
                return self._feed_text(text, n, key)
        return [{key: text}]

    def _feed_ids(self, token_ids: Sequence[int]) -> list[dict[str, Any]]:
        # some stage holds text, stops are not eligible yet, or the output ended: every stage
        if self.is_finished:
            return []
        before = self.n_tokens
        n = len(token_ids)
        self.n_tokens = before + n
        stops = self._stops
        cut = self._min_tokens - before
        if 0 < cut < n:
            # tokens up to min_tokens and the ones after go to the stop checker separately,
            # so eligibility does not depend on how the engine grouped them
            text = stops.feed(self._detok.feed(token_ids[:cut]), n_tokens=cut)
            if not stops.is_finished:
                text += stops.feed(self._detok.feed(token_ids[cut:]), n_tokens=n - cut)
        else:
            text = stops.feed(self._detok.feed(token_ids), n_tokens=n)
        return self._after_stops(text)

    def _feed_text(self, text: str, n: int, key: str) -> list[dict[str, Any]]:
        # every stage idle, text has a character that may start/end a stop or start a tag: run
        # only the stage(s) it concerns (an idle stage given text without its characters would
        # return it unchanged and change nothing)
        if self._stop_chars.isdisjoint(text):
            parser = self._parser
            assert parser is not None  # the character is a tag's
            out = parser.feed(text)
            self._fast_key = parser.idle_key
            if parser.idle_chars is not self._idle_chars:
                self._mode_changed(parser)
            return out
        stops = self._stops
        text = stops.feed(text, n_tokens=n)
        # what the stop checker let through decides: a newline it holds (it may start a stop
        # string) does not reach the parser now, and text without the parser's characters
        # goes out unchanged (OutputParser.idle_key)
        if not stops.is_finished and self._tag_chars.isdisjoint(text):
            self._fast_key = key if stops.is_idle else None
            return [{key: text}] if text else []
        return self._after_stops(text)

    def _after_stops(self, text: str) -> list[dict[str, Any]]:
        if self._stops.is_finished:
            self._fast_key = None
            return self._end(text, "stop")
        out = self._parse(text)
        self._update_fast_key()
        return out

    def _update_fast_key(self) -> None:
        self._strs = self._detok.text_table
        if not self._stops.is_idle:
            self._fast_key = None
        elif self._parser is None:
            self._fast_key = "content"
        else:
            self._fast_key = self._parser.idle_key
            if self._parser.idle_chars is not self._idle_chars:
                self._mode_changed(self._parser)

    def _mode_changed(self, parser: OutputParser) -> None:
        # the parser's mode changed (content <-> reasoning): its characters for the fast path
        self._idle_chars = parser.idle_chars
        self._danger, self._danger_str, self._stop_chars, self._tag_chars = _danger_chars(
            self._stops, self._idle_chars
        )

    def finish(self, finish_reason: str = "stop", *, stop_token_id: int | None = None) -> list[dict[str, Any]]:
        """The engine ended the request: flush every stage, set ``finish_reason``; the rest.

        ``finish_reason`` is the engine's: ``"stop"`` (EOS or a stop token, give its id as
        ``stop_token_id``), ``"length"`` or ``"abort"``. A stop string completed by the
        flushed text still wins ("stop"). After an abort nothing more is sent.
        """
        if finish_reason not in FINISH_REASONS:
            raise InvalidInput(
                f"finish_reason {short(finish_reason)} is not one of {sorted(FINISH_REASONS)}"
            )
        self._fast_key = None
        if self.is_finished:
            return []
        if finish_reason == "abort":
            self.is_finished = True
            self.finish_reason = "abort"
            return []
        text = self._stops.feed(self._detok.finish())
        if self._stops.is_finished:
            return self._end(text, "stop")
        if finish_reason == "stop" and stop_token_id is not None:
            text += self._stops.stopped_by_token(stop_token_id)
        else:
            text += self._stops.finish()
        return self._end(text, finish_reason)

    def _parse(self, text: str) -> list[dict[str, Any]]:
        if self._parser is not None:
            return self._parser.feed(text) if text else []
        return [{"content": text}] if text else []

    def _end(self, text: str, reason: str) -> list[dict[str, Any]]:
        self.is_finished = True
        self.stop_reason = self._stops.stop_reason
        out = self._parse(text)
        if self._parser is not None:
            out = join_text(out + self._parser.finish())
            if reason == "stop" and self._parser.has_tool_calls:
                reason = "tool_calls"
        self.finish_reason = reason
        return out


_CharSets = tuple[frozenset[str], str | None, frozenset[str], frozenset[str]]
_DANGER_STR_MAX = 8  # up to this many characters, longer deltas are scanned once per character
_DANGER: dict[tuple[frozenset[str], frozenset[str]], _CharSets] = {}


def _danger_chars(stops: StopChecker, tag_chars: frozenset[str]) -> _CharSets:
    # (any, any as a str if short, stop, tag): characters that could start or end a stop string,
    # or change the parser's state in its current mode (OutputParser.idle_chars); shared per
    # distinct combination (free per request)
    stop_chars = stops.boundary_chars
    key = (stop_chars, tag_chars)
    sets = _DANGER.get(key)
    if sets is None:
        if len(_DANGER) >= 1024:
            _DANGER.clear()
        both = stop_chars | tag_chars
        short = "".join(sorted(both)) if len(both) <= _DANGER_STR_MAX else None
        sets = _DANGER[key] = (both, short, stop_chars, tag_chars)
    return sets

"""OutputParser: a model's streamed text -> OpenAI chat deltas.

Owns the split of generated text into ``reasoning_content``, ``content`` and ``tool_calls`` for
every registered format (:mod:`textproc.core.parsing.formats`; tool-call sections are parsed by
the format's body, :mod:`textproc.core.parsing.section`; a format with a whole-output parser,
gpt-oss's harmony, by that parser); deltas are built and merged by
:mod:`textproc.core.deltas`, the one-shot forms are :mod:`textproc.core.parsing.oneshot`. It takes only the new text each time and keeps its own history; the work
per ``feed`` is proportional to the new text (no re-parsing).

Invariant (property-tested): for any split of a text into ``feed`` calls,
``merge_deltas(deltas)`` equals ``parse_output(text)`` with the same options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from textproc.errors import InvalidInput, short
from textproc.core.deltas import Deltas
from textproc.core.parsing.declaration import WholeParser
from textproc.core.parsing.formats import (
    REASONING_FORMATS, TOOL_FORMATS, ReasoningFormat,
    ToolFormat,
)
from textproc.core.parsing.section import Section
from textproc.core.parsing.tags import TagStreamer
from textproc.options import OutputOptions, ParseOptions, split_options

__all__ = ["OutputParser", "tool_names_and_schemas"]

_SPACE = " \t\r\n"


def tool_names_and_schemas(
    tool_schemas: Sequence[Mapping[str, Any]] | None,
) -> tuple[frozenset[str] | None, dict[str, Any]]:
    """``(declared names, name -> parameters schema)`` of an OpenAI ``tools`` list; None: any
    name is a call (no list given)."""
    if tool_schemas is None:
        return None, {}
    names: set[str] = set()
    schemas: dict[str, Any] = {}
    for i, tool in enumerate(tool_schemas):
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise InvalidInput(
                f"tool_schemas[{i}] = {short(tool)} must be {{'type': 'function', 'function': "
                "{'name': str, 'parameters': schema}}"
            )
        assert isinstance(function, Mapping)
        names.add(name)
        schemas[name] = function.get("parameters")
    return frozenset(names), schemas


_PLAIN, _OUTPUT = ParseOptions(), OutputOptions()  # the defaults: no parsing, all calls allowed


def _formats(tool_format: str, reasoning_format: str, think_tags: tuple[str, str] | None,
             tool_tags: tuple[str, str] | None) -> tuple[ToolFormat, ReasoningFormat]:
    """The declared formats by name, with custom tags in place of theirs when given."""
    if tool_format not in TOOL_FORMATS:
        raise InvalidInput(f"tool_format={short(tool_format)}; supported: {', '.join(TOOL_FORMATS)}")
    if reasoning_format not in REASONING_FORMATS:
        raise InvalidInput(
            f"reasoning_format={short(reasoning_format)}; supported: {', '.join(REASONING_FORMATS)}"
        )
    fmt = TOOL_FORMATS[tool_format]
    for label, pair in (("think_tags", think_tags), ("tool_tags", tool_tags)):
        if pair is None:
            continue
        if len(pair) != 2 or not all(isinstance(t, str) for t in pair) or not pair[0] or \
                (not pair[1] and (label == "think_tags" or fmt.needs_close_tag)):
            raise InvalidInput(
                f"{label}={short(pair)} must be a pair of non-empty strings (open, close)"
            )
    if tool_tags is not None:
        fmt = fmt.with_tags(*tool_tags)
    rfmt = REASONING_FORMATS[reasoning_format]
    if think_tags is not None:
        rfmt = ReasoningFormat("custom", (think_tags[0],), (think_tags[1],))
    return fmt, rfmt


class OutputParser:
    """Turn streamed model text into OpenAI chat deltas.

    ``feed(text)`` returns the deltas ready now, ``finish()`` the rest. Deltas are
    ``{"reasoning_content": s}``, ``{"content": s}``, and for each tool call, once it is complete
    and valid, ``{"tool_calls": [{"index", "id", "type": "function", "function": {"name",
    "arguments": ""}}]}`` then ``{"tool_calls": [{"index", "function": {"arguments"}}]}`` with
    the JSON text of the arguments object.

    - ``reasoning``: recognise reasoning blocks of ``reasoning_format`` (``"think"``:
      ``<think>``...``</think>``, ``"deepseek_r1"``, ``"mistral"``: ``[THINK]``, ``"granite"``,
      ``"gpt_oss"``) anywhere in content. ``starts_in_reasoning``: the prompt ended inside an
      open block, so the text is reasoning until the close tag. Newlines around reasoning are
      formatting: ``"<think>\\nplan\\n</think>\\n\\nAnswer"`` gives reasoning ``"plan"`` and
      content ``"Answer"``. Tool-call markup inside reasoning stays reasoning text.
    - ``tools``: recognise tool calls of ``tool_format`` (see ``TOOL_FORMATS``) in content.
      ``tool_schemas``: the request's OpenAI ``tools``; a call naming another tool is content,
      and raw-text values (formats with ``raw_values``) are typed by the tool's schema.
      ``parallel_tool_calls`` False: calls past the first are content. A call is held until
      it is complete and valid, so a malformed or cut-off call is content and never shows as
      a call: a client cannot take back a call it acted on. Streamed or not, the calls are the
      one-shot parse's (``OutputOptions.stream_calls`` does not change them).
    - ``think_tags`` / ``tool_tags``: custom tags instead of the format's.
    - ``request_id``: tool-call ids are ``call_<request_id>_<index>`` (``call_<index>`` if
      empty), so streamed and one-shot parses agree; Kimi K2 and Mistral ids come from the text.

    Text is held back only while its tail could still start a tag of the current mode (and
    trailing newlines of reasoning, leading whitespace where a call may start the answer, a
    call until it is complete).

    >>> p = OutputParser(reasoning=True, tools=True, request_id="r1")
    >>> p.feed("<think>hm</think>ok<tool_call>")
    [{'reasoning_content': 'hm'}, {'content': 'ok'}]
    >>> p.feed('{"name": "f", "arguments": {"x": 1}}</tool_call>')[0]["tool_calls"][0]["id"]
    'call_r1_0'
    """

    def __init__(
        self,
        parse: ParseOptions | None = None,
        output: OutputOptions | None = None,
        *,
        think_tags: tuple[str, str] | None = None,
        tool_tags: tuple[str, str] | None = None,
        request_id: str = "",
        **options: Any,
    ) -> None:
        if options:  # keyword convenience: OutputParser(reasoning=True, tools=True, ...)
            _, output, parse = split_options(options)
        parse = parse if parse is not None else _PLAIN
        output = output if output is not None else _OUTPUT
        reasoning, tools = parse.reasoning, parse.tools
        tool_format = parse.tool_format or TOOL_FORMATS.default
        reasoning_format = parse.reasoning_format or REASONING_FORMATS.default
        tool_schemas = parse.tool_schemas
        starts_in_reasoning = parse.starts_in_reasoning
        max_calls = None if output.parallel_tool_calls else 1
        fmt, rfmt = _formats(tool_format, reasoning_format, think_tags, tool_tags)
        self.reasoning = reasoning
        self.tools = tools
        self.tool_format = tool_format
        self.reasoning_format = reasoning_format
        self.request_id = request_id
        self.max_calls = max_calls
        self._fmt = fmt
        self._rfmt = rfmt
        self._names, self._schemas = tool_names_and_schemas(tool_schemas)
        # a format that owns the whole output (harmony's channels) parses it instead
        self._whole: WholeParser | None = None
        whole = fmt.whole_parser or REASONING_FORMATS[reasoning_format].whole_parser
        if whole is not None and (reasoning or tools):
            self._whole = whole(
                tools=tools, make_id=self._call_id, names=self._names, schemas=self._schemas,
                max_calls=max_calls,
            )
        self._in_reasoning = reasoning and (starts_in_reasoning or rfmt.starts_in_reasoning)
        self._content_tags: list[str] = []
        self._reasoning_tags: list[str] = list(rfmt.close_tags)
        if reasoning:
            self._content_tags.extend(rfmt.open_tags)
        if tools:
            self._content_tags.extend(fmt.open_tags)
            if fmt.ends_reasoning:
                self._reasoning_tags.extend(fmt.open_tags)
        # markup around the answer that is neither content nor a call (Kimi K3's channels)
        self._hidden = frozenset((fmt.hidden_tags if tools else ()) + (rfmt.hidden_tags if reasoning else ()))
        self._content_tags.extend(self._hidden)
        self._start_chars = fmt.start_chars if tools else ""
        # characters that can change the state while idle: tags' first characters (any mode)
        if self._whole is not None:
            self._content_chars = self._reasoning_chars = frozenset("<")
        else:
            first = {t[0] for t in self._content_tags + (self._reasoning_tags if reasoning else [])}
            self._content_chars = frozenset(first)
            self._reasoning_chars = self._content_chars | {"\n"} if reasoning else self._content_chars
        self._streamer = TagStreamer(self._mode_tags())
        self._section: Section | None = None
        self._n_calls = 0  # complete calls (each has the next index)
        self._finished = False
        # formatting state: a call may start the answer (leading whitespace held in _lead);
        # leading newlines of content after reasoning are dropped; trailing newlines of
        # reasoning are held in _newlines until more reasoning text follows
        self._at_start = bool(self._start_chars) and not self._in_reasoning
        self._lead = ""
        self._strip_lead = False
        self._reasoning_started = False
        self._newlines = ""
        self._quiet = False
        self._update_quiet()

    @property
    def has_tool_calls(self) -> bool:
        """True once a complete tool call was parsed: the finish reason becomes "tool_calls"."""
        if self._whole is not None:
            return self._whole.n_calls > 0
        return self._n_calls > 0 or (self._section is not None and self._section.n_calls > 0)

    @property
    def idle_key(self) -> str | None:
        """``"content"`` / ``"reasoning_content"`` while nothing is held and no call is open,
        else None. While idle, ``feed(text)`` of a text holding none of :attr:`idle_chars` is
        ``[{idle_key: text}]`` and changes no state (the pipeline's fast path)."""
        if self._finished:
            return None
        if self._whole is not None:
            return self._whole.idle_key
        if self._section is not None or not self._quiet or not self._streamer.is_empty:
            return None
        return self._text_key()

    @property
    def tag_chars(self) -> frozenset[str]:
        """Every character that can change this parser's state while it is idle, in any mode
        (the first characters of its tags, and the newline when reasoning is parsed)."""
        return self._reasoning_chars

    @property
    def idle_chars(self) -> frozenset[str]:
        """:attr:`tag_chars` of the current mode: in content the newline changes nothing (so
        the pipeline's fast path takes more tokens), in reasoning a trailing one is held."""
        return self._reasoning_chars if self._in_reasoning else self._content_chars

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Deltas for the new text (adjacent deltas of one kind are joined)."""
        if self._finished:
            raise InvalidInput("OutputParser.feed() called after finish()")
        if self._section is None and self._whole is None and self._streamer.is_plain(text):
            if self._quiet and not (self._in_reasoning and text.endswith("\n")):
                return [{self._text_key(): text}] if text else []  # most deltas
            if self._in_reasoning and self._reasoning_started:  # what _emit does, unwrapped:
                text = self._newlines + text  # trailing newlines are held until text follows
                kept = text.rstrip("\n")
                self._newlines = text[len(kept):]
                self._quiet = not self._newlines
                return [{"reasoning_content": kept}] if kept else []
        out = Deltas()
        if self._whole is not None:
            self._whole.feed(text, out)
            return out.items
        self._run(text, out)
        return out.items

    def finish(self) -> list[dict[str, Any]]:
        """The rest: a held tag prefix, an unterminated call's text."""
        if self._finished:
            return []
        self._finished = True
        out = Deltas()
        if self._whole is not None:
            self._whole.finish(out)
            return out.items
        while self._section is not None:
            step = self._section.finish()
            out.extend(step.deltas)
            self._emit(out, "content", step.content)
            self._end_section()
            if step.rest:  # after a malformed call: ordinary text again
                self._finished = False
                self._run(step.rest, out)
                self._finished = True
        if self._lead:
            self._emit(out, "content", self._lead)
            self._lead = ""
        self._emit(out, self._text_key(), self._streamer.take_rest())
        return out.items

    # -- internals -----------------------------------------------------------------------

    def _mode_tags(self) -> list[str]:
        return self._reasoning_tags if self._in_reasoning else self._content_tags

    def _text_key(self) -> str:
        return "reasoning_content" if self._in_reasoning else "content"

    def _run(self, text: str, out: Deltas) -> None:
        while True:
            section = self._section
            if section is not None:
                step = section.feed(text)
                out.extend(step.deltas)
                self._emit(out, "content", step.content)
                if not step.is_closed:
                    return
                self._end_section()
                text = step.rest
            if self._at_start and not self._in_reasoning:
                text = self._answer_start(text, out)
                if self._section is not None:
                    continue
                if self._at_start:
                    return  # only whitespace so far
            if not self._scan_tags(text, out):
                return
            text = self._streamer.take_rest()

    def _answer_start(self, text: str, out: Deltas) -> str:
        # the answer's first non-space character decides whether a call starts it
        i, n = 0, len(text)
        while i < n and text[i] in _SPACE:
            i += 1
        self._lead += text[:i]
        if i == n:
            return ""
        self._at_start = False
        self._update_quiet()
        lead, self._lead = self._lead, ""
        if self._strip_lead:
            lead = lead.lstrip("\n")
        if text[i] in self._start_chars:
            self._open_section(lead)
        else:
            self._emit(out, "content", lead)
        return text[i:]

    def _scan_tags(self, text: str, out: Deltas) -> bool:
        """Scan text in content/reasoning mode; True when the mode changed (a call opened or a
        reasoning block ended) and the rest must be read again."""
        streamer = self._streamer
        streamer.push(text)
        while True:
            released, tag = streamer.next_event()
            self._emit(out, self._text_key(), released)
            if tag is None:
                return False
            if self._in_reasoning:
                self._in_reasoning = False
                self._newlines = ""
                self._reasoning_started = False
                self._strip_lead = True
                self._at_start = bool(self._start_chars)
                streamer.set_tags(self._content_tags)
                if tag in self._rfmt.close_tags:
                    self._update_quiet()
                    return True
                self._open_section(tag)  # a call section that also ends reasoning (Kimi K2)
                return True
            if tag in self._hidden:
                continue
            if self.reasoning and tag in self._rfmt.open_tags:
                self._in_reasoning = True
                self._reasoning_started = False
                streamer.set_tags(self._reasoning_tags)
                self._update_quiet()
                continue
            self._open_section(tag)
            return True

    def _open_section(self, open_tag: str) -> None:
        body = self._fmt.body
        assert body is not None
        self._at_start = False
        self._section = Section(
            body,
            open_tag=open_tag,
            first_index=self._n_calls,
            make_id=self._call_id,
            names=self._names,
            schemas=self._schemas,
            max_calls=self.max_calls,
        )
        self._update_quiet()

    def _end_section(self) -> None:
        assert self._section is not None
        self._n_calls += self._section.n_calls
        self._section = None
        self._update_quiet()

    def _update_quiet(self) -> None:
        # True when plain text would go out unchanged with no formatting state to update
        if self._in_reasoning:
            self._quiet = self._reasoning_started and not self._newlines
        else:
            self._quiet = not self._at_start and not self._strip_lead and not self._lead

    def _emit(self, out: Deltas, key: str, text: str) -> None:
        if not text:
            return
        if key == "reasoning_content":
            if not self._reasoning_started:
                text = text.lstrip("\n")
                if not text:
                    return
                self._reasoning_started = True
            text = self._newlines + text
            kept = text.rstrip("\n")
            self._newlines = text[len(kept):]
            self._quiet = not self._newlines
            out.text(key, kept)
            return
        if self._strip_lead:
            text = text.lstrip("\n")
            if not text:
                return
            self._strip_lead = False
            self._update_quiet()
        out.text(key, text)

    def _call_id(self, index: int) -> str:
        return f"call_{self.request_id}_{index}" if self.request_id else f"call_{index}"

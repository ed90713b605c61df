"""Strict tool calls in free text: the regex of an output that may say anything, but whose
calls (once the format's call marker appears) are declared tools with valid arguments.

Composed from the format's declaration only (:class:`~textproc.core.parsing.declaration.ToolFormat`):
the markers that start a call section are its ``open_tags`` (anywhere in content) and its
``start_chars`` (as the first non-space character of the answer); a section is spelled as the
forced calls spell it (:func:`~textproc.core.constraints.plans.forced_calls.spelling_pattern`). The
output is::

    [reasoning]  free0  (section free)*        (several calls: parallel_tool_calls)
    [reasoning]  free0  (section free)?        (at most one call)

where ``free`` is text containing no marker (:func:`~textproc.core.constraints.plans.free_text.without`,
exact at the byte level whether a marker is one special token or text over several tokens) and
``free0`` also does not start with a start character. Reasoning (a reasoning format with tags):
the prompt left a block open, so free reasoning (no close tag) and the close tag come first; or
an optional block at the very start. Free text after the reasoning never holds a reasoning open
tag, so a call is never read as reasoning by the parser (a narrowing: the reasoning block comes
first).

Formats without a marker in content cannot be strict (their calls are not text in content):
gpt-oss's harmony (calls are messages on their own channel) -> ``InvalidInput``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textproc.core.constraints.plans.forced_calls import ToRegex, plain_or_shared, spelling_pattern
from textproc.core.constraints.plans.free_text import without
from textproc.core.constraints.regex.parts import Shared, lit
from textproc.core.parsing.declaration import Lit, ReasoningFormat, ToolFormat
from textproc.errors import InvalidInput

__all__ = ["strict_calls_pattern", "free_reasoning_pattern", "section_lead", "PLAIN_MAX_CHARS"]

# a strict pattern is read by the token compiler alone (no other regex engine is given one), so
# past this it writes its calls once (forced patterns stay plain ``re`` syntax up to 64 K):
# parsing and the NFA of 12 coding-agent tools 0.23 -> 0.17 s of CPU, 20 closed tools 0.37 -> 0.24 s
PLAIN_MAX_CHARS = 1 << 12


def section_lead(fmt: ToolFormat) -> str:
    """The literal text every call section of ``fmt`` starts with (its begin, or the first
    literal of a call when sections are single calls)."""
    spelling = fmt.calls
    first = spelling.call[0] if spelling.call else None
    return spelling.begin + (first.text if spelling.begin == "" and isinstance(first, Lit) else "")


def free_reasoning_pattern(rfmt: ReasoningFormat, *, starts_inside: bool, close_text: str | None = None) -> str:
    """Free reasoning in ``rfmt``'s markup, closed: when ``starts_inside`` (the prompt left a block
    open) text without the close tag then ``close_text`` (default: the format's close tag);
    else an optional ``open ... close`` block at the start. "" for a format without tags."""
    if not rfmt.close_tags or not rfmt.open_tags:
        return ""
    close = rfmt.close_tags[0]
    end = lit(close_text if close_text is not None else close)
    if close_text is not None and not close_text.startswith(close):
        raise InvalidInput(f"close text {close_text!r} does not start with the close tag {close!r}")
    body = without([close]) + end
    if starts_inside:
        return body
    opens = "|".join(lit(t) for t in rfmt.open_tags)
    return f"(?:[ \\t\\r\\n]*(?:{opens}){body})?"


def strict_calls_pattern(fmt: ToolFormat, by_name: Mapping[str, Mapping[str, Any] | bool], *,
                         parallel: bool, to_regex: ToRegex, reasoning: ReasoningFormat | None = None,
                         starts_in_reasoning: bool = False) -> str:
    """The regex of a ``tool_choice: "auto"`` output with strict calls in ``fmt`` (see the
    module docstring); ``reasoning``: the reasoning format the output is parsed with (None:
    no reasoning), ``starts_in_reasoning``: the prompt left its block open. Past
    ``PLAIN_MAX_CHARS`` (4 K) the calls are written once
    (:func:`~textproc.core.constraints.plans.forced_calls.plain_or_shared`)."""
    if fmt.whole_parser is not None or not (fmt.open_tags or fmt.start_chars):
        raise InvalidInput(
            f"strict tool calls are not supported for tool format {fmt.name!r}: its calls are not "
            "marked in content (a whole-output format); use tool_choice 'required' or a named tool")

    def pattern(shared: Shared, schema_regex: ToRegex) -> str:
        return _strict_pattern(fmt, by_name, parallel, schema_regex, reasoning, starts_in_reasoning, shared)

    return plain_or_shared(pattern, to_regex, plain_max=PLAIN_MAX_CHARS)


def _strict_pattern(fmt: ToolFormat, by_name: Mapping[str, Mapping[str, Any] | bool], parallel: bool,
                    to_regex: ToRegex, reasoning: ReasoningFormat | None, starts_in_reasoning: bool,
                    shared: Shared) -> str:
    lead = section_lead(fmt)
    # the calls recur (after free text, after an open tag, as the answer's start, again after
    # more text): ``shared`` writes them once in a long pattern
    section = shared.call(spelling_pattern(fmt.calls, by_name, None, parallel=parallel, to_regex=to_regex,
                                           shared=shared))
    markers = list(fmt.open_tags)
    prefix = ""
    if reasoning is not None and reasoning.whole_parser is None and reasoning.open_tags:
        # a reasoning open tag in content would turn what follows into reasoning
        markers += [t for t in reasoning.open_tags if t not in markers]
        prefix = free_reasoning_pattern(reasoning, starts_inside=starts_in_reasoning)
    sections = []
    if any(lead.startswith(tag) for tag in fmt.open_tags):
        sections.append(section)
    else:
        # the spelling starts without a marker (a bare JSON object or list): after an open tag
        sections += [lit(tag) + section for tag in fmt.open_tags]
    start_chars = "".join(c for c in fmt.start_chars if lead.startswith(c))
    free = without(markers)
    first = without(markers, first_excluded=start_chars) if start_chars else free
    mid = shared.call("(?:" + "|".join(sections) + ")") if sections else None
    openings = [first]  # text only
    if mid is not None:
        openings.append(first + mid + free)  # text, then a section
    if start_chars:
        openings.append(f"[ \\t\\r\\n]*{section}{free}")  # a section as the answer's start
    more = f"(?:{mid}{free})*" if parallel and mid is not None else ""
    return prefix + "(?:" + "|".join(openings) + ")" + more

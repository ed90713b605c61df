"""Which tool-call and reasoning format a model writes, read from its own files.

Owns the choice made at startup from the chat template and the tokenizer's added tokens: each
family's template renders assistant tool calls in its own markup (``<function=`` inside
``<tool_call>`` is Qwen3-Coder, ``<｜tool▁sep｜>`` is DeepSeek, ``<|channel|>`` is gpt-oss ...),
and each declaration says which markers show it (``detect``, with a rank). The first rule by
rank that matches wins; ranks put the more specific markup first. An unknown
family gets no tool format (plain content) and a reason saying so, never an error. The
``--tool-format`` / ``--reasoning-format`` flags override the result (``resolve_formats``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from textproc.errors import InvalidInput, short
from textproc.core.parsing.formats import REASONING_FORMATS, TOOL_FORMATS

__all__ = ["FormatChoice", "detect_formats", "resolve_formats", "AUTO", "NONE"]

AUTO = "auto"
NONE = "none"

_Rule = tuple[int, str, tuple[str, ...], str]


@functools.cache
def _rules() -> tuple[list[_Rule], list[_Rule]]:
    """(rank, format, markers that must all appear, why) of every declaration, tool formats'
    and reasoning formats', each checked by rank (built on the first detection)."""
    return (sorted((d.rank, f.name, d.markers, d.why)
                   for f in TOOL_FORMATS.values() for d in f.detect),
            sorted((d.rank, f.name, d.markers, d.why)
                   for f in REASONING_FORMATS.values() for d in f.detect))


@dataclass(frozen=True)
class FormatChoice:
    """The formats to parse (None: that part is plain content) and why, for the log."""

    tool_format: str | None
    reasoning_format: str | None
    reason: str

    @property
    def is_known(self) -> bool:
        return self.tool_format is not None


def detect_formats(chat_template: str | dict[str, str] | None, added_tokens: Iterable[str] = ()) -> FormatChoice:
    """The formats a model's chat template and added tokens call for.

    >>> detect_formats("{{'<tool_call>\\n' + tool_call | tojson}}<think>x</think>").tool_format
    'hermes'
    >>> detect_formats("{{ messages }}").tool_format is None
    True
    """
    if isinstance(chat_template, dict):  # named templates: the default one, else all of them
        chat_template = chat_template.get("default") or "\n".join(chat_template.values())
    text = (chat_template or "") + "\n" + "\n".join(added_tokens)
    tool, tool_why = None, "no known tool-call markup in the chat template or added tokens"
    tool_rules, reasoning_rules = _rules()
    for _, name, markers, why in tool_rules:
        if all(m in text for m in markers):
            tool, tool_why = name, f"tool calls: {why}"
            break
    reasoning, reasoning_why = None, "no reasoning markup"
    for _, name, markers, why in reasoning_rules:
        if all(m in text for m in markers):
            reasoning, reasoning_why = name, f"reasoning: {why}"
            break
    implied = TOOL_FORMATS[tool].reasoning if tool is not None else None
    if implied is not None:  # the tool format's own reasoning (harmony's analysis channel)
        why = next((d.why for d in REASONING_FORMATS[implied].detect), f"implied by tool format {tool}")
        reasoning, reasoning_why = implied, f"reasoning: {why}"
    return FormatChoice(tool, reasoning, f"{tool_why}; {reasoning_why}")


def resolve_formats(detected: FormatChoice, *, tool_format: str = AUTO, reasoning_format: str = AUTO) -> FormatChoice:
    """Apply the ``--tool-format`` / ``--reasoning-format`` overrides (``auto``: what was
    detected; ``none``: off; else a registered name)."""
    for label, value, names in (("tool_format", tool_format, TOOL_FORMATS),
                                ("reasoning_format", reasoning_format, REASONING_FORMATS)):
        if value not in (AUTO, NONE) and value not in names:
            raise InvalidInput(f"{label}={short(value)}; supported: {AUTO}, {NONE}, {', '.join(names)}")
    tool, reasoning, reason = detected.tool_format, detected.reasoning_format, detected.reason
    if tool_format != AUTO:
        tool = None if tool_format == NONE else tool_format
        reason += f"; tool format {tool_format} from the command line"
    if reasoning_format != AUTO:
        reasoning = None if reasoning_format == NONE else reasoning_format
        reason += f"; reasoning format {reasoning_format} from the command line"
    return FormatChoice(tool, reasoning, reason)

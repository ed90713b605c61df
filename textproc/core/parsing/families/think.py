"""Reasoning between ``<think>`` and ``</think>`` (Qwen3, QwQ, GLM, Kimi, DeepSeek V3.1, ...).

Qwen3-2507 thinking models, Qwen3.5 and QwQ open ``<think>`` in the prompt, so often only
``</think>`` appears: the service asks :meth:`ReasoningFormat.prompt_leaves_open` and, for a
forced output, writes ``close_text`` first.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import Detect, ReasoningFormat

__all__ = ["FORMATS", "THINK"]

THINK = ReasoningFormat(
    "think", ("<think>",), ("</think>",), specials=("<think>", "</think>"), close_text="</think>\n\n",
    detect=(Detect(30, ("<think>", "</think>"), "<think>...</think>"), Detect(31, ("</think>",), "</think>")),
    is_default=True,
)
FORMATS = (THINK,)

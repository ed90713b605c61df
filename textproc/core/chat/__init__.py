"""Chat templates: transformers-identical rendering (``template``), which template to render
(``selection``), the metered Jinja sandbox (``sandbox``) and the built-in ChatML template
(``chatml``)."""

from __future__ import annotations

from textproc.core.chat.template import (
    CHATML_TEMPLATE,
    RESERVED_VARIABLES,
    ChatTemplate,
    RenderLimits,
    prompt_starts_in_reasoning,
    render_chat,
)
from textproc.core.chat.selection import load_chat_template, select_template

__all__ = [
    "CHATML_TEMPLATE",
    "ChatTemplate",
    "RenderLimits",
    "RESERVED_VARIABLES",
    "render_chat",
    "select_template",
    "load_chat_template",
    "prompt_starts_in_reasoning",
]

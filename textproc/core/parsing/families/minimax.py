"""MiniMax M2 tool calls: invoke blocks inside ``<minimax:tool_call>``.

As the MiniMax-M2 chat template renders calls::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

Values are raw text for strings, JSON (``tojson``) otherwise, typed back by the tool's schema
(:func:`textproc.core.parsing.xml_invoke.invoke_body`). Reasoning is ``<think>...</think>``
(the ``think`` format); the generation prompt opens ``<think>``, so the answer starts inside it.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.xml_invoke import invoke_body

__all__ = ["FORMATS"]

BEGIN, END = "<minimax:tool_call>", "</minimax:tool_call>"

FORMATS = (ToolFormat(
    "minimax_m2", (BEGIN,), invoke_body("", (END,)),
    CallSpelling((Lit('<invoke name="'), Name(), Lit('">\n'), RawArgs('<parameter name="', '">', "</parameter>\n"),
                  Lit("</invoke>\n")), begin=BEGIN + "\n", end=END),
    specials=(BEGIN, END), raw_values=True, listed=162,
    detect=(Detect(16, (BEGIN,), "<minimax:tool_call> invoke blocks"),),
),)

"""Seed-OSS (ByteDance) tool calls and reasoning.

As the Seed-OSS chat template renders a call (one block per call)::

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

The Qwen3-Coder layout (:func:`textproc.core.parsing.families.qwen3_coder.function_calls_body`,
with its rules for missing tags) inside ``<seed:tool_call>``, values without newlines around
them; non-string values are written with Jinja's ``string`` filter (Python literals such as
``True`` or ``{'a': 1}``), typed back by the tool's schema. Reasoning (``seed``) is
``<seed:think>...</seed:think>``; budget reflections (``<seed:cot_budget_reflect>``) stay
reasoning text.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ReasoningFormat, ToolFormat
from textproc.core.parsing.families.qwen3_coder import function_calls_body

__all__ = ["FORMATS"]

CALL_OPEN, CALL_CLOSE = "<seed:tool_call>", "</seed:tool_call>"
THINK_OPEN, THINK_CLOSE = "<seed:think>", "</seed:think>"

FORMATS = (
    ToolFormat(
        "seed_oss", (CALL_OPEN,), function_calls_body(CALL_OPEN, CALL_CLOSE, strip_newlines=False),
        CallSpelling((Lit(CALL_OPEN + "\n<function="), Name(), Lit(">\n"),
                      RawArgs("<parameter=", ">", "</parameter>\n", python_values=True),
                      Lit("</function>\n" + CALL_CLOSE)), sep="\n"),
        specials=(CALL_OPEN, CALL_CLOSE), raw_values=True, listed=166,
        detect=(Detect(18, (CALL_OPEN,), "<seed:tool_call> with <function=...>"),),
    ),
    ReasoningFormat(
        "seed", (THINK_OPEN,), (THINK_CLOSE,), specials=(THINK_OPEN, THINK_CLOSE), close_text=THINK_CLOSE + "\n",
        listed=160, detect=(Detect(24, (THINK_OPEN, THINK_CLOSE), "<seed:think>...</seed:think>"),),
    ),
)

"""DeepSeek V3.2 (``deepseek_v32``) and V4 (``deepseek_v4``) tool calls: DSML invoke blocks.

As their chat templates render calls (``｜DSML｜`` uses the fullwidth bars of the DeepSeek
special tokens, but is ordinary text in their vocabularies)::

    <｜DSML｜function_calls>            (V4: <｜DSML｜tool_calls>)
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

``string="true"`` values are raw text, ``string="false"`` ones JSON. Both formats read both
block names (the body is :func:`textproc.core.parsing.xml_invoke.invoke_body`); they differ in
the spelling a forced call writes. Reasoning is ``<think>...</think>`` (the ``think`` format):
with thinking on, the prompt ends with ``<think>``.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.xml_invoke import invoke_body

__all__ = ["FORMATS"]

DSML = "｜DSML｜"
_V32_BLOCK, _V4_BLOCK = f"<{DSML}function_calls>", f"<{DSML}tool_calls>"
_ENDS = (f"</{DSML}function_calls>", f"</{DSML}tool_calls>")
_BODY = invoke_body(DSML, _ENDS)


def _spelling(block: str, end: str, empty: str) -> CallSpelling:
    args = RawArgs(f'<{DSML}parameter name="', '" string="false">', f"</{DSML}parameter>\n",
                   string_key_close='" string="true">', empty=empty)
    return CallSpelling((Lit(f'<{DSML}invoke name="'), Name(), Lit('">\n'), args, Lit(f"</{DSML}invoke>\n")),
                        begin=block + "\n", end=end)


FORMATS = (
    ToolFormat(
        "deepseek_v32", (_V32_BLOCK, _V4_BLOCK), _BODY, _spelling(_V32_BLOCK, _ENDS[0], ""),
        raw_values=True, listed=152,
        detect=(Detect(15, (DSML, "function_calls>"), "<｜DSML｜function_calls> invoke blocks"),),
    ),
    ToolFormat(
        # (V4 writes an empty line for a call without arguments)
        "deepseek_v4", (_V4_BLOCK, _V32_BLOCK), _BODY, _spelling(_V4_BLOCK, _ENDS[1], "\n"),
        raw_values=True, listed=153,
        detect=(Detect(14, (DSML, "tool_calls>"), "<｜DSML｜tool_calls> invoke blocks"),),
    ),
)

"""Step 3 (StepFun) tool calls: steptml invoke blocks inside DeepSeek-like call tokens.

As Step 3 writes calls (vLLM's ``step3`` parser reads the same; the bars are U+FF5C)::

    <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">
    <steptml:parameter name="city">Paris</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>

One invoke per call (:func:`textproc.core.parsing.xml_invoke.read_invoke`: raw strings, other
values typed by the tool's schema); the section end may be missing at the very end after a
complete call. Reasoning is ``<think>...</think>``. No package this project fetches templates
from ships Step 3's chat template, so the vectors follow the reference parser's. Step 3.5
writes Qwen3-Coder calls instead (:mod:`textproc.core.parsing.families.step3p5`).
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.section import Malformed, Section, Wait
from textproc.core.parsing.xml_invoke import read_invoke

__all__ = ["FORMATS", "step3_body"]

CALLS_BEGIN, CALLS_END = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"
PREFIX = "steptml:"
_MAX_KIND = 64


def step3_body(s: Section) -> Wait:
    """The text after ``<｜tool_calls_begin｜>``."""
    n_read = 0
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(CALL_BEGIN, CALLS_END)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None  # the section end missing at the very end
            raise Malformed(s.at())
        if tag == CALLS_END:
            return None
        kind, _ = yield from s.until(SEP, max_len=_MAX_KIND)
        if kind.strip() != "function":
            raise Malformed(s.at())
        yield from s.skip_ws()
        yield from s.lit(f"<{PREFIX}invoke")
        yield from read_invoke(s, PREFIX)
        yield from s.skip_ws()
        yield from s.lit(CALL_END)
        s.end_call()
        n_read += 1


FORMATS = (ToolFormat(
    "step3", (CALLS_BEGIN,), step3_body,
    CallSpelling((Lit(f'{CALL_BEGIN}function{SEP}<{PREFIX}invoke name="'), Name(), Lit('">'),
                  RawArgs(f'<{PREFIX}parameter name="', '">', f"</{PREFIX}parameter>"),
                  Lit(f"</{PREFIX}invoke>{CALL_END}")), begin=CALLS_BEGIN, end=CALLS_END),
    specials=(CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP), raw_values=True, listed=111,
    detect=(Detect(12, (f"<{PREFIX}invoke",), "<steptml:invoke> blocks"),
            Detect(12, (CALLS_BEGIN, CALL_BEGIN), "<｜tool_calls_begin｜> (Step 3)")),
),)

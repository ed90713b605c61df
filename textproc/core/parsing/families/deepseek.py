"""DeepSeek tool calls: V3 / R1 (``deepseek_v3``) and V3.1 (``deepseek_v31``); R1's reasoning.

Owns the text after ``<｜tool▁calls▁begin｜>`` (the bars are U+FF5C, the spaces U+2581, as
the DeepSeek vocabularies spell these special tokens)::

    V3:   <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>
    V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>

repeated, then ``<｜tool▁calls▁end｜>``. The section may end without its closing token (it
is often the last thing before end of sequence). R1 (``deepseek_r1``) reasons until ``</think>``:
its template opens ``<think>`` in the prompt, so the answer starts inside reasoning. Generic rules:
:mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, JsonArgs, Lit, Name, ReasoningFormat, ToolFormat
from textproc.core.parsing.json_args import json_args
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["deepseek_v3_body", "deepseek_v31_body", "CALLS_BEGIN", "CALL_BEGIN", "SEP", "CALL_END", "CALLS_END",
           "FORMATS"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_MAX_NAME = 256


def _calls(s: Section, v31: bool) -> Wait:
    n_read = 0  # calls read, declared or not
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(CALL_BEGIN, CALLS_END)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None  # ended after a complete call
            raise Malformed(s.at())
        if tag == CALLS_END:
            return None
        if v31:
            name, _ = yield from s.until(SEP, max_len=_MAX_NAME)
        else:
            kind, _ = yield from s.until(SEP, max_len=_MAX_NAME)
            if kind.strip() != "function":
                raise Malformed(s.at())
            name, _ = yield from s.until("\n", max_len=_MAX_NAME)
        name = name.strip()
        if not name:
            raise Malformed(s.at())
        s.header(name)
        if not v31:
            yield from s.skip_ws()
            yield from s.lit("```json")
        yield from s.skip_ws()
        yield from json_args(s)
        yield from s.skip_ws()
        if not v31:
            yield from s.lit("```")
            yield from s.skip_ws()
        yield from s.lit(CALL_END)
        s.end_call()
        n_read += 1


def deepseek_v3_body(s: Section) -> Wait:
    """The text after ``<｜tool▁calls▁begin｜>``, V3 / R1 spelling."""
    result = yield from _calls(s, v31=False)
    return result


def deepseek_v31_body(s: Section) -> Wait:
    """The text after ``<｜tool▁calls▁begin｜>``, V3.1 spelling."""
    result = yield from _calls(s, v31=True)
    return result


_SPECIALS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
FORMATS = (
    ToolFormat(
        "deepseek_v3", (CALLS_BEGIN,), deepseek_v3_body,
        CallSpelling((Lit(f"{CALL_BEGIN}function{SEP}"), Name(), Lit("\n```json\n"), JsonArgs(),
                      Lit(f"\n```{CALL_END}")), begin=CALLS_BEGIN, sep="\n", end=CALLS_END),
        specials=_SPECIALS,
        detect=(Detect(20, (SEP, "```json"), "<｜tool▁sep｜> with a ```json block"),), listed=50,
    ),
    ToolFormat(
        "deepseek_v31", (CALLS_BEGIN,), deepseek_v31_body,
        CallSpelling((Lit(CALL_BEGIN), Name(), Lit(SEP), JsonArgs(), Lit(CALL_END)), begin=CALLS_BEGIN,
                     end=CALLS_END),
        specials=_SPECIALS,
        detect=(Detect(30, (SEP,), "<｜tool▁sep｜> followed by the arguments"),), listed=51,
    ),
    ReasoningFormat("deepseek_r1", ("<think>",), ("</think>",), starts_in_reasoning=True,
                    specials=("<think>", "</think>"), close_text="</think>\n\n", listed=10),
)

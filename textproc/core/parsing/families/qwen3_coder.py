"""Qwen3-Coder tool calls: XML-like parameters with raw-text values.

As the Qwen3-Coder chat template renders a call::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Owns the body after ``<tool_call>``. Values are raw text, typed by the tool's JSON Schema
(``raw_values.typed_value_json``); one newline on each side of a value is formatting. The header
goes out when ``<function=NAME>`` is complete; each parameter's ``"key": value`` streams when
its ``</parameter>`` arrives, the object's ``}`` with ``</function>``. A missing
``</tool_call>`` at the end is tolerated; anything else out of place makes the call malformed
(:mod:`textproc.core.parsing.section`).
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["qwen3_coder_body", "FORMATS"]

_MAX_NAME = 256


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def qwen3_coder_body(s: Section) -> Wait:
    """The text after ``<tool_call>``."""
    yield from s.skip_ws()
    s.begin_call()
    yield from s.lit("<function=")
    name, _ = yield from s.until(">", max_len=_MAX_NAME)
    name = name.strip()
    if not name:
        raise Malformed(s.at())
    s.header(name)
    while True:
        yield from s.skip_ws()
        tag = yield from s.match("<parameter=", "</function>")
        if tag is None:
            raise Malformed(s.at())
        if tag == "</function>":
            break
        key, _ = yield from s.until(">", max_len=_MAX_NAME)
        key = key.strip()
        if s.is_string_argument(key):  # text: streamed as it arrives
            yield from s.string_member(key, "</parameter>", strip_newlines=True)
            continue
        value, _ = yield from s.until("</parameter>")
        s.raw_member(key, _strip_one_newline(value))
    s.end_members()
    yield from s.skip_ws()
    yield from s.match("</tool_call>")
    s.end_call()
    return None


FORMATS = (ToolFormat(
    "qwen3_coder", ("<tool_call>",), qwen3_coder_body,
    CallSpelling((Lit("<tool_call>\n<function="), Name(), Lit(">\n"),
                  RawArgs("<parameter=", ">\n", "\n</parameter>\n"), Lit("</function>\n</tool_call>")), sep="\n"),
    specials=("<tool_call>", "</tool_call>"), raw_values=True,
    detect=(Detect(70, ("<function=", "<parameter="), "<function=...> with <parameter=...> inside <tool_call>"),),
    listed=10,
),)

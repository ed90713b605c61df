"""Hunyuan 3 (Tencent Hy3) tool calls and reasoning: GLM-like key/value tags with a suffix.

As the Hy3 chat template renders calls (every tag carries ``:opensource``)::

    <tool_calls:opensource>
    <tool_call:opensource>get_weather<tool_sep:opensource>
    <arg_key:opensource>city</arg_key:opensource>
    <arg_value:opensource>Paris</arg_value:opensource>
    </tool_call:opensource>
    </tool_calls:opensource>

Values are raw text for strings, JSON otherwise, typed back by the tool's schema; whitespace
between tags is formatting; the section end may be missing at the very end after a complete
call. Reasoning (``hunyuan``) is ``<think:opensource>...</think:opensource>``; with reasoning on
the prompt opens it. Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ReasoningFormat, ToolFormat
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["FORMATS", "hunyuan_body"]

_S = ":opensource"
CALLS_OPEN, CALLS_CLOSE = f"<tool_calls{_S}>", f"</tool_calls{_S}>"
CALL_OPEN, CALL_CLOSE, SEP = f"<tool_call{_S}>", f"</tool_call{_S}>", f"<tool_sep{_S}>"
KEY_OPEN, KEY_CLOSE = f"<arg_key{_S}>", f"</arg_key{_S}>"
VALUE_OPEN, VALUE_CLOSE = f"<arg_value{_S}>", f"</arg_value{_S}>"
THINK_OPEN, THINK_CLOSE = f"<think{_S}>", f"</think{_S}>"
_MAX_NAME = 256


def hunyuan_body(s: Section) -> Wait:
    """The text after ``<tool_calls:opensource>``."""
    n_read = 0
    while True:
        yield from s.skip_ws()
        s.begin_call()
        tag = yield from s.match(CALL_OPEN, CALLS_CLOSE)
        if tag is None:
            if s.is_final and n_read and s.pos >= len(s.buf):
                return None  # the section end missing at the very end
            raise Malformed(s.at())
        if tag == CALLS_CLOSE:
            return None
        name, _ = yield from s.until(SEP, max_len=_MAX_NAME)
        name = name.strip()
        if not name:
            raise Malformed(s.at())
        s.header(name)
        while True:
            yield from s.skip_ws()
            tag = yield from s.match(KEY_OPEN, CALL_CLOSE)
            if tag is None:
                raise Malformed(s.at())
            if tag == CALL_CLOSE:
                break
            key, _ = yield from s.until(KEY_CLOSE, max_len=_MAX_NAME)
            key = key.strip()
            yield from s.skip_ws()
            yield from s.lit(VALUE_OPEN)
            if s.is_string_argument(key):  # text: read as it arrives
                yield from s.string_member(key, VALUE_CLOSE, strip_newlines=False)
                continue
            value, _ = yield from s.until(VALUE_CLOSE)
            s.raw_member(key, value)
        s.end_members()
        s.end_call()
        n_read += 1


_SPECIALS = (CALLS_OPEN, CALLS_CLOSE, CALL_OPEN, CALL_CLOSE, SEP, KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE)
FORMATS = (
    ToolFormat(
        "hunyuan", (CALLS_OPEN,), hunyuan_body,
        CallSpelling((Lit(CALL_OPEN), Name(), Lit(SEP + "\n"), RawArgs(KEY_OPEN, f"{KEY_CLOSE}\n{VALUE_OPEN}",
                                                                      f"{VALUE_CLOSE}\n"), Lit(CALL_CLOSE + "\n")),
                     begin=CALLS_OPEN + "\n", end=CALLS_CLOSE),
        specials=_SPECIALS, raw_values=True, listed=176,
        detect=(Detect(19, (SEP,), "<tool_sep:opensource> in the added tokens"),
                Detect(20, ("<tool_sep{}>", _S), "<tool_sep:opensource> key/value calls")),
    ),
    ReasoningFormat(
        "hunyuan", (THINK_OPEN,), (THINK_CLOSE,), specials=(THINK_OPEN, THINK_CLOSE), close_text=THINK_CLOSE,
        listed=180, detect=(Detect(21, (THINK_OPEN,), "<think:opensource> in the added tokens"),
                           Detect(22, ("<think{}>", _S), "<think:opensource>...</think:opensource>")),
    ),
)

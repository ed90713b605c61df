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
(``raw_values.typed_value_json``); one newline on each side of a value is formatting. A string
value is read as it arrives, any other parameter's ``"key": value`` when its value ends, the
object's ``}`` with ``</function>``, when the call goes out.

Lenient where the template's markup leaves no doubt, strict elsewhere:

* a missing ``</parameter>``: the value ends before a line ``<parameter=NAME>`` naming a
  parameter the tool declares (any name when the request gives no schema) that this call has
  not given yet, or before a line ``</function>`` followed by ``</tool_call>``, another call
  or the end of the text; otherwise such text is part of the value;
* several ``<function=...>`` blocks in one ``<tool_call>`` are one call each; a missing
  ``</function>`` before ``</tool_call>``, or a missing ``</tool_call>`` at the end, is
  tolerated;
* a call cut off by the end of the text is malformed (content), anything else out of place
  too (:mod:`textproc.core.parsing.section`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.section import Body, Malformed, Section, Wait

__all__ = ["qwen3_coder_body", "function_calls_body", "FORMATS"]

_MAX_NAME = 256
_MAX_GAP = 64  # whitespace looked at after a "</function>" that may end a value
_CLOSE, _NEXT, _END = "</parameter>", "\n<parameter=", "\n</function>"


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _declared(s: Section) -> frozenset[str] | None:
    # the parameter names the open call's tool declares (None: no schema to go by)
    params = s.schemas.get(s.call_name or "")
    props = params.get("properties") if isinstance(params, Mapping) else None
    return frozenset(props) if isinstance(props, Mapping) and props else None


def function_calls_body(call_open: str, call_close: str, *, strip_newlines: bool) -> Body:
    """The body after ``call_open`` of ``<function=NAME>`` blocks with ``<parameter=KEY>``
    values, closed by ``call_close`` (Qwen3-Coder; Seed-OSS writes values without the newlines
    around them, ``strip_newlines=False``)."""
    after_end = (call_close, call_open, "<function=")

    def ends_value(s: Section, marker: str, seen: set[str]) -> Wait:
        # True when marker (at the read position, not consumed) ends a value whose
        # </parameter> is missing: a line opening a parameter the tool declares (any name
        # without a schema) not given yet, or a line </function> that ends the call
        if marker == _NEXT:
            head = yield from s.peek_text(len(_NEXT) + _MAX_NAME + 1)
            close = head.find(">", len(_NEXT))
            name = head[len(_NEXT):close].strip() if close >= 0 else ""
            declared = _declared(s)
            return bool(name) and name not in seen and (declared is None or name in declared)
        head = yield from s.peek_text(len(_END) + _MAX_GAP + max(map(len, after_end)))
        rest = head[len(_END):].lstrip()
        return (not rest and s.is_final) or rest.startswith(after_end)

    def value(s: Section, piece: Callable[[str], None], seen: set[str]) -> Wait:
        # a raw value, in pieces, up to its </parameter> (consumed) or an implicit end
        while True:
            _, marker = yield from s.until(_CLOSE, _NEXT, _END, consume=False, on_piece=piece)
            if marker == _CLOSE:
                s.pos += len(_CLOSE)
                return
            assert marker is not None
            if (yield from ends_value(s, marker, seen)):
                return
            s.pos += len(marker)  # literal text of the value
            piece(marker)

    def function(s: Section) -> Wait:
        # one <function=NAME> (its tag already read); returns the tag that ended it
        name, _ = yield from s.until(">", max_len=_MAX_NAME)
        name = name.strip()
        if not name:
            raise Malformed(s.at())
        s.header(name)
        seen: set[str] = set()
        while True:
            yield from s.skip_ws()
            tag = yield from s.match("<parameter=", "</function>", call_close)
            if tag is None:
                raise Malformed(s.at())
            if tag != "<parameter=":
                s.end_members()
                return tag
            key, _ = yield from s.until(">", max_len=_MAX_NAME)
            key = key.strip()
            seen.add(key)
            if s.is_string_argument(key):  # text: read as it arrives
                yield from value(s, s.open_string(key, strip_newlines=strip_newlines), seen)
                s.args('"')
                continue
            pieces: list[str] = []
            yield from value(s, pieces.append, seen)
            text = "".join(pieces)
            s.raw_member(key, _strip_one_newline(text) if strip_newlines else text)

    def body(s: Section) -> Wait:
        yield from s.skip_ws()
        s.begin_call()
        yield from s.lit("<function=")
        while True:
            tag = yield from function(s)
            if tag == call_close:  # (its </function> missing)
                s.end_call()
                return None
            yield from s.skip_ws()
            tag = yield from s.match(call_close, "<function=")
            if tag != "<function=":
                s.end_call()
                return None
            s.end_call()  # several functions in one call block: one call each
            s.begin_call()

    return body


qwen3_coder_body = function_calls_body("<tool_call>", "</tool_call>", strip_newlines=True)


FORMATS = (ToolFormat(
    "qwen3_coder", ("<tool_call>",), qwen3_coder_body,
    CallSpelling((Lit("<tool_call>\n<function="), Name(), Lit(">\n"),
                  RawArgs("<parameter=", ">\n", "\n</parameter>\n"), Lit("</function>\n</tool_call>")), sep="\n"),
    specials=("<tool_call>", "</tool_call>"), raw_values=True,
    detect=(Detect(70, ("<function=", "<parameter="), "<function=...> with <parameter=...> inside <tool_call>"),),
    listed=10,
),)

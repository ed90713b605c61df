"""GLM-4.5 / 4.6 (``glm45``) and GLM-4.7 (``glm47``) tool calls: key/value tags, raw values.

Owns the text after ``<tool_call>``, as the GLM templates render a call::

    glm45: <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>
    glm47: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>

Whitespace between tags is tolerated, so one body reads both. Values are raw text, typed by the
tool's JSON Schema (``raw_values.typed_value_json``: the templates write strings as they are
and other values with ``tojson``). Each ``"key": value`` is read when its ``</arg_value>``
arrives, the closing ``}`` with ``</tool_call>``, and the call goes out then; a call with
no arguments gets ``{}``. The templates always close a call with ``</tool_call>`` (the turn then
ends with ``<|observation|>``), so a call without it at the end of the text was cut off
(``max_tokens``, a stop string) and is malformed: content, as every cut-off call.
Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, RawArgs, ToolFormat
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["glm_body", "FORMATS"]

_MAX_NAME = 256


def glm_body(s: Section) -> Wait:
    """The text after ``<tool_call>``."""
    yield from s.skip_ws()
    s.begin_call()
    name, marker = yield from s.until("\n", "<arg_key>", "</tool_call>", max_len=_MAX_NAME,
                                      consume=False)
    name = name.strip()
    if not name or "<" in name or "{" in name:
        raise Malformed(s.at())
    s.header(name)
    while True:
        yield from s.skip_ws()
        tag = yield from s.match("<arg_key>", "</tool_call>")
        if tag is None:
            raise Malformed(s.at())
        if tag == "</tool_call>":
            break
        key, _ = yield from s.until("</arg_key>", max_len=_MAX_NAME)
        yield from s.skip_ws()
        yield from s.lit("<arg_value>")
        if s.is_string_argument(key.strip()):  # text: read as it arrives
            yield from s.string_member(key.strip(), "</arg_value>", strip_newlines=False)
            continue
        value, _ = yield from s.until("</arg_value>")
        s.raw_member(key.strip(), value)
    s.end_members()
    s.end_call()
    return None


def _glm(name: str, nl: str, detect: Detect, listed: int) -> ToolFormat:
    return ToolFormat(
        name, ("<tool_call>",), glm_body,
        CallSpelling((Lit("<tool_call>"), Name(), Lit(nl), RawArgs("<arg_key>", f"</arg_key>{nl}<arg_value>",
                                                                    f"</arg_value>{nl}"), Lit("</tool_call>")), sep=nl),
        raw_values=True,
        specials=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        detect=(detect,), listed=listed,
    )


FORMATS = (
    _glm("glm45", "\n", Detect(60, ("<arg_key>",), "<arg_key>/<arg_value> pairs"), 70),
    _glm("glm47", "", Detect(50, ("</arg_key><arg_value>",), "<arg_key>/<arg_value> pairs without newlines"), 71),
)

"""XML-like invoke blocks, shared by the families that write them (DeepSeek V3.2 / V4 DSML,
MiniMax M2, Step 3)::

    <PREFIXinvoke name="NAME">
    <PREFIXparameter name="KEY" string="true">VALUE</PREFIXparameter>
    </PREFIXinvoke>

repeated inside the family's block tags. Owns the body after the block's open tag: each invoke
is a call; a parameter whose ``string`` attribute is ``"true"`` (or, without the attribute, one
the tool declares as text) is raw text read as it arrives, any other value is typed by the
tool's schema (``raw_values.typed_value_json``: JSON, else text) when its close tag arrives.
Whitespace between tags is formatting. The block's end tag may be missing at the very end after
a complete invoke (the end of sequence often follows it); a call cut off inside an invoke is
malformed. Generic rules: :mod:`textproc.core.parsing.section`.
"""

from __future__ import annotations

import html
import re

from textproc.core.parsing.section import Body, Malformed, Section, Wait

__all__ = ["invoke_body", "read_invoke", "attribute"]

_MAX_TAG = 512  # characters of a tag's attributes
_ATTR = re.compile(r'([A-Za-z_][\w\-]*)\s*=\s*"([^"]*)"')


def attribute(attrs: str, name: str) -> str | None:
    """The value of attribute ``name`` in the text of a tag's attributes (``&quot;`` and other
    entities decoded), or None."""
    for key, value in _ATTR.findall(attrs):
        if key == name:
            return html.unescape(value)
    return None


def read_invoke(s: Section, prefix: str) -> Wait:
    """One invoke after its ``<PREFIXinvoke`` (consumed): the header, the parameters up to
    ``</PREFIXinvoke>``, the arguments object closed; the caller ends the call."""
    invoke_end = f"</{prefix}invoke>"
    param, param_end = f"<{prefix}parameter", f"</{prefix}parameter>"
    attrs, _ = yield from s.until(">", max_len=_MAX_TAG)
    name = (attribute(attrs, "name") or "").strip()
    if not name:
        raise Malformed(s.at())
    s.header(name)
    while True:
        yield from s.skip_ws()
        tag = yield from s.match(param, invoke_end)
        if tag is None:
            raise Malformed(s.at())
        if tag == invoke_end:
            break
        attrs, _ = yield from s.until(">", max_len=_MAX_TAG)
        key = attribute(attrs, "name")
        if not key:
            raise Malformed(s.at())
        flag = attribute(attrs, "string")
        if flag == "true" or (flag is None and s.is_string_argument(key)):
            yield from s.string_member(key, param_end, strip_newlines=False)
            continue
        value, _ = yield from s.until(param_end)
        s.raw_member(key, value)
    s.end_members()


def invoke_body(prefix: str, ends: tuple[str, ...]) -> Body:
    """The body after a block's open tag: invokes spelled with ``prefix`` until one of ``ends``."""
    invoke = f"<{prefix}invoke"

    def body(s: Section) -> Wait:
        n_read = 0  # invokes read, declared or not
        while True:
            yield from s.skip_ws()
            s.begin_call()
            tag = yield from s.match(invoke, *ends)
            if tag is None:
                if s.is_final and n_read and s.pos >= len(s.buf):
                    return None  # the block's end missing at the very end
                raise Malformed(s.at())
            if tag != invoke:
                return None
            yield from read_invoke(s, prefix)
            s.end_call()
            n_read += 1

    return body

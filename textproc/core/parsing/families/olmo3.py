"""OLMo 3 (Ai2) tool calls: Python calls, one per line, inside ``<function_calls>``.

As OLMo 3 writes them (vLLM's ``olmo3`` parser reads the same)::

    <function_calls>get_weather(city="Paris", days=3)
    ping()</function_calls>

Each line is one call in Python syntax, its values Python literals or JSON's ``true`` /
``false`` / ``null`` (read by :func:`textproc.core.parsing.families.pythonic.python_call`).
The close tag may be missing at the very end after a complete call. Reasoning (OLMo 3 Think) is
``<think>...</think>`` (the ``think`` format). No package this project fetches templates from
ships OLMo 3's chat template, so the test vectors follow the reference parser's.
"""

from __future__ import annotations

import re

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, PythonArgs, ToolFormat
from textproc.core.parsing.families.pythonic import python_call
from textproc.core.parsing.section import Malformed, Section, Wait

__all__ = ["FORMATS", "olmo3_body"]

OPEN, CLOSE = "<function_calls>", "</function_calls>"
_SPACE = re.compile(r"[ \t\r\n]*")
_MAX_GAP = 256


def olmo3_body(s: Section) -> Wait:
    """The text after ``<function_calls>``."""
    yield from s.skip_ws()
    while True:
        yield from python_call(s)
        gap = yield from s.run_of(_SPACE, max_len=_MAX_GAP)
        if (yield from s.match(CLOSE)) is not None:
            return None
        if (yield from s.peek()) is None:
            return None  # the close tag missing at the very end
        if "\n" not in gap:  # the next call starts on its own line
            raise Malformed(s.at())


FORMATS = (ToolFormat(
    "olmo3", (OPEN,), olmo3_body,
    CallSpelling((Name(), Lit("("), PythonArgs(), Lit(")")), begin=OPEN, sep="\n", end=CLOSE),
    listed=178,
    detect=(Detect(60, (OPEN, CLOSE), "<function_calls> with Python calls one per line"),),
),)

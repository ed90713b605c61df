"""LFM2 / LFM2.5 (Liquid AI) tool calls: a Python call list between special tokens.

As the LFM2.5 chat template renders calls::

    <|tool_call_start|>[get_weather(city='Paris', days=3, opts={"unit": "c"}), ping()]<|tool_call_end|>

Strings in single quotes, mappings with ``tojson`` (so JSON's ``true`` / ``false`` / ``null``
may appear inside them), other values with Jinja's ``string`` filter. The list is read by the
pythonic body (:func:`textproc.core.parsing.families.pythonic.python_list_body`). Reasoning is
``<think>...</think>`` (the ``think`` format).
"""

from __future__ import annotations

from textproc.core.parsing.declaration import CallSpelling, Detect, Lit, Name, PythonArgs, ToolFormat
from textproc.core.parsing.families.pythonic import python_list_body

__all__ = ["FORMATS"]

START, END = "<|tool_call_start|>", "<|tool_call_end|>"

FORMATS = (ToolFormat(
    "lfm2", (START,), python_list_body({START: END}),
    CallSpelling((Name(), Lit("("), PythonArgs(), Lit(")")), begin=START + "[", sep=", ", end="]" + END),
    specials=(START, END), listed=170,
    detect=(Detect(19, (START, END), "<|tool_call_start|>[...]<|tool_call_end|> Python call list"),),
),)

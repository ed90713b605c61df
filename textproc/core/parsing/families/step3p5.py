"""Step 3.5 (StepFun) tool calls: Qwen3-Coder's markup, calls written back to back.

The Step 3.5 chat template renders each call as Qwen3-Coder does
(:mod:`textproc.core.parsing.families.qwen3_coder`, same body and rules) but with nothing between
one ``</tool_call>`` and the next ``<tool_call>``; this declaration differs only in that
spelling (what a forced call writes) and in its detection, the template's own instruction
text. Reasoning is ``<think>...</think>``; the prompt opens ``<think>``.
"""

from __future__ import annotations

import dataclasses

from textproc.core.parsing.declaration import Detect
from textproc.core.parsing.families.qwen3_coder import FORMATS as _QWEN3_CODER

__all__ = ["FORMATS"]

_BASE = _QWEN3_CODER[0]
FORMATS = (dataclasses.replace(
    _BASE, name="step3p5", calls=dataclasses.replace(_BASE.calls, sep=""), listed=112,
    detect=(Detect(65, ("an inner <function=...>\\n...\\n</function> block", "<parameter="),
                   "Step 3.5's instructions for <function=...> blocks"),),
),)

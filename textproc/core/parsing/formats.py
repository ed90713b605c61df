"""The registry of tool-call and reasoning formats: every declaration of every family module.

Owns the names users and the format detection pick (``tool_format=`` / ``reasoning_format=``
of :class:`OutputParser`, ``--tool-format`` / ``--reasoning-format`` of ``textproc serve``). The
declarations (:mod:`textproc.core.parsing.declaration`) come from a scan of the
:mod:`textproc.core.parsing.families` package, the way tiktoken finds its encoding plugins: each
module there lists its formats in ``FORMATS``. The default format of each kind comes first,
then the others by their ``listed`` rank and name.
"""

from __future__ import annotations

import importlib
import pkgutil

import textproc.core.parsing.families as families
from textproc.core.parsing.declaration import ReasoningFormat, ToolFormat

__all__ = ["ToolFormat", "ReasoningFormat", "TOOL_FORMATS", "REASONING_FORMATS", "DEFAULT_TOOL_FORMAT",
           "DEFAULT_REASONING_FORMAT", "family_modules"]


def family_modules() -> list[str]:
    """The module names of the family package, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(families.__path__) if not m.name.startswith("_"))


def _collect() -> tuple[dict[str, ToolFormat], dict[str, ReasoningFormat]]:
    tools: list[ToolFormat] = []
    reasoning: list[ReasoningFormat] = []
    for name in family_modules():
        module = importlib.import_module(f"{families.__name__}.{name}")
        declared = getattr(module, "FORMATS", None)
        if not isinstance(declared, tuple) or not declared:
            raise TypeError(f"{module.__name__}.FORMATS must be a non-empty tuple of format declarations")
        for fmt in declared:
            if isinstance(fmt, ToolFormat):
                tools.append(fmt)
            elif isinstance(fmt, ReasoningFormat):
                reasoning.append(fmt)
            else:
                raise TypeError(f"{module.__name__}.FORMATS holds {fmt!r}, not a format declaration")
    out_tools: dict[str, ToolFormat] = {}
    for t in sorted(tools, key=lambda f: (not f.is_default, f.listed, f.name)):
        if t.name in out_tools:
            raise TypeError(f"tool format {t.name!r} is declared twice")
        out_tools[t.name] = t
    out_reasoning: dict[str, ReasoningFormat] = {}
    for r in sorted(reasoning, key=lambda f: (not f.is_default, f.listed, f.name)):
        if r.name in out_reasoning:
            raise TypeError(f"reasoning format {r.name!r} is declared twice")
        out_reasoning[r.name] = r
    for t in out_tools.values():
        if t.reasoning is not None and t.reasoning not in out_reasoning:
            raise TypeError(f"tool format {t.name!r} implies unknown reasoning format {t.reasoning!r}")
    return out_tools, out_reasoning


TOOL_FORMATS, REASONING_FORMATS = _collect()
DEFAULT_TOOL_FORMAT = next(f for f in TOOL_FORMATS.values() if f.is_default).name
DEFAULT_REASONING_FORMAT = next(f for f in REASONING_FORMATS.values() if f.is_default).name

"""The registry of tool-call and reasoning formats: every declaration of every family module.

Owns the names users and the format detection pick (``tool_format=`` / ``reasoning_format=``
of :class:`OutputParser`, ``--tool-format`` / ``--reasoning-format`` of ``textproc serve``). The
declarations (:mod:`textproc.core.parsing.declaration`) come from a scan of the
:mod:`textproc.core.parsing.families` package, the way tiktoken finds its encoding plugins: each
module there lists its formats in ``FORMATS``. The default format of each kind comes first,
then the others by their ``listed`` rank and name.

The scan runs on the first lookup, not at import (tiktoken's ``registry.py`` does the same):
:data:`TOOL_FORMATS` and :data:`REASONING_FORMATS` are read-only mappings that load every family
when first read, so importing the parsers (or anything that imports them) imports no family.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

import textproc.core.parsing.families as families
from textproc.core.parsing.declaration import ReasoningFormat, ToolFormat

__all__ = ["ToolFormat", "ReasoningFormat", "TOOL_FORMATS", "REASONING_FORMATS", "Formats",
           "DEFAULT_TOOL_FORMAT", "DEFAULT_REASONING_FORMAT", "family_modules"]

F = TypeVar("F", ToolFormat, ReasoningFormat)


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


_lock = threading.Lock()
_loaded: tuple[dict[str, ToolFormat], dict[str, ReasoningFormat]] | None = None


def _registry() -> tuple[dict[str, ToolFormat], dict[str, ReasoningFormat]]:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _collect()
    return _loaded


class Formats(Mapping[str, F], Generic[F]):
    """Format name -> declaration of one kind, the default first; the families load when it is
    first read. ``default`` is the name of the format used when a model's files name none."""

    def __init__(self, load: Callable[[], dict[str, F]]) -> None:
        self._formats: Callable[[], dict[str, F]] = load  # the registry's dict of this kind (scanned on the first call)

    def __getitem__(self, name: str) -> F:
        return self._formats()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._formats())

    def __len__(self) -> int:
        return len(self._formats())

    def __contains__(self, name: object) -> bool:
        return name in self._formats()

    def __repr__(self) -> str:
        return f"Formats({list(self._formats())!r})"

    @property
    def default(self) -> str:
        return next(iter(self._formats()))  # sorted with the default first (_collect)


TOOL_FORMATS: Formats[ToolFormat] = Formats(lambda: _registry()[0])
REASONING_FORMATS: Formats[ReasoningFormat] = Formats(lambda: _registry()[1])


def __getattr__(name: str) -> str:
    """``DEFAULT_TOOL_FORMAT`` / ``DEFAULT_REASONING_FORMAT``, read from the registry when asked
    for (``TOOL_FORMATS.default`` inside textproc, which does not load it at import)."""
    if name == "DEFAULT_TOOL_FORMAT":
        return TOOL_FORMATS.default
    if name == "DEFAULT_REASONING_FORMAT":
        return REASONING_FORMATS.default
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

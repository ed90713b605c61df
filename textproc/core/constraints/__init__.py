"""Constraints on generated text: regex / JSON Schema / choice / forced tool call -> a token
index the engine only looks up.

``schema`` (JSON Schema -> regex, with its building blocks in ``regex_parts``) and the forced
tool-call pattern; ``regex_syntax`` (Python ``re`` syntax -> tree), ``automaton`` (tree ->
minimal byte DFA), ``vocab`` (:class:`TokenVocabulary`: exact token bytes), ``index``
(:class:`TokenIndex`; built by ``build`` from each state's tokens in ``index_states``, with
the per-vocabulary token sets of ``token_sets``), ``guide`` (:class:`Guide`: one request's
walk), ``budget`` (:class:`Budget`: the limits every phase checks) and ``compile``
(:func:`compile_constraint`, cache). The names listed here load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textproc.core.constraints.budget import Budget
    from textproc.core.constraints.compile import (
        DEFAULT_CACHE,
        IndexCache,
        compile_constraint,
        constraint_regex,
    )
    from textproc.core.constraints.guide import Guide
    from textproc.core.constraints.index import TokenIndex
    from textproc.core.constraints.schema import (
        MAX_BOUND,
        MAX_COUNT,
        json_schema_to_regex,
        tool_call_pattern,
    )
    from textproc.core.constraints.vocab import TokenVocabulary

__all__ = [
    "json_schema_to_regex",
    "tool_call_pattern",
    "MAX_COUNT",
    "MAX_BOUND",
    "TokenVocabulary",
    "TokenIndex",
    "Guide",
    "compile_constraint",
    "constraint_regex",
    "Budget",
    "IndexCache",
    "DEFAULT_CACHE",
]

# name -> the module that defines it: imported on first use, so importing one module of this
# package (the engine's ``index`` and ``guide``) loads neither the compiler nor the parsers
_HOME = {
    "json_schema_to_regex": "schema", "tool_call_pattern": "schema", "MAX_COUNT": "schema",
    "MAX_BOUND": "schema", "TokenVocabulary": "vocab", "TokenIndex": "index", "Guide": "guide",
    "compile_constraint": "compile", "constraint_regex": "compile", "Budget": "budget",
    "IndexCache": "compile", "DEFAULT_CACHE": "compile",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

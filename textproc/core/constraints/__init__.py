"""Constraints on generated text: regex / JSON Schema / choice / forced tool call -> a token
index the engine only looks up.

By stage: ``schema/`` (JSON Schema -> regex), ``plans/`` (what tool calls and a reasoning block
add around it: forced calls, strict calls, free text, reasoning budgets), ``regex/`` (regex
text: the building blocks the first two write with, and the parse into a tree),
``automaton/`` (tree -> byte DFA: the minimal one, or one built on demand), ``index/``
(automaton + vocabulary -> :class:`TokenIndex`: the exact token bytes of
:class:`TokenVocabulary`, each state's tokens, the packed table, and :class:`Guide`, one
request's walk over it: the part an engine imports). ``budget`` (:class:`Budget`: the limits
every phase checks) and ``compile`` (:func:`compile_constraint`, cache) run the stages. The
names listed here load their module on first use.
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
    from textproc.core.constraints.index.guide import Guide
    from textproc.core.constraints.index.table import TokenIndex
    from textproc.core.constraints.index.vocab import TokenVocabulary
    from textproc.core.constraints.plans.forced_calls import tool_call_pattern
    from textproc.core.constraints.schema.to_regex import MAX_BOUND, MAX_COUNT, json_schema_to_regex

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
# package (the engine's ``index.table`` and ``index.guide``) loads neither the compiler nor the parsers
_HOME = {
    "json_schema_to_regex": "schema.to_regex", "tool_call_pattern": "plans.forced_calls",
    "MAX_COUNT": "schema.to_regex", "MAX_BOUND": "schema.to_regex", "TokenVocabulary": "index.vocab",
    "TokenIndex": "index.table", "Guide": "index.guide", "compile_constraint": "compile",
    "constraint_regex": "compile", "Budget": "budget", "IndexCache": "compile", "DEFAULT_CACHE": "compile",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

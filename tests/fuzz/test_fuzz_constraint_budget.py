"""Budgets hold under random schemas: on the Qwen3 vocabulary, any JSON schema (objects with
many optional free-form properties, counted strings, nested arrays, enums) compiles or is
refused with an ``InvalidInput`` within its time budget plus a small slack, never later. The
budget is what a worker gives a request: wall time from the moment it arrived, the schema's
regex included, and that is what is measured.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=500 .venv/bin/python -m pytest tests/fuzz/test_fuzz_constraint_budget.py``.
"""

from __future__ import annotations

import gc
import os
import time
from functools import lru_cache
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget
from textproc.errors import InvalidInput
from tests.helpers.models import model_dir

BUDGET_S = 0.5
# one state of the index (or one step of another phase) between two checks of the clock, and
# the collector freeing a refused compile's automaton: up to ~0.3 s each measured at load
# average 10 on 2 cores, more with other test processes beside (a compile past its budget used
# to run on for seconds to minutes)
SLACK_S = 1.5
EXAMPLES = max(5, int(os.environ.get("TEXTPROC_MAX_EXAMPLES", "100")) // 10)


@lru_cache(maxsize=1)
def _vocab() -> TokenVocabulary:
    vocab = TokenVocabulary.from_dir(model_dir("qwen3"))
    vocab.tables()
    # what a worker derives before its Ready (the token sets every string state needs)
    compile_constraint(vocab, json_schema={"type": "object", "properties": {"s": {"type": "string"}}}, cache=None)
    return vocab


scalars = st.one_of(
    st.just({}),  # any JSON value
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 300)),
    st.builds(lambda n: {"type": "string", "minLength": n}, st.integers(0, 40)),
    st.sampled_from([{"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "string"},
                     {"type": "string", "format": "date-time"}, {"enum": ["a", "b", 3]}]),
)


def _object(props: list[Any], required: int, free_form: int) -> dict[str, Any]:
    properties = {f"p{i}": p for i, p in enumerate(props)}
    properties.update({f"f{i}": {} for i in range(free_form)})
    return {"type": "object", "properties": properties, "required": list(properties)[:required]}


schemas = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(_object, st.lists(inner, max_size=12), st.integers(0, 12), st.integers(0, 250)),
        st.builds(lambda item, n: {"type": "array", "items": item, "maxItems": n}, inner, st.integers(1, 20)),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
    ),
    max_leaves=20,
)


@settings(max_examples=EXAMPLES)
@given(schemas)
@example(_object([], 0, 200))  # ~100 MB of regex if expanded
@example({"type": "object", "properties": {k: {"type": "string", "maxLength": 200} for k in "abc"},
          "required": list("abc")})
def test_compile_ends_within_its_budget(schema: dict[str, Any]) -> None:
    vocab = _vocab()
    gc.collect()  # the previous example's automaton is not this compile's work
    arrived = time.monotonic()  # the request's arrival: the clock starts before its schema's regex
    try:
        compile_constraint(vocab, json_schema=schema, budget=Budget(max_seconds=BUDGET_S, started=arrived),
                           cache=None)
    except InvalidInput:
        pass
    elapsed = time.monotonic() - arrived
    assert elapsed < BUDGET_S + SLACK_S, f"{elapsed:.2f} s of wall time for a {BUDGET_S} s budget"

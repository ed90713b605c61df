"""Counted bounds too large to unroll (``maxLength`` 1,000,000, ``maxItems`` 100,000, a pattern's
``{0,200000}``): written unbounded above ``MAX_EXACT_COUNT``, exact at and below it, and a tool
set carrying them compiles to an index that accepts its valid calls."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from tests.helpers.agent_tools import AGENT_CALLS, AGENT_TOOLS

from textproc import TokenIndex, TokenVocabulary, compile_constraint
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.regex.parts import upper_bound
from textproc.core.constraints.regex.syntax import Repeat, parse_regex
from textproc.core.constraints.schema.to_regex import MAX_COUNT, MAX_EXACT_COUNT, json_schema_to_regex
from textproc.errors import InvalidInput

# every byte a token, a few longer tokens and an end id
PIECES = [bytes([b]) for b in range(256)] + [b"xxxx", b'", "', b"0f0f", "é".encode()]
END = len(PIECES)
VOCAB = TokenVocabulary([*PIECES, b""], end_ids=[END])

HUGE = {
    "type": "object",
    "properties": {
        "document": {"type": "string", "maxLength": 1_000_000},
        "chunks": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 100_000},
        "digest": {"type": "string", "pattern": "^[0-9a-f]{0,200000}$"},
        "source": {"type": "string", "format": "uri", "maxLength": 100_000},
        "note": {"type": "string", "maxLength": 2**33},
    },
    "required": ["document", "chunks"],
    "additionalProperties": False,
}


def _accepts(index: TokenIndex, text: str) -> bool:
    state = index.initial_state
    for token_id in text.encode():  # one byte a token: the byte's own id
        if token_id not in index.allowed_ids(state):
            return False
        state = index.next_state(state, token_id)
    return END in index.allowed_ids(state)


def _counts(node: Any) -> list[tuple[int, int | None]]:
    if isinstance(node, Repeat):
        return [(node.lo, node.hi), *_counts(node.item)]
    return [c for item in getattr(node, "items", ()) for c in _counts(item)]


def test_bounds_too_large_to_unroll_compile_unbounded() -> None:
    pattern = json_schema_to_regex(HUGE)  # was a 400: "a repetition count above 65536"
    assert all(hi is None or hi <= MAX_EXACT_COUNT for _, hi in _counts(parse_regex(pattern)))
    index = compile_constraint(VOCAB, json_schema=HUGE, cache=None)
    for value in [
        {"document": "", "chunks": []},
        {"document": "x" * 1000, "chunks": ["ab"] * 300, "digest": "0f" * 200, "source": "https://a.example/b"},
        {"document": "é" * 300, "chunks": ["12345678"], "note": "y" * 400},
    ]:
        jsonschema.validate(value, HUGE)
        text = json.dumps(value, ensure_ascii=False)
        assert re.fullmatch(pattern, text) and _accepts(index, text), text[:80]
    # what stays enforced: the items' own maxLength 8, the pattern's characters, the keys
    for value in [{"document": "", "chunks": ["123456789"]}, {"document": "", "chunks": [], "digest": "g"},
                  {"document": "", "chunks": [], "extra": 1}]:
        assert not _accepts(index, json.dumps(value, ensure_ascii=False)), value


@pytest.mark.parametrize(("schema", "at", "over"), [
    ({"type": "string", "maxLength": MAX_EXACT_COUNT}, "x" * MAX_EXACT_COUNT, "x" * (MAX_EXACT_COUNT + 1)),
    ({"type": "string", "minLength": 3, "maxLength": 5}, "xxx", "xx"),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": MAX_EXACT_COUNT}, [1] * MAX_EXACT_COUNT,
     [1] * (MAX_EXACT_COUNT + 1)),
    ({"type": "string", "pattern": f"^a{{0,{MAX_EXACT_COUNT}}}$"}, "a" * MAX_EXACT_COUNT, "a" * (MAX_EXACT_COUNT + 1)),
    # an exact count over the limit stays exact (the states are there either way)
    ({"type": "string", "pattern": "^a{300}$"}, "a" * 300, "a" * 301),
    ({"type": "string", "minLength": 300}, "x" * 300, "x" * 299),
])
def test_bounds_up_to_the_limit_stay_exact(schema: dict[str, Any], at: Any, over: Any) -> None:
    pattern = re.compile(json_schema_to_regex(schema))
    assert pattern.fullmatch(json.dumps(at))
    assert not pattern.fullmatch(json.dumps(over))


def test_upper_bound_rule() -> None:
    assert upper_bound(0, MAX_EXACT_COUNT) == MAX_EXACT_COUNT
    assert upper_bound(0, MAX_EXACT_COUNT + 1) is None
    assert upper_bound(300, 301) is None and upper_bound(300, 300) == 300
    assert upper_bound(5, None) is None


@pytest.mark.parametrize(("schema", "match"), [
    ({"type": "string", "minLength": 100_000}, r"minLength 100000 at \$\.minLength is enforced exactly"),
    ({"type": "array", "minItems": MAX_COUNT + 1}, r"minItems 65537 at \$\.minItems is enforced exactly"),
    ({"type": "string", "pattern": "^a{100000,}$"}, r"pattern .* a minimum above 65536"),
    ({"type": "string", "maxLength": 1.5}, r"maxLength 1\.5 at \$\.maxLength must be a non-negative integer"),
])
def test_a_huge_lower_bound_is_refused_naming_it(schema: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        json_schema_to_regex(schema)


def test_a_huge_lower_bound_with_a_smaller_maximum_accepts_nothing() -> None:
    with pytest.raises(InvalidInput, match="accepts nothing|exclude each other"):
        json_schema_to_regex({"type": "string", "minLength": 1000, "maxLength": 500})


def test_agent_tool_set_compiles_and_accepts_its_calls() -> None:
    pattern = tool_call_pattern(AGENT_TOOLS)
    index = compile_constraint(VOCAB, tools=AGENT_TOOLS, cache=None)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in AGENT_TOOLS}
    for name, arguments in AGENT_CALLS:
        jsonschema.validate(arguments, schemas[name])
        call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        text = f"<tool_call>\n{call}\n</tool_call>"
        assert re.fullmatch(pattern, text) and _accepts(index, text), name
    bad = json.dumps({"name": "Bash", "arguments": {"command": "ls", "timeout": 600001}})
    assert not _accepts(index, f"<tool_call>\n{bad}\n</tool_call>")

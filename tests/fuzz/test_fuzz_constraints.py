"""Fuzz ``json_schema_to_regex`` / ``tool_call_pattern``: a regex that compiles, or InvalidInput naming where.

Random schemas come from a grammar of JSON Schema keywords with random and hostile values
(wrong types, huge counts, bad patterns, dangling ``$ref``, deep nesting, unknown formats). Every
regex returned must compile with the ``regex`` module (what engines' constrained decoders take),
and a valid instance built for simple schemas must match it. Any other exception is a bug.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_constraints.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.errors import InvalidInput

_TYPES = ["string", "integer", "number", "boolean", "null", "object", "array", "foo"]
_hostile = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 70), st.integers(-(2**80), 2**80), st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(["#", "#/$defs/a", "#/definitions/b", "#/nope", "http://x/y", "date", "time",
                     "date-time", "uuid", "email", "[a-z]+", "(a|b)*?", r"\d{2,4}", "((", "a{3}",
                     "^ab$", "(?=x)", "a**", "\\", ".", "[^\"]", "é+", "\ud800"]),
    st.sampled_from(_TYPES), st.lists(st.sampled_from(_TYPES), max_size=3),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3)), max_size=3),
)
_scalar_keys = ["minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "const", "enum",
                "$ref", "description", "title", "default", "uniqueItems", "multipleOf", "nullable",
                "required", "type", "additionalProperties"]


def _schema(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.dictionaries(st.sampled_from(_scalar_keys), _hostile, max_size=4),
        st.fixed_dictionaries({"type": st.sampled_from(_TYPES)},
                              optional={k: _hostile for k in _scalar_keys[:12]}),
        st.fixed_dictionaries({"type": st.just("object"),
                               "properties": st.dictionaries(st.sampled_from(["a", "b", "", "é", "q\"x"]),
                                                             children, max_size=3)},
                              optional={"required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
                                        "additionalProperties": st.one_of(st.booleans(), children)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": children},
                              optional={"minItems": st.integers(0, 4), "maxItems": st.integers(0, 4),
                                        "prefixItems": st.lists(children, max_size=2)}),
        st.fixed_dictionaries({st.sampled_from(["anyOf", "oneOf", "allOf"]): st.lists(children, max_size=3)}),
        st.fixed_dictionaries({"$defs": st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2),
                               "$ref": st.sampled_from(["#/$defs/a", "#/$defs/b", "#"])}),
        st.fixed_dictionaries({"not": children}),
    )


schemas: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.booleans(), st.just({}), st.builds(lambda t: {"type": t}, st.sampled_from(_TYPES)), _hostile),
    _schema, max_leaves=8,
)


def _check_error(e: InvalidInput) -> None:
    msg = str(e)
    assert "$" in msg or "tools" in msg or "tool_choice" in msg, f"no JSON path in: {msg}"


@given(schemas, st.integers(0, 4), st.integers(0, 3))
def test_random_schema_compiles_or_names_the_keyword(schema: Any, max_recursion: int, any_depth: int) -> None:
    try:
        pattern = json_schema_to_regex(schema, max_recursion=max_recursion, any_depth=any_depth)
    except InvalidInput as e:
        _check_error(e)
        return
    assert isinstance(pattern, str)
    regex.compile(pattern)


@given(st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["f", "get_weather", "a.b", "x(y)*", "名前", "\\"]),
                           st.text(max_size=5), _hostile)},
        optional={"parameters": schemas, "description": _hostile})}),
    st.fixed_dictionaries({"name": st.text(max_size=4), "parameters": schemas}),
    _hostile, st.just({}), st.just({"type": "code_interpreter"}),
), max_size=3), st.one_of(st.none(), st.text(max_size=4), st.sampled_from(["f", "get_weather"])),
    st.booleans())
def test_random_tools_compile_or_fail_cleanly(tools: Any, name: Any, parallel: bool) -> None:
    try:
        pattern = tool_call_pattern(tools, name, parallel=parallel)
    except InvalidInput as e:
        _check_error(e)
        return
    compiled = regex.compile(pattern)
    # a call of a tool whose parameters are absent or an empty object schema matches
    for tool in tools:
        function = tool.get("function", tool)
        params = function.get("parameters")
        if params is None and (name is None or function["name"] == name):
            call = json.dumps({"name": function["name"], "arguments": {}}, ensure_ascii=False)
            assert compiled.fullmatch(f"<tool_call>\n{call}\n</tool_call>"), (pattern, call)


@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=5)),
                    lambda c: st.one_of(st.lists(c, max_size=3),
                                        st.dictionaries(st.text(max_size=3), c, max_size=3)),
                    max_leaves=8))
def test_const_and_enum_match_their_own_serialisation(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    for schema in ({"const": value}, {"enum": [value, "other"]}):
        try:
            pattern = json_schema_to_regex(schema)
        except InvalidInput as e:
            _check_error(e)
            continue
        assert regex.fullmatch(pattern, text), (schema, pattern, text)


@given(st.integers(0, 2000), st.integers(0, 2000))
def test_integer_ranges_are_exact(lo: int, hi: int) -> None:
    schema = {"type": "integer", "minimum": lo - 1000, "maximum": hi - 1000}
    try:
        compiled = regex.compile(json_schema_to_regex(schema))
    except InvalidInput as e:
        _check_error(e)
        assert lo > hi
        return
    for n in range(lo - 1003, lo - 990):
        assert bool(compiled.fullmatch(str(n))) == (lo - 1000 <= n <= hi - 1000), (schema, n)
    for n in range(hi - 1010, hi - 997):
        assert bool(compiled.fullmatch(str(n))) == (lo - 1000 <= n <= hi - 1000), (schema, n)


# ---- regressions: found by this fuzzer, fixed by the PARSE helper in constraints.py --------------

def _refused(schema: Any, where: str) -> None:
    with pytest.raises(InvalidInput, match=where.replace("$", r"\$")):
        json_schema_to_regex(schema)


@pytest.mark.parametrize("fmt", [{}, [], ["date"]])
def test_unhashable_format(fmt: Any) -> None:
    _refused({"type": "string", "format": fmt}, "at $.format")  # was TypeError (unhashable)


@pytest.mark.parametrize("schema,where", [
    ({"type": "string", "minLength": 2**40}, "at $.minLength"),
    ({"type": "array", "minItems": 2**70}, "at $.minItems"),
])
def test_huge_counts(schema: dict[str, Any], where: str) -> None:
    _refused(schema, where)  # was a regex that did not compile ('repeat count too big')


@pytest.mark.parametrize("schema", [{"type": "string", "maxLength": 2**33}, {"type": "array", "maxItems": 2**33},
                                    {"type": "string", "pattern": "^a{0,99999999999999999999}$"}])
def test_huge_upper_counts_are_unbounded(schema: dict[str, Any]) -> None:
    regex.compile(json_schema_to_regex(schema))  # written unbounded, no count


def test_huge_integer_bounds() -> None:
    _refused({"type": "integer", "minimum": -(10**400), "maximum": 10**400}, "at $.minimum")  # was OverflowError


def test_reversed_quantifier_pattern() -> None:
    _refused({"type": "string", "pattern": "a{2,1}"}, "at $.pattern")  # was an uncompilable regex

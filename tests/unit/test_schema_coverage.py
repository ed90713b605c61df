"""JSON Schema coverage of ``json_schema_to_regex``: what real schemas use is accepted with the
spec's meaning (checked against ``jsonschema``), annotations and unknown keywords are ignored,
and what cannot be enforced is refused (tests/unit/test_constraints.py names the refusals)."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal
from typing import Any

import jsonschema
import pytest

from tests.helpers.regex_sampler import sample
from textproc.testing.schema_corpus import validator
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.schema.formats import FORMATS
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.errors import InvalidInput

INT = {"type": "integer"}
STR = {"type": "string"}


def _match(schema: Any, value: Any, **options: Any) -> bool:
    return re.fullmatch(json_schema_to_regex(schema, **options), json.dumps(value, ensure_ascii=False)) is not None


def _agrees(schema: Any, values: list[Any], **options: Any) -> None:
    """Each value matches exactly when jsonschema calls it valid."""
    check = validator(schema)
    regex = re.compile(json_schema_to_regex(schema, **options))
    for value in values:
        assert bool(regex.fullmatch(json.dumps(value, ensure_ascii=False))) == check.is_valid(value), value


def _sound(schema: Any, n: int = 200, seed: int = 0, **options: Any) -> None:
    """Strings sampled from the regex parse and validate."""
    check = validator(schema)
    regex = json_schema_to_regex(schema, **options)
    rng = random.Random(seed)
    for _ in range(n):
        text = sample(regex, rng)
        assert check.is_valid(json.loads(text)), text


def test_annotations_and_unknown_keywords_are_ignored() -> None:
    plain = {"type": "object", "properties": {"a": INT}, "required": ["a"]}
    noisy = {
        "id": "http://example.com/thing", "$comment": "c", "title": "t", "descrption": "typo",
        "links": [{"rel": "self", "href": "/x"}], "readonly": True, "example": {"a": 1}, "examples": [],
        "x-vendor": {"anything": 1}, "javaType": "com.example.Thing", "markdownDescription": "**a**",
        "nullable": True, "discriminator": {"propertyName": "a"}, "contentMediaType": "text/plain",
        "type": "object", "properties": {"a": {**INT, "format": "int32", "x-order": 1}}, "required": ["a"],
    }
    assert json_schema_to_regex(noisy) == json_schema_to_regex(plain)


def test_additional_properties_mean_what_they_say() -> None:
    base = {"type": "object", "properties": {"a": INT}, "required": ["a"]}
    _agrees(base, [{"a": 1}, {"a": 1, "b": [1, "x"]}, {"a": 1, "a2": None, "": {}}, {"b": 1}, {"a": "x"}])
    typed = {**base, "additionalProperties": STR}
    _agrees(typed, [{"a": 1, "b": "x"}, {"a": 1, "b": 2}, {"a": 1, "b": "x", "c": "y"}])
    _agrees({**base, "additionalProperties": False}, [{"a": 1}, {"a": 1, "b": 1}])
    # an extra key never repeats a declared one (that value would escape its schema)
    assert not re.fullmatch(json_schema_to_regex(typed), '{"a": 1, "a": "x"}')
    _sound(typed)
    _sound({"type": "object", "properties": {"ab": INT, "a": STR, "b\"c": {"type": "null"}}})


def test_strict_closes_objects_that_list_properties() -> None:
    schema = {"type": "object", "properties": {"a": INT, "o": {"type": "object", "properties": {}}}}
    assert _match(schema, {"a": 1, "b": 2})
    assert not _match(schema, {"a": 1, "b": 2}, strict=True)
    assert not _match(schema, {"o": {"x": 1}}, strict=True)
    assert _match(schema, {"a": 1, "o": {}}, strict=True)
    assert _match({**schema, "additionalProperties": INT}, {"a": 1, "b": 2}, strict=True)  # explicit wins
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": schema}}
    assert not re.fullmatch(tool_call_pattern([tool], "f"), '<tool_call>\n{"name": "f", "arguments": {"b": 1}}\n</tool_call>')
    loose = {"type": "function", "function": {"name": "f", "parameters": schema}}
    assert re.fullmatch(tool_call_pattern([loose], "f"), '<tool_call>\n{"name": "f", "arguments": {"b": 1}}\n</tool_call>')


def test_all_of_is_merged() -> None:
    schema = {"allOf": [
        {"type": "object", "properties": {"a": INT}, "required": ["a"]},
        {"properties": {"b": STR, "a": {"minimum": 3}}, "required": ["b"]},
        {"$ref": "#/$defs/c"}], "$defs": {"c": {"properties": {"c": {"type": "boolean"}}}}}
    _agrees(schema, [{"a": 3, "b": "x"}, {"a": 2, "b": "x"}, {"a": 3}, {"a": 3, "b": "x", "c": True},
                     {"a": 3, "b": "x", "c": 1}, {"a": 4, "b": "", "z": None}])
    closed = {"allOf": [{"properties": {"a": INT}, "additionalProperties": False}, {"properties": {"b": INT}}]}
    _agrees(closed, [{"a": 1}, {"a": 1, "b": 1}, {}, {"b": 1}])
    _sound(schema)


def test_any_of_and_one_of_next_to_other_keywords() -> None:
    schema = {"type": "object", "properties": {"kind": {"enum": ["a", "b", "c"]}, "n": INT}, "required": ["kind"],
              "additionalProperties": False,
              "oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["n"]},
                        {"properties": {"kind": {"enum": ["b", "c"]}, "n": {"maximum": 0}}}]}
    _agrees(schema, [{"kind": "a", "n": 5}, {"kind": "a"}, {"kind": "b"}, {"kind": "b", "n": 1}, {"kind": "c", "n": -1},
                     {"kind": "d"}, {"kind": "a", "n": 1, "x": 1}])
    _sound(schema)
    mixed = {"type": ["string", "integer"], "anyOf": [{"minLength": 2}, {"minimum": 5}]}
    _agrees(mixed, ["ab", "a", 5, 4, None])


def test_pattern_properties_and_dependencies() -> None:
    schema = {"type": "object", "properties": {"name": STR}, "patternProperties": {"^x-": INT, "^[0-9]+$": STR},
              "additionalProperties": False}
    _agrees(schema, [{"name": "a", "x-a": 1}, {"x-a": "s"}, {"12": "s"}, {"12": 1}, {"y": 1}, {"name": "a", "x-": 2, "3": ""}])
    _sound(schema)
    dep = {"type": "object", "properties": {"card": STR, "billing": STR, "x": INT},
           "dependentRequired": {"card": ["billing"]}}
    _agrees(dep, [{"card": "1", "billing": "a"}, {"card": "1"}, {"billing": "a"}, {}, {"x": 1, "card": "2"}])
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **{k: v for k, v in dep.items() if k != "dependentRequired"},
              "dependencies": {"card": ["billing"]}}
    _agrees(draft7, [{"card": "1", "billing": "a"}, {"card": "1"}])


@pytest.mark.parametrize("schema", [
    {"type": "number", "minimum": 0.5, "exclusiveMaximum": 10},
    {"type": "number", "exclusiveMinimum": -2.25, "maximum": 3},
    {"type": "number", "minimum": -1, "maximum": -0.001},
    {"type": "integer", "exclusiveMinimum": 1.5, "maximum": 40},
    {"type": "number", "multipleOf": 0.01, "maximum": 5},
    {"type": "integer", "multipleOf": 25},
    {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 100},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 1, "exclusiveMinimum": True,
     "maximum": 2.5},
])
def test_number_bounds_and_multiples(schema: dict[str, Any]) -> None:
    rng = random.Random(1)
    values: list[Any] = [0, 1, -1, 1.5, 2.5, 10, 9.99, -2.25, -2.24, 3, 0.5, 0.49, 100, 75, 49, 42, 7.0001]
    values += [float(Decimal(rng.randint(-5000, 5000)).scaleb(-rng.randint(0, 3))) for _ in range(300)]
    values += [rng.randint(-300, 300) for _ in range(300)]
    if schema["type"] == "integer":  # integers are written without a fraction (a narrowing)
        values = [v for v in values if not isinstance(v, float)]
    _agrees(schema, values)
    _sound(schema, seed=2)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_format_regexes_are_sound(fmt: str) -> None:
    """Strings sampled from each format's regex pass jsonschema's format checker."""
    schema = {"type": "string", "format": fmt}
    _sound(schema, n=150)


def test_formats_accept_common_values() -> None:
    good = {
        "date-time": "2024-02-29T07:08:09.5+02:00", "date": "2023-12-31", "time": "23:59:59Z",
        "duration": "P1Y2M3DT4H5M6S", "email": "first.last+tag@mail.example.org", "hostname": "api-1.example.com",
        "ipv4": "192.168.0.1", "ipv6": "2001:db8::ff00:42:8329", "uri": "https://example.com/a/b?q=1#frag",
        "uri-reference": "../a/b?x=%20", "uuid": "123e4567-e89b-12d3-a456-426614174000", "byte": "aGVsbG8=",
        "json-pointer": "/a/b~1c", "relative-json-pointer": "1/a",
    }
    for fmt, text in good.items():
        assert _match({"type": "string", "format": fmt}, text), fmt
    assert not _match({"type": "string", "format": "ipv4"}, "256.1.1.1")
    assert _match({"type": "string", "format": "binary"}, "anything")  # an annotation


def test_prefix_items_contains_and_const_structures() -> None:
    tuple_schema = {"type": "array", "prefixItems": [STR, INT], "items": {"type": "boolean"}, "minItems": 1}
    _agrees(tuple_schema, [["a"], ["a", 1], ["a", 1, True, False], [1], ["a", "b"], [], ["a", 1, 2]])
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [STR, INT], "additionalItems": False}
    _agrees(draft7, [["a", 1], ["a", 1, 2], ["a"], []])
    contains = {"type": "array", "items": INT, "contains": {"minimum": 10}, "minContains": 2}
    _agrees(contains, [[10, 11], [1, 10, 2, 12, 3], [10], [], [1, 2], [10, "x", 11]])
    _sound(contains)
    const = {"type": "object", "properties": {"p": {"const": {"x": [1, {"y": None}]}}, "q": {"enum": [[1, 2], {"a": "b"}, 3]}}}
    _agrees(const, [{"p": {"x": [1, {"y": None}]}}, {"p": {"x": [1]}}, {"q": [1, 2]}, {"q": {"a": "b"}}, {"q": 3.0}, {"q": [2, 1]}])


def test_recursive_ref_depth_is_configurable() -> None:
    expr = {"$defs": {"e": {"anyOf": [INT, {"type": "object", "properties": {
        "op": {"enum": ["+", "*"]}, "args": {"type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 2}},
        "required": ["op", "args"], "additionalProperties": False}]}}, "$ref": "#/$defs/e"}

    def nest(depth: int) -> Any:
        return 1 if depth == 0 else {"op": "+", "args": [nest(depth - 1), 2]}

    regex = re.compile(json_schema_to_regex(expr))
    assert regex.fullmatch(json.dumps(nest(4)))  # a valid 4-deep expression passes by default
    assert not regex.fullmatch(json.dumps(nest(6)))  # deeper outputs are not produced
    assert not re.fullmatch(json_schema_to_regex(expr, max_recursion=2), json.dumps(nest(3)))
    jsonschema.validate(nest(6), expr)


def test_refs_by_id_and_anchor() -> None:
    schema = {"$id": "https://example.com/root.json", "type": "object", "properties": {
        "a": {"$ref": "item.json"}, "b": {"$ref": "#num"}, "c": {"$ref": "https://example.com/root.json#/$defs/s"}},
        "$defs": {"item": {"$id": "item.json", "type": "boolean"}, "n": {"$anchor": "num", "type": "integer"}, "s": STR}}
    _agrees(schema, [{"a": True, "b": 1, "c": "x"}, {"a": 1}, {"b": "x"}, {"c": 1}])


def test_unique_items_min_properties_and_regex_format() -> None:
    unique = {"type": "array", "items": {"enum": ["r", "w", "x"]}, "uniqueItems": True, "minItems": 1}
    _agrees(unique, [["r"], ["r", "w", "x"], ["w", "x"], ["r", "r"], [], ["y"]])
    assert not _match(unique, ["w", "r"])  # valid, but the set's own order is the one produced
    _sound(unique)
    _agrees({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}, [[True, False], [True, True], []])
    _agrees({"type": "array", "uniqueItems": True, "maxItems": 1}, [[], [[1, 1]], [1, 2]])
    with pytest.raises(InvalidInput, match="uniqueItems"):
        json_schema_to_regex({"type": "array", "items": STR, "uniqueItems": True})
    assert _match({"type": "array", "uniqueItems": False}, [1, 1])  # false asserts nothing
    _agrees({"minProperties": 1}, [{}, {"a": 1}, [], 3])  # untyped: only objects are counted
    _agrees({"uniqueItems": True, "items": {"type": "boolean"}}, [[True, True], [True], "x"])
    nonempty = {"type": "object", "properties": {"a": INT, "b": INT}, "minProperties": 1}
    _agrees(nonempty, [{}, {"a": 1}, {"b": 1}, {"z": 1}, {"a": 1, "b": 2}])
    with pytest.raises(InvalidInput, match="accepts no value"):
        json_schema_to_regex({"type": "object", "additionalProperties": False, "minProperties": 1})
    _sound({"type": "string", "format": "regex"})


def test_strict_request_option_reaches_the_regex() -> None:
    from types import SimpleNamespace

    from textproc.http.api_types import JsonSchemaFormat, ResponseFormat
    from textproc.http.openai.structured import structured_spec
    from textproc.service.constraints import structured_regex

    schema = {"type": "object", "properties": {"a": INT}}
    extra = '{"a": 1, "b": 2}'
    for strict, allowed in ((None, True), (False, True), (True, False)):
        fmt = ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(name="s", schema_=schema, strict=strict))
        spec = structured_spec(SimpleNamespace(response_format=fmt))
        assert bool(re.fullmatch(structured_regex(spec), extra)) == allowed, strict
    with pytest.raises(InvalidInput, match="must be one of"):
        structured_regex({"regex": "a", "strict": True})

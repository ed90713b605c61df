"""json_schema_to_regex / tool_call_pattern: strings sampled from the regex validate against the
schema (jsonschema), valid instances serialised with json.dumps(ensure_ascii=False) match, and
invalid ones do not."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import random

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.regex_sampler import sample
from tests.helpers.schemas import SCHEMAS, FEW, any_json, instances

from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.errors import InvalidInput
from textproc.core.parsing import parse_tool_calls

@pytest.fixture(scope="module")
def compiled() -> dict[str, re.Pattern[str]]:
    return {name: re.compile(json_schema_to_regex(schema)) for name, schema in SCHEMAS.items()}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_sampled_strings_validate(name: str, seed: int, compiled: dict[str, re.Pattern[str]]) -> None:
    rng = random.Random(seed)
    validator = jsonschema.Draft202012Validator(SCHEMAS[name])
    for _ in range(150):
        text = sample(compiled[name].pattern, rng)
        assert compiled[name].fullmatch(text)  # the sampler is right
        validator.validate(json.loads(text))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(
    max_examples=FEW,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_valid_instances_match(name: str, compiled: dict[str, re.Pattern[str]], data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    value = data.draw(instances(schema, schema))
    jsonschema.validate(value, schema)  # the generator itself is right
    text = json.dumps(value, ensure_ascii=False)
    assert compiled[name].fullmatch(text), text


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=FEW, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=any_json(2))
def test_arbitrary_values_match_only_when_valid(name: str, compiled: dict[str, re.Pattern[str]], value: Any) -> None:
    if compiled[name].fullmatch(json.dumps(value, ensure_ascii=False)):
        jsonschema.validate(value, SCHEMAS[name])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("weather", {"city": ""}),
        ("weather", {"city": "x" * 13}),
        ("weather", {"unit": "celsius"}),
        ("weather", {"city": "a", "unit": "kelvin"}),
        ("weather", {"city": "a", "days": 15}),
        ("weather", {"city": "a", "days": 0}),
        ("weather", {"city": "a", "extra": 1}),
        ("nested", {"user": {"name": "a", "tags": []}, "active": True}),
        ("nested", {"user": {"name": "a", "tags": ["x"], "age": -1}, "active": True}),
        ("nested", {"user": {"name": "a", "tags": ["x"]}, "active": "yes"}),
        ("nested", {"user": {"name": "a", "tags": ["x"]}, "active": True, "note": "toolong"}),
        ("any_of", "four"),
        ("any_of", 1.5),
        ("one_of_tagged", {"kind": "c", "x": 1}),
        ("tree", {"value": 1, "children": [{"children": []}]}),
        ("patterns", {"code": "AB-12", "word": "abc", "quoted": "", "not_digits": "", "spaced": "a b"}),
        ("patterns", {"code": "AB-123", "word": "ac", "quoted": "", "not_digits": "", "spaced": "a b"}),
        ("patterns", {"code": "AB-123", "word": "abc", "quoted": "d", "not_digits": "", "spaced": "a b"}),
        ("patterns", {"code": "AB-123", "word": "abc", "quoted": "", "not_digits": "a1", "spaced": "a b"}),
        ("patterns", {"code": "AB-123", "word": "abc", "quoted": "", "not_digits": "", "spaced": "a  b"}),
        ("enum_values", 2),
        ("enum_values", {"a": [1]}),
        ("int_range", -38),
        ("int_range", 1205),
        ("no_params", []),
        ("any_object", {"a": "x"}),
        ("free_array", [1, 2, 3]),
        ("formats", {"day": 20240101, "id": str(uuid.UUID(int=5))}),
        ("bool_schemas", {"never": 1}),
    ],
)
def test_invalid_instances_do_not_match(name: str, value: Any, compiled: dict[str, re.Pattern[str]]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, SCHEMAS[name])
    assert not compiled[name].fullmatch(json.dumps(value, ensure_ascii=False))


def test_serialisation_is_json_dumps_default() -> None:
    regex = re.compile(json_schema_to_regex(SCHEMAS["weather"]))
    assert regex.fullmatch('{"city": "Zürich", "days": 3}')
    assert not regex.fullmatch('{"city":"Zürich","days":3}')  # separators are fixed
    assert not regex.fullmatch('{"days": 3, "city": "Zürich"}')  # schema order
    assert regex.fullmatch('{"city": "Z\\u00fcrich"}')  # escapes are fine


@pytest.mark.parametrize(("lo", "hi"), [(None, None), (0, 0), (-5, 5), (7, 130), (-1000, -10), (99, None), (None, -3), (1, 1000), (12, 12)])
def test_integer_ranges_exact(lo: int | None, hi: int | None) -> None:
    schema: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    regex = re.compile(json_schema_to_regex(schema))
    low = (lo if lo is not None else -2000) - 300
    high = (hi if hi is not None else 2000) + 300
    for n in [*range(low, high), 10**12, -(10**12)]:
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(regex.fullmatch(str(n))) == inside, n
    assert not regex.fullmatch("01")
    assert bool(regex.fullmatch("-0")) == (lo is None and hi is None)  # -0 only where any integer goes


def test_recursion_is_bounded() -> None:
    regex = re.compile(json_schema_to_regex(SCHEMAS["tree"], max_recursion=2))
    assert regex.fullmatch('{"value": 1, "children": [{"value": 2}]}')
    assert not regex.fullmatch('{"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}')
    with pytest.raises(InvalidInput, match=r"accepts no value: nothing is valid at \$\.\$ref\(#/\$defs/a\)\.items.*"
                                           r"\$ref recursion deeper than 5 levels"):
        json_schema_to_regex({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}, "$ref": "#/$defs/a"})


BAD_RANGE = {"type": "integer", "minimum": 5, "maximum": 2}


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "integer", "minimum": 5, "maximum": 2}, "$ (integer, minimum 5, maximum 2)"),
        ({"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2}},
          "required": ["a"]}, "$.properties.a (string, minLength 5, maxLength 2); $ (object)"),
        ({"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 1,
                                                 "exclusiveMaximum": 1}}, "required": ["n"]},
         "$.properties.n (number, exclusiveMinimum 1, exclusiveMaximum 1)"),
        ({"type": "string", "enum": [1, 2]}, "$ (string, enum of 2)"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "$ (false, or keywords no type satisfies)"),
        # an optional property and an array position that allow nothing are no cause
        ({"type": "object", "properties": {"opt": False, "tags": {"type": "array", "prefixItems": [False]},
                                           "n": {"type": "integer", "minimum": 5, "maximum": 2}},
          "required": ["tags", "n"]}, "$.properties.n (integer, minimum 5, maximum 2); $ (object)"),
        # the same sub-schema object twice (its compile is remembered): named where it failed
        ({"type": "object", "properties": {"opt": BAD_RANGE, "req": BAD_RANGE}, "required": ["req"]},
         "$.properties.req (integer, minimum 5, maximum 2); $ (object)"),
    ],
)
def test_a_schema_that_accepts_nothing_names_where(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        json_schema_to_regex(schema)
    assert f"accepts no value: nothing is valid at {where}" in str(info.value)


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, r"uniqueItems at \$\.properties\.a\.uniqueItems is enforced only"),
        ({"type": "array", "items": {"not": {}}}, r"keyword 'not' at \$\.items"),
        ({"if": {"type": "string"}, "then": {"minLength": 1}}, r"keyword 'if' at \$\.if"),
        ({"type": "object", "propertyNames": {"maxLength": 3}}, r"keyword 'propertyNames' at \$"),
        ({"type": "object", "minProperties": 2}, r"minProperties 2 at \$\.minProperties"),
        ({"type": "object", "maxProperties": 2}, r"keyword 'maxProperties' at \$"),
        ({"$dynamicRef": "#x"}, r"keyword '\$dynamicRef' at \$"),
        ({"oneOf": [{"type": "string"}, {"maxLength": 3}]}, r"oneOf at \$\.oneOf: branches"),
        ({"type": "number", "multipleOf": 0.3}, r"multipleOf 0\.3 at \$\.multipleOf"),
        ({"type": "integer", "minimum": 0, "multipleOf": 7}, r"multipleOf 7 at \$\.multipleOf"),
        ({"type": "array", "contains": {"type": "integer"}, "maxItems": 3}, r"contains at \$\.contains"),
        ({"type": "string", "pattern": "(?=a)b"}, r"pattern '\(\?=a\)b' at \$\.pattern: a group with '\(\?'"),
        ({"type": "string", "pattern": "a\\1"}, r"the escape \\1"),
        ({"type": "string", "pattern": "a^b"}, r"anchor '\^'"),
        ({"type": "string", "pattern": "^a$", "maxLength": 3}, "minLength/maxLength together with pattern"),
        ({"type": "string", "format": "date", "pattern": "^2"}, r"several patterns/formats \['\^2', 'date'\] at \$"),
        ({"$ref": "other.json#/x"}, r"\$ref 'other.json#/x' at \$\.\$ref points outside the schema"),
        ({"$ref": "#/$defs/missing"}, "points to nothing"),
        ({"$ref": "#nowhere"}, "no \\$anchor or \\$id 'nowhere'"),
        ({"type": "strin"}, r"type 'strin' at \$\.type; known"),
        ({"type": "object", "patternProperties": {"^a": {}}, "properties": {"ab": {}}}, r"also matches the declared properties \['ab'\]"),
        ({"anyOf": [{"anyOf": [{"type": t} for t in "abcdefghi"]}] * 1, "oneOf": [{"type": "null"}] * 1, "allOf": [
            {"anyOf": [{"minimum": i} for i in range(9)]}, {"anyOf": [{"maximum": i} for i in range(9)]}]},
         "distributes into over 64 alternatives"),
        ({"type": "string", "maxLength": -1}, "maxLength -1 at \\$.maxLength must be a non-negative integer"),
        ("nope", "must be an object or a boolean"),
        ({"type": "string", "minLength": 2**33}, r"minLength 8589934592 at \$\.minLength is enforced exactly, .* at most 65536"),
        ({"type": "array", "minItems": 2**70}, r"minItems .* at \$\.minItems is enforced exactly"),
        ({"type": "integer", "maximum": 10**400}, r"maximum .* at \$\.maximum must be a finite number within"),
        ({"type": "string", "pattern": "a{2,1}"}, r"a quantifier \{2,1\} with min > max"),
    ],
)
def test_unsupported_input_names_keyword_and_path(schema: Any, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        json_schema_to_regex(schema)


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMAS["weather"]}},
    {"type": "function", "function": {"name": "ping"}},
    {"name": "tree_sum", "parameters": SCHEMAS["tree"]},
]


def test_tool_call_pattern_named_and_required() -> None:
    named = re.compile(tool_call_pattern(TOOLS, "get_weather"))
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    ping = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    assert named.fullmatch(call)
    assert not named.fullmatch(ping)
    required = re.compile(tool_call_pattern(TOOLS))
    assert required.fullmatch(call) and required.fullmatch(ping)
    assert required.fullmatch(call + "\n" + ping)
    single = re.compile(tool_call_pattern(TOOLS, parallel=False))
    assert single.fullmatch(ping) and not single.fullmatch(ping + "\n" + ping)
    assert not required.fullmatch('<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')
    thinking = re.compile(tool_call_pattern(TOOLS, "ping", prefix="</think>\n\n"))
    assert thinking.fullmatch("</think>\n\n" + ping) and not thinking.fullmatch(ping)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forced_output_parses_back_to_a_valid_call(seed: int) -> None:
    pattern = tool_call_pattern(TOOLS[:2])
    text = sample(pattern, random.Random(seed))
    assert re.fullmatch(pattern, text)
    content, calls = parse_tool_calls(text)
    assert content == "\n" * (len(calls) - 1)
    schemas = {"get_weather": SCHEMAS["weather"], "ping": {"type": "object", "properties": {}, "additionalProperties": False}}
    for call in calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])


def test_tool_call_pattern_errors() -> None:
    with pytest.raises(InvalidInput, match=r"unknown tool 'nope'; known tools: \['get_weather', 'ping', 'tree_sum'\]"):
        tool_call_pattern(TOOLS, "nope")
    with pytest.raises(InvalidInput, match=r"tools\[0\] must be"):
        tool_call_pattern([{"type": "function", "function": {}}])
    with pytest.raises(InvalidInput, match=r"tool 'bad' parameters: keyword 'if' at \$\.if"):
        tool_call_pattern([{"type": "function", "function": {"name": "bad", "parameters": {"if": {}}}}])
    with pytest.raises(InvalidInput, match="non-empty list"):
        tool_call_pattern([])


def test_template_rendered_calls_match_and_parse_back() -> None:
    """The chat template's own tool-call text (tojson) matches the pattern and parses back."""
    chat = pytest.importorskip("textproc.core.chat.template")
    args = {"city": "Zü \"c\"", "unit": "celsius", "days": 3}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": args}}]},
    ]
    rendered = chat.render_chat(chat.CHATML_TEMPLATE, messages, tools=TOOLS[:2], add_generation_prompt=False)
    start = rendered.index("<tool_call>", rendered.index("<|im_start|>assistant"))
    end = rendered.index("</tool_call>", start) + len("</tool_call>")
    assert re.fullmatch(tool_call_pattern(TOOLS, "get_weather"), rendered[start:end])
    content, calls = parse_tool_calls(rendered[start:end])
    assert content == "" and json.loads(calls[0]["function"]["arguments"]) == args
    assert calls[0]["function"]["arguments"] == json.dumps(args, ensure_ascii=False)


# -- random schemas ------------------------------------------------------------------------

PATTERNS = ["^[a-z]{1,3}$", "x+", "^(?:ab|c)*$", '^[^0-9"]{0,2}$', "^\\d{2}$", '^"\\\\?$']


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    def int_schema(lo: int | None, span: int | None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer"}
        if lo is not None:
            schema["minimum"] = lo
        if span is not None:
            schema["maximum"] = (lo or 0) + span
        return schema

    def str_schema(lo: int, span: int | None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string", "minLength": lo}
        if span is not None:
            schema["maxLength"] = lo + span
        return schema

    return st.one_of(
        st.sampled_from(
            [{"type": "boolean"}, {"type": "null"}, {"type": "number"}, {"type": "string", "format": "date"},
             {"type": ["string", "null"], "maxLength": 2}, {"type": ["integer", "boolean"]}, {}, {"type": "object"}]
        ),
        st.builds(int_schema, st.none() | st.integers(-300, 300), st.none() | st.integers(0, 400)),
        st.builds(str_schema, st.integers(0, 3), st.none() | st.integers(0, 4)),
        st.sampled_from(PATTERNS).map(lambda p: {"type": "string", "pattern": p}),
        st.lists(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3), min_size=1, max_size=4, unique_by=json.dumps).map(lambda v: {"enum": v}),
        st.text(max_size=3).map(lambda v: {"const": v}),
    )


def _schema(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    if depth == 0:
        return _leaf()
    inner = _schema(depth - 1)

    def obj(props: dict[str, dict[str, Any]], required_mask: list[bool], closed: bool) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": props}
        schema["required"] = [k for k, r in zip(props, required_mask) if r]
        if closed:
            schema["additionalProperties"] = False
        return schema

    def arr(items: dict[str, Any], lo: int, span: int | None) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array", "items": items, "minItems": lo}
        if span is not None:
            schema["maxItems"] = lo + span
        return schema

    return st.one_of(
        _leaf(),
        st.builds(obj, st.dictionaries(st.text(max_size=3), inner, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4), st.booleans()),
        st.builds(arr, inner, st.integers(0, 2), st.none() | st.integers(0, 3)),
        st.lists(inner, min_size=1, max_size=3).map(lambda s: {"anyOf": s}),
    )


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_schema(2), st.randoms(use_true_random=False), st.data())
def test_random_schemas_sampled_strings_validate_and_instances_match(
    schema: dict[str, Any], rng: random.Random, data: st.DataObject
) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    regex = json_schema_to_regex(schema)
    compiled = re.compile(regex)
    validator = jsonschema.Draft202012Validator(schema)
    for _ in range(10):
        text = sample(regex, rng)
        assert compiled.fullmatch(text)
        validator.validate(json.loads(text))
    value = data.draw(instances(schema, schema))
    validator.validate(value)
    assert compiled.fullmatch(json.dumps(value, ensure_ascii=False))


@pytest.mark.parametrize("fmt, text, ok", [
    ("date", "0000-07-31", False),  # no year 0 (seen from the random engine under CI)
    ("date", "0001-01-01", True), ("date", "1000-12-31", True), ("date", "2024-02-28", True),
    ("date", "9999-11-30", True), ("date", "2024-02-30", False), ("date", "2024-04-31", False),
    ("date-time", "0000-01-01T00:00:00Z", False), ("date-time", "0010-01-01T23:59:59Z", True),
])
def test_date_formats_match_only_what_jsonschema_accepts(fmt: str, text: str, ok: bool) -> None:
    pattern = re.compile(json_schema_to_regex({"type": "string", "format": fmt}))
    assert bool(pattern.fullmatch(json.dumps(text))) is ok
    checker = jsonschema.FormatChecker()
    assert checker.conforms(text, fmt) or not ok  # what matches validates

"""Forced-call patterns of every tool-call format: what the pattern accepts parses back as a
complete, valid call with the format's own parser, and random schema instances rendered the
way the family's template writes them match the pattern and parse back to the same name and
arguments."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.helpers.regex_sampler import sample
from tests.helpers.schemas import instances
from tests.helpers.tool_calls import render
from textproc.core.constraints.plans.forced_calls import FORCED_FORMATS
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.parsing import TOOL_FORMATS, parse_output
from textproc.core.parsing.declaration import DelimitedArgs, PythonArgs, RawArgs
from textproc.errors import InvalidInput

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 0, "maximum": 30},
    "unit": {"enum": ["c", "f"]}, "ok": {"type": "boolean"}, "rate": {"type": "number"}},
    "required": ["city"]}
PING = {"type": "object", "properties": {}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "ping", "parameters": PING}}]
SCHEMAS = {"get_weather": WEATHER, "ping": PING}

def _parse(fmt: str, text: str) -> dict[str, Any]:
    return parse_output(text, tools=True, reasoning=True, tool_format=fmt,
                        reasoning_format="gpt_oss" if fmt == "gpt_oss" else "think", tool_schemas=TOOLS)


def test_every_format_has_a_forced_pattern() -> None:
    assert FORCED_FORMATS == set(TOOL_FORMATS)


@pytest.mark.parametrize("fmt", sorted(FORCED_FORMATS))
@pytest.mark.parametrize("seed", range(8))
def test_sampled_forced_outputs_parse_back_to_valid_calls(fmt: str, seed: int) -> None:
    pattern = tool_call_pattern(TOOLS, tool_format=fmt)
    text = sample(pattern, random.Random(seed))
    assert re.fullmatch(pattern, text)
    got = _parse(fmt, text)
    assert got["tool_calls"] and got["content"].strip("\n; ") == "", text
    for call in got["tool_calls"]:
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])


@pytest.mark.parametrize("fmt", sorted(FORCED_FORMATS))
def test_named_and_single_call_patterns(fmt: str) -> None:
    named = re.compile(tool_call_pattern(TOOLS, "ping", tool_format=fmt))
    assert named.fullmatch(render(fmt, "ping", {}))
    assert not named.fullmatch(render(fmt, "get_weather", {"city": "x"}))
    single = re.compile(tool_call_pattern(TOOLS, tool_format=fmt, parallel=False))
    assert single.fullmatch(render(fmt, "get_weather", {"city": "x", "days": 2}))


@pytest.mark.parametrize("fmt", sorted(FORCED_FORMATS))
@given(data=st.data())
def test_rendered_instances_match_and_parse_back(fmt: str, data: st.DataObject) -> None:
    args = data.draw(instances(WEATHER, WEATHER))
    if isinstance(TOOL_FORMATS[fmt].calls.args_layout, (RawArgs, DelimitedArgs)):  # raw text values
        assume("<" not in args["city"])
    if isinstance(TOOL_FORMATS[fmt].calls.args_layout, PythonArgs):  # Python literals
        assume(not re.search(r"['\\\x00-\x1f]", args["city"]))
    text = render(fmt, "get_weather", args)
    assert re.fullmatch(tool_call_pattern(TOOLS, "get_weather", tool_format=fmt), text), text
    got = _parse(fmt, text)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]] == [
        ("get_weather", args)]


def test_hermes_signature_unchanged_and_errors() -> None:
    assert tool_call_pattern(TOOLS) == tool_call_pattern(TOOLS, tool_format="hermes")
    with pytest.raises(InvalidInput, match="tool_format='nope'; forced calls support hermes"):
        tool_call_pattern(TOOLS, tool_format="nope")
    nested = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"o": {"type": "object"}}}}}]
    with pytest.raises(InvalidInput, match="tool 'f' parameters: pythonic forced calls support string"):
        tool_call_pattern(nested, tool_format="pythonic")


NESTED = {"type": "object", "properties": {
    "o": {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "array", "items": {"type": "integer"},
                                                                          "maxItems": 3}}, "required": ["a"]},
    "rows": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "boolean"}}}, "minItems": 1},
    "free": {"type": "object"}}, "required": ["o", "rows"]}
NESTING = sorted(n for n, f in TOOL_FORMATS.items()
                 if isinstance(f.calls.args_layout, RawArgs) and f.calls.args_layout.item)


@pytest.mark.parametrize("fmt", NESTING)
def test_nested_elements_are_forced_as_the_template_nests_them(fmt: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": NESTED}}]
    pattern = tool_call_pattern(tools, tool_format=fmt)
    args = {"o": {"a": "x", "n": [1, 2]}, "rows": [{"k": True}, {}]}
    assert re.fullmatch(pattern, render(fmt, "f", args))  # (an object without properties: JSON text)
    for seed in range(6):
        text = sample(pattern, random.Random(seed))
        got = parse_output(text, tools=True, tool_format=fmt, tool_schemas=tools)
        assert got["tool_calls"] and got["content"] == "", text
        jsonschema.validate(json.loads(got["tool_calls"][0]["function"]["arguments"]), NESTED)

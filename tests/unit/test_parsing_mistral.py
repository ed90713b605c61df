"""Mistral ``[TOOL_CALLS][...]`` tool calls: examples and streamed == one-shot for any split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.errors import InvalidInput
from textproc.core.parsing import OutputParser, merge_deltas, openai_tool_call, parse_output, parse_tool_calls

M = {"tool_format": "mistral"}


def call(name: str, arguments: str, index: int = 0) -> dict[str, Any]:
    return openai_tool_call(name, arguments, id=f"call_{index}")


def test_list_of_calls() -> None:
    text = 'Sure[TOOL_CALLS][{"name": "f", "arguments": {"a": "]}"}}, {"name": "g", "arguments": {}}]'
    assert parse_tool_calls(text, **M) == ("Sure", [call("f", '{"a": "]}"}'), call("g", "{}", 1)])


def test_single_object_and_lenient_end() -> None:
    assert parse_tool_calls('[TOOL_CALLS]{"name": "f"} ok', **M) == (" ok", [call("f", "{}")])
    assert parse_tool_calls('[TOOL_CALLS][{"name": "f"} ok', **M) == ("ok", [call("f", "{}")])


@pytest.mark.parametrize("text", ["[TOOL_CALLS] nope", "[TOOL_CALLS][]", '[TOOL_CALLS][{"name": 1}]', "[TOOL_CALLS] [", "[TOOL_CA"])
def test_malformed_lists_come_back_as_content(text: str) -> None:
    assert parse_tool_calls(text, **M) == (text, [])


def test_later_malformed_object_keeps_earlier_calls() -> None:
    content, calls = parse_tool_calls('[TOOL_CALLS][{"name": "f"}, {"nam', **M)
    assert content == '{"nam' and calls == [call("f", "{}")]
    content, calls = parse_tool_calls('[TOOL_CALLS][{"name": "f"}, {"name": "g", "arguments": {', **M)
    assert content == '{"name": "g", "arguments": {' and calls == [call("f", "{}")]


def test_unknown_format() -> None:
    with pytest.raises(InvalidInput, match="tool_format='llama'; supported: hermes, qwen3_coder, llama3_json, pythonic, mistral"):
        OutputParser(tools=True, tool_format="llama")


ARGS = st.dictionaries(st.text(max_size=4), st.recursive(st.none() | st.integers() | st.text(max_size=4), lambda k: st.lists(k, max_size=2), max_leaves=4), max_size=3)
NOISE = st.lists(
    st.sampled_from(["[TOOL_CALLS]", "[TOOL_", "[", "]", "{", "}", '"name"', ": ", '"f"', ", ", '"arguments"', "x", " ", '"', "\\", "1", "<think>", "</think>"]),
    max_size=30,
).map("".join)


@st.composite
def outputs(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]]]:
    content = draw(st.text(st.characters(blacklist_characters="[", blacklist_categories=["Cs"]), max_size=6))
    calls = [(draw(st.sampled_from(["f", "get", "é"])), json.dumps(draw(ARGS), ensure_ascii=False)) for _ in range(draw(st.integers(1, 3)))]
    body = ", ".join(f'{{"name": {json.dumps(n)}, "arguments": {a}}}' for n, a in calls)
    return f"{content}[TOOL_CALLS][{body}]", content, calls


@given(outputs(), st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_streamed_equals_one_shot_equals_grammar(case: tuple[str, str, list[tuple[str, str]]], sizes: list[int]) -> None:
    text, content, calls = case
    one = parse_output(text, tools=True, **M)
    assert one == {"reasoning_content": "", "content": content, "tool_calls": [call(n, a, i) for i, (n, a) in enumerate(calls)]}
    assert _streamed(text, sizes, tools=True, **M) == one


@given(NOISE, st.lists(st.integers(1, 9), min_size=1, max_size=6), st.booleans())
def test_streamed_equals_one_shot_for_any_text(text: str, sizes: list[int], reasoning: bool) -> None:
    for stream_calls in (True, False):
        opts: dict[str, Any] = {"tools": True, "reasoning": reasoning, "stream_calls": stream_calls, **M}
        assert _streamed(text, sizes, **opts) == parse_output(text, **opts)


def _streamed(text: str, sizes: list[int], **opts: Any) -> dict[str, Any]:
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    pos = i = 0
    while pos < len(text):
        deltas += parser.feed(text[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return merge_deltas(deltas + parser.finish())

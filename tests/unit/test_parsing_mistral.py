"""Mistral ``[TOOL_CALLS][...]`` tool calls: examples and streamed == one-shot for any split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
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
    st.sampled_from(["[TOOL_CALLS]", "[TOOL_", "[", "]", "{", "}", '"name"', ": ", '"f"', ", ", '"arguments"', "x", " ", '"', "\\", "1", "<think>", "</think>",
                     "[ARGS]", "[CALL_ID]", "abc123XYZ"]),
    max_size=30,
).map("".join)

# a call cut off after its name, in each spelling the format reads: "[TOOL_CALLS]1{" streamed
# as a call named "1" with arguments "{" while its one-shot parse is content
CUT_AFTER_NAME = {
    "v11, [ARGS] dropped by the decoder": "[TOOL_CALLS]1{",
    "v11": "[TOOL_CALLS]1[ARGS]{",
    "v11 with a call id": "[TOOL_CALLS]1[CALL_ID]abc123XYZ[ARGS]{",
    "v11, arguments as a JSON string": '[TOOL_CALLS]1[ARGS]"{',
    "list (before v11)": '[TOOL_CALLS][{"name": "1", "arguments": {',
    "single object (before v11)": '[TOOL_CALLS]{"name": "1", "arguments": {',
}


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


@pytest.mark.parametrize("text", CUT_AFTER_NAME.values(), ids=CUT_AFTER_NAME.keys())
def test_a_call_cut_after_its_name_is_content_for_any_split(text: str) -> None:
    want = {"reasoning_content": "", "content": text, "tool_calls": []}
    assert parse_output(text, tools=True, **M) == want
    for stream_calls in (True, False):
        for size in range(1, len(text) + 1):
            parser = OutputParser(tools=True, stream_calls=stream_calls, **M)
            deltas = [d for i in range(0, len(text), size) for d in parser.feed(text[i : i + size])]
            assert not any("tool_calls" in d for d in deltas)  # no call went out, not even its name
            assert merge_deltas(deltas + parser.finish()) == want
            assert not parser.has_tool_calls


@given(NOISE, st.lists(st.integers(1, 9), min_size=1, max_size=6), st.booleans())
@example("[TOOL_CALLS]1{", [1], False)
@example("[TOOL_CALLS]1{", [2], True)
@example("[TOOL_CALLS]1[ARGS]{", [1], False)
@example("[TOOL_CALLS]1[CALL_ID]abc123XYZ[ARGS]{", [3], False)
@example('[TOOL_CALLS]1[ARGS]"{', [1], False)
@example('[TOOL_CALLS][{"name": "1", "arguments": {', [1], False)
@example('[TOOL_CALLS]{"name": "1", "arguments": {', [4], False)
def test_streamed_equals_one_shot_for_any_text(text: str, sizes: list[int], reasoning: bool) -> None:
    opts: dict[str, Any] = {"tools": True, "reasoning": reasoning, **M}
    one_shot = parse_output(text, **opts)
    assert _streamed(text, sizes, **opts) == one_shot  # the parser streams calls by default
    for stream_calls in (True, False):
        assert _streamed(text, sizes, **opts, stream_calls=stream_calls) == one_shot


def _streamed(text: str, sizes: list[int], **opts: Any) -> dict[str, Any]:
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    pos = i = 0
    while pos < len(text):
        deltas += parser.feed(text[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return merge_deltas(deltas + parser.finish())

"""Edge cases where the reference parsers of other servers disagree with each other or with the
family's own template, decided per format (docs/architecture.md, "Edge cases, decided per
format"): each vector gives the one-shot parse, and every split of the text into deltas gives
the same (both call modes)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from textproc.core.parsing import OutputParser, merge_deltas, parse_output

WEATHER = {"type": "function", "function": {"name": "get_current_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "state": {"type": "string"},
                                     "unit": {"type": "string"}, "days": {"type": "integer"}}}}}
GET_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}}}}}
BASH = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}
QC = {"tool_format": "qwen3_coder", "tool_schemas": [WEATHER]}
M3 = {"tool_format": "minimax_m3", "tool_schemas": [WEATHER], "reasoning": True, "reasoning_format": "minimax_m3"}
GLM = {"tool_format": "glm45", "tool_schemas": [GET_WEATHER]}


def _fn(name: str, body: str) -> str:
    return f"<function={name}>\n{body}</function>"


DALLAS_NO_CLOSE = ("<parameter=city>\nDallas\n<parameter=state>\nTX\n</parameter>\n"
                   "<parameter=unit>\nfahrenheit\n</parameter>\n")
GLM_CALL = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
            "<arg_key>date</arg_key>\n<arg_value>2025-08-01</arg_value>\n</tool_call>")
NS = "]<]minimax[>["
M3_CALL = f'{NS}<tool_call>\n{NS}<invoke name="get_current_weather">{NS}<city>Dallas{NS}</city>{NS}</invoke>\n'
MISTRAL_CUT = 'hi{hi[TOOL_CALLS]bash{"command": "print(\\"hello world!\\")\\nre.compile(r\'{}\')"'

# (options, text, content, [(name, arguments)], reasoning)
VECTORS: list[tuple[dict[str, Any], str, str, list[tuple[str, dict[str, Any]]], str]] = [
    # qwen3_coder: a missing </parameter> ends at the next declared parameter's line
    (QC, "Let me check:\n<tool_call>\n" + _fn("get_current_weather", DALLAS_NO_CLOSE) + "\n</tool_call>",
     "Let me check:\n", [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})], ""),
    # ... also without a schema (any name not given yet), and before a closing </function> line
    ({"tool_format": "qwen3_coder"}, "<tool_call>\n" + _fn("f", "<parameter=a>\nx\n<parameter=b>\ny\n")
     + "\n</tool_call>", "", [("f", {"a": "x", "b": "y"})], ""),
    # ... but a line naming an undeclared or repeated parameter is the value's own text
    (QC, "<tool_call>\n" + _fn("get_current_weather", "<parameter=city>\nx\n<parameter=zip>\ny\n</parameter>\n"
                                "<parameter=state>\na\n<parameter=city>\nb\n</parameter>\n") + "\n</tool_call>",
     "", [("get_current_weather", {"city": "x\n<parameter=zip>\ny", "state": "a\n<parameter=city>\nb"})], ""),
    # qwen3_coder: several functions in one <tool_call> are one call each; typed values
    (QC, "<tool_call>\n" + _fn("get_current_weather", "<parameter=city>\nDallas\n</parameter>\n") + "\n"
     + _fn("get_current_weather", "<parameter=days>\n3\n") + "\n</tool_call>", "",
     [("get_current_weather", {"city": "Dallas"}), ("get_current_weather", {"days": 3})], ""),
    # qwen3_coder: </function> missing before </tool_call>
    (QC, "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nA\n</parameter>\n</tool_call>", "",
     [("get_current_weather", {"city": "A"})], ""),
    # qwen3_coder: cut off by max_tokens inside a value: not a call
    (QC, "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal",
     "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal", [], ""),
    # glm45: calls after the thinking tags, with and without reasoning parsing
    ({**GLM, "reasoning": True}, "<think>I want the weather.</think>\n\nI will help.\n" + GLM_CALL, "I will help.\n",
     [("get_weather", {"city": "Beijing", "date": "2025-08-01"})], "I want the weather."),
    (GLM, "<think>I want the weather.</think>\n\nI will help.\n" + GLM_CALL,
     "<think>I want the weather.</think>\n\nI will help.\n", [("get_weather", {"city": "Beijing", "date": "2025-08-01"})], ""),
    # glm45: a call without its </tool_call> at the end was cut off: content
    (GLM, GLM_CALL[: -len("\n</tool_call>")], GLM_CALL[: -len("\n</tool_call>")], [], ""),
    # llama3_json: a JSON call opens the answer (no <|python_tag|> needed); ";" or a line break
    # separates calls; a JSON object inside prose is not a call
    ({"tool_format": "llama3_json"}, '{"name": "a", "parameters": {}}\n{"name": "b", "parameters": {"x": 1}}', "",
     [("a", {}), ("b", {"x": 1})], ""),
    ({"tool_format": "llama3_json"}, 'Here is the result: {"name": "a", "parameters": {}} More?',
     'Here is the result: {"name": "a", "parameters": {}} More?', [], ""),
    # minimax_m3: the adaptive mode's leading </mm:think> closes no block and is dropped;
    # the block's end may be missing at the end; an untyped parameter is typed as JSON
    (M3, "</mm:think>Checking." + M3_CALL, "Checking.", [("get_current_weather", {"city": "Dallas"})], ""),
    (M3, f"<mm:think>\nhot?\n</mm:think>{M3_CALL}{NS}</tool_call>", "",
     [("get_current_weather", {"city": "Dallas"})], "hot?"),
    ({"tool_format": "minimax_m3"}, M3_CALL.replace("Dallas", "12"), "", [("get_current_weather", {"city": 12})], ""),
    # minimax_m3: a value closed by a tag naming another element, or without the namespace
    # token, is malformed: content (the template always writes its own close tag)
    (M3, M3_CALL.replace(f"{NS}</city>", f"{NS}</state>"), M3_CALL.replace(f"{NS}</city>", f"{NS}</state>"), [], ""),
    (M3, M3_CALL.replace(f"{NS}</city>", "</city>"), M3_CALL.replace(f"{NS}</city>", "</city>"), [], ""),
    # mistral v11: arguments cut off by max_tokens are not a call
    ({"tool_format": "mistral", "tool_schemas": [BASH]}, MISTRAL_CUT, MISTRAL_CUT, [], ""),
    ({"tool_format": "mistral", "tool_schemas": [BASH]}, MISTRAL_CUT + "}", "hi{hi",
     [("bash", {"command": "print(\"hello world!\")\nre.compile(r'{}')"})], ""),
]


def _stream(text: str, size: int, opts: dict[str, Any]) -> dict[str, Any]:
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    for i in range(0, len(text), size):
        deltas += parser.feed(text[i : i + size])
    return merge_deltas(deltas + parser.finish())


@pytest.mark.parametrize("index", range(len(VECTORS)))
def test_edge_vector(index: int) -> None:
    options, text, content, calls, reasoning = VECTORS[index]
    opts = {"tools": True, **options}
    got = parse_output(text, **opts)
    assert got["content"] == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]] == calls
    assert got["reasoning_content"] == reasoning
    assert parse_output(text, **opts, stream_calls=True) == got
    for size in (1, 2, 3, 5, 8, 13):
        assert _stream(text, size, {**opts, "stream_calls": False}) == got
        assert _stream(text, size, {**opts, "stream_calls": True}) == got

"""The Responses API's pure parts: body -> chat request (textproc.http.responses.bodies), deltas
-> items and events (textproc.http.responses.answers), the previous_response_id store."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.http.api_types import ApiError
from textproc.http.responses.bodies import ResponseStore, parse_responses_request
from textproc.http.responses.answers import ResponseBuilder

MODELS = ["m"]


def _parse(**body: Any) -> Any:
    return parse_responses_request(json.dumps({"model": "m", **body}).encode(),
                                   served_models=MODELS)


def test_items_become_chat_messages() -> None:
    req = _parse(instructions="sys", tools=[{"type": "function", "name": "f"}], input=[
        {"role": "developer", "content": "dev"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                        {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs", "summary": [],
         "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "ok", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ])
    assert req.chat.messages == [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": "dev"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok", "reasoning_content": "hm", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    assert req.chat.tools == [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}}}}]
    assert req.chat.tool_choice == "auto"
    assert req.history[0] == {"role": "developer", "content": "dev"}  # no instructions


def test_fields_map_onto_chat() -> None:
    req = _parse(input="hi", max_output_tokens=7, temperature=0.5, top_p=0.9, stream=True,
                 tools=[{"type": "function", "name": "f"}],
                 tool_choice={"type": "function", "name": "f"}, parallel_tool_calls=False,
                 reasoning={"effort": "low"})
    chat = req.chat
    assert (chat.sampling.max_tokens, chat.stream, chat.output.parallel_tool_calls) == (7, True, False)
    assert chat.sampling.params == {"temperature": 0.5, "top_p": 0.9}
    assert chat.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert chat.chat_template_kwargs == {"reasoning_effort": "low"}
    assert req.echo["tool_choice"] == {"type": "function", "name": "f"}
    fmt = {"type": "json_schema", "name": "s", "schema": {"type": "object"}}
    assert _parse(input="x", text={"format": fmt}).chat.structured == {"json": {"type": "object"}}
    assert _parse(input="x", text={"format": {"type": "json_object"}}).chat.structured == {
        "json": {"type": "object"}}


@pytest.mark.parametrize("body, param, match", [
    ({"input": "x", "top_logprobs": 2}, "top_logprobs", "needs include"),
    ({"input": "x", "include": ["message.input_image.image_url"]}, "include[0]", "not supported"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
     "input[0].call_id", "must be a string"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "previous_response_id"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": 3}]},
     "input[1].content", "must be a string"),
    ({"input": "x", "previous_response_id": "resp-1"}, "previous_response_id", "not known"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice", "needs at least one tool"),
])
def test_errors_name_the_field(body: dict[str, Any], param: str, match: str) -> None:
    with pytest.raises(ApiError, match=match) as err:
        _parse(**body)
    assert err.value.param == param and err.value.status == 400


def _call(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                            "function": {"name": name, "arguments": ""}}]}


def _args(index: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}


FRAGMENTS = [{"reasoning_content": "think "}, {"reasoning_content": "more"},
             {"content": "\n\n"}, {"content": "Answer"}, {"content": " here."},
             _call(0, "c0", "f"), _args(0, '{"a":'), _args(0, " 1}"),
             _call(1, "c1", "g"), _args(1, "{}")]


def _run(chunks: list[list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    builder = ResponseBuilder("resp-1", _parse(input="x"), created_at=0)
    events = builder.start()
    for chunk in chunks:
        events += builder.feed(chunk)
    events += builder.finish("tool_calls", prompt_tokens=3, completion_tokens=9, cached_tokens=2)
    return events, builder.response()


def _strip_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


@given(st.lists(st.integers(1, len(FRAGMENTS)), max_size=len(FRAGMENTS)))
def test_any_split_gives_the_same_response(cuts: list[int]) -> None:
    bounds = sorted({0, len(FRAGMENTS), *cuts})
    chunks = [FRAGMENTS[a:b] for a, b in zip(bounds, bounds[1:])]
    events, response = _run(chunks)
    _, whole = _run([FRAGMENTS])
    assert _strip_ids(response["output"]) == _strip_ids(whole["output"])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # the deltas add up to each item's final text
    done = {e["item"]["id"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    for item_id, item in done.items():
        deltas = "".join(e["delta"] for e in events if e.get("item_id") == item_id
                         and e["type"].endswith(".delta"))
        expected = item["arguments"] if item["type"] == "function_call" else item["content"][0]["text"]
        assert deltas == expected


def test_items_and_event_order() -> None:
    events, response = _run([FRAGMENTS])
    assert [i["type"] for i in response["output"]] == ["reasoning", "message", "function_call",
                                                       "function_call"]
    message, first, second = response["output"][1:]
    assert message["content"][0]["text"] == "\n\nAnswer here."  # as chat's content has it
    assert (first["call_id"], first["name"], first["arguments"]) == ("c0", "f", '{"a": 1}')
    assert (second["call_id"], second["arguments"]) == ("c1", "{}")
    assert [e["type"] for e in events if e["type"].startswith("response.output_item")] == [
        "response.output_item.added", "response.output_item.done"] * 4
    assert response["status"] == "completed" and response["usage"]["total_tokens"] == 12
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 2}
    assert events[-1]["type"] == "response.completed"


def test_only_whitespace_is_still_an_answer_and_failures_end_the_stream() -> None:
    builder = ResponseBuilder("resp-1", _parse(input="x"), created_at=0)
    builder.feed([{"content": "  "}])
    builder.finish("stop", prompt_tokens=1, completion_tokens=1)
    assert builder.response()["output"][0]["content"][0]["text"] == "  "
    failed = ResponseBuilder("resp-2", _parse(input="x"), created_at=0)
    failed.start()
    failed.feed([{"content": "half"}])
    events = failed.fail(ApiError("generation failed: boom", status=500, type="server_error",
                                  code="generation_error"))
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert events[0]["code"] == "generation_error" and "boom" in events[0]["message"]
    assert events[1]["response"]["status"] == "failed"
    assert events[1]["response"]["error"]["code"] == "server_error"


def test_store_is_bounded() -> None:
    store = ResponseStore(max_entries=2, ttl_s=3600, max_bytes=200)
    msg = [{"role": "user", "content": "x" * 50}]
    store.put("a", msg)
    store.put("b", msg)
    store.put("c", msg)  # over the count: "a" goes
    assert store.get("a") is None and store.get("c") == msg and len(store) == 2
    store.put("big", [{"role": "user", "content": "x" * 500}])  # larger than all: not kept
    assert store.get("big") is None and len(store) == 2
    store.put("d", [{"role": "user", "content": "y" * 120}])  # over the bytes: oldest go
    assert store.get("b") is None and store.bytes <= 200
    expired = ResponseStore(ttl_s=0.0)
    expired.put("a", msg)
    assert expired.get("a") is None


def test_logprobs_follow_the_output_text() -> None:
    """An output's entries go with the output text it carries (held whitespace keeps its own);
    entries of a reasoning-only output are not shown."""
    req = _parse(input="x", include=["message.output_text.logprobs"], top_logprobs=1)
    assert req.chat.output.logprobs == 1 and req.echo["top_logprobs"] == 1

    def entry(data: bytes) -> Any:
        return (1, data, -0.5, [2], [b"z"], [-1.0])

    builder = ResponseBuilder("resp-1", req, created_at=0)
    builder.start()
    events = builder.feed([{"reasoning_content": "hm"}], [entry(b"hm")])
    events += builder.feed([{"content": "\n"}], [entry(b"\n")])
    events += builder.feed([{"content": "ok"}], [entry(b"o"), entry(b"k")])
    events += builder.finish("stop", prompt_tokens=1, completion_tokens=4)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[lp["token"] for lp in e["logprobs"]] for e in deltas] == [["\n", "o", "k"]]
    part = builder.response()["output"][-1]["content"][0]
    assert part["text"] == "\nok" and [lp["token"] for lp in part["logprobs"]] == ["\n", "o", "k"]
    assert part["logprobs"][0]["top_logprobs"] == [{"token": "z", "logprob": -1.0,
                                                    "bytes": [122]}]

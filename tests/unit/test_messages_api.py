"""Anthropic's Messages API, pure parts: body -> chat request (textproc.http.anthropic.bodies), deltas
-> content blocks and events (textproc.http.anthropic.answers), the serving loops (.events) over a fake
run (a failure mid-stream is an ``error`` event)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.http.api_types import ApiError
from textproc.http.backend import Output
from textproc.http.anthropic.bodies import (
    anthropic_error_body,
    parse_count_tokens_request,
    parse_messages_request,
)
from textproc.http.anthropic.answers import MessageBuilder, thinking_signature
from textproc.http.anthropic.events import message_events
from textproc.options import REASONING_BUDGET_OPTIONAL

MODELS = ["m"]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def _parse(**body: Any) -> Any:
    return parse_messages_request(json.dumps({"model": "m", "max_tokens": 50, **body}).encode(),
                                  served_models=MODELS)


def test_blocks_become_chat_messages() -> None:
    req = _parse(system=[{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}},
                         {"type": "text", "text": "more"}],
                 tools=[{"name": "f", "description": "d", "input_schema": SCHEMA}],
                 messages=[
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "X"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "boom"}]},
            {"type": "text", "text": "go on"}]},
        {"role": "system", "content": "late"},
    ])
    assert req.chat.messages == [
        {"role": "system", "content": "sys\n\nmore\n\nlate"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok", "reasoning_content": "hm", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "f", "arguments": {"city": "X"}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": "Error: boom", "tool_call_id": "toolu_2"},
        {"role": "user", "content": "go on"},
    ]
    assert req.chat.tools == [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": SCHEMA}}]
    assert req.chat.tool_choice == "auto" and req.max_tokens == 50


def test_fields_map_onto_chat() -> None:
    tools = [{"name": "f", "input_schema": SCHEMA, "type": "custom"}]
    req = _parse(messages=[{"role": "user", "content": "hi"}], stop_sequences=["X"], stream=True,
                 temperature=0.5, top_p=0.9, top_k=5, tools=tools,
                 tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True},
                 thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2000,
                 metadata={"user_id": "u"}, context_management={"edits": []},
                 output_config={"effort": "high"})
    chat = req.chat
    assert (chat.sampling.max_tokens, chat.stream, chat.output.parallel_tool_calls) == (
        2000, True, False)
    assert chat.output.stop == ["X"]
    # budget_tokens is the reasoning budget where the model marks its reasoning (the worker
    # drops it elsewhere); effort reaches the template as reasoning_effort
    assert chat.sampling.params == {"temperature": 0.5, "top_p": 0.9, "top_k": 5,
                                    "max_reasoning_tokens": 1024,
                                    REASONING_BUDGET_OPTIONAL: True}
    assert chat.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert chat.chat_template_kwargs == {"enable_thinking": True, "thinking": True,
                                         "reasoning_effort": "high"}
    adaptive = _parse(messages=[{"role": "user", "content": "x"}], thinking={"type": "adaptive"},
                      output_config={"effort": "max"})
    assert "max_reasoning_tokens" not in adaptive.chat.sampling.params
    assert adaptive.chat.chat_template_kwargs == {"enable_thinking": True, "thinking": True,
                                                  "reasoning_effort": "high"}
    assert _parse(messages=[{"role": "user", "content": "x"}], tools=tools,
                  tool_choice={"type": "any"}).chat.tool_choice == "required"
    off = _parse(messages=[{"role": "user", "content": "x"}], thinking={"type": "disabled"})
    assert off.chat.chat_template_kwargs == {"enable_thinking": False, "thinking": False}
    default = _parse(messages=[{"role": "user", "content": "x"}])
    assert default.chat.chat_template_kwargs == {} and default.chat.tool_choice == "none"
    fmt = _parse(messages=[{"role": "user", "content": "x"}],
                 output_config={"format": {"type": "json_schema", "schema": SCHEMA}})
    assert fmt.chat.structured == {"json": SCHEMA}


@pytest.mark.parametrize("body, param, message", [
    ({"max_tokens": None}, "max_tokens", "Field required"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].source.type", "supported: base64"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type", "'document'"),
    ({"messages": [{"role": "assistant", "content": [{"type": "server_tool_use"}]}]},
     "messages[0].content[0].type", "supported: text, tool_use"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}]},
     "messages[0].content[0].content[0].type", "'image'"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type",
     "server tool"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema", "JSON Schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools[0].input_schema",
     "type 'object'"),
    ({"tools": [{"name": "bad name!", "input_schema": SCHEMA}]}, "tools[0].name",
     "invalid"),
    ({"mcp_servers": [{"type": "url"}]}, "mcp_servers", "not supported"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice", "not supported"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "thinking.budget_tokens",
     "less than max_tokens"),
    ({"thinking": {"type": "on"}}, "thinking.type", "'adaptive'"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort", "'xhigh'"),
    ({"temperature": 1.5}, "temperature", "<= 1.0"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": []}]}]},
     "messages[1].content[0]", "object input"),
    ({"model": "other"}, "model", "does not exist"),
])
def test_errors_name_the_field(body: dict[str, Any], param: str, message: str) -> None:
    full = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}],
            **body}
    with pytest.raises(ApiError) as exc:
        parse_messages_request(json.dumps({k: v for k, v in full.items() if v is not None})
                               .encode(), served_models=MODELS)
    assert exc.value.param == param and message in exc.value.message, exc.value.message
    assert param in exc.value.message or param in ("max_tokens", "model", "temperature")


def test_final_assistant_turn_is_a_prefill() -> None:
    req = _parse(messages=[{"role": "user", "content": "x"},
                           {"role": "assistant", "content": [{"type": "text", "text": "{"}]}])
    assert (req.chat.continue_final_message, req.chat.add_generation_prompt) == (True, False)
    assert req.chat.messages[-1] == {"role": "assistant", "content": "{"}
    for content, message in (("ends here ", "trailing whitespace"),
                             ([{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                              "ends with tool_use")):
        with pytest.raises(ApiError, match=message) as exc:
            _parse(tools=[{"name": "f", "input_schema": SCHEMA}], messages=[
                {"role": "user", "content": "x"}, {"role": "assistant", "content": content}])
        assert exc.value.param == "messages[1].content"


def test_count_tokens_body_needs_no_max_tokens() -> None:
    chat = parse_count_tokens_request(b'{"model": "m", "messages": [{"role": "user", '
                                      b'"content": "hi"}]}', served_models=MODELS)
    assert chat.messages == [{"role": "user", "content": "hi"}]


def test_error_shape() -> None:
    assert anthropic_error_body(ApiError("gone", status=404)) == (
        404, {"type": "error", "error": {"type": "not_found_error", "message": "gone"}})
    assert anthropic_error_body(ApiError("busy", status=503))[0] == 529
    assert anthropic_error_body(ApiError("x", status=503))[1]["error"]["type"] == \
        "overloaded_error"
    assert anthropic_error_body(ApiError("x", status=500))[1]["error"]["type"] == "api_error"
    assert anthropic_error_body(ApiError("x", status=413))[1]["error"]["type"] == \
        "request_too_large"


# an answer with every block kind, as the pipeline emits its deltas
DELTAS: list[dict[str, Any]] = [
    {"reasoning_content": "think "}, {"reasoning_content": "hard"},
    {"content": "\n\n"}, {"content": "Hello"}, {"content": " world"}, {"content": "\n"},
    {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                     "function": {"name": "f", "arguments": ""}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
    {"tool_calls": [{"index": 0, "function": {"arguments": '"X"}'}}]},
    {"content": "\n"},
    {"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                     "function": {"name": "g", "arguments": "{}"}}]},
]


def _fold(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_start":
            assert event["index"] == len(blocks)
            blocks.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            delta, block = event["delta"], blocks[event["index"]]
            key = {"text_delta": "text", "thinking_delta": "thinking",
                   "signature_delta": "signature"}.get(delta["type"])
            if key is None:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
            else:
                block[key] += delta[key]
        elif event["type"] == "content_block_stop" and blocks[event["index"]]["type"] == "tool_use":
            blocks[event["index"]]["input"] = json.loads(partial.get(event["index"], "{}"))
    return blocks


def _request() -> Any:
    return _parse(messages=[{"role": "user", "content": "x"}])


@given(st.lists(st.integers(0, len(DELTAS)), max_size=6))
def test_streamed_blocks_equal_the_message_under_any_split(cuts: list[int]) -> None:
    builder = MessageBuilder("msg_1", _request())
    events = builder.start()
    bounds = [0, *sorted(cuts), len(DELTAS)]
    for lo, hi in zip(bounds, bounds[1:]):
        events += builder.feed(DELTAS[lo:hi])
    events += builder.finish(Output([], finish_reason="tool_calls", prompt_tokens=5,
                                     completion_tokens=9, cached_tokens=2), context_room=None)
    message = builder.message()
    assert _fold(events) == message["content"]
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert message["content"][0]["signature"] == thinking_signature("think hard")
    assert message["content"][1]["text"] == "\n\nHello world\n"  # the blank before it joins it
    assert message["content"][2]["input"] == {"city": "X"}
    assert all(b["id"].startswith("toolu_") for b in message["content"][2:])
    assert message["stop_reason"] == "tool_use"
    # input_tokens leaves out the 2 read from the cache, as Anthropic counts them
    assert message["usage"] == {"input_tokens": 3, "output_tokens": 9, "cache_read_input_tokens": 2,
                                "cache_creation_input_tokens": 0}
    assert events[-2]["usage"] == message["usage"]
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]


@pytest.mark.parametrize("out, room, reason, sequence", [
    (Output([], finish_reason="stop", stop="END"), None, "stop_sequence", "END"),
    (Output([], finish_reason="stop"), None, "end_turn", None),
    (Output([], finish_reason="length", completion_tokens=5), None, "max_tokens", None),
    (Output([], finish_reason="length", completion_tokens=5), 5,
     "model_context_window_exceeded", None),
])
def test_stop_reasons(out: Output, room: int | None, reason: str, sequence: str | None) -> None:
    req = _parse(messages=[{"role": "user", "content": "x"}], stop_sequences=["END"])
    builder = MessageBuilder("msg_1", req)
    builder.finish(out, context_room=room)
    assert (builder.stop_reason, builder.stop_sequence) == (reason, sequence)


def test_only_whitespace_is_the_answer() -> None:
    builder = MessageBuilder("msg_1", _request())
    builder.feed([{"content": " \n"}])
    builder.finish(Output([], finish_reason="stop"), context_room=None)
    assert builder.message()["content"] == [{"type": "text", "text": " \n"}]


class _Run:
    def __init__(self, outputs: list[Output]) -> None:
        self.outputs = outputs
        self.seen = 0

    async def next(self) -> Output | None:
        return self.outputs.pop(0) if self.outputs else None

    def observe(self, out: Output) -> None:
        self.seen += 1


def _collect(events: AsyncIterator[bytes]) -> list[bytes]:
    async def run() -> list[bytes]:
        return [chunk async for chunk in events]
    return asyncio.run(run())


def test_stream_writes_once_per_output_and_fails_with_an_error_event() -> None:
    run = _Run([Output([{"content": "b"}]),
                Output([], finish_reason="error", error="engine died")])
    chunks = _collect(message_events(_request(), "msg_1", run, Output([{"content": "a"}]), None))
    assert len(chunks) == 3 and run.seen == 3  # one write per output
    names = [line[7:] for chunk in chunks for line in chunk.decode().split("\n")
             if line.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_delta", "error"]
    error = json.loads(chunks[-1].decode().split("data: ")[-1])
    assert error == {"type": "error", "error": {"type": "api_error",
                                                "message": "generation failed: engine died"}}


class _Backend:
    """The little of a Backend the Messages route uses: one scripted answer, or down."""

    served_models = MODELS
    max_model_len = 4096

    def __init__(self, *, serving: bool = True) -> None:
        self.serving = serving

    def health(self) -> tuple[bool, str]:
        return self.serving, "" if self.serving else "the detokenizer is restarting"

    async def chat(self, params: Any, *, request_id: str) -> AsyncIterator[Output]:
        yield Output([{"content": "hi"}], finish_reason="stop", prompt_tokens=5,
                     completion_tokens=1)


def test_auth_and_status_shapes() -> None:
    """``x-api-key`` (what Anthropic clients send) passes the API key check; refusals under
    /v1/messages are Anthropic-shaped (401 authentication_error; a service down: 529)."""
    import httpx

    from textproc.http.server import build_app

    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}

    async def go(headers: dict[str, str], backend: Any) -> httpx.Response:
        app = build_app(backend, api_key="s3cret")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/v1/messages", json=body, headers=headers)

    reply = asyncio.run(go({"x-api-key": "s3cret"}, _Backend()))
    assert reply.status_code == 200 and reply.json()["content"] == [{"type": "text", "text": "hi"}]
    assert reply.json()["usage"]["input_tokens"] == 5
    denied = asyncio.run(go({"x-api-key": "nope"}, _Backend()))
    assert denied.status_code == 401
    assert denied.json()["error"]["type"] == "authentication_error"
    down = asyncio.run(go({"x-api-key": "s3cret"}, _Backend(serving=False)))
    assert down.status_code == 529 and down.headers["retry-after"] == "1"
    assert down.json()["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("limits, status, kind", [
    ({"max_body_bytes": 50}, 413, "request_too_large"),
    ({"max_running": 0}, 429, "rate_limit_error"),
])
def test_limits_are_anthropic_shaped(limits: dict[str, int], status: int, kind: str) -> None:
    import httpx

    from textproc.http.server import HttpLimits, build_app

    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 60}]}

    async def go() -> httpx.Response:
        app = build_app(_Backend(), limits=HttpLimits(**limits))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/v1/messages", json=body)

    reply = asyncio.run(go())
    assert reply.status_code == status
    assert reply.json() == {"type": "error", "error": {"type": kind,
                                                       "message": reply.json()["error"]["message"]}}

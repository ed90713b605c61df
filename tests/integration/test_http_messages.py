"""Anthropic's Messages API (``POST /v1/messages``) end to end through the official ``anthropic``
client: a real service (stub engine, echo mode) behind the HTTP frontend.

Echo mode answers with the last user turn of the prompt, so the messages script the model:
``<think>..</think>`` makes it reason, ``<tool_call>{...}</tool_call>`` makes it call a tool, and
a ``tool_result`` (rendered as a user ``<tool_response>`` turn by the ChatML template) comes
back as the answer: proof it reached the prompt.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import anthropic
import httpx
import jsonschema
import pytest

from tests.helpers.service import Service, serve_toy_http

pytestmark = pytest.mark.timeout(60)

MODEL = "toy"
MAX_MODEL_LEN = 2048
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
CALL_TEXT = f"Let me check.<tool_call>\n{json.dumps(CALL)}\n</tool_call>"
THINK_TEXT = "<think>The user wants 2+2. That is 4.</think>The answer is 4."


@pytest.fixture(scope="module")
def service_and_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    service, url = serve_toy_http(tmp_path_factory.mktemp("messages"), "--stub-arg=--step-ms=1",
                                  "--max-model-len", str(MAX_MODEL_LEN))
    try:
        yield service, url
    finally:
        service.stop()


@pytest.fixture(scope="module")
def url(service_and_url: tuple[Service, str]) -> str:
    return service_and_url[1]


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def _raw_events(client: anthropic.Anthropic, **kwargs: Any) -> list[Any]:
    return list(client.messages.create(model=MODEL, stream=True, **kwargs))


def _fold(events: list[Any]) -> dict[str, Any]:
    """The message the raw events build, by Anthropic's rules (done here, not by the SDK)."""
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    message = events[0].message.model_dump()
    assert message["content"] == [] and message["stop_reason"] is None
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    open_index = None
    for event in events[1:-1]:
        if event.type == "content_block_start":
            assert open_index is None and event.index == len(blocks)
            open_index = event.index
            blocks.append(event.content_block.model_dump(exclude_none=True))
        elif event.type == "content_block_delta":
            assert event.index == open_index
            block, delta = blocks[event.index], event.delta
            if delta.type == "text_delta":
                block["text"] += delta.text
            elif delta.type == "thinking_delta":
                block["thinking"] += delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] += delta.signature
            else:
                assert delta.type == "input_json_delta"
                partial[event.index] = partial.get(event.index, "") + delta.partial_json
        elif event.type == "content_block_stop":
            assert event.index == open_index
            open_index = None
            if blocks[event.index]["type"] == "tool_use":
                blocks[event.index]["input"] = json.loads(partial.get(event.index) or "{}")
        elif event.type == "message_delta":
            assert open_index is None
            message["stop_reason"] = event.delta.stop_reason
            message["stop_sequence"] = event.delta.stop_sequence
            message["usage"].update(event.usage.model_dump(exclude_none=True))
        else:
            assert event.type == "ping", event
    message["content"] = blocks
    return message


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The message without its ids and unset (None) fields."""
    blocks = [{k: v for k, v in b.items() if k != "id" and v is not None}
              for b in message["content"]]
    return {**{k: v for k, v in message.items() if k != "id" and v is not None},
            "content": blocks}


def _count(client: anthropic.Anthropic, **kwargs: Any) -> int:
    return client.messages.count_tokens(model=MODEL, **kwargs).input_tokens


def test_text_whole(client: anthropic.Anthropic) -> None:
    text = "Hello there, how are you? 你好 😀"
    msg = client.messages.create(model=MODEL, max_tokens=200, system="Be brief.",
                                 messages=_user(text))
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL and msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == text  # type: ignore[union-attr]
    assert msg.usage.input_tokens == _count(client, system="Be brief.", messages=_user(text))
    assert msg.usage.output_tokens > 5


def test_streamed_events_equal_the_whole_answer(client: anthropic.Anthropic) -> None:
    """The streaming contract: the raw events, folded, are the whole answer (ids aside)."""
    tools = [WEATHER]
    for text in ("Streaming works one token at a time: naïve café, 東京.", THINK_TEXT,
                 f"<think>Weather first.</think>{CALL_TEXT}"):
        kwargs: dict[str, Any] = {"max_tokens": 300, "messages": _user(text), "tools": tools}
        events = _raw_events(client, **kwargs)
        deltas = [e for e in events if e.type == "content_block_delta"]
        assert len(deltas) > 5  # really streamed
        whole = client.messages.create(model=MODEL, **kwargs).model_dump()
        assert _without_ids(_fold(events)) == _without_ids(whole), text


def test_sse_framing(url: str) -> None:
    """Each event is ``event: <type>`` + ``data: <json>`` of that type; ``ping`` (which the SDK
    drops) follows ``message_start``; nothing follows ``message_stop``."""
    body = {"model": MODEL, "max_tokens": 50, "stream": True, "messages": _user(THINK_TEXT)}
    reply = httpx.post(url + "/v1/messages", json=body, timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    chunks = reply.text.split("\n\n")
    assert chunks[-1] == ""
    types = []
    for chunk in chunks[:-1]:
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == name[7:]
        types.append(name[7:])
    assert types[:3] == ["message_start", "ping", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_stream_helper_final_message(client: anthropic.Anthropic) -> None:
    """What agent frameworks call: ``messages.stream`` folds the events into a Message."""
    text = f"<think>Weather first.</think>{CALL_TEXT}"
    with client.messages.stream(model=MODEL, max_tokens=300, messages=_user(text),
                                tools=[WEATHER]) as stream:  # type: ignore[list-item]
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "Weather first."  # type: ignore[union-attr]
    assert final.content[0].signature  # type: ignore[union-attr]
    assert streamed_text == final.content[1].text  # type: ignore[union-attr]
    assert final.content[1].text.strip() == "Let me check."  # type: ignore[union-attr]
    call = final.content[2]
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert call.name == "get_weather" and call.input == CALL["arguments"]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 5


def test_tool_round_trip(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(model=MODEL, max_tokens=300, messages=_user(CALL_TEXT),
                                 tools=[WEATHER])  # type: ignore[list-item]
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    call = msg.content[1]
    assert call.type == "tool_use" and call.input == CALL["arguments"]
    follow = client.messages.create(model=MODEL, max_tokens=300, tools=[WEATHER], messages=[  # type: ignore[list-item]
        {"role": "user", "content": CALL_TEXT},
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": [{"type": "text", "text": "18 C, sunny"}]}]}])
    assert follow.stop_reason == "end_turn"
    assert follow.content[0].text == "<tool_response>\n18 C, sunny\n</tool_response>"  # type: ignore[union-attr]
    failed = client.messages.create(model=MODEL, max_tokens=300, tools=[WEATHER], messages=[  # type: ignore[list-item]
        {"role": "user", "content": CALL_TEXT},
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "no network", "is_error": True}]}])
    assert "Error: no network" in failed.content[0].text  # type: ignore[union-attr]


def test_thinking_blocks_handed_back(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(model=MODEL, max_tokens=300, messages=_user(
        f"<think>Weather first.</think>{CALL_TEXT}"), tools=[WEATHER])  # type: ignore[list-item]
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    turn = [b.model_dump() for b in msg.content]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg.content[2].id,  # type: ignore[union-attr]
                                           "content": "18 C"}]}

    def history(blocks: list[dict[str, Any]]) -> list[Any]:
        return [*_user(CALL_TEXT), {"role": "assistant", "content": blocks}, result]

    # the reasoning reaches the template (it renders the reasoning of the turn after the last
    # user query): the prompt is longer with the thinking block than without it
    with_thinking = _count(client, messages=history(turn), tools=[WEATHER])
    without = _count(client, messages=history(turn[1:]), tools=[WEATHER])
    assert with_thinking > without
    redacted = [{"type": "redacted_thinking", "data": "opaque"}, *turn[1:]]
    assert _count(client, messages=history(redacted), tools=[WEATHER]) == without
    follow = client.messages.create(model=MODEL, max_tokens=300, messages=history(turn),
                                    tools=[WEATHER])  # type: ignore[list-item]
    assert follow.content[-1].text == "<tool_response>\n18 C\n</tool_response>"  # type: ignore[union-attr]
    assert follow.usage.input_tokens == with_thinking


def test_thinking_switch_reaches_the_template(client: anthropic.Anthropic) -> None:
    # the ChatML template opens <think> when thinking is on: the whole echo is reasoning
    on = client.messages.create(model=MODEL, max_tokens=1100, messages=_user("Ponder this."),
                                thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in on.content] == ["thinking"]
    assert on.content[0].thinking == "Ponder this."  # type: ignore[union-attr]
    adaptive = client.messages.create(model=MODEL, max_tokens=100, messages=_user("Ponder."),
                                      thinking={"type": "adaptive"})  # type: ignore[arg-type,typeddict-item]
    assert [b.type for b in adaptive.content] == ["thinking"]
    off = client.messages.create(model=MODEL, max_tokens=100, messages=_user("Ponder this."),
                                 thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]


def test_stops_and_limits(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(model=MODEL, max_tokens=100, messages=_user("one two STOP three"),
                                 stop_sequences=["STOP"])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "STOP"
    assert msg.content[0].text == "one two "  # type: ignore[union-attr]
    cut = client.messages.create(model=MODEL, max_tokens=3, messages=_user("a b c d e f g h"))
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3


def test_max_tokens_over_the_context(client: anthropic.Anthropic) -> None:
    """max_tokens larger than the context leaves (Claude Code sends 32000 whatever the model)
    runs with the room left; filling it is model_context_window_exceeded."""
    short = client.messages.create(model=MODEL, max_tokens=32000, messages=_user("Hello"))
    assert short.stop_reason == "end_turn" and short.content[0].text == "Hello"  # type: ignore[union-attr]
    long_text = "lorem ipsum dolor " * 120  # ~1,300 toy tokens: echoing it overflows 2,048
    prompt = _count(client, messages=_user(long_text))
    assert MAX_MODEL_LEN // 2 < prompt < MAX_MODEL_LEN
    for max_tokens in (32000, MAX_MODEL_LEN - prompt + 1):
        full = client.messages.create(model=MODEL, max_tokens=max_tokens,
                                      messages=_user(long_text))
        assert full.stop_reason == "model_context_window_exceeded"
        assert full.usage.input_tokens == prompt
        assert full.usage.output_tokens == MAX_MODEL_LEN - prompt
        events = _raw_events(client, max_tokens=max_tokens, messages=_user(long_text))
        assert _fold(events)["stop_reason"] == "model_context_window_exceeded"
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long|maximum context"):
        client.messages.create(model=MODEL, max_tokens=32000, messages=_user(long_text * 2))


def test_tool_choice_is_enforced(client: anthropic.Anthropic) -> None:
    # echo would answer with plain text: the forced call's constraint takes over
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        msg = client.messages.create(model=MODEL, max_tokens=200, messages=_user("hi"),
                                     tools=[WEATHER], tool_choice=choice)  # type: ignore[list-item,arg-type]
        assert msg.stop_reason == "tool_use", choice
        calls = [b for b in msg.content if b.type == "tool_use"]
        assert calls and calls[0].name == "get_weather"
        jsonschema.validate(calls[0].input, WEATHER["input_schema"])
    none = client.messages.create(model=MODEL, max_tokens=200, messages=_user(CALL_TEXT),
                                  tools=[WEATHER], tool_choice={"type": "none"})  # type: ignore[list-item]
    assert none.stop_reason == "end_turn" and [b.type for b in none.content] == ["text"]
    two = CALL_TEXT + f"<tool_call>\n{json.dumps(CALL)}\n</tool_call>"
    both = client.messages.create(model=MODEL, max_tokens=300, messages=_user(two),
                                  tools=[WEATHER])  # type: ignore[list-item]
    assert [b.type for b in both.content].count("tool_use") == 2
    one = client.messages.create(model=MODEL, max_tokens=300, messages=_user(two),
                                 tools=[WEATHER],  # type: ignore[list-item]
                                 tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.type for b in one.content].count("tool_use") == 1


def test_structured_output(client: anthropic.Anthropic) -> None:
    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
              "required": ["unit"], "additionalProperties": False}
    msg = client.messages.create(model=MODEL, max_tokens=60, messages=_user("not json at all"),
                                 extra_body={"output_config": {"format": {
                                     "type": "json_schema", "schema": schema}}})
    jsonschema.validate(json.loads(msg.content[0].text), schema)  # type: ignore[union-attr]


def test_prefill_continues_the_final_assistant_turn(url: str,
                                                   client: anthropic.Anthropic) -> None:
    """A final assistant turn is continued (chat's continue_final_message): the prompt is the
    one chat completions renders with it, not a closed turn plus a new one."""
    turns = [{"role": "user", "content": "Name a colour."},
             {"role": "assistant", "content": "The colour is"}]
    msg = client.messages.create(model=MODEL, max_tokens=50, messages=turns)  # type: ignore[arg-type]
    chat = httpx.post(url + "/v1/chat/completions", timeout=10, json={
        "model": MODEL, "messages": turns, "max_tokens": 50,
        "continue_final_message": True, "add_generation_prompt": False}).json()
    assert msg.usage.input_tokens == chat["usage"]["prompt_tokens"]
    closed = httpx.post(url + "/v1/chat/completions", timeout=10, json={
        "model": MODEL, "messages": turns, "max_tokens": 50}).json()
    assert closed["usage"]["prompt_tokens"] > msg.usage.input_tokens
    assert msg.content[0].text == chat["choices"][0]["message"]["content"]  # type: ignore[union-attr]


def test_claude_code_fields_are_accepted(url: str) -> None:
    """What Claude Code sends beside the conversation, none of which changes the output here."""
    body = {
        "model": MODEL, "max_tokens": 300, "stream": False,
        "system": [{"type": "text", "text": "You are an agent."},
                   {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "Available agent types: none."}],
        "tools": [{**WEATHER, "type": "custom"}, {**WEATHER, "name": "other"}],
        "metadata": {"user_id": "{\"device_id\": \"x\"}"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"}, "thinking": {"type": "disabled"},
        "service_tier": "auto",
    }
    reply = httpx.post(url + "/v1/messages?beta=true", json=body, timeout=10, headers={
        "anthropic-beta": "claude-code-20250219,context-management-2025-06-27",
        "anthropic-version": "2023-06-01", "x-api-key": "placeholder"})
    assert reply.status_code == 200, reply.text
    text = reply.json()["content"][0]["text"]
    assert text == "<system-reminder>ctx</system-reminder>\nSay hi"
    # the system entry inside messages joined the system prompt (rendered first)
    prompt = httpx.post(url + "/tokenize", timeout=10, json={"messages": [
        {"role": "system", "content": "You are an agent.\n\nBe brief.\n\n"
                                      "Available agent types: none."},
        {"role": "user", "content": "<system-reminder>ctx</system-reminder>\nSay hi"}],
        "tools": [{"type": "function", "function": {"name": n, "description": WEATHER[
            "description"], "parameters": WEATHER["input_schema"]}} for n in (
            "get_weather", "other")],
        "chat_template_kwargs": {"enable_thinking": False, "thinking": False}}).json()
    assert reply.json()["usage"]["input_tokens"] == prompt["count"]


def _anthropic_error(reply: httpx.Response) -> str:
    body = reply.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return str(body["error"]["message"])


def test_errors(url: str, client: anthropic.Anthropic) -> None:
    base: dict[str, Any] = {"model": MODEL, "max_tokens": 10, "messages": _user("x")}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AA=="}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": []}, "at least one message"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [image]}]},  # a text model
         "messages[0].content[0] is an image, and the served model does not read images"),
        ({"messages": [{"role": "user", "content": [{"type": "document"}]}]},
         "'document' at messages[0].content[0].type"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "mcp_servers"),
        ({"temperature": 1.5}, "temperature"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"thinking": {"type": "enabled", "budget_tokens": 10}}, "budget_tokens"),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": "nope"}]}]},
         "messages[1].content[0]"),
    ]
    for change, needle in cases:
        body = {k: v for k, v in {**base, **change}.items() if v is not None}
        reply = httpx.post(url + "/v1/messages", json=body, timeout=10)
        assert reply.status_code == 400, (change, reply.text)
        assert needle in _anthropic_error(reply), (change, reply.text)
        assert reply.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=_user("x"))
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    for method, path in (("GET", "/v1/messages"), ("POST", "/v1/messages/nope")):
        reply = httpx.request(method, url + path, timeout=10)
        assert reply.status_code in (404, 405)
        assert _anthropic_error(reply)
    reply = httpx.post(url + "/v1/messages", content=b"{not json", timeout=10)
    assert reply.status_code == 400 and "not valid JSON" in _anthropic_error(reply)


def test_count_tokens(url: str, client: anthropic.Anthropic) -> None:
    with_tools = _count(client, messages=_user("hi"), tools=[WEATHER])
    plain = _count(client, messages=_user("hi"))
    assert with_tools > plain > 0
    rendered = httpx.post(url + "/tokenize", timeout=10, json={"messages": _user("hi")}).json()
    assert plain == rendered["count"]
    reply = httpx.post(url + "/v1/messages/count_tokens", timeout=10,
                       json={"model": MODEL, "messages": [{"role": "user", "content": [
                           {"type": "image"}]}]})
    assert reply.status_code == 400 and "messages[0].content[0].source" in _anthropic_error(reply)

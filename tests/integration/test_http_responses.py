"""The Responses API (``POST /v1/responses``) end to end through the official ``openai`` client:
a real service (stub engine, echo mode) behind the HTTP frontend.

Echo mode answers with the last user turn of the prompt, so the input scripts the model:
``<think>..</think>`` makes it reason, ``<tool_call>{...}</tool_call>`` makes it call a tool, and
a ``function_call_output`` (rendered as a user ``<tool_response>`` turn by the ChatML template)
comes back as the answer — proof it reached the prompt.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Iterator

import httpx
import jsonschema
import openai
import pytest

from tests.helpers.service import Service, build_toy_model, wait_http

pytestmark = pytest.mark.timeout(60)

MODEL = "toy"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
CALL_TEXT = f"Let me check.<tool_call>\n{json.dumps(CALL)}\n</tool_call>"


@pytest.fixture(scope="module")
def service_and_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    root = tmp_path_factory.mktemp("responses")
    model = build_toy_model(root / MODEL)
    service = Service(root, model, workers=1,
                      args=["--stub-arg=--step-ms=1", "--http", "127.0.0.1:0"]).start()
    try:
        yield service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()


@pytest.fixture(scope="module")
def url(service_and_url: tuple[Service, str]) -> str:
    return service_and_url[1]


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


def _events(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    return list(client.responses.create(model=MODEL, stream=True, **kwargs))


def _check_sequence(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[-1].type in ("response.completed", "response.incomplete")


def test_text_whole(url: str, client: openai.OpenAI) -> None:
    text = "Hello there, how are you? 你好 😀"
    resp = client.responses.create(model=MODEL, input=text, instructions="Be brief.")
    assert resp.id.startswith("resp-") and resp.object == "response"
    assert resp.status == "completed" and resp.error is None
    assert resp.output_text == text
    assert [item.type for item in resp.output] == ["message"]
    message = resp.output[0]
    assert message.role == "assistant" and message.status == "completed"  # type: ignore[union-attr]
    assert resp.instructions == "Be brief." and resp.model == MODEL
    rendered = httpx.post(url + "/tokenize", timeout=10, json={"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]}).json()
    assert resp.usage is not None
    assert resp.usage.input_tokens == rendered["count"]
    assert resp.usage.output_tokens > 5
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_text_streamed_events_in_order(client: openai.OpenAI) -> None:
    text = "Streaming works one token at a time: naïve café, 東京."
    events = _events(client, input=[{"role": "user", "content": [
        {"type": "input_text", "text": text}]}])
    _check_sequence(events)
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 5  # really streamed
    first, last = types.index(deltas[0].type), len(types) - types[::-1].index(deltas[0].type)
    assert types[2:first] == ["response.output_item.added", "response.content_part.added"]
    assert types[last:] == ["response.output_text.done", "response.content_part.done",
                            "response.output_item.done", "response.completed"]
    assert "".join(e.delta for e in deltas) == text
    item_id = events[2].item.id
    assert all(e.item_id == item_id and e.output_index == 0 for e in deltas)
    done = events[-1].response
    assert done.status == "completed" and done.output_text == text
    assert done.output[0].id == item_id and done.usage.output_tokens > 5
    assert events[-4].text == text and events[-3].part.text == text


def test_function_call_out_and_output_back_in(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input=CALL_TEXT, tools=[WEATHER])  # type: ignore[list-item]
    assert [item.type for item in resp.output] == ["message", "function_call"]
    assert resp.output_text.strip() == "Let me check."
    call = resp.output[1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == CALL["arguments"] and call.call_id
    assert resp.status == "completed" and resp.tools[0].name == "get_weather"  # type: ignore[union-attr]

    # the tool's answer goes back in, after the model's own output items
    follow = client.responses.create(model=MODEL, tools=[WEATHER], input=[  # type: ignore[list-item]
        {"role": "user", "content": CALL_TEXT}, *[item.model_dump() for item in resp.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}])
    assert follow.output_text.strip() == "<tool_response>\n18 C, sunny\n</tool_response>"
    # the same through previous_response_id (the store keeps the conversation)
    chained = client.responses.create(model=MODEL, tools=[WEATHER], previous_response_id=resp.id,  # type: ignore[list-item]
                                      input=[{"type": "function_call_output",
                                              "call_id": call.call_id, "output": "18 C, sunny"}])
    assert chained.output_text == follow.output_text
    assert chained.previous_response_id == resp.id
    assert chained.usage is not None and follow.usage is not None
    assert chained.usage.input_tokens == follow.usage.input_tokens


def test_function_call_streamed(client: openai.OpenAI) -> None:
    events = _events(client, input=CALL_TEXT, tools=[WEATHER])
    _check_sequence(events)
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.item.type for e in added] == ["message", "function_call"]
    assert [e.output_index for e in added] == [0, 1]
    call = added[1].item
    assert call.name == "get_weather" and call.call_id and call.status == "in_progress"
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    # a call goes out once complete and valid: its arguments in one delta
    assert len(deltas) == 1 and all(e.item_id == call.id for e in deltas)
    arguments = "".join(e.delta for e in deltas)
    assert json.loads(arguments) == CALL["arguments"]
    types = [e.type for e in events]
    assert types[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    assert events[-3].arguments == arguments
    final = events[-1].response.output
    assert [item.type for item in final] == ["message", "function_call"]
    assert final[1].arguments == arguments and final[1].status == "completed"


def test_reasoning_item(client: openai.OpenAI) -> None:
    text = "<think>The user wants 2+2. That is 4.</think>The answer is 4."
    resp = client.responses.create(model=MODEL, input=text)
    assert [item.type for item in resp.output] == ["reasoning", "message"]
    reasoning = resp.output[0]
    assert reasoning.content is not None  # type: ignore[union-attr]
    assert reasoning.content[0].text == "The user wants 2+2. That is 4."  # type: ignore[union-attr]
    assert resp.output_text.strip() == "The answer is 4."
    events = _events(client, input=text)
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == "The user wants 2+2. That is 4."
    assert [e.item.type for e in events if e.type == "response.output_item.done"] == [
        "reasoning", "message"]


def test_max_output_tokens_is_incomplete(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=MODEL, input="a b c d e f g h i j", max_output_tokens=3)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage is not None and resp.usage.output_tokens == 3
    events = _events(client, input="a b c d e f g h i j", max_output_tokens=3)
    assert events[-1].type == "response.incomplete"


def test_text_format_json_schema_is_enforced(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}},
              "required": ["unit"], "additionalProperties": False}
    fmt = {"type": "json_schema", "name": "unit", "schema": schema, "strict": True}
    # echo would say "not json at all": the constraint takes over
    resp = client.responses.create(model=MODEL, input="not json at all", max_output_tokens=60,
                                   text={"format": fmt})  # type: ignore[typeddict-item]
    assert resp.status == "completed"
    jsonschema.validate(json.loads(resp.output_text), schema)
    assert resp.text is not None and resp.text.format is not None
    assert resp.text.format.type == "json_schema"


def test_sdk_stream_and_parse_helpers(client: openai.OpenAI) -> None:
    """What agent frameworks call: ``responses.stream`` (events folded into a final response by
    the SDK) and ``responses.parse`` (a pydantic model as text.format json_schema)."""
    import pydantic

    with client.responses.stream(model=MODEL, input=CALL_TEXT, tools=[WEATHER]) as stream:  # type: ignore[list-item]
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert json.loads(final.output[1].arguments) == CALL["arguments"]  # type: ignore[union-attr]

    class Unit(pydantic.BaseModel):
        unit: str
        count: int

    parsed = client.responses.parse(model=MODEL, input="not json", text_format=Unit,
                                    max_output_tokens=60)
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Unit)


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_errors(url: str, client: openai.OpenAI) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"input": []}, "input", "input is empty"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "allowed roles"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0].type",
         "not supported"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]},  # no source
         "input[0].content[0].image_url", "must"),
        ({"input": [{"role": "user", "content": [  # a text model
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]},
         "input[0].content[0]", "does not read images"),
        ({"input": "x", "tools": [{"type": "websearch"}]}, "tools[0].type",
         "not a Responses API tool type"),
        ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
         "tool_choice", "nope"),
        ({"input": "x", "text": {"format": {"type": "grammar"}}}, "text.format.type",
         "not supported"),
        ({"input": "x", "background": True}, "background", "not supported"),
        ({"input": "x", "temperature": 5}, "temperature", "<= 2.0"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f",
                     "arguments": "{nope"}]}, "input[0]", "not valid JSON"),
    ]
    for body, param, message in cases:
        reply = httpx.post(url + "/v1/responses", json={"model": MODEL, **body}, timeout=10)
        assert reply.status_code == 400, (body, reply.text)
        error = reply.json()["error"]
        assert (error["param"] or "").startswith(param) and message in error["message"], \
            (body, error)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp-nope")
    assert _error(missing.value)["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="gpt-4o", input="x")
    assert _error(missing.value)["code"] == "model_not_found"
    # store=false: nothing to continue from
    unstored = client.responses.create(model=MODEL, input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", previous_response_id=unstored.id)
    # a refusal by the worker (too long) is a 400 before the stream starts
    with pytest.raises(openai.BadRequestError):
        _events(client, input="x", max_output_tokens=10_000_000)


def test_failure_mid_stream_is_error_then_response_failed(
        service_and_url: tuple[Service, str], client: openai.OpenAI) -> None:
    """Runs last: kill -9 the detokenizer under a streamed response; the stream ends with an
    ``error`` event and ``response.failed``, then the service recovers."""
    service, _ = service_and_url
    events = []
    killed = False
    for event in client.responses.create(model=MODEL, input="word " * 3000, stream=True):
        events.append(event)
        if event.type == "response.output_text.delta" and not killed and len(events) > 6:
            os.kill(service.refresh_pids()["detokenizer"], signal.SIGKILL)
            killed = True
    assert killed
    assert [e.type for e in events[-2:]] == ["error", "response.failed"], events[-3:]
    assert "detokenizer" in events[-2].message
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "server_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deadline = time.monotonic() + 20  # restarted by the supervisor; new requests succeed
    while True:
        try:
            again = client.responses.create(model=MODEL, input="back")
            break
        except openai.APIStatusError:
            assert time.monotonic() < deadline, "no recovery after the detokenizer restart"
            time.sleep(0.2)
    assert again.output_text == "back"

"""OpenAI API shapes of the HTTP frontend: validation, response shaping, metrics, and the ASGI
app over a scripted fake backend (in-process, no sockets, no processes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Mapping, Sequence

import httpx
import pytest

from tests.helpers.chat_cases import WEATHER_TOOL
from tests.helpers.prom import value
from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.http.asgi import EventStream
from textproc.http.backend import Output
from textproc.http.metrics import ScrapeInputs
from textproc.http.openai.bodies import (
    parse_chat_request,
    parse_completion_request,
    parse_detokenize_request,
    parse_tokenize_request,
)
from textproc.core.deltas import MessageAccumulator, join_text
from textproc.http.openai.answers import SSE_DONE, chat_chunk, new_id, sse_event
from textproc.http.server import HttpLimits, build_app

pytestmark = pytest.mark.timeout(30)

MODELS = ["qwen3"]


def chat_body(**fields: Any) -> bytes:
    body: dict[str, Any] = {"model": "qwen3", "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return json.dumps(body).encode()


def chat(**fields: Any) -> ChatParams:
    return parse_chat_request(chat_body(**fields), served_models=MODELS)


def rejected(body: bytes, *, kind: str = "chat") -> ApiError:
    parse = {"chat": parse_chat_request, "completion": parse_completion_request,
             "tokenize": parse_tokenize_request, "detokenize": parse_detokenize_request}[kind]
    with pytest.raises(ApiError) as info:
        parse(body, served_models=MODELS)
    return info.value


WEATHER = WEATHER_TOOL


# ---------------------------------------------------------------- request validation


def test_chat_request_normalized() -> None:
    p = chat(
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        ],
        tools=[WEATHER], stop="END", max_completion_tokens=7, max_tokens=99, temperature=0.5,
        seed=3, top_k=20, stream=True, stream_options={"include_usage": True},
        chat_template_kwargs={"enable_thinking": False},
    )
    assert p.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    assert p.output.stop == ["END"]
    assert p.sampling.max_tokens == 7  # max_completion_tokens wins over the deprecated max_tokens
    assert p.sampling.params == {"temperature": 0.5, "top_k": 20, "seed": 3}
    assert p.tool_choice == "auto"
    assert p.tools is not None and p.tools[0]["function"]["name"] == "get_weather"
    assert p.stream and p.include_usage
    assert p.chat_template_kwargs == {"enable_thinking": False}


def test_tool_choice_forms() -> None:
    assert chat().tool_choice == "none"
    assert chat(tools=[WEATHER], tool_choice="required").tool_choice == "required"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert chat(tools=[WEATHER], tool_choice=named).tool_choice == named
    assert chat(tools=[WEATHER], tool_choice="none").tool_choice == "none"


@pytest.mark.parametrize(
    ("fields", "param", "match"),
    [
        ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role", "allowed roles"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "got `int`"),
        ({"messages": [{"role": "user"}]}, "messages[0]", "missing required field `content`"),
        ({"messages": []}, "messages", "empty"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
         "messages[0].content[0].type", "supported content part types: text, image_url"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages[0].content[0].image_url", "missing required field `url`"),
        ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content",
         "neither content nor tool_calls"),
        ({"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
         "messages[0].tool_calls[0].function.arguments", "not valid JSON"),
        ({"n": 0}, "n", "n=0 is out of range"),
        ({"max_tokens": 0}, "max_tokens", ">= 1"),
        ({"max_completion_tokens": "9"}, "max_completion_tokens", "Expected `int"),
        ({"temperature": 3}, "temperature", "<= 2.0"),
        ({"stop": ["ok", ""]}, "stop", "stop[1] is empty"),
        ({"stop": ["s"] * 65}, "stop", "at most 64"),
        ({"stop": 7}, "stop", "Expected `str | array | null`, got `int`"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "top_logprobs=21 is out of range; allowed: 0..20"),
        ({"top_logprobs": 1}, "top_logprobs", "needs logprobs set to true"),
        ({"logprobs": 1}, "logprobs", "Expected `bool | null`"),
        ({"response_format": {"type": "grammar"}}, "response_format.type", "not supported"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema", "needs"),
        ({"guided_grammar": "root ::= x"}, "guided_grammar", "not supported"),
        ({"structured_outputs": {"grammar": "x"}}, "structured_outputs.grammar", "not supported"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "exactly one"),
        ({"guided_choice": []}, "guided_choice", "non-empty list"),
        ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex", "both"),
        ({"tools": [WEATHER], "tool_choice": "required", "guided_regex": "a"}, "tool_choice",
         "together with a forced tool call"),
        ({"tool_choice": "sometimes"}, "tool_choice", "Invalid enum value 'sometimes'"),
        ({"tool_choice": "required"}, "tool_choice", "needs at least one tool in tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice", "unknown tool 'nope'"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
         "tools[0].function.name", "invalid"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "defined twice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
         "tools[0].function.parameters", "of type 'object'"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": ["x"]}}}]},
         "tools[0].function.parameters.properties", "must map names to schemas"),
        ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type",
         "Invalid enum value 'retrieval'"),
        ({"tools": [{"function": {"name": "f"}}]}, "tools[0]", "missing required field `type`"),
        ({"continue_final_message": True}, "continue_final_message", "from the assistant"),
    ],
)
def test_chat_request_rejected(fields: dict[str, Any], param: str, match: str) -> None:
    err = rejected(chat_body(**fields))
    assert err.status == 400
    assert err.param == param
    assert match in err.message
    body = err.body()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error"


def test_unknown_model_is_404() -> None:
    err = rejected(chat_body(model="gpt-9"))
    assert (err.status, err.code, err.param) == (404, "model_not_found", "model")
    assert "'gpt-9' does not exist" in err.message and "qwen3" in err.message


def test_body_not_json_or_not_object() -> None:
    assert "not valid JSON" in rejected(b"{\"model\": ").message
    assert "Expected `object`, got `array`" in rejected(b"[]").message
    assert "missing required field `messages`" in rejected(b'{"model": "qwen3"}').message


def test_unknown_fields_ignored() -> None:
    assert chat(user="u1", metadata={"a": 1}, store=False).messages


def test_completion_prompt_forms() -> None:
    def prompt(value: Any, **extra: Any) -> CompletionParams:
        body = json.dumps({"model": "qwen3", "prompt": value, **extra}).encode()
        return parse_completion_request(body, served_models=MODELS)

    assert prompt("hello").prompt == "hello"
    assert prompt("hello").sampling.max_tokens == 16  # the legacy API's default
    assert prompt([1, 2, 3]).prompt == [1, 2, 3]
    assert prompt([[4, 5]]).prompt == [4, 5]
    assert prompt(["one"]).prompt == "one"
    assert prompt("x", stop=["a", "b"], echo=True).output.stop == ["a", "b"]
    for bad, match in [(["a", "b"], "batch of 2 prompts"), ([], "must be a string"),
                       ([1, "a"], "must be a string"), ([-1], ">= 0")]:
        body = json.dumps({"model": "qwen3", "prompt": bad}).encode()
        assert match in rejected(body, kind="completion").message
    body = json.dumps({"model": "qwen3", "prompt": "x", "suffix": "y"}).encode()
    assert rejected(body, kind="completion").param == "suffix"
    assert prompt("x", logprobs=5).output.logprobs == 5 and prompt("x").output.logprobs is None
    for extra, param, match in [({"logprobs": 6}, "logprobs", "logprobs=6 is out of range; "
                                 "allowed: 0..5"), ({"logprobs": 0, "echo": True}, "echo",
                                                    "prompt's logprobs")]:
        err = rejected(json.dumps({"model": "qwen3", "prompt": "x", **extra}).encode(),
                       kind="completion")
        assert (err.param, match in err.message) == (param, True), err.message


def test_logprob_bodies() -> None:
    from textproc.http.openai.answers import CompletionLogprobs, chat_logprobs

    # "é" as two tokens of one byte each, then " ok": (id, bytes, logprob, alternatives)
    entries = [(1, b"\xc3", -0.5, [1, 9], [b"\xc3", b"<s>"], [-0.5, -2.0]),
               (2, b"\xa9", -0.25, [], [], []), (3, b" ok", -1.0, [4], [b" no"], [-1.5])]
    body = chat_logprobs(entries)
    assert body["refusal"] is None and [e["token"] for e in body["content"]] == [
        "bytes:\\xc3", "bytes:\\xa9", " ok"]
    assert body["content"][0]["top_logprobs"][1] == {"token": "<s>", "logprob": -2.0,
                                                     "bytes": [60, 115, 62]}
    assert b"".join(bytes(e["bytes"]) for e in body["content"]) == "é ok".encode()
    comp = CompletionLogprobs()
    first, rest = comp.feed(entries[:1]), comp.feed(entries[1:])  # chunk by chunk
    assert first["text_offset"] + rest["text_offset"] == [0, 0, 1]  # "é" is character 0
    assert rest["top_logprobs"] == [{"bytes:\\xa9": -0.25}, {" no": -1.5, " ok": -1.0}]


def test_tokenize_detokenize_requests() -> None:
    req = parse_tokenize_request(b'{"prompt": "hi"}', served_models=MODELS)
    assert req.prompt == "hi" and req.add_special_tokens is None
    assert "exactly one" in rejected(b'{"prompt": "a", "messages": []}', kind="tokenize").message
    assert "exactly one" in rejected(b"{}", kind="tokenize").message
    assert parse_detokenize_request(b'{"tokens": [1, 2]}', served_models=MODELS).tokens == [1, 2]
    assert rejected(b'{"tokens": [1, -2]}', kind="detokenize").param == "tokens[1]"


# ---------------------------------------------------------------- response shaping


def test_join_text_keeps_tool_calls_apart() -> None:
    call = {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}
    frags = [{"content": "a"}, {"content": "b"}, call, call,
             {"reasoning_content": "r"}, {"reasoning_content": "s"}, {"content": "c"}]
    assert join_text(frags) == [{"content": "ab"}, call, call,
                                      {"reasoning_content": "rs"}, {"content": "c"}]


def test_accumulator_equals_streamed_concatenation() -> None:
    acc = MessageAccumulator()
    acc.feed([{"reasoning_content": "think "}, {"reasoning_content": "more"}])
    acc.feed([{"content": "\n"}])
    acc.feed([{"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]}])
    acc.feed([{"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}])
    acc.feed([{"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}])
    acc.feed([{"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "now", "arguments": "{}"}}]}])
    msg = acc.message(new_call_id=lambda: new_id("call"))
    assert msg == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "think more",
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }


def test_chunk_and_sse_framing() -> None:
    chunk = chat_chunk("chatcmpl-1", 7, "qwen3", {"content": "é\n"}, include_usage=True)
    assert chunk["object"] == "chat.completion.chunk" and chunk["usage"] is None
    assert chunk["choices"] == [{"index": 0, "delta": {"content": "é\n"}, "logprobs": None,
                                 "finish_reason": None}]
    assert "usage" not in chat_chunk("c", 7, "m", {})
    event = sse_event(chunk)
    assert event.startswith(b"data: {") and event.endswith(b"}\n\n")
    assert event.count(b"\n") == 2  # a newline in the text is escaped inside the JSON
    assert json.loads(event[6:]) == chunk
    assert SSE_DONE == b"data: [DONE]\n\n"


# ---------------------------------------------------------------- the app over a fake backend


class FakeBackend:
    """Scripted backend: yields the given Outputs; records aborts (streams closed early)."""

    def __init__(self, script: Sequence[Output] = (), *, error: ApiError | None = None,
                 serving: bool = True, delay_s: float = 0.0) -> None:
        self.script = list(script)
        self.error = error
        self.serving = serving
        self.delay_s = delay_s
        self.first_delay_s = 0.0
        self.calls: list[tuple[str, Any]] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []

    @property
    def served_models(self) -> Sequence[str]:
        return MODELS

    @property
    def max_model_len(self) -> int | None:
        return 4096

    @property
    def lora_modules(self) -> dict[str, str]:
        return {}

    async def _run(self, request_id: str) -> AsyncIterator[Output]:
        done = False
        try:
            if self.error is not None:
                raise self.error
            await asyncio.sleep(self.first_delay_s)
            yield Output([], prompt_tokens=5)
            for out in self.script:
                await asyncio.sleep(self.delay_s)
                if out.finish_reason is not None:
                    done = True
                    self.finished.append(request_id)
                yield out
        finally:
            if not done:
                self.aborted.append(request_id)

    def chat(self, params: ChatParams, *, request_id: str) -> AsyncIterator[Output]:
        self.calls.append(("chat", params))
        return self._run(request_id)

    def complete(self, params: CompletionParams, *, request_id: str) -> AsyncIterator[Output]:
        self.calls.append(("complete", params))
        return self._run(request_id)

    async def tokenize(self, *, text: str | None, messages: Any, tools: Any,
                       add_special_tokens: bool, add_generation_prompt: bool,
                       chat_template_kwargs: dict[str, Any]) -> list[int]:
        return [ord(c) for c in text or ""]

    async def detokenize(self, token_ids: list[int], *, skip_special_tokens: bool) -> str:
        return "".join(map(chr, token_ids))

    def worker_requests(self) -> Sequence[int]:
        return [3, 4]

    def queue_depths(self) -> Mapping[str, int]:
        return {"worker-0": 0}

    async def process_counters(self) -> Sequence[tuple[str, int, Mapping[str, int]]]:
        return [("worker", 0, {"requests": 4, "pid": 99}), ("detokenizer", 0, {"tokens_in": 7})]

    def engine_stats(self) -> Mapping[str, Any]:
        return {"scheduler": {"running": 2, "waiting": 1, "kv_cache_usage": 0.25}}

    def health(self) -> tuple[bool, str]:
        return self.serving, "" if self.serving else "the detokenizer is restarting"


TOOL_SCRIPT = [
    Output([{"reasoning_content": "hmm"}]),
    Output([{"content": "ok "}, {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                 "function": {"name": "get_weather",
                                                              "arguments": ""}}]}]),
    Output([{"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Oslo\"}"}}]}],
           finish_reason="tool_calls", prompt_tokens=5, completion_tokens=9,
           cached_tokens=4),  # as the detokenizer's pipeline reports it
]


def request(backend: FakeBackend, method: str, path: str, *, limits: HttpLimits | None = None,
            **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=build_app(backend, limits=limits))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def test_app_chat_whole_and_streamed_agree() -> None:
    backend = FakeBackend(TOOL_SCRIPT)
    whole = request(backend, "POST", "/v1/chat/completions",
                    content=chat_body(tools=[WEATHER]))
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"] == "hmm"
    assert choice["message"]["content"] == "ok "
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14,
                             "prompt_tokens_details": {"cached_tokens": 4}}

    streamed = request(backend, "POST", "/v1/chat/completions",
                       content=chat_body(tools=[WEATHER], stream=True,
                                         stream_options={"include_usage": True}))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    raw = streamed.content
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = [json.loads(e[6:]) for e in raw.split(b"\n\n")[:-2]]
    assert all(e["id"] == events[0]["id"] and e["object"] == "chat.completion.chunk"
               for e in events)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]][-1] == "tool_calls"
    assert events[-1]["choices"] == [] and events[-1]["usage"] == body["usage"]
    assert all(e["usage"] is None for e in events[:-1])
    acc = MessageAccumulator()
    for e in events[1:-1]:
        acc.feed([e["choices"][0]["delta"]])
    # reasoning goes out under both names, streamed and whole
    assert all(d.get("reasoning") == d.get("reasoning_content")
               for d in (e["choices"][0]["delta"] for e in events[1:-1]))
    assert choice["message"]["reasoning"] == choice["message"]["reasoning_content"] == "hmm"
    assert acc.message(new_call_id=lambda: new_id("call")) == {
        k: v for k, v in choice["message"].items() if k != "reasoning"}
    assert backend.finished and not backend.aborted


def asgi_sends(backend: FakeBackend, path: str, body: bytes) -> list[dict[str, Any]]:
    """The ASGI messages the app sends for one request (what uvicorn turns into writes)."""
    sent: list[dict[str, Any]] = []

    async def go() -> None:
        app = build_app(backend)
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80),
                 "headers": [(b"host", b"test"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())]}
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)  # the client stays
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await asyncio.wait_for(app(scope, receive, send), 5)

    asyncio.run(go())
    return sent


@pytest.mark.parametrize("path, body, sends, last", [
    # the first output (no text) and three scripted ones: a send each
    ("/v1/chat/completions", chat_body(tools=[WEATHER], stream=True,
                                       stream_options={"include_usage": True}), 4, SSE_DONE),
    # only the third output has text a completion streams
    ("/v1/completions", json.dumps({"model": "qwen3", "prompt": "hi", "stream": True}).encode(),
     2, SSE_DONE),
    ("/v1/responses", json.dumps({"model": "qwen3", "input": "hi", "stream": True}).encode(),
     4, b"response.completed"),
])
def test_stream_sends_one_write_per_output(path: str, body: bytes, sends: int,
                                           last: bytes) -> None:
    """The events of one engine output go out in one send (one socket write): the role chunk
    with the first output's, the finish, usage and [DONE] with the last output's, which also
    ends the body, so no empty send follows."""
    backend = FakeBackend(TOOL_SCRIPT)
    sent = asgi_sends(backend, path, body)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = sent[1:]
    assert all(m["type"] == "http.response.body" and m["body"].endswith(b"\n\n")
               for m in bodies)
    assert [m["more_body"] for m in bodies] == [True] * (sends - 1) + [False]
    assert last in bodies[-1]["body"] and last not in b"".join(m["body"] for m in bodies[:-1])
    if path == "/v1/chat/completions":  # the role chunk; the finish, usage and [DONE] together
        counts = [m["body"].count(b"data: ") for m in bodies]
        assert counts[0] == 1 and counts[-1] >= 3, counts
    assert backend.finished and not backend.aborted


def test_app_errors_have_status_and_error_object() -> None:
    def check(resp: httpx.Response, status: int, match: str) -> None:
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert match in error["message"]
        assert set(error) == {"message", "type", "param", "code"}

    ok = FakeBackend([Output([{"content": "x"}], finish_reason="stop")])
    check(request(ok, "POST", "/v1/chat/completions", content=chat_body(n=17)), 400, "limit of 16")
    check(request(ok, "POST", "/v1/chat/completions", content=chat_body(model="m2")), 404,
          "does not exist")
    check(request(ok, "POST", "/v1/chat/completions", content=chat_body(stop="x" * 300),
                  limits=HttpLimits(max_body_bytes=200)), 413, "200-byte limit")
    check(request(ok, "POST", "/v1/chat/completions", content=chat_body(),
                  limits=HttpLimits(max_running=0)), 429, "limit is 0")
    check(request(FakeBackend(serving=False), "POST", "/v1/chat/completions",
                  content=chat_body()), 503, "the detokenizer is restarting")
    refused = FakeBackend(error=ApiError("prompt (9000 tokens) + max_tokens is over "
                                         "max_model_len 4096", param="messages"))
    check(request(refused, "POST", "/v1/chat/completions", content=chat_body(stream=True)),
          400, "max_model_len 4096")
    check(request(ok, "GET", "/v1/chat/completions"), 405, "not allowed")
    check(request(ok, "GET", "/v2/nothing"), 404, "no route")
    broken = FakeBackend([Output([{"content": "x"}], finish_reason="error", error="engine died")])
    check(request(broken, "POST", "/v1/chat/completions", content=chat_body()), 500,
          "engine died")
    health = request(FakeBackend(serving=False), "GET", "/health")
    assert health.status_code == 503 and health.json()["status"] == "unavailable"


def test_metrics_count_and_time_requests_as_vllm_does() -> None:
    """Per request (streamed or not): one time to first token, one inter-token latency per
    later output with text, one end-to-end latency and one queue time (the service's template,
    tokenize and queue timings); the usage's tokens in the token counters and histograms; a
    tool call finishes as vLLM's "stop"."""
    backend = FakeBackend([
        Output([{"content": "a"}], timings_s={"template": 0.25, "tokenize": 0.25, "queue": 0.25}),
        Output([{"content": "b"}]),
        Output([], ),  # no text in this step: no latency to observe
        Output([{"content": "c"}], finish_reason="tool_calls", prompt_tokens=7,
               completion_tokens=3, cached_tokens=2)], delay_s=0.01)
    app = build_app(backend)

    async def go() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for stream in (False, True):
                resp = await client.post("/v1/chat/completions",
                                         content=chat_body(stream=stream))
                assert resp.status_code == 200, resp.text
            return (await client.get("/metrics")).text

    text = asyncio.run(go())
    labels = {"model_name": MODELS[0], "engine": "0"}
    assert value(text, "vllm:time_to_first_token_seconds_count", **labels) == 2
    assert value(text, "vllm:inter_token_latency_seconds_count", **labels) == 4
    assert value(text, "vllm:e2e_request_latency_seconds_count", **labels) == 2
    assert value(text, "vllm:e2e_request_latency_seconds_sum", **labels) >= 2 * 0.04
    assert value(text, "vllm:request_queue_time_seconds_sum", **labels) == 2 * 0.75
    assert value(text, "vllm:request_queue_time_seconds_bucket", le="0.8", **labels) == 2
    assert value(text, "vllm:request_queue_time_seconds_bucket", le="0.5", **labels) == 0
    assert value(text, "vllm:prompt_tokens_total", **labels) == 14
    assert value(text, "vllm:generation_tokens_total", **labels) == 6
    assert value(text, "vllm:prefix_cache_queries_total", **labels) == 14
    assert value(text, "vllm:prefix_cache_hits_total", **labels) == 4
    assert value(text, "vllm:request_generation_tokens_bucket", le="2.0", **labels) == 0
    assert value(text, "vllm:request_generation_tokens_bucket", le="5.0", **labels) == 2
    assert value(text, "vllm:request_success_total", finished_reason="stop", **labels) == 2
    assert value(text, "textproc_stage_seconds_count", stage="first_token") == 2
    assert value(text, "textproc_stage_seconds_count", stage="tokenize") == 2


def test_app_completions_models_tokenize_metrics() -> None:
    backend = FakeBackend([Output([{"content": " world"}], finish_reason="length",
                                  prompt_tokens=1, completion_tokens=1)])
    resp = request(backend, "POST", "/v1/completions",
                   json={"model": "qwen3", "prompt": "hello", "echo": True, "max_tokens": 1})
    body = resp.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["choices"][0]["text"] == "hello world"
    assert body["choices"][0]["finish_reason"] == "length"
    streamed = request(backend, "POST", "/v1/completions",
                       json={"model": "qwen3", "prompt": "hello", "stream": True})
    texts = [json.loads(e[6:])["choices"][0]["text"]
             for e in streamed.content.split(b"\n\n")[:-2]]
    assert texts == [" world", ""]
    models = request(backend, "GET", "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["qwen3"]
    assert request(backend, "GET", "/v1/models/qwen3").json()["id"] == "qwen3"
    assert request(backend, "GET", "/v1/models/gpt-4").status_code == 404
    tok = request(backend, "POST", "/tokenize", json={"prompt": "ab"}).json()
    assert tok == {"count": 2, "max_model_len": 4096, "tokens": [97, 98]}
    assert request(backend, "POST", "/detokenize", json={"tokens": [97, 98]}).json() == {
        "prompt": "ab"}
    text = request(backend, "GET", "/metrics").text
    assert "textproc_requests_running 0.0" in text
    assert ('textproc_process_events_total{counter="requests",index="0",role="worker"} 4.0'
            in text)
    assert 'counter="pid"' not in text
    assert 'textproc_worker_requests_total{worker="0"} 3.0' in text
    assert 'textproc_worker_requests_total{worker="1"} 4.0' in text
    assert 'vllm:num_requests_running{engine="0",model_name="qwen3"} 2.0' in text
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen3"}' \
        in text


def test_event_stream_disconnect_cancels_and_aborts() -> None:
    """The client leaves mid-stream: the producer is cancelled and the backend stream closed."""
    backend = FakeBackend([Output([{"content": "t"}])] * 1000, delay_s=0.01)

    async def go() -> tuple[list[bytes], list[str]]:
        sent: list[bytes] = []
        disconnects: list[str] = []
        stream = backend._run("req-1")

        async def events() -> AsyncIterator[bytes]:
            async for out in stream:
                yield sse_event(out.deltas)

        async def receive() -> dict[str, Any]:
            while len(sent) < 5:
                await asyncio.sleep(0.005)
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.body":
                sent.append(message["body"])

        async def cleanup() -> None:
            await stream.aclose()

        response = EventStream(events(), on_disconnect=lambda: disconnects.append("gone"),
                               cleanup=cleanup)
        await asyncio.wait_for(response({"type": "http"}, receive, send), 5)
        return sent, disconnects

    sent, disconnects = asyncio.run(go())
    assert 5 <= len(sent) < 20
    assert disconnects == ["gone"]
    assert backend.aborted == ["req-1"]


def test_service_errors_map_to_statuses() -> None:
    from textproc.errors import InvalidInput, TextprocError, WorkerDied
    from textproc.http.client_backend import api_error

    refused = InvalidInput("prompt is over max_model_len")
    setattr(refused, "status", 400)
    setattr(refused, "kind", "invalid_input")
    err = api_error(refused)
    assert (err.status, err.type, err.code) == (400, "invalid_request_error", "invalid_input")
    died = api_error(WorkerDied("worker 0 (pid 9) exited with code -9"))
    assert (died.status, died.type, died.code) == (503, "server_error", "service_unavailable")
    overloaded = TextprocError("the detokenizer is not accepting requests")
    setattr(overloaded, "status", 503)
    assert api_error(overloaded).status == 503
    assert api_error(TextprocError("bug")).status == 500


def test_parse_address() -> None:
    from textproc.errors import InvalidInput
    from textproc.ports import parse_address

    assert parse_address("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad in ("8000", "host:", "host:http", "h:70000"):
        with pytest.raises(InvalidInput, match="is not HOST:PORT"):
            parse_address(bad)


def test_client_backend_passes_every_parameter() -> None:
    """The TextClient adapter: API parameters -> TextClient keywords, events -> Outputs."""
    from textproc.client import TextEvent, Usage
    from textproc.http.client_backend import ClientBackend

    seen: dict[str, Any] = {}
    closed: list[str] = []

    class FakeClient:
        detok_instance = "d1"
        engine_down = None  # the engine is up

        def chat(self, messages: Any, **kwargs: Any) -> AsyncIterator[TextEvent]:
            seen.update(kwargs, messages=messages)

            async def events() -> AsyncIterator[TextEvent]:
                try:
                    yield TextEvent(kwargs["request_id"], [{"content": "a"}], None, None, None)
                    yield TextEvent(kwargs["request_id"], [], "stop", "END", Usage(3, 2))
                finally:
                    closed.append(kwargs["request_id"])

            return events()

    backend = ClientBackend("/nonexistent")
    backend.client = FakeClient()  # type: ignore[assignment]
    params = chat(tools=[WEATHER], tool_choice="required", stop=["END"], max_tokens=9,
                  min_tokens=1, temperature=0.2, top_p=0.9, seed=11, ignore_eos=True,
                  include_stop_str_in_output=True, skip_special_tokens=False,
                  chat_template_kwargs={"enable_thinking": False})

    async def go() -> list[Output]:
        return [out async for out in backend.chat(params, request_id="chatcmpl-x")]

    outs = asyncio.run(go())
    assert [(o.deltas, o.finish_reason, o.prompt_tokens, o.completion_tokens, o.stop)
            for o in outs] == [([{"content": "a"}], None, 0, 0, None), ([], "stop", 3, 2, "END")]
    assert closed == ["chatcmpl-x"]
    assert seen["messages"] == [{"role": "user", "content": "hi"}]
    assert seen["tools"][0]["function"]["name"] == "get_weather"
    sampling, output = seen["sampling"], seen["output"]
    assert (seen["tool_choice"], output.stop, sampling.max_tokens, sampling.min_tokens) == (
        "required", ["END"], 9, 1)
    assert sampling.params == {"temperature": 0.2, "top_p": 0.9, "seed": 11}
    assert output.include_stop and sampling.ignore_eos and not output.skip_special_tokens
    assert seen["chat_template_kwargs"] == {"enable_thinking": False}
    assert seen["request_id"] == "chatcmpl-x"
    assert backend.health() == (True, "")


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_while_queued_or_generating_aborts(stream: bool) -> None:
    """The client leaves before the first output (queued) or while a whole answer is being
    collected: the backend stream is cancelled at once, not when the answer is done."""
    for first_delay_s, delay_s in ((5.0, 0.0), (0.0, 0.5)):
        backend = FakeBackend([Output([{"content": "t"}])] * 20 + [
            Output([], finish_reason="stop")], delay_s=delay_s)
        backend.first_delay_s = first_delay_s
        app = build_app(backend)
        sent: list[Any] = []
        body = chat_body(stream=stream)

        async def go() -> float:
            messages = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive() -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await asyncio.sleep(0.1)
                return {"type": "http.disconnect"}

            async def send(message: Any) -> None:
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                     "http_version": "1.1", "method": "POST", "scheme": "http",
                     "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                     "root_path": "", "query_string": b"", "headers": [],
                     "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(app(scope, receive, send), 5)
            return asyncio.get_running_loop().time() - started

        elapsed = asyncio.run(go())
        assert elapsed < 1.0, (first_delay_s, delay_s)
        assert len(backend.aborted) == 1 and not backend.finished
        metrics = app.state.serving.metrics
        text = metrics.scrape(ScrapeInputs()).decode()
        assert value(text, "textproc_client_disconnects_total") == 1 and metrics.running == 0
        assert value(text, "vllm:request_success_total", finished_reason="abort") == 1


def test_api_key_required_when_set() -> None:
    backend = FakeBackend([Output([{"content": "x"}], finish_reason="stop")])

    async def go(headers: dict[str, str], path: str = "/v1/models") -> httpx.Response:
        app = build_app(backend, api_key="s3cret")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path, headers=headers)

    denied = asyncio.run(go({}))
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    assert asyncio.run(go({"Authorization": "Bearer nope"})).status_code == 401
    assert asyncio.run(go({"Authorization": "Bearer s3cret"})).status_code == 200
    assert asyncio.run(go({}, "/health")).status_code == 200


def test_worker_ties_go_round_robin() -> None:
    """Least pending first; among equals, round robin (a soak sent 26,021 of 27,402 requests
    to worker 0 when ties always went to the lowest index)."""
    from textproc.client.inflight import InFlight

    table = InFlight(3)
    picks = [table.pick_worker() for _ in range(7)]  # nothing pending: every pick is a tie
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    table.worker_pending[1].update({"a", "b"})
    table.worker_pending[2].add("c")
    assert [table.pick_worker() for _ in range(2)] == [0, 0]  # the least loaded still wins
    table.worker_pending[0].update({"d", "e"})
    assert table.pick_worker() == 2
    assert table.worker_requests == [5, 2, 3]

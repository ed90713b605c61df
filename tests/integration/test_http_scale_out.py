"""vLLM's scale-out routes against the echo stub: render gives the ids the chat / completion
routes send the engine, generate runs ids (whole, streamed, aborted), derender turns ids back
into the text the chat route would have answered; bad input is a 400 naming the field.

The echo stub answers a chat prompt with the last user message (then EOS) and a completion
prompt with itself, so every id and text here is known in advance. The same bodies against
``vllm serve --enable-scale-out`` on a real model: ``test_real_engine.py``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.service import Service, toy_http_fixtures, user

pytestmark = pytest.mark.timeout(90)

MODEL = "toy"
TEXT = "Render once, generate on ids: 你好 🦜."

echo, client = toy_http_fixtures("scale-out", "--stub-arg=--step-ms=2")


@pytest.fixture(scope="module")
def http(echo: tuple[Service, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=echo[1], timeout=30) as c:
        yield c


def _post(http: httpx.Client, path: str, body: Any) -> Any:
    resp = http.post(path, json=body)
    assert resp.status_code == 200, (path, resp.text)
    return resp.json() if resp.content else None


def _events(http: httpx.Client, body: dict[str, Any], out: list[Any] | None = None) -> list[Any]:
    """The stream's events (``out``, when given, fills as they arrive), ``[DONE]`` checked."""
    out = [] if out is None else out
    with http.stream("POST", "/inference/v1/generate", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
    assert out[-1] == "[DONE]"
    return out[:-1]


def _decode(http: httpx.Client, ids: list[int], *, skip: bool = True) -> str:
    return str(_post(http, "/detokenize", {"tokens": ids, "skip_special_tokens": skip})["prompt"])


def test_chat_render_is_the_prompt_chat_sends(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": user(TEXT), "max_tokens": 50, "temperature": 0.5,
            "seed": 7, "stop": ["zz"], "top_k": 3, "priority": -2}
    rendered = _post(http, "/v1/chat/completions/render", body)
    assert rendered["priority"] == -2
    tokenized = _post(http, "/tokenize", {"model": MODEL, "messages": user(TEXT)})
    assert rendered["token_ids"] == tokenized["tokens"]
    sp = rendered["sampling_params"]
    assert (sp["max_tokens"], sp["temperature"], sp["seed"], sp["stop"], sp["top_k"]) == (
        50, 0.5, 7, ["zz"], 3)
    assert rendered["request_id"].startswith("chatcmpl-") and rendered["model"] == MODEL
    assert rendered["output_mode"] == "tokens" and rendered["stream"] is False
    # without max_tokens: the room the context leaves, as the chat route resolves it
    room = _post(http, "/v1/chat/completions/render", {"model": MODEL, "messages": user(TEXT)})
    max_len = _post(http, "/tokenize", {"prompt": "x"})["max_model_len"]
    assert room["sampling_params"]["max_tokens"] == max_len - len(room["token_ids"])
    # greedy: vLLM drops the filters a greedy draw ignores
    greedy = _post(http, "/v1/chat/completions/render", {**body, "temperature": 0})
    assert "top_k" not in greedy["sampling_params"] and "top_p" not in greedy["sampling_params"]


def test_messages_and_responses_render_as_their_chat(http: httpx.Client) -> None:
    chat = _post(http, "/v1/chat/completions/render",
                 {"model": MODEL, "messages": [{"role": "system", "content": "be brief"},
                                               *user(TEXT)], "max_tokens": 9})
    messages = _post(http, "/v1/messages/render",
                     {"model": MODEL, "max_tokens": 9, "system": "be brief",
                      "messages": user(TEXT)})
    responses = _post(http, "/v1/responses/render",
                      {"model": MODEL, "input": TEXT, "instructions": "be brief",
                       "max_output_tokens": 9})
    assert messages["token_ids"] == chat["token_ids"] == responses["token_ids"]
    assert messages["sampling_params"]["max_tokens"] == 9
    assert responses["sampling_params"]["max_tokens"] == 9


def test_completion_render_takes_a_batch(http: httpx.Client) -> None:
    rendered = _post(http, "/v1/completions/render",
                     {"model": MODEL, "prompt": [TEXT, [5, 6, 7]], "max_tokens": 3,
                      "request_id": "batch"})
    assert [r["request_id"] for r in rendered] == ["cmpl-batch-0", "cmpl-batch-1"]
    ids = _post(http, "/tokenize", {"prompt": TEXT, "add_special_tokens": True})["tokens"]
    assert rendered[0]["token_ids"] == ids and rendered[1]["token_ids"] == [5, 6, 7]
    one = _post(http, "/v1/completions/render", {"model": MODEL, "prompt": TEXT})
    assert len(one) == 1 and one[0]["sampling_params"]["max_tokens"] == 16  # OpenAI's default


def test_rendered_chat_generates_what_chat_answers(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": user(TEXT), "max_tokens": 60}
    answer = _post(http, "/v1/chat/completions", body)
    rendered = _post(http, "/v1/chat/completions/render", body)
    whole = _post(http, "/inference/v1/generate", {**rendered, "request_id": "r1"})
    assert whole["request_id"] == "generate-tokens-r1" and whole["output_mode"] == "tokens"
    choice = whole["choices"][0]
    ids = choice["token_ids"]
    assert _decode(http, ids) == answer["choices"][0]["message"]["content"] == TEXT
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] is None
    eos = _post(http, "/tokenize", {"prompt": "<|im_end|>"})["tokens"]
    assert ids[-1:] == eos  # every generated id, EOS too (the text skips it)
    assert whole["usage"]["completion_tokens"] == len(ids)
    assert whole["usage"]["prompt_tokens"] == len(rendered["token_ids"])
    text = _post(http, "/inference/v1/generate", {**rendered, "output_mode": "text"})
    assert text["choices"][0]["text"] == TEXT and text["choices"][0]["token_ids"] == ids
    # derendered, the ids are the chat route's answer
    derendered = _post(http, "/v1/chat/completions/derender",
                       {"generate_response": whole, "prompt_tokens": len(rendered["token_ids"]),
                        "chat_request": body})
    assert derendered["choices"][0]["message"]["content"] == TEXT
    assert derendered["object"] == "chat.completion"
    assert derendered["usage"]["completion_tokens"] == len(ids)


def test_stream_equals_whole(http: httpx.Client) -> None:
    rendered = _post(http, "/v1/chat/completions/render",
                     {"model": MODEL, "messages": user(TEXT), "max_tokens": 60})
    whole = _post(http, "/inference/v1/generate", rendered)["choices"][0]
    body = {**rendered, "stream": True, "output_mode": "text", "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    chunks = _events(http, body)
    assert chunks[0]["prompt_token_ids"] == rendered["token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    steps = [c["choices"][0] for c in chunks if c["choices"]]
    assert [i for s in steps for i in s["token_ids"]] == whole["token_ids"]
    assert "".join(s["text"] for s in steps) == TEXT
    assert steps[-1]["finish_reason"] == "stop"
    assert all(s["finish_reason"] is None for s in steps[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(
        whole["token_ids"])
    # derendered chunk by chunk, carrying the state, the deltas join to the text
    state, text, roles = None, "", 0
    for step in steps:
        chunk = {"request_id": "x", "choices": [{k: step[k] for k in
                                                 ("index", "token_ids", "finish_reason")}]}
        out = _post(http, "/v1/chat/completions/derender",
                    {"stream": True, "generate_chunk": chunk, "stream_state": state})
        state = out["stream_state"]
        delta = out["chunk"]["choices"][0]["delta"]
        roles += "role" in delta
        text += delta["content"]
    assert text == TEXT and roles == 1


def test_stop_string_and_stop_id_reasons(http: httpx.Client) -> None:
    ids = _post(http, "/tokenize", {"prompt": TEXT})["tokens"]
    # a completion prompt: the echo stub says it back
    body = {"token_ids": ids, "output_mode": "text",
            "sampling_params": {"max_tokens": 100, "stop": ["ids"]}}
    choice = _post(http, "/inference/v1/generate", body)["choices"][0]
    assert choice["text"] == TEXT[:TEXT.index("ids")] and choice["stop_reason"] == "ids"
    assert _decode(http, choice["token_ids"]).startswith(TEXT[:TEXT.index("ids") + 3])
    derendered = _post(http, "/v1/completions/derender",
                       {"generate_responses": [{"request_id": "s", "choices": [choice]}],
                        "completion_request": {"stop": ["ids"]}})
    assert derendered["choices"][0]["text"] == choice["text"]
    by_id = _post(http, "/inference/v1/generate",
                  {"token_ids": ids, "sampling_params": {"max_tokens": 100,
                                                         "stop_token_ids": [ids[3]]}})
    choice = by_id["choices"][0]
    assert choice["token_ids"] == ids[:4] and choice["stop_reason"] == ids[3]
    length = _post(http, "/inference/v1/generate",
                   {"token_ids": ids, "sampling_params": {"max_tokens": 2}})["choices"][0]
    assert length["token_ids"] == ids[:2] and length["finish_reason"] == "length"


def test_abort_ends_a_stream_by_its_id(http: httpx.Client) -> None:
    ids = _post(http, "/tokenize", {"prompt": TEXT})["tokens"]
    body = {"request_id": "long", "token_ids": ids, "stream": True,
            "sampling_params": {"max_tokens": 3000, "ignore_eos": True}}
    chunks: list[Any] = []
    done = threading.Event()

    def read() -> None:
        try:
            _events(http, body, chunks)
        finally:
            done.set()

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 20
    while not chunks and not done.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    resp = http.post("/inference/v1/abort_requests",
                     json={"request_ids": ["generate-tokens-long", "generate-tokens-unknown"]})
    assert resp.status_code == 200 and resp.content == b""
    assert done.wait(20)
    reader.join()
    assert chunks[-1] == "[DONE]"
    chunks.pop()
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "abort" and last["token_ids"] == []
    generated = sum(len(c["choices"][0]["token_ids"]) for c in chunks)
    assert 0 < generated < 3000


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/inference/v1/generate", {"token_ids": [], "sampling_params": {}}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1]}, "sampling_params"),
    ("/inference/v1/generate", {"token_ids": [-1], "sampling_params": {}}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [10**6], "sampling_params": {}}, "token_ids"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"top_p": "x"}},
     "sampling_params.top_p"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"max_tokens": 0}},
     "sampling_params.max_tokens"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"bad_words": ["a"]}},
     "sampling_params.bad_words"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"logprobs": 1},
                                "output_mode": "text"}, "sampling_params.logprobs"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"logprobs": 21}},
     "sampling_params.logprobs"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {},
                                "output_mode": "json"}, "output_mode"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {},
                                "features": {"mm_hashes": {}}}, "features"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {
        "structured_outputs": {"grammar": "x"}}}, "sampling_params.structured_outputs.grammar"),
    ("/inference/v1/abort_requests", {}, "request_ids"),
    ("/inference/v1/abort_requests", {"request_ids": [1]}, "request_ids"),
    ("/v1/chat/completions/render", {"model": MODEL}, "messages"),
    ("/v1/responses/render", {"model": MODEL, "input": "hi", "previous_response_id": "r"},
     "previous_response_id"),
    ("/v1/completions/derender", {"generate_responses": [], "prompt_tokens": [1]},
     "prompt_tokens"),
    ("/v1/chat/completions/derender", {"stream": True}, "generate_chunk"),
    ("/v1/chat/completions/render", {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]},
     "messages[0].content[0]"),
])
def test_bad_input_is_a_400_naming_the_field(http: httpx.Client, path: str,
                                             body: dict[str, Any], param: str) -> None:
    resp = http.post(path, json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and error["message"], error


def test_unknown_model_is_a_404(http: httpx.Client) -> None:
    resp = http.post("/inference/v1/generate",
                     json={"model": "nope", "token_ids": [1], "sampling_params": {}})
    assert resp.status_code == 404 and resp.json()["error"]["param"] == "model"


def test_n_choices_and_the_request_id_header(http: httpx.Client) -> None:
    ids = _post(http, "/tokenize", {"prompt": TEXT})["tokens"]
    body = {"token_ids": ids, "sampling_params": {"n": 2, "max_tokens": 5}}
    resp = http.post("/inference/v1/generate", json=body, headers={"X-Request-Id": "hdr"})
    whole = resp.json()
    assert resp.status_code == 200 and whole["request_id"] == "generate-tokens-hdr"
    assert sorted(c["index"] for c in whole["choices"]) == [0, 1]
    assert all(c["token_ids"] == ids[:5] for c in whole["choices"])
    assert whole["usage"]["completion_tokens"] == 10
    chunks = _events(http, {**body, "stream": True,
                            "stream_options": {"include_usage": True,
                                               "continuous_usage_stats": True}})
    by_choice: dict[int, list[int]] = {0: [], 1: []}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        by_choice[choice["index"]] += choice["token_ids"]
        assert chunk["usage"]["completion_tokens"] == len(by_choice[choice["index"]])
    assert by_choice == {0: ids[:5], 1: ids[:5]}
    assert chunks[-1]["usage"]["completion_tokens"] == 10


def test_logprobs_come_one_per_generated_id(http: httpx.Client) -> None:
    ids = _post(http, "/tokenize", {"prompt": TEXT})["tokens"]
    eos = _post(http, "/tokenize", {"prompt": "<|im_end|>"})["tokens"]
    rendered = _post(http, "/v1/chat/completions/render",
                     {"model": MODEL, "messages": user(TEXT), "max_tokens": 60})
    body = {**rendered, "sampling_params": {**rendered["sampling_params"], "logprobs": 2}}
    choice = _post(http, "/inference/v1/generate", body)["choices"][0]
    content = choice["logprobs"]["content"]
    # one entry per id, EOS included (the chat route's logprobs follow the text and skip it)
    assert [e["token_id"] for e in content] == choice["token_ids"] == ids + eos
    for entry in content:
        assert entry["logprob"] <= 0 and 1 <= len(entry["top_logprobs"]) <= 2
        # the echo stub's most likely alternative is the sampled id itself: rank 1, listed first
        assert entry["rank"] == 1 and entry["top_logprobs"][0] == {
            "token_id": entry["token_id"], "logprob": entry["logprob"], "rank": 1}
    streamed = [e for chunk in _events(http, {**body, "stream": True})
                for c in chunk["choices"] for e in (c["logprobs"] or {"content": []})["content"]]
    assert streamed == content


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("body", [
    {"messages": user("<think>the user wants a word</think>Paris")},
    {"messages": user('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                      "</tool_call>"), "tools": TOOLS},
    {"messages": user("one, two, three"), "stop": [", three"]},
], ids=["reasoning", "tool-call", "stop"])
def test_derender_with_the_chat_request_answers_as_the_chat_route(
        http: httpx.Client, body: dict[str, Any]) -> None:
    body = {"model": MODEL, "max_tokens": 80, **body}
    answer = _post(http, "/v1/chat/completions", body)["choices"][0]
    rendered = _post(http, "/v1/chat/completions/render", body)
    generated = _post(http, "/inference/v1/generate", rendered)
    derendered = _post(http, "/v1/chat/completions/derender",
                       {"generate_response": generated, "chat_request": body,
                        "prompt_tokens": len(rendered["token_ids"])})["choices"][0]

    def same(message: dict[str, Any]) -> dict[str, Any]:
        calls = [{**c, "id": None} for c in message.get("tool_calls") or []]
        return {"content": message.get("content"), "calls": calls,
                "reasoning": message.get("reasoning_content")}

    assert same(derendered["message"]) == same(answer["message"])
    assert derendered["finish_reason"] == answer["finish_reason"]


@pytest.mark.parametrize("body", [
    {"messages": user("<think>the user wants a word</think>Paris")},
    {"messages": user('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                      "</tool_call>"), "tools": TOOLS},
    {"messages": user("one, two, three"), "stop": [", three"]},
], ids=["reasoning", "tool-call", "stop"])
def test_streamed_derender_with_the_chat_request_streams_as_the_chat_route(
        http: httpx.Client, body: dict[str, Any]) -> None:
    body = {"model": MODEL, "max_tokens": 80, **body}
    answer = _post(http, "/v1/chat/completions", body)["choices"][0]["message"]
    rendered = _post(http, "/v1/chat/completions/render", body)
    state: Any = None
    content, reasoning, calls, finish = "", "", [], None
    for chunk in _events(http, {**rendered, "stream": True}):
        out = _post(http, "/v1/chat/completions/derender",
                    {"stream": True, "generate_chunk": chunk, "stream_state": state,
                     "chat_request": body})
        state = out["stream_state"]
        for choice in out["chunk"]["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            calls += delta.get("tool_calls") or []
            finish = choice["finish_reason"] or finish
    assert content == (answer["content"] or "")
    assert reasoning == (answer.get("reasoning_content") or "")
    merged: dict[int, dict[str, str]] = {}  # streamed call parts by index, as a client joins them
    for part in calls:
        call = merged.setdefault(part["index"], {"name": "", "arguments": ""})
        call["name"] = call["name"] or part["function"].get("name") or ""
        call["arguments"] += part["function"].get("arguments") or ""
    assert [merged[i] for i in sorted(merged)] == [
        c["function"] for c in answer.get("tool_calls") or []]
    assert finish in ("stop", "tool_calls")

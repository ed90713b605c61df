"""n > 1 end to end through the official ``openai`` client: one prompt (rendered and encoded
once by a worker), n engine requests ``<id>-<i>``, outputs routed to ``choices[i]`` each with its
own stops, parser and finish reason; usage counts the prompt once; a disconnect aborts all n.

Echo mode answers every choice alike (so routing and per-choice parsing are checked against
one known answer); random mode shows the choices are really different requests.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Callable

import httpx
import jsonschema
import openai
import pytest

from tests.helpers.service import Service, serve_toy_http as _serve, toy_http_fixtures, user

pytestmark = pytest.mark.timeout(90)

MODEL = "toy"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


echo, client = toy_http_fixtures("choices", "--stub-arg=--step-ms=2")


def test_chat_n3_whole(echo: tuple[Service, str], client: openai.OpenAI) -> None:
    text = "Three of the same, please: 你好 😀"
    one = client.chat.completions.create(model=MODEL, messages=user(text))  # type: ignore[arg-type]
    resp = client.chat.completions.create(model=MODEL, messages=user(text), n=3, seed=5)  # type: ignore[arg-type]
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert all(c.message.content == text and c.finish_reason == "stop" for c in resp.choices)
    assert resp.usage is not None and one.usage is not None
    assert resp.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt once
    assert resp.usage.completion_tokens == 3 * one.usage.completion_tokens
    # the engine saw three requests <id>-0..2 (the stub writes its stats now and then)
    entries = _stub_entries(echo[0], resp.id, 3, lambda e: e.get("finish_reason") == "stop")
    assert all(entries.values()), entries


def test_chat_n3_streamed_carries_the_index(client: openai.OpenAI) -> None:
    text = "Streaming three choices at once, one token at a time."
    chunks = list(client.chat.completions.create(model=MODEL, messages=user(text), n=3,  # type: ignore[arg-type]
                                                 stream=True,
                                                 stream_options={"include_usage": True}))
    texts: dict[int, str] = defaultdict(str)
    reasons: dict[int, list[str]] = defaultdict(list)
    roles: dict[int, str] = {}
    for chunk in chunks[:-1]:
        assert len(chunk.choices) == 1 and chunk.usage is None
        choice = chunk.choices[0]
        texts[choice.index] += choice.delta.content or ""
        if choice.delta.role:
            roles[choice.index] = choice.delta.role
        if choice.finish_reason:
            reasons[choice.index].append(choice.finish_reason)
    assert dict(texts) == {0: text, 1: text, 2: text}
    assert roles == {0: "assistant", 1: "assistant", 2: "assistant"}
    assert dict(reasons) == {0: ["stop"], 1: ["stop"], 2: ["stop"]}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    whole = client.chat.completions.create(model=MODEL, messages=user(text))  # type: ignore[arg-type]
    assert whole.usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == 3 * whole.usage.completion_tokens


def test_each_choice_has_its_own_parser_and_stops(client: openai.OpenAI) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}
    text = f"Checking.<tool_call>\n{json.dumps(call)}\n</tool_call>"
    resp = client.chat.completions.create(model=MODEL, messages=user(text), n=2,  # type: ignore[arg-type]
                                          tools=[WEATHER])  # type: ignore[list-item]
    for choice in resp.choices:
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert len(calls) == 1 and json.loads(calls[0].function.arguments) == call["arguments"]  # type: ignore[union-attr]
    assert resp.choices[0].message.tool_calls[0].id != resp.choices[1].message.tool_calls[0].id  # type: ignore[index]
    stopped = client.chat.completions.create(model=MODEL, messages=user("alpha beta gamma"),  # type: ignore[arg-type]
                                             n=2, stop=["gamma"])
    assert [c.message.content for c in stopped.choices] == ["alpha beta "] * 2
    assert [c.finish_reason for c in stopped.choices] == ["stop", "stop"]


def test_completions_n3(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt="Once upon a time", n=3, max_tokens=50,
                                     echo=True)
    assert [(c.index, c.text) for c in resp.choices] == [
        (i, "Once upon a timeOnce upon a time") for i in range(3)]
    short = client.completions.create(model=MODEL, prompt="one two three", n=2, max_tokens=2)
    assert [c.finish_reason for c in short.choices] == ["length", "length"]
    assert short.usage is not None and short.usage.completion_tokens == 4
    texts: dict[int, str] = defaultdict(str)
    for chunk in client.completions.create(model=MODEL, prompt="one two three four", n=3,
                                           stream=True, stop=[" three"], max_tokens=50):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert dict(texts) == {0: "one two", 1: "one two", 2: "one two"}


def test_n_limits(echo: tuple[Service, str]) -> None:
    url = echo[1]
    for n, message in ((17, "limit of 16"), (0, "out of range")):
        reply = httpx.post(url + "/v1/chat/completions", timeout=10,
                           json={"model": MODEL, "messages": user("x"), "n": n})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "n"
        assert message in reply.json()["error"]["message"]


def test_disconnect_aborts_all_n(echo: tuple[Service, str]) -> None:
    service, url = echo
    body = {"model": MODEL, "messages": user("word " * 2000), "stream": True, "n": 3}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
        received = b""
        for data in resp.iter_raw():
            received += data
            if received.count(b"\n\n") >= 8:
                break
    request_id = json.loads(received.split(b"\n\n")[0][6:])["id"]
    entries = _stub_entries(service, request_id, 3, lambda e: e.get("finish_reason") == "abort")
    assert all(e and e.get("finish_reason") == "abort" and e["generated"] < 1500
               for e in entries.values()), entries


def _stub_entries(service: Service, request_id: str, n: int,
                  ok: Callable[[dict[str, Any]], bool]) -> dict[int, Any]:
    """The stub's stats entries of ``<request_id>-<i>``, once ``ok`` holds for all (10 s)."""
    deadline = time.monotonic() + 10
    entries: dict[int, Any] = {}
    while time.monotonic() < deadline:
        try:
            stats = service.stub_stats()["requests"]
        except (OSError, ValueError, KeyError):
            stats = {}
        entries = {i: stats.get(f"{request_id}-{i}") for i in range(n)}
        if all(e and ok(e) for e in entries.values()):
            break
        time.sleep(0.1)
    return entries


def test_random_choices_differ(tmp_path_factory: pytest.TempPathFactory) -> None:
    service, url = _serve(tmp_path_factory.mktemp("choices-random"), "--stub-mode", "random")
    try:
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           timeout=30) as client:
            resp = client.chat.completions.create(model=MODEL, messages=user("x"), n=3,  # type: ignore[arg-type]
                                                  max_tokens=20, seed=1)
            texts = [c.message.content for c in resp.choices]
            assert len(set(texts)) == 3, texts
            # a constraint compiled once serves every choice (its table travels once)
            schema = {"type": "object", "properties": {"n": {"type": "integer"}},
                      "required": ["n"], "additionalProperties": False}
            constrained = client.chat.completions.create(
                model=MODEL, messages=user("x"), n=3, max_tokens=40,  # type: ignore[arg-type]
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "n", "schema": schema}})
            for choice in constrained.choices:
                assert choice.finish_reason == "stop", choice
                jsonschema.validate(json.loads(choice.message.content or ""), schema)
    finally:
        service.stop()

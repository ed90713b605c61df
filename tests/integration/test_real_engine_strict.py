"""Strict tool calls end to end on a real engine: vLLM's engine core (``--engine vllm``) on a
copy of the seeded tiny Qwen3 model whose weights open a hermes call as the answer
(``tests/helpers/call_model.py``: ``<tool_call>`` is the first token with probability 0.99 at
temperature 1, then the copy samples ~uniformly among the ids its mask allows, and the turn ends
at 0.2 per step once the call is done).

The random source model almost never writes ``<tool_call>``, so a strict check on it sees no
call. On this copy, with a strict tool and ``tool_choice: "auto"``, eight seeded answers carry a
call (each with probability 0.99: fewer than six of eight is ~5e-5) and every call names the
tool with arguments that validate; the same tool without ``strict`` gives the copy's own calls,
the marker and a few random tokens, never a valid call: the constraint does the work.
``tool_choice`` ``"required"`` and a named tool give one valid call each; streamed answers give
the one-shot answers' calls; the engine counts no sampled id outside its mask and vLLM's
scheduler logs no token rejected by the grammar. One engine start (15-80 s), ~2 min in all.
Skips, naming the setup command, where the engine environment is not installed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import pytest

from tests.helpers.call_model import CALL, CALL_FIRST, write_calling_copy
from tests.helpers.real_engine import TINY_MODEL, engine_stats, missing, serve_vllm_textproc
from tests.helpers.service import Service
from tests.helpers.turn_model import END_PER_STEP

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

MODEL = TINY_MODEL.name  # the copy's directory has the same name: served as "qwen3-tiny"
# a call is 50-70 tokens (the city's 12 characters in random tokens, up to 4 per character);
# after it the end comes at 0.2 per step: 130 more tokens, 0.8 ** 130 ~ 3e-13
MAX_TOKENS = 200
FORECAST = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "unit"], "additionalProperties": False}
NAME = "get_forecast"
SEEDS = range(8)
MESSAGES = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]


def _tool(*, strict: bool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": NAME, "description": "Weather forecast", "parameters": FORECAST}
    return {"type": "function", "function": {**function, "strict": True} if strict else function}


def _body(seed: int, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": MESSAGES, "temperature": 1.0, "seed": seed,
            "max_tokens": MAX_TOKENS, "tools": [_tool(strict=True)], **fields}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    model = write_calling_copy(TINY_MODEL, tmp_path_factory.mktemp("models") / MODEL,
                               max_new_tokens=MAX_TOKENS)
    service, url = serve_vllm_textproc(tmp_path_factory.mktemp("strict-vllm"), model=model)
    try:
        yield service, url
    finally:
        service.stop(timeout_s=60)


def _chat(url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["choices"][0])


def _chats(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: _chat(url, body), bodies))


def _stream(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """A streamed answer merged: its content, its calls (name and arguments joined by index)
    and its finish reason."""
    content, reason = "", None
    calls: dict[int, dict[str, str]] = {}  # index -> name and arguments joined
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True},
                      timeout=300) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for choice in chunk["choices"]:
                content += choice["delta"].get("content") or ""
                reason = choice.get("finish_reason") or reason
                for call in choice["delta"].get("tool_calls") or []:
                    merged = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                    for key in ("name", "arguments"):
                        merged[key] += (call.get("function") or {}).get(key) or ""
    return {"content": content, "calls": [calls[i] for i in sorted(calls)], "finish_reason": reason}


def _calls(choice: dict[str, Any]) -> list[dict[str, str]]:
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in choice["message"].get("tool_calls") or []]


def _is_valid(call: dict[str, str]) -> bool:
    try:
        arguments = json.loads(call["arguments"])
    except json.JSONDecodeError:
        return False
    return call["name"] == NAME and jsonschema.Draft202012Validator(FORECAST).is_valid(arguments)


def _check_valid(call: dict[str, str], where: Any) -> None:
    assert call["name"] == NAME, (where, call)
    jsonschema.validate(json.loads(call["arguments"]), FORECAST)


@pytest.fixture(scope="module")
def strict_answers(served: tuple[Service, str]) -> dict[int, dict[str, Any]]:
    """The one-shot answers of the strict tool with ``tool_choice: "auto"``, by seed (sent at
    once: the first compiles the strict pattern, the others wait for it)."""
    _, url = served
    return dict(zip(SEEDS, _chats(url, [_body(seed, tool_choice="auto") for seed in SEEDS])))


def test_strict_auto_answers_carry_valid_calls(strict_answers: dict[int, dict[str, Any]]) -> None:
    """Each answer opens a call with probability 0.99 and the mask makes the call complete and
    valid before the end may come: at least 6 of 8 carry one (fewer: ~5e-5), and every call is
    the tool's with arguments that validate; no call markup is left in the content (what follows
    a call is free text: a few random tokens, then the end)."""
    with_calls = 0
    for seed, choice in strict_answers.items():
        message = choice["message"]
        assert CALL not in (message.get("content") or ""), (seed, choice)
        calls = _calls(choice)
        for call in calls:
            _check_valid(call, (seed, choice))
        if calls:
            with_calls += 1
            assert choice["finish_reason"] == "tool_calls", (seed, choice)
    assert with_calls >= 6, strict_answers


def test_without_strict_the_copys_calls_are_not_valid(served: tuple[Service, str]) -> None:
    """The same tool without ``strict``: nothing is enforced, so after the marker the copy
    writes a few random tokens and ends (0.2 per step): the call is malformed and stays
    content, and no answer carries a valid call. The first token's logprob is the weights'
    0.99, the end's after the marker 0.2."""
    _, url = served
    bodies = [_body(seed, tools=[_tool(strict=False)], logprobs=True, top_logprobs=1) for seed in SEEDS]
    choices = _chats(url, bodies)
    opened = [c for c in choices if (c["message"].get("content") or "").startswith(CALL) or _calls(c)]
    assert len(opened) >= 6, choices
    assert not [c for c in choices if any(_is_valid(call) for call in _calls(c))], choices
    for choice in opened:
        # (the end has no entry: an answer that ends right after the marker has one)
        first, *rest = choice["logprobs"]["content"]
        assert first["token"] == CALL, choice
        assert math.isclose(first["logprob"], math.log(CALL_FIRST), abs_tol=0.01), first
        for entry in rest[:1]:  # after the marker (it shows text) the end is the likeliest
            best = entry["top_logprobs"][0]
            assert best["token"] == "<|im_end|>", choice
            assert math.isclose(best["logprob"], math.log(END_PER_STEP), abs_tol=0.01), entry


def test_required_and_named_tool_choice_give_a_valid_call(served: tuple[Service, str]) -> None:
    """A forced call (one: ``parallel_tool_calls`` false, so the end follows it) from every
    answer, valid, with nothing else in the content."""
    _, url = served
    named = {"type": "function", "function": {"name": NAME}}
    bodies = [_body(seed, tools=[_tool(strict=False)], tool_choice=choice, parallel_tool_calls=False)
              for choice in ("required", named) for seed in SEEDS[:4]]
    for body, choice in zip(bodies, _chats(url, bodies)):
        where = (body["tool_choice"], body["seed"], choice)
        calls = _calls(choice)
        assert len(calls) == 1 and choice["finish_reason"] == "tool_calls", where
        _check_valid(calls[0], where)
        assert not (choice["message"].get("content") or "").strip(), where


def test_streamed_strict_answers_give_the_one_shot_calls(
        served: tuple[Service, str], strict_answers: dict[int, dict[str, Any]]) -> None:
    """The same seeds streamed: the calls joined from the deltas are the one-shot answers'
    (same sampling, same mask), and they validate."""
    _, url = served
    seeds = SEEDS[:4]
    with ThreadPoolExecutor(len(seeds)) as pool:
        streamed = list(pool.map(lambda seed: _stream(url, _body(seed, tool_choice="auto")), seeds))
    for seed, answer in zip(seeds, streamed):
        one_shot = strict_answers[seed]
        assert answer["calls"] == _calls(one_shot), (seed, answer, one_shot)
        assert answer["content"] == (one_shot["message"].get("content") or ""), (seed, answer, one_shot)
        assert answer["finish_reason"] == one_shot["finish_reason"], (seed, answer, one_shot)
        for call in answer["calls"]:
            _check_valid(call, (seed, answer))


def test_engine_sampled_no_token_outside_its_mask(served: tuple[Service, str]) -> None:
    """After every constrained answer above: the engine counted no sampled id its mask forbids,
    and vLLM's scheduler logged no token its grammar rejected (runs last: the module's tests
    run in file order)."""
    service, _ = served
    since = time.time()
    deadline = time.monotonic() + 30
    stats = engine_stats(service)
    while stats["written_at"] <= since or stats["scheduler"]["requests"] != 0:
        assert time.monotonic() < deadline, f"engine stats not idle and fresh: {stats['scheduler']}"
        time.sleep(0.1)
        stats = engine_stats(service)
    assert stats["bitmask_fill_us"]["samples"] > 0, stats  # masks were applied: the count means something
    assert stats["mask_violations"] == 0, stats["mask_violations_last"]
    assert "grammar rejected" not in service.log_path.read_text(errors="replace")

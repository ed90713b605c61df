"""Constraints through the service: workers compile, the index reaches the engine once, and
engine_stub in random mode (uniform among the allowed ids) returns only valid outputs.

The toy vocabulary (600 byte-level tokens) keeps compiles fast; the OpenAI-client end-to-end
run is in tests/integration/test_http_constraints.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

from tests.helpers.service import Service, run
from textproc.client import TextClient
from textproc.core.parsing import merge_deltas
from textproc.errors import InvalidInput, WorkerDied

pytestmark = pytest.mark.timeout(240)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "unit": {"enum": ["celsius", "fahrenheit"]},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 14}},
           "required": ["city", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"]}}}]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, toy_model: Path) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("csvc"), toy_model, workers=2,
                  args=["--max-model-len", "4096", "--stub-mode", "random"])
    svc.start()
    yield svc
    svc.stop()


async def _collect(client: TextClient, **kwargs: Any) -> tuple[dict[str, Any], str | None]:
    deltas: list[dict[str, Any]] = []
    reason = None
    async for event in client.chat([{"role": "user", "content": "go"}], **kwargs):
        deltas.extend(event.deltas)
        reason = event.finish_reason or reason
    return merge_deltas(deltas), reason


def test_random_engine_outputs_follow_every_constraint(service: Service) -> None:
    stats = _check_mix(service, 60)
    # 7 distinct constraints (3 schemas, regex, choice, required, named): one EngineIndex each
    assert stats["detokenizer"]["indexes_sent_to_engine"] == 7


@pytest.fixture(scope="module")
def progressive(tmp_path_factory: pytest.TempPathFactory, toy_model: Path) -> Iterator[Service]:
    """``--first-index-ms 0``: every compile sends the request with a partial index (its first
    state only), the whole index after it."""
    svc = Service(tmp_path_factory.mktemp("progressive"), toy_model, workers=1,
                  args=["--max-model-len", "4096", "--stub-mode", "random", "--first-index-ms", "0"])
    svc.start()
    yield svc
    svc.stop()


def test_an_engine_that_outruns_a_progressive_compile_is_held(progressive: Service) -> None:
    """Every request starts on a partial index, so the stub reaches unbuilt states at once and
    holds until the whole index follows; every output still follows its constraint. ~10 s (a
    second service; runs on it first: it counts the indexes sent)."""
    stats = _check_mix(progressive, 20)
    assert stats["detokenizer"]["indexes_sent_to_engine"] == 7
    assert stats["detokenizer"]["indexes_completed_on_engine"] >= 5  # the tiny choice may fit whole


# 20 required strings of up to 30 characters: ~2 s of CPU for the whole index on the toy
# vocabulary (under the 20,000-state budget), its first state at once
HEAVY = {"type": "object", "properties": {f"k{i}": {"type": "string", "maxLength": 30} for i in range(20)},
         "required": [f"k{i}" for i in range(20)]}


def test_a_worker_killed_while_compiling_the_whole_index_fails_its_requests(progressive: Service) -> None:
    """kill -9 the worker once the request's first tokens came (the partial index reached the
    engine, which then holds the request; the worker is still compiling the whole one): the
    detokenizer fails the request naming the worker when the supervisor says it died, long
    before the hold deadline (the 60 s compile budget plus slack); the restarted worker serves
    the next requests. ~3 s."""
    worker_pid = progressive.all_pids()["worker-0"]

    async def held(client: TextClient) -> None:
        killed = False
        async for _ in client.chat([{"role": "user", "content": "go"}], max_tokens=400,
                                   structured={"json": HEAVY}):
            if not killed:  # the first tokens: the worker is compiling the whole index now
                os.kill(worker_pid, signal.SIGKILL)
                killed = True

    async def main() -> tuple[str, list[tuple[dict[str, Any], str | None]]]:
        async with await TextClient.connect(progressive.runtime_dir) as client:
            with pytest.raises(WorkerDied) as died:
                await asyncio.wait_for(held(client), 30)  # not the hold deadline: 62 s
            later = await asyncio.gather(*(_collect(client, max_tokens=400, structured={"json": WEATHER})
                                           for _ in range(3)))
        return str(died.value), later

    error, later = run(main)
    assert f"worker 0 (pid {worker_pid}) compiling it exited with code -9" in error, error
    for message, reason in later:
        jsonschema.validate(json.loads(message["content"]), WEATHER)
        assert reason == "stop", (message, reason)


def _check_mix(service: Service, n: int) -> dict[str, dict[str, Any]]:
    """``n`` requests over 7 constraints, each output checked; the service's stats after."""
    schemas = [WEATHER, {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
               {"type": "object"}]

    async def main() -> tuple[list[tuple[str, dict[str, Any], str | None]], dict[str, dict[str, Any]]]:
        async with await TextClient.connect(service.runtime_dir) as client:
            jobs = []
            for i in range(n):
                kind = ("json", "regex", "choice", "required", "named")[i % 5]
                if kind == "json":
                    kwargs: dict[str, Any] = {"structured": {"json": schemas[i % 3]}}
                elif kind == "regex":
                    kwargs = {"structured": {"regex": r"[a-z]{1,5}-[0-9]{2}"}}
                elif kind == "choice":
                    kwargs = {"structured": {"choice": ["yes", "no", "maybe so"]}}
                elif kind == "required":
                    kwargs = {"tools": TOOLS, "tool_choice": "required"}
                else:
                    kwargs = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add"}}}
                jobs.append((kind, i, kwargs))
            results = await asyncio.gather(*(_collect(client, max_tokens=400, **kw) for _, _, kw in jobs))
            stats = {s.role: s.counters for s in await client.stats()}
            return [(kind, *res) for (kind, _, _), res in zip(jobs, results)], stats

    outputs, stats = run(main)
    for kind, message, reason in outputs:
        content = message.get("content") or ""
        if kind == "json":
            json.loads(content)
        elif kind == "regex":
            assert re.fullmatch(r"[a-z]{1,5}-[0-9]{2}", content), content
        elif kind == "choice":
            assert content in ("yes", "no", "maybe so"), content
        else:
            calls = message.get("tool_calls")
            assert calls and reason == "tool_calls", message
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                tool = next(t for t in TOOLS if t["function"]["name"] == call["function"]["name"])
                jsonschema.validate(args, tool["function"]["parameters"])
                if kind == "named":
                    assert call["function"]["name"] == "add"
    deadline = time.monotonic() + 5  # the stats file is rewritten every 0.5 s
    while service.stub_stats()["constrained_requests"] < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert service.stub_stats()["constrained_requests"] == n
    return stats


def test_constraint_errors_are_invalid_input(service: Service) -> None:
    async def main() -> list[str]:
        errors = []
        async with await TextClient.connect(service.runtime_dir) as client:
            for structured in ({"regex": "a(?=b)"}, {"json": {"type": "object", "properties": {"x": {"not": {}}}}},
                               {"yaml": "x"}):
                try:
                    await _collect(client, structured=structured)
                except InvalidInput as e:
                    errors.append(str(e))
        return errors

    errors = run(main)
    assert len(errors) == 3
    assert "a lookahead '(?=b' at position 1" in errors[0]
    assert "keyword 'not' at $.properties.x" in errors[1]
    assert "must be one of" in errors[2]


def test_format_markers_that_are_special_tokens_can_be_forced(toy_model: Path) -> None:
    """A tool-call format spelled in special tokens (Mistral's [TOOL_CALLS], Llama's
    <|python_tag|>): the worker's vocabulary lets a constraint write those markers, and only
    those (here the toy's special <|im_start|> stands in for one)."""
    from textproc import TokenVocabulary, Tokenizer, compile_constraint

    tok = Tokenizer.from_dir(toy_model)
    marker = tok.added_tokens["<|im_start|>"]
    plain = compile_constraint(TokenVocabulary.from_tokenizer(tok), regex=r"<\|im_start\|>x", cache=None)
    assert marker not in plain.allowed_ids(0)  # only spelled with ordinary tokens
    vocab = TokenVocabulary.from_tokenizer(tok, text_specials=["<|im_start|>"])
    index = compile_constraint(vocab, regex=r"<\|im_start\|>x", cache=None)
    assert marker in index.allowed_ids(0)
    assert tok.added_tokens["<|endoftext|>"] not in index.allowed_ids(0)

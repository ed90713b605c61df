"""Strict tool calls end to end: the official openai client -> HTTP -> workers (compile the
strict pattern of the model's format) -> engine_stub -> every answer is plain text or calls that
parse and validate, never a marker left in content.

Random mode (uniform among the allowed ids) checks that free text stays free and whatever is
sampled parses; echo mode answers with the user's text as long as the constraint allows it, so a
message that opens a call with a wrong tool name or bad arguments shows the constraint taking
over right after the marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest

from tests.helpers.service import Service, build_toy_model, wait_http

pytestmark = pytest.mark.timeout(300)

MODEL = "toy"
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
       "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD, "strict": True}},
         {"type": "function", "function": {"name": "weather", "parameters": CITY, "strict": True}}]
SCHEMAS = {"add": ADD, "weather": CITY}
MODEL_DIRS: dict[str, Any] = {}  # url -> the toy model dir it serves


def _model_dir(url: str) -> Any:
    return MODEL_DIRS[url]


def _service(tmp_path_factory: pytest.TempPathFactory, mode: str) -> Iterator[str]:
    root = tmp_path_factory.mktemp(f"strict-{mode}")
    model = build_toy_model(root / MODEL)
    service = Service(root, model, workers=1, args=["--stub-mode", mode, "--http", "127.0.0.1:0",
                                                    "--max-model-len", "4096"]).start()
    try:
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
        MODEL_DIRS[url] = model
        yield url
    finally:
        service.stop()


@pytest.fixture(scope="module")
def random_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _service(tmp_path_factory, "random")


@pytest.fixture(scope="module")
def echo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _service(tmp_path_factory, "echo")


def _ask(url: str, bodies: list[dict[str, Any]]) -> list[Any]:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as client, \
            ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda body: client.chat.completions.create(**body).choices[0], bodies))


def _check(choice: Any) -> int:
    """The number of calls; every one valid, no call markup left in the content."""
    message = choice.message
    assert "<tool_call>" not in (message.content or ""), message
    for call in message.tool_calls or []:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    if message.tool_calls:
        assert choice.finish_reason == "tool_calls"
    return len(message.tool_calls or [])


def test_random_strict_auto_outputs_are_text_or_valid_calls(random_url: str) -> None:
    bodies = [{"model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}], "tools": TOOLS,
               "max_tokens": 200, "parallel_tool_calls": i % 2 == 0} for i in range(60)]
    for choice in _ask(random_url, bodies):
        _check(choice)


def test_echoed_calls_are_forced_valid_after_the_marker(echo_url: str) -> None:
    texts = ['Let me add. <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
             '<tool_call>\n{"name": "add", "arguments": {"a": "x"}}\n</tool_call> done',
             'Two: <tool_call>\n{"name": "weather", "arguments": {"city": "far too long a name"}}\n</tool_call>']
    bodies = [{"model": MODEL, "messages": [{"role": "user", "content": texts[i % 3]}], "tools": TOOLS,
               "max_tokens": 300, "seed": i} for i in range(24)]
    calls = [_check(choice) for choice in _ask(echo_url, bodies)]
    assert sum(calls) >= len(bodies) // 2, calls  # the marker was followed by a valid call
    # without strict, the same echo gives the invalid calls back (as text, or as a call whose
    # arguments do not validate): nothing was enforced
    loose = [{**body, "tools": [{"type": "function", "function": {k: v for k, v in t["function"].items()
                                                                  if k != "strict"}} for t in TOOLS]}
             for body in bodies[:3]]
    for choice in _ask(echo_url, loose):
        message = choice.message
        invalid = [c for c in message.tool_calls or []
                   if not jsonschema.Draft202012Validator(SCHEMAS[c.function.name]).is_valid(
                       json.loads(c.function.arguments))]
        assert invalid or "<tool_call>" in (message.content or ""), message


@pytest.mark.parametrize("field", ["max_reasoning_tokens", "thinking_token_budget"])
def test_reasoning_budget_closes_the_block(echo_url: str, field: str) -> None:
    """The echo reasons past the budget; the guide forces the close once it is spent."""
    from textproc.core.tokenizer import Tokenizer

    words = " ".join(f"w{i}" for i in range(25))
    tok = Tokenizer.from_dir(_model_dir(echo_url))
    for budget in (0, 5, 17):
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"<think>{words}</think>answer"}],
                "max_tokens": 200, "extra_body": {field: budget}}
        message = _ask(echo_url, [body])[0].message
        reasoning = getattr(message, "reasoning_content", None) or ""
        assert words.startswith(reasoning.strip()), reasoning
        assert len(tok.encode(reasoning)) <= budget + 1, (budget, reasoning)
    # without a budget the whole echoed reasoning comes back
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"<think>{words}</think>answer"}],
            "max_tokens": 200}
    assert (getattr(_ask(echo_url, [body])[0].message, "reasoning_content", None) or "").strip() == words


def test_request_builder_makes_strict_calls_from_a_flag_or_a_tool(tmp_path: Any) -> None:
    """``--strict-tools`` (ServiceConfig.strict_tools) enforces every tool; without it a tool's
    own ``strict: true`` does; neither: tool_choice auto stays unconstrained. gpt-oss's harmony
    format cannot be strict: a 400 naming why."""
    import msgspec

    from textproc.config import ServiceConfig
    from textproc.core.tokenizer import Tokenizer
    from textproc.errors import InvalidInput
    from textproc.protocol import ChatRequest, EngineRequest
    from textproc.service.request_builder import RequestBuilder

    model = build_toy_model(tmp_path / "toy")
    tok = Tokenizer.from_dir(model)
    plain = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]

    def constraint(builder: RequestBuilder, tools: list[dict[str, Any]]) -> str | None:
        built = builder.chat(ChatRequest("r", [{"role": "user", "content": "hi"}], tools=tools), b"c")
        return msgspec.msgpack.decode(built.submit.engine_request, type=EngineRequest).constraint

    loose = RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=4096))
    assert constraint(loose, plain) is None
    assert "<tool_call>" in (constraint(loose, TOOLS) or "")
    strict = RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=4096, strict_tools=True))
    assert "<tool_call>" in (constraint(strict, plain) or "")
    # an object that lists properties takes no other keys once its tool is strict: every tool
    # with --strict-tools, a strict: true tool without it (OpenAI's strict mode)
    opened = [{"type": "function", "function": {"name": "sub", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}}}}]
    extra = '<tool_call>\n{"name": "sub", "arguments": {"a": 1, "z": 2}}\n</tool_call>'
    assert not _matches(constraint(strict, opened), extra)
    assert not _matches(constraint(loose, [{**opened[0], "function": {**opened[0]["function"], "strict": True}}]),
                        extra)
    assert _matches(constraint(loose, [*opened, TOOLS[0]]), extra)  # sub itself is not strict
    assert _matches(constraint(strict, opened), extra.replace(', "z": 2', ""))
    harmony = RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=4096, strict_tools=True,
                                                tool_format="gpt_oss"))
    with pytest.raises(InvalidInput, match="not marked in content"):
        constraint(harmony, plain)


def _matches(pattern: str | None, text: str) -> bool:
    """Whether the constraint ``pattern`` matches all of ``text`` (textproc's own byte DFA)."""
    from textproc.core.constraints import Budget
    from textproc.core.constraints.automaton.lazy import lazy_dfa
    from textproc.core.constraints.regex.syntax import parse_regex

    assert pattern is not None
    dfa = lazy_dfa(parse_regex(pattern), Budget(max_seconds=60))
    state = dfa.walk(dfa.start, text.encode())
    return state >= 0 and bool(dfa.accepting[state])


def test_request_builder_budget_where_the_model_reasons(tmp_path: Any) -> None:
    """An optional budget (the Messages API's ``budget_tokens``) is the reasoning budget where
    the model marks its reasoning and is dropped where it does not; a chat request's budget is
    a 400 there. The budget's constraint lets the output end inside the block, as it may
    without a budget."""
    import msgspec
    import regex

    from textproc.config import ServiceConfig
    from textproc.core.tokenizer import Tokenizer
    from textproc.errors import InvalidInput
    from textproc.options import REASONING_BUDGET_OPTIONAL, SamplingOptions
    from textproc.protocol import ChatRequest, EngineRequest
    from textproc.service.request_builder import RequestBuilder

    model = build_toy_model(tmp_path / "toy")
    tok = Tokenizer.from_dir(model)

    def engine_request(builder: RequestBuilder, params: dict[str, Any], **kwargs: Any) -> EngineRequest:
        req = ChatRequest("r", [{"role": "user", "content": "hi"}], sampling=SamplingOptions(params=params),
                          **kwargs)
        return msgspec.msgpack.decode(builder.chat(req, b"c").submit.engine_request, type=EngineRequest)

    optional = {"max_reasoning_tokens": 1024, REASONING_BUDGET_OPTIONAL: True}
    reasons = RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=4096))
    for thinking in (False, True):  # the prompt leaves <think> open, or the model may open it
        sent = engine_request(reasons, optional, chat_template_kwargs={"enable_thinking": thinking})
        assert sent.sampling["max_reasoning_tokens"] == 1024 and sent.sampling["reasoning_close"]
        assert REASONING_BUDGET_OPTIONAL not in sent.sampling
        lead = "" if thinking else "<think>"
        for output in (f"{lead}unfinished", f"{lead}done</think>answer"):
            assert regex.fullmatch(sent.constraint or "(?!)", output), (thinking, output)
        assert not regex.fullmatch(sent.constraint or "", f"{lead}a</think>b<think>c")
    plain = RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=4096, reasoning_format="none"))
    sent = engine_request(plain, optional)
    assert sent.constraint is None and "max_reasoning_tokens" not in sent.sampling
    assert REASONING_BUDGET_OPTIONAL not in sent.sampling
    with pytest.raises(InvalidInput, match="needs a reasoning format"):
        engine_request(plain, {"max_reasoning_tokens": 1024})

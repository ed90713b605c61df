"""The OpenAI HTTP API end to end: a real service (stub engine, echo mode) behind the HTTP
frontend process, driven by the official ``openai`` package and, for the SSE framing and the
disconnect test, by plain ``httpx``.

Echo mode makes the fake model answer with the last user message, so the user message scripts
the model: ``<think>..</think>`` makes it reason, ``<tool_call>{...}</tool_call>`` makes it call
a tool.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import httpx
import openai
import pytest

from tests.helpers.prom import families, value
from textproc.http.metrics import CONTENT_TYPE
from tests.helpers.service import REPO, Service, build_toy_model, user, wait_http
from textproc.http.health import pid_alive

pytestmark = pytest.mark.timeout(60)

MODEL = "toy"  # the served model name is the model directory's name
STEP_MS = 2  # stub step time: fast, yet a long answer streams for a while
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}


class HttpFrontend:
    """Another ``python -m textproc.http`` on a free port for a running service."""

    def __init__(self, service: Service, *args: str) -> None:
        self.service = service
        self.args = list(args)
        n = len(list(service.root.glob("http-*.log")))
        self.log_path = service.root / f"http-{n}.log"
        self.http_file = service.root / f"http-{n}.json"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout_s: float = 30.0) -> str:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "textproc.http", "--runtime-dir",
             str(self.service.runtime_dir), "--http", "127.0.0.1:0",
             "--http-file", str(self.http_file), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        return wait_http(self.http_file, self.proc, self.log_path, timeout_s)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            raise AssertionError(f"HTTP frontend ignored SIGTERM:\n{self.log_path.read_text()}")
        finally:
            self._log.close()
        # uvicorn re-raises the signal after its graceful shutdown: -SIGTERM, not a crash
        assert proc.returncode in (0, -signal.SIGTERM), self.log_path.read_text()[-3000:]
        assert not self.http_file.exists(), "the frontend left its address file behind"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """A service (1 worker, stub echo engine) and the base URL of its HTTP frontend.

    The toy Qwen-like vocabulary (ChatML template, <think>/<tool_call> tokens) loads in ~0.1 s;
    the HTTP layer does not care which vocabulary is behind it."""
    root = tmp_path_factory.mktemp("http")
    model = build_toy_model(root / MODEL)
    args = [f"--stub-arg=--step-ms={STEP_MS}", "--http", "127.0.0.1:0",
            f"--http-arg=--max-body-bytes={1 << 20}"]
    service = Service(root, model, workers=1, args=args).start()
    http_pid = 0
    try:
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
        http_pid = json.loads((service.runtime_dir / "http.json").read_text())["pid"]
        yield service, url
    finally:
        service.stop()
    assert http_pid and not pid_alive(http_pid), "the HTTP frontend outlived the service"


@pytest.fixture(scope="module")
def client(stack: tuple[Service, str]) -> Iterator[openai.OpenAI]:
    # closed at teardown: a pooled socket left for the GC is a ResourceWarning (an error here)
    with openai.OpenAI(base_url=stack[1] + "/v1", api_key="unused", max_retries=0,
                       timeout=30) as c:
        yield c


def test_models_health_metrics(stack: tuple[Service, str], client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    health = httpx.get(stack[1] + "/health", timeout=10)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    metrics = httpx.get(stack[1] + "/metrics", timeout=10)
    assert metrics.headers["content-type"] == CONTENT_TYPE  # prometheus_client's, as vLLM's
    fams = families(metrics.text)
    assert fams["textproc_stage_seconds"].type == "histogram"
    # every service process's counters, fetched through the TextClient
    events = {(s.labels["role"], s.labels["index"], s.labels["counter"])
              for s in fams["textproc_process_events"].samples}
    assert ("worker", "0", "requests") in events
    assert any(role == "detokenizer" and index == "0" for role, index, _ in events)
    cpu = {(s.labels["role"], s.labels["index"]) for s in fams["textproc_process_cpu_seconds"].samples}
    assert {("worker", "0"), ("detokenizer", "0")} <= cpu, cpu
    assert "textproc_worker_requests" in fams


def _stage_count(metrics_text: str, stage: str) -> int:
    assert f'textproc_stage_seconds_count{{stage="{stage}"}}' in metrics_text, \
        f"no {stage} histogram in /metrics"
    return int(value(metrics_text, "textproc_stage_seconds_count", stage=stage))


def test_metrics_stage_histograms_fill_from_service_timings(
        stack: tuple[Service, str], client: openai.OpenAI) -> None:
    before = httpx.get(stack[1] + "/metrics", timeout=10).text
    stages = ("template", "tokenize", "queue", "detokenize")
    counts = {stage: _stage_count(before, stage) for stage in stages}
    stream = client.chat.completions.create(model=MODEL, messages=user("one two three"),
                                            stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    after = httpx.get(stack[1] + "/metrics", timeout=10).text
    for stage in ("template", "tokenize", "queue"):
        assert _stage_count(after, stage) == counts[stage] + 1, stage
    assert _stage_count(after, "detokenize") >= counts["detokenize"] + 2


def test_chat_non_streaming_echo(stack: tuple[Service, str], client: openai.OpenAI) -> None:
    text = "Hello there, how are you? 你好 😀"
    resp = client.chat.completions.create(model=MODEL, messages=user(text), seed=7,
                                          temperature=0.0)
    assert resp.id.startswith("chatcmpl-") and resp.object == "chat.completion"
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == text
    assert choice.finish_reason == "stop"
    ids = httpx.post(stack[1] + "/tokenize", json={"prompt": text, "add_special_tokens": False},
                     timeout=10).json()["tokens"]
    assert resp.usage is not None
    # echo: the answer's tokens, plus the EOS that ended it
    assert resp.usage.completion_tokens in (len(ids), len(ids) + 1)
    rendered = httpx.post(stack[1] + "/tokenize", json={"messages": user(text)}, timeout=10).json()
    assert resp.usage.prompt_tokens == rendered["count"]
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    back = httpx.post(stack[1] + "/detokenize", json={"tokens": ids}, timeout=10).json()
    assert back == {"prompt": text}


def test_chat_streaming_with_usage(client: openai.OpenAI) -> None:
    text = "Streaming works one token at a time: naïve café, 東京."
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=user(text), stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    body = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in body) == text
    assert len(body) > 5  # really streamed, not one blob
    assert [c.choices[0].finish_reason for c in body][-1] == "stop"
    assert all(c.choices[0].finish_reason is None for c in body[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens >= 10 and last.usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_max_tokens_gives_length(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=user("a b c d e f g h i j"),
                                          max_completion_tokens=3)
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None and resp.usage.completion_tokens == 3
    resp = client.chat.completions.create(model=MODEL, messages=user("a b c d e f g h i j"),
                                          max_tokens=4)
    assert resp.usage is not None and resp.usage.completion_tokens == 4


def test_stop_strings(client: openai.OpenAI) -> None:
    text = "alpha beta gamma delta epsilon"
    one = client.chat.completions.create(model=MODEL, messages=user(text), stop="gamma")
    assert one.choices[0].message.content == "alpha beta "
    assert one.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model=MODEL, messages=user(text),
                                                 stop=["zeta", "delta"], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        "alpha beta gamma "
    assert one.usage is not None
    full = client.chat.completions.create(model=MODEL, messages=user(text))
    assert full.usage is not None
    assert one.usage.completion_tokens < full.usage.completion_tokens


def test_tool_call_streamed_arguments(client: openai.OpenAI) -> None:
    call = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    text = f"Let me check.<tool_call>\n{json.dumps(call)}\n</tool_call>"
    chunks = list(client.chat.completions.create(model=MODEL, messages=user(text),
                                                 tools=[WEATHER], stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls, deltas
    first = calls[0]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function is not None and first.function.name == "get_weather"
    args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    assert json.loads(args) == call["arguments"]
    # a call goes out once it is complete and valid (a stream cut off inside it must not have
    # sent a call the one-shot parse would not give): its header, then its arguments whole
    assert [tc.function.arguments for tc in calls if tc.function and tc.function.arguments] == [args]
    assert all(tc.function is None or tc.function.name is None for tc in calls[1:])
    content = "".join(d.content or "" for d in deltas)
    assert content.strip() == "Let me check."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

    whole = client.chat.completions.create(model=MODEL, messages=user(text), tools=[WEATHER])
    msg = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls is not None and len(msg.tool_calls) == 1
    assert msg.tool_calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(msg.tool_calls[0].function.arguments) == call["arguments"]  # type: ignore[union-attr]

    # the conversation continues with the tool's answer (assistant tool_calls + tool role)
    follow = client.chat.completions.create(model=MODEL, tools=[WEATHER], messages=[
        *user(text),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": msg.tool_calls[0].id, "type": "function",
             "function": {"name": "get_weather",
                          "arguments": msg.tool_calls[0].function.arguments}}]},  # type: ignore[union-attr]
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "18 C, sunny"},
        {"role": "user", "content": "Thanks!"},
    ])
    assert follow.choices[0].message.content == "Thanks!"


def test_tool_choice_none_leaves_text(client: openai.OpenAI) -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    resp = client.chat.completions.create(model=MODEL, messages=user(text), tools=[WEATHER],
                                          tool_choice="none")
    assert resp.choices[0].finish_reason == "stop"
    assert not resp.choices[0].message.tool_calls
    assert "get_weather" in (resp.choices[0].message.content or "")


def test_bad_and_undeclared_calls_are_content_when_not_streamed(client: openai.OpenAI) -> None:
    """A call with bad JSON, one cut off by max_tokens, one naming a tool the request
    did not declare, and a second one with parallel_tool_calls false come back as content; the
    finish reason is not tool_calls. Streamed, the finish reason says the same."""
    bad = 'x<tool_call>{"name": "get_weather", "arguments": {"city": Oslo}}</tool_call>'
    other = '<tool_call>{"name": "launch", "arguments": {}}</tool_call>'
    for text, extra, reason in ((bad, {}, "stop"), (other, {}, "stop"),
                                ('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo, Norway, Europe"}}',
                                 {"max_tokens": 12}, "length")):
        resp = client.chat.completions.create(model=MODEL, messages=user(text), tools=[WEATHER], **extra)
        assert resp.choices[0].finish_reason == reason, text
        assert not resp.choices[0].message.tool_calls
        assert (resp.choices[0].message.content or "").startswith(text[:12])
        chunks = list(client.chat.completions.create(model=MODEL, messages=user(text), tools=[WEATHER],
                                                     stream=True, **extra))
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == reason
    one = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    resp = client.chat.completions.create(model=MODEL, messages=user(one + one), tools=[WEATHER],
                                          parallel_tool_calls=False)
    assert len(resp.choices[0].message.tool_calls or []) == 1
    assert resp.choices[0].message.content == one and resp.choices[0].finish_reason == "tool_calls"


def test_reasoning_content(client: openai.OpenAI) -> None:
    text = "<think>The user wants 2+2. That is 4.</think>The answer is 4."
    resp = client.chat.completions.create(model=MODEL, messages=user(text))
    msg = resp.choices[0].message
    assert getattr(msg, "reasoning_content", None) == "The user wants 2+2. That is 4."
    assert (msg.content or "").strip() == "The answer is 4."
    chunks = list(client.chat.completions.create(model=MODEL, messages=user(text),
                                                 stream=True))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    assert reasoning == "The user wants 2+2. That is 4."
    # vLLM's newer name too
    assert getattr(msg, "reasoning", None) == "The user wants 2+2. That is 4."


def test_completions(stack: tuple[Service, str], client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=50)
    assert resp.object == "text_completion" and resp.id.startswith("cmpl-")
    assert resp.choices[0].text == "Once upon a time"
    assert resp.choices[0].finish_reason == "stop"
    short = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=2)
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 2
    chunks = list(client.completions.create(model=MODEL, prompt="one two three four",
                                            stream=True, stop=[" three"], max_tokens=50))
    assert "".join(c.choices[0].text for c in chunks) == "one two"
    ids = httpx.post(stack[1] + "/tokenize", json={"prompt": "Hello world"}, timeout=10).json()
    by_ids = client.completions.create(model=MODEL, prompt=ids["tokens"], max_tokens=50)
    assert by_ids.choices[0].text == "Hello world"
    assert by_ids.usage is not None and by_ids.usage.prompt_tokens == ids["count"]
    echoed = client.completions.create(model=MODEL, prompt="Hi", echo=True, max_tokens=50)
    assert echoed.choices[0].text == "HiHi"


def _error(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def test_errors(stack: tuple[Service, str], client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=user("x"), n=17)
    assert _error(bad.value)["param"] == "n" and "limit of 16" in _error(bad.value)["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL,
                                       messages=[{"role": "robot", "content": "x"}])  # type: ignore[misc,list-item]
    assert "allowed roles" in _error(bad.value)["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=user("x"), tools=[WEATHER],
                                       tool_choice={"type": "function",
                                                    "function": {"name": "nope"}})
    assert "nope" in _error(bad.value)["message"]
    with pytest.raises(openai.BadRequestError) as bad:  # refused by the worker: too long
        client.chat.completions.create(model=MODEL, messages=user("x"),
                                       max_tokens=10_000_000)
    assert "max_model_len" in _error(bad.value)["message"] or "max_tokens" in \
        _error(bad.value)["message"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=user("x"))
    assert _error(missing.value)["code"] == "model_not_found"
    big = httpx.post(stack[1] + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "messages": user("x" * (2 << 20))})
    assert big.status_code == 413 and "limit" in big.json()["error"]["message"]
    raw = httpx.post(stack[1] + "/v1/chat/completions", content=b"{not json", timeout=10)
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]


def test_raw_sse_framing(stack: tuple[Service, str]) -> None:
    body = {"model": MODEL, "messages": user("Raw SSE, please."), "stream": True}
    with httpx.stream("POST", stack[1] + "/v1/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(resp.iter_raw())
    assert raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    chunks = []
    for event in events[:-2]:
        assert event.startswith(b"data: {") and b"\n" not in event, event
        chunks.append(json.loads(event[len(b"data: "):]))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    for chunk in chunks:
        assert chunk["id"] == chunks[0]["id"] and chunk["id"].startswith("chatcmpl-")
        assert chunk["object"] == "chat.completion.chunk" and chunk["model"] == MODEL
        assert isinstance(chunk["created"], int) and "usage" not in chunk
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        "Raw SSE, please."
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "stop"}


def test_disconnect_aborts_in_engine(stack: tuple[Service, str]) -> None:
    """Streamed: close the connection after a few events. Non-streamed: the client times out.
    Either way the engine stops generating for the request (the stub's stats say "abort")."""
    service, url = stack
    text = "word " * 2000  # ~2000 tokens: seconds of streaming at STEP_MS per token
    body = {"model": MODEL, "messages": user(text), "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
        request_id = None
        received = b""
        for data in resp.iter_raw():
            received += data
            if received.count(b"\n\n") >= 5:
                request_id = json.loads(received.split(b"\n\n")[0][6:])["id"]
                break
    assert request_id is not None
    _assert_aborted(service, request_id)

    before = _stub_ids(service)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/chat/completions", timeout=httpx.Timeout(30, read=0.5),
                   json={"model": MODEL, "messages": user(text)})
    deadline = time.monotonic() + 10
    while not (new := _stub_ids(service) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(new) == 1, new
    _assert_aborted(service, new.pop())
    metrics = httpx.get(url + "/metrics", timeout=10).text
    assert value(metrics, "textproc_client_disconnects_total") == 2


def _assert_aborted(service: Service, request_id: str) -> None:
    deadline = time.monotonic() + 10
    entry = None
    while time.monotonic() < deadline:
        entry = _stub_entry(service, request_id)
        if entry is not None and entry.get("finish_reason") == "abort":
            break
        time.sleep(0.1)
    assert entry is not None, f"request {request_id} not in the stub's stats"
    assert entry.get("finish_reason") == "abort", entry
    assert entry["generated"] < 1500, entry


def _stub_entry(service: Service, request_id: str) -> dict[str, Any] | None:
    """The stub's stats entry of one request: {"generated": n, "finish_reason": r, ...}."""
    try:
        entry = service.stub_stats()["requests"].get(request_id)
    except (OSError, ValueError, KeyError):
        return None
    return dict(entry) if isinstance(entry, dict) else None


def test_template_kwargs_and_forced_tool_choice(stack: tuple[Service, str],
                                                client: openai.OpenAI) -> None:
    """chat_template_kwargs reach the template; required / named tool_choice reach the engine
    as a constraint (the stub counts constrained requests)."""
    service, url = stack
    plain = client.chat.completions.create(model=MODEL, messages=user("hi"))
    no_think = client.chat.completions.create(
        model=MODEL, messages=user("hi"), extra_body={"chat_template_kwargs":
                                                      {"enable_thinking": False}})
    assert plain.usage is not None and no_think.usage is not None
    rendered = httpx.post(url + "/tokenize", timeout=10, json={
        "messages": user("hi"), "chat_template_kwargs": {"enable_thinking": False}}).json()
    assert no_think.usage.prompt_tokens == rendered["count"] > plain.usage.prompt_tokens

    def constrained() -> int:
        return int(service.stub_stats()["constrained_requests"])

    before = constrained()
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        resp = client.chat.completions.create(model=MODEL, messages=user(call), tools=[WEATHER],
                                              tool_choice=choice)  # type: ignore[arg-type]
        assert resp.choices[0].finish_reason == "tool_calls"
    deadline = time.monotonic() + 5  # the stats file is rewritten every 0.5 s
    while constrained() < before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert constrained() == before + 2


def test_too_many_requests_429(stack: tuple[Service, str]) -> None:
    """A second frontend on the same service, limited to one request in flight."""
    service, _ = stack
    frontend = HttpFrontend(service, "--max-running", "1")
    url = frontend.start()
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
    try:
        body = {"model": MODEL, "messages": user("word " * 1000), "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
            assert resp.status_code == 200
            with pytest.raises(openai.RateLimitError) as limited:
                client.chat.completions.create(model=MODEL, messages=user("x"))
            assert limited.value.response.headers["retry-after"] == "1"
            assert "limit is 1" in _error(limited.value)["message"]
        deadline = time.monotonic() + 10  # the stream's slot frees once its abort is done
        while True:
            try:
                ok = client.chat.completions.create(model=MODEL, messages=user("again"))
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert ok.choices[0].message.content == "again"
    finally:
        client.close()  # a pooled socket left for the GC is a ResourceWarning (an error)
        frontend.stop()


def test_detokenizer_death_is_503_then_recovers(stack: tuple[Service, str],
                                                client: openai.OpenAI) -> None:
    """Runs last: kill -9 the detokenizer under a long request; it fails with 503, quickly."""
    service, url = stack
    result: dict[str, Any] = {}

    def long_request() -> None:
        try:
            result["response"] = httpx.post(url + "/v1/chat/completions", timeout=30, json={
                "model": MODEL, "messages": user("word " * 3000)})
        except Exception as exc:  # reported by the assert below
            result["error"] = exc

    before = _stub_ids(service)
    thread = threading.Thread(target=long_request, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while True:  # kill only once the request is generating (the detokenizer holds it)
        stats = service.stub_stats()["requests"]
        if any(e["generated"] > 0 and e["finish_reason"] is None
               for rid, e in stats.items() if rid not in before):
            break
        assert time.monotonic() < deadline, "the long request never started generating"
        time.sleep(0.05)
    killed_at = time.monotonic()
    os.kill(service.refresh_pids()["detokenizer"], signal.SIGKILL)
    thread.join(20)
    assert not thread.is_alive()
    resp = result.get("response")
    assert resp is not None, result
    assert resp.status_code == 503, resp.text
    assert "detokenizer" in resp.json()["error"]["message"]
    assert time.monotonic() - killed_at < 10
    deadline = time.monotonic() + 20  # restarted by the supervisor; new requests succeed
    while True:
        try:
            again = client.chat.completions.create(model=MODEL, messages=user("back"))
            break
        except openai.APIStatusError:
            assert time.monotonic() < deadline, "no recovery after the detokenizer restart"
            time.sleep(0.2)
    assert again.choices[0].message.content == "back"


def _stub_ids(service: Service) -> set[str]:
    try:
        return set(service.stub_stats().get("requests", {}))
    except (OSError, ValueError):
        return set()


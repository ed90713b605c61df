"""Bad input over HTTP gets a 4xx naming what was wrong and where, never a 5xx.

A real service (1 worker, the stub engine in random mode, ``max_model_len`` 256) behind the HTTP
frontend process, driven with plain ``httpx`` and raw sockets: integers out of range, deep
nesting, lone surrogates, huge messages, context-length errors, clients that leave mid-upload,
``logit_bias`` carried to the engine, ``documents`` reaching the template, and a hypothesis fuzz
of every route (no 5xx; the service stays healthy with the same process ids). Deeper fuzzing:
``TEXTPROC_MAX_EXAMPLES=2000``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import time
from typing import Any, Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers.service import Service, build_toy_model, user, wait_http

pytestmark = pytest.mark.timeout(120)

MODEL = "toy"
MAX_MODEL_LEN = 256
# the toy ChatML template, plus the RAG documents a template like Command-R's renders
DOCS_TEMPLATE = ("{%- if documents %}{%- for d in documents %}<doc>{{ d.title }}: {{ d.text }}"
                 "</doc>\n{%- endfor %}{%- endif %}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    root = tmp_path_factory.mktemp("http-input")
    model = build_toy_model(root / MODEL)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = DOCS_TEMPLATE + config["chat_template"]
    config_path.write_text(json.dumps(config))
    args = ["--stub-mode", "random", "--stub-arg=--step-ms=1", "--max-model-len",
            str(MAX_MODEL_LEN), "--http", "127.0.0.1:0"]
    service = Service(root, model, workers=1, args=args).start()
    try:
        yield service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()


def chat_body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user("hi"), "max_tokens": 4, **fields}


def post(url: str, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + path, content=content, timeout=30,
                      headers={"content-type": "application/json"})


def refused(resp: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:500]
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def nested(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


BIG = 2**64  # over what MessagePack's int64/uint64 carry with a sign


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", chat_body(max_tokens=BIG), "max_tokens"),
    ("/v1/chat/completions", chat_body(max_tokens=2**40), "max_tokens"),
    ("/v1/chat/completions", chat_body(max_completion_tokens=2**80), "max_completion_tokens"),
    ("/v1/chat/completions", chat_body(seed=2**80), "seed"),
    ("/v1/chat/completions", chat_body(seed=2**63), "seed"),
    ("/v1/chat/completions", chat_body(top_k=2**80), "top_k"),
    ("/v1/chat/completions", chat_body(top_k=2**40), "top_k"),
    ("/v1/chat/completions", chat_body(min_tokens=2**70), "min_tokens"),
    ("/v1/chat/completions", chat_body(n=2**70), "n"),
    ("/v1/chat/completions", chat_body(chat_template_kwargs={"x": -(2**70)}),
     "chat_template_kwargs.x"),
    ("/v1/completions", {"model": MODEL, "prompt": [1, 2**32]}, "prompt[1]"),
    ("/v1/completions", {"model": MODEL, "prompt": [[2**64]]}, "prompt[0][0]"),
    ("/v1/completions", {"model": MODEL, "prompt": [10**6], "max_tokens": 2}, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "seed": BIG}, "seed"),
    ("/detokenize", {"tokens": [5, 2**32]}, "tokens[1]"),
    ("/detokenize", {"tokens": [BIG]}, "tokens[0]"),
    ("/detokenize", {"tokens": [10**6]}, "tokens"),
    ("/tokenize", {"prompt": "x", "add_special_tokens": 2**80}, "add_special_tokens"),
])
def test_integers_out_of_range_are_400_naming_the_field(
        stack: tuple[Service, str], path: str, body: dict[str, Any], param: str) -> None:
    error = refused(post(stack[1], path, body))
    assert error["param"] == param, error
    assert re.search(r"\d", error["message"]), error  # says the allowed range or the limit


def test_deep_nesting_is_400_naming_where(stack: tuple[Service, str]) -> None:
    url = stack[1]
    kwargs = '{"model": "toy", "messages": [{"role": "user", "content": "hi"}], ' \
        '"chat_template_kwargs": {"k": ' + nested(500) + "}}"
    error = refused(post(url, "/v1/chat/completions", kwargs.encode()))
    assert error["param"].startswith("chat_template_kwargs.k.a.a"), error
    assert "nested deeper than 64 levels" in error["message"]
    tool = ('{"model": "toy", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": '
            '"function", "function": {"name": "f", "parameters": ' + nested(500) + "}}]}")
    error = refused(post(url, "/v1/chat/completions", tool.encode()))
    assert error["param"].startswith("tools[0].function.parameters.a"), error
    unknown = '{"model": "toy", "prompt": "hi", "whatever": ' + "[" * 200_000 + "]" * 200_000 + "}"
    error = refused(post(url, "/v1/completions", unknown.encode()))
    assert error["param"].startswith("whatever[0][0]"), error
    deep_args = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": nested(500)}}]}  # a string: its own JSON, already a clean 400
    refused(post(url, "/v1/chat/completions", chat_body(messages=[deep_args, *user("x")])))


def test_lone_surrogate_is_400_naming_the_string(stack: tuple[Service, str]) -> None:
    body = b'{"model": "toy", "messages": [{"role": "user", "content": "ab\\ud800cd"}]}'
    error = refused(post(stack[1], "/v1/chat/completions", body))
    assert "lone UTF-16 surrogate \\ud800" in error["message"]
    assert error["param"] == "messages[0].content"
    paired = b'{"model": "toy", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}], ' \
        b'"max_tokens": 2}'
    assert post(stack[1], "/v1/chat/completions", paired).status_code == 200


def test_huge_message_and_context_length_read_like_openai(stack: tuple[Service, str]) -> None:
    url = stack[1]
    error = refused(post(url, "/v1/chat/completions", chat_body(messages=user("x" * 10_000_000))))
    assert error["param"] == "messages"
    assert "10000000 characters" in error["message"] and "limit" in error["message"]
    error = refused(post(url, "/v1/chat/completions", chat_body(max_tokens=1000)))
    assert error["param"] == "max_tokens"
    assert error["message"].startswith(f"this model's maximum context length is {MAX_MODEL_LEN} "
                                       "tokens, but you requested"), error
    assert "in max_tokens" in error["message"]
    error = refused(post(url, "/v1/chat/completions", chat_body(messages=user("word " * 400))))
    assert error["param"] == "messages"
    assert error["message"].startswith("this model's maximum context length is"), error
    error = refused(post(url, "/v1/completions", {"model": MODEL, "prompt": "word " * 400}))
    assert error["param"] == "prompt"


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_client_leaving_mid_upload_is_counted_not_an_error(stack: tuple[Service, str]) -> None:
    service, url = stack
    address = urlsplit(url)
    before = _metric(url, "textproc_http_upload_disconnects_total")
    for _ in range(5):
        with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n"
                         b'{"model": "toy", "messages": [')
            time.sleep(0.05)
    deadline = time.monotonic() + 5
    while _metric(url, "textproc_http_upload_disconnects_total") < before + 5:
        assert time.monotonic() < deadline, "upload disconnects not counted"
        time.sleep(0.05)
    metrics = httpx.get(url + "/metrics", timeout=10).text
    assert 'status="500"' not in metrics
    log = service.log(tail=None)
    assert "ClientDisconnect" not in log and "Traceback" not in log, log[-3000:]


def _vocab(service: Service) -> tuple[int, frozenset[int]]:
    from textproc.core.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(service.model_dir)
    return tok.vocab_size, tok.special_ids


def _ids(url: str, text: str) -> list[int]:
    return list(post(url, "/tokenize", {"prompt": text}).json()["tokens"])


def test_logit_bias_reaches_the_engine(stack: tuple[Service, str]) -> None:
    """The random stub applies it: +100 forces a token, -100 bans one (OpenAI's rules)."""
    service, url = stack
    words = [w for w in ("Hello", " world", " fox", " dog", " the") if len(_ids(url, w)) == 1]
    assert len(words) >= 2, words
    forced = _ids(url, words[0])[0]
    resp = post(url, "/v1/chat/completions", chat_body(max_tokens=6,
                                                       logit_bias={str(forced): 100}))
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == words[0] * 6
    resp = post(url, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 3,
                                         "logit_bias": {str(forced): 100.0}})
    assert resp.json()["choices"][0]["text"] == words[0] * 3

    vocab, special = _vocab(service)
    keep = {_ids(url, w)[0] for w in words[:2]}
    ban = {str(t): -100 for t in range(vocab) if t not in keep and t not in special}
    resp = post(url, "/v1/chat/completions", chat_body(max_tokens=30, logit_bias=ban))
    text = resp.json()["choices"][0]["message"]["content"]
    assert re.fullmatch("(?:" + "|".join(map(re.escape, words[:2])) + ")+", text), text

    for bias, param in [({"abc": 1}, "logit_bias"), ({"5": 101}, "logit_bias"),
                        ({"5": "x"}, "logit_bias"), ({str(vocab + 10): 5}, "logit_bias"),
                        ({str(t): 1 for t in range(2000)}, "logit_bias")]:
        error = refused(post(url, "/v1/chat/completions", chat_body(logit_bias=bias)))
        assert error["param"].startswith(param), (bias, error)


def test_documents_reach_the_template_and_reserved_names_are_refused(
        stack: tuple[Service, str]) -> None:
    url = stack[1]
    plain = post(url, "/v1/chat/completions", chat_body())
    docs = [{"title": "Guide", "text": "the quick brown fox jumps over the lazy dog"}]
    with_docs = post(url, "/v1/chat/completions", chat_body(documents=docs))
    assert plain.status_code == 200 and with_docs.status_code == 200, with_docs.text
    assert with_docs.json()["usage"]["prompt_tokens"] > plain.json()["usage"]["prompt_tokens"] + 8
    for key in ("template_name", "documents", "messages", "limits"):
        error = refused(post(url, "/v1/chat/completions",
                             chat_body(chat_template_kwargs={key: "x"})))
        assert error["param"] == "chat_template_kwargs" and key in error["message"], error


# ------------------------------------------------------------------ fuzz: every route

_EDGE_INTS = st.sampled_from([-1, 0, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**30])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _EDGE_INTS | st.floats()
    | st.text(max_size=20) | st.sampled_from(["\ud800", "x" * 5000, "<|im_end|>"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)


def _deep(depth: int, as_list: bool) -> Any:
    value: Any = 1
    for _ in range(depth):  # built by a loop: json.loads would recurse
        value = [value] if as_list else {"a": value}
    return value


_DEEP = st.builds(_deep, st.integers(60, 600), st.booleans())
_BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": chat_body(),
    "/v1/completions": {"model": MODEL, "prompt": "hi", "max_tokens": 4},
    "/v1/responses": {"model": MODEL, "input": "hi", "max_output_tokens": 4},
    "/tokenize": {"prompt": "hi"},
    "/detokenize": {"tokens": [1, 2]},
    "/v1/messages": {"model": MODEL, "max_tokens": 4,
                     "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages/count_tokens": {"model": MODEL,
                                  "messages": [{"role": "user", "content": "hi"}]},
    "/v1/chat/completions/render": chat_body(),
    "/v1/completions/render": {"model": MODEL, "prompt": ["hi", [1, 2]], "max_tokens": 4},
    "/v1/messages/render": {"model": MODEL, "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses/render": {"model": MODEL, "input": "hi", "max_output_tokens": 4},
    "/v1/chat/completions/derender": {
        "generate_response": {"request_id": "x", "choices": [{"index": 0, "token_ids": [1, 2],
                                                              "finish_reason": "stop"}]},
        "prompt_tokens": 3, "chat_request": chat_body(stop=["x"])},
    "/v1/completions/derender": {
        "stream": True, "generate_chunk": {"request_id": "x", "choices": [
            {"index": 0, "token_ids": [1, 2]}]},
        "stream_state": {"output_token_ids": [3], "output_chunk_lens": [1]}},
    "/inference/v1/generate": {"token_ids": [1, 2], "sampling_params": {"max_tokens": 4,
                                                                         "temperature": 0}},
    "/inference/v1/abort_requests": {"request_ids": ["generate-tokens-x"]},
}
_GET_PATHS = ["/v1/models", "/health", "/metrics", "/v1/models/x", "/v1/chat/completions",
              "/nope"]
_COMMON = ["model", "max_tokens", "stream", "stop", "seed", "top_k", "logit_bias", "n",
           "temperature", "min_tokens", "stream_options", "skip_special_tokens", "unknown"]
_FIELDS = {
    "/v1/chat/completions": [*_COMMON, "messages", "tools", "tool_choice", "documents",
                             "chat_template_kwargs", "response_format", "messages[0]",
                             "messages[0].content", "max_completion_tokens", "logprobs",
                             "top_logprobs"],
    "/v1/completions": [*_COMMON, "prompt", "echo", "best_of", "logprobs"],
    "/tokenize": ["model", "prompt", "messages", "tools", "add_special_tokens",
                  "chat_template_kwargs", "unknown"],
    "/detokenize": ["model", "tokens", "skip_special_tokens", "unknown"],
    "/v1/responses": ["model", "input", "instructions", "tools", "tool_choice",
                      "max_output_tokens", "text", "reasoning", "stream", "store",
                      "previous_response_id", "metadata", "include", "chat_template_kwargs",
                      "temperature", "unknown"],
    "/v1/messages": ["model", "max_tokens", "messages", "system", "tools", "tool_choice",
                     "stop_sequences", "temperature", "top_p", "top_k", "thinking", "metadata",
                     "stream", "messages[0]", "messages[0].content", "unknown"],
    "/v1/messages/count_tokens": ["model", "messages", "system", "tools", "tool_choice",
                                  "thinking", "messages[0]", "messages[0].content", "unknown"],
}
_FIELDS["/v1/chat/completions/render"] = [*_FIELDS["/v1/chat/completions"], "request_id"]
_FIELDS["/v1/completions/render"] = [*_FIELDS["/v1/completions"], "request_id"]
_FIELDS["/v1/messages/render"] = _FIELDS["/v1/messages"]
_FIELDS["/v1/responses/render"] = [*_FIELDS["/v1/responses"], "request_id"]
_DERENDER = ["model", "stream", "generate_chunk", "stream_state", "prompt_tokens",
             "prompt_token_ids", "unknown"]
_FIELDS["/v1/chat/completions/derender"] = [*_DERENDER, "generate_response", "chat_request"]
_FIELDS["/v1/completions/derender"] = [*_DERENDER, "generate_responses", "completion_request"]
_FIELDS["/inference/v1/generate"] = ["token_ids", "sampling_params", "request_id", "model",
                                     "output_mode", "stream", "stream_options", "priority",
                                     "return_token_ids", "features", "cache_salt", "unknown"]
_FIELDS["/inference/v1/abort_requests"] = ["request_ids", "unknown"]


def test_the_fuzz_covers_every_route() -> None:
    """A route added to the app without a fuzz body fails here, not silently."""
    from textproc.http.server import build_app

    app = build_app(object())  # type: ignore[arg-type]  # the routes only, never served
    posts = {r.path for r in app.routes if "POST" in (getattr(r, "methods", None) or ())}
    gets = {r.path for r in app.routes if "GET" in (getattr(r, "methods", None) or ())}
    assert posts == set(_BASES) == set(_FIELDS)
    assert gets - {"/v1/models/{model:path}"} <= set(_GET_PATHS)


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    kind = draw(st.sampled_from(["field"] * 5 + ["json", "bytes", "get"]))
    if kind == "get":
        path = draw(st.sampled_from(_GET_PATHS))
        return draw(st.sampled_from(["GET", "DELETE", "PUT"])), path, b""
    path = draw(st.sampled_from(sorted(_BASES)))
    if kind == "bytes":
        return "POST", path, draw(st.binary(max_size=64))
    if kind == "json":
        return "POST", path, json.dumps(draw(_JSON)).encode()
    body = json.loads(json.dumps(_BASES[path]))
    for field in draw(st.lists(st.sampled_from(_FIELDS[path]), min_size=1, max_size=3)):
        value = copy.deepcopy(draw(st.one_of(_EDGE_INTS, _DEEP, _JSON)))  # edited below
        if field.startswith("messages[0]") and isinstance(body.get("messages"), list) \
                and body["messages"]:
            if field.endswith("content") and isinstance(body["messages"][0], dict):
                body["messages"][0]["content"] = value
            else:
                body["messages"][0] = value
        else:
            body[field] = value
    if body.get("stream") is True:
        body["max_tokens"] = 4
    return "POST", path, json.dumps(body).encode()


@settings(max_examples=int(os.environ.get("TEXTPROC_MAX_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(_requests(), min_size=1, max_size=4))
@example(requests=[("POST", "/v1/chat/completions",
                    json.dumps(chat_body(min_tokens=2**64)).encode())])
@example(requests=[("POST", "/v1/completions", b'{"model": "toy", "prompt": "x", "unknown": '
                    + b"[" * 3000 + b"]" * 3000 + b"}")])
def test_fuzz_every_route_never_5xx(stack: tuple[Service, str],
                                    requests: list[tuple[str, str, bytes]]) -> None:
    service, url = stack
    pids = _pids(service)
    with httpx.Client(base_url=url, timeout=30) as http:
        for method, path, body in requests:
            resp = http.request(method, path, content=body or None,
                                headers={"content-type": "application/json"})
            assert resp.status_code < 500, (method, path, body[:300], resp.text[:500])
            if resp.status_code >= 400 and resp.headers.get("content-type", "").startswith(
                    "application/json"):
                assert resp.json()["error"]["message"]
        assert http.get("/health").status_code == 200
    assert _pids(service) == pids, "a process was restarted"


def _pids(service: Service) -> dict[str, Any]:
    pids = dict(service.refresh_pids())
    pids["http"] = json.loads((service.runtime_dir / "http.json").read_text())["pid"]
    return pids



def test_images_to_a_text_model_are_refused_naming_the_part(stack: tuple[Service, str]) -> None:
    # the toy model has no vision_config: every API's image is a 400 naming the image's place
    _, url = stack
    png = "data:image/png;base64,iVBORw0KGgo="
    error = refused(post(url, "/v1/chat/completions", chat_body(messages=[
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": png}}]}])))
    assert error["param"] == "messages[0].content[1]"
    assert "does not read images" in error["message"]
    error = refused(post(url, "/v1/responses", {"model": MODEL, "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": png}]}]}))
    assert error["param"] == "input[0].content[0]"
    resp = post(url, "/v1/messages", {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": png.split(",")[1]}}]}]})
    assert resp.status_code == 400
    assert "messages[0].content[1] is an image" in resp.json()["error"]["message"]
    # refused before anything is fetched (a fetch of this would be refused as private)
    error = refused(post(url, "/v1/chat/completions", chat_body(messages=[
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": "http://127.0.0.1:9/x.png"}}]}])))
    assert error["param"] == "messages[0].content[0]"
    assert "served model does not read images" in error["message"]

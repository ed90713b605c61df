"""Logprobs end to end through the official ``openai`` client: chat (``logprobs`` /
``top_logprobs``) and completions (``logprobs``), whole and streamed, against the echo stub.

The contract: a choice's entries have bytes that concatenate to its content (a token split
inside a UTF-8 character keeps its partial bytes and its ``token`` reads ``bytes:\\xNN``), each
entry has the asked number of alternatives, the streamed entries equal the whole ones, a stop
string cuts the entries with the text; bad values are 400s naming the parameter. Random mode
gives the true uniform logprob of its draw.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import httpx
import openai
import pytest

from tests.helpers.service import Service, serve_toy_http as _serve, toy_http_fixtures, user

pytestmark = pytest.mark.timeout(90)

MODEL = "toy"
TEXT = "Logprobs for 你好 and 🦜 (split in the toy BPE), token by token."


echo, client = toy_http_fixtures("logprobs", "--stub-arg=--step-ms=1")


def _check_entries(entries: list[Any], content: str, k: int) -> None:
    assert entries, "no logprob entries"
    assert b"".join(bytes(e.bytes) for e in entries) == content.encode()
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == k
        data = bytes(e.bytes)
        try:
            assert e.token == data.decode()
        except UnicodeDecodeError:  # a token inside a character: OpenAI's spelling
            assert e.token == "bytes:" + data.decode("utf-8", "backslashreplace")
        for alt in e.top_logprobs:
            assert alt.logprob <= e.logprob + 1e-6 and isinstance(alt.bytes, list)


def test_chat_whole(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=user(TEXT), logprobs=True,  # type: ignore[arg-type]
                                          top_logprobs=3)
    choice = resp.choices[0]
    assert choice.message.content == TEXT and choice.logprobs is not None
    entries = choice.logprobs.content or []
    _check_entries(entries, TEXT, 3)
    assert any(e.token.startswith("bytes:") for e in entries)  # the parrot is three tokens
    # the echo stub's first alternative is the sampled token itself
    assert all(e.top_logprobs[0].token == e.token for e in entries)
    assert resp.usage is not None and len(entries) == resp.usage.completion_tokens - 1  # no EOS


def test_chat_streamed_equals_whole(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=user(TEXT), logprobs=True,  # type: ignore[arg-type]
                                           top_logprobs=2)
    assert whole.choices[0].logprobs is not None
    want = [e.model_dump() for e in whole.choices[0].logprobs.content or []]
    got: list[Any] = []
    text = ""
    for chunk in client.chat.completions.create(model=MODEL, messages=user(TEXT), logprobs=True,  # type: ignore[arg-type]
                                                top_logprobs=2, stream=True):
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        if choice.logprobs is not None:
            got += [e.model_dump() for e in choice.logprobs.content or []]
    assert text == TEXT and got == want


def test_chat_logprobs_without_top_and_off(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=user("plain text"), logprobs=True)  # type: ignore[arg-type]
    assert resp.choices[0].logprobs is not None
    _check_entries(resp.choices[0].logprobs.content or [], "plain text", 0)
    off = client.chat.completions.create(model=MODEL, messages=user("plain text"))  # type: ignore[arg-type]
    assert off.choices[0].logprobs is None


def test_chat_stop_string_cuts_the_entries(client: openai.OpenAI) -> None:
    for include in (False, True):
        resp = client.chat.completions.create(  # type: ignore[call-overload]
            model=MODEL, messages=user("cut here: 你好 world and more"), logprobs=True,
            top_logprobs=1, stop=["好 wor"], extra_body={"include_stop_str_in_output": include})
        content = resp.choices[0].message.content
        assert content == ("cut here: 你好 wor" if include else "cut here: 你")
        _check_entries(resp.choices[0].logprobs.content, content, 1)


def test_tokens_as_token_ids_name_the_ids_the_text_came_from(
        echo: tuple[Service, str], client: openai.OpenAI) -> None:
    """``return_tokens_as_token_ids`` (vLLM's): every token and alternative reads
    ``token_id:<id>``, the ids detokenize to the text, bytes and logprobs stay as without it."""
    plain = client.chat.completions.create(model=MODEL, messages=user(TEXT), logprobs=True,  # type: ignore[arg-type]
                                           top_logprobs=2)
    resp = client.chat.completions.create(  # type: ignore[call-overload]
        model=MODEL, messages=user(TEXT), logprobs=True, top_logprobs=2,
        extra_body={"return_tokens_as_token_ids": True})
    entries, want = resp.choices[0].logprobs.content, plain.choices[0].logprobs.content
    assert [(e.bytes, e.logprob) for e in entries] == [(e.bytes, e.logprob) for e in want]
    assert all(a.token.startswith("token_id:") for e in entries for a in [e, *e.top_logprobs])
    ids = [int(e.token.removeprefix("token_id:")) for e in entries]
    r = httpx.post(f"{echo[1]}/detokenize", json={"tokens": ids}, timeout=10)
    assert r.status_code == 200 and r.json()["prompt"] == TEXT, r.text
    comp = client.completions.create(model=MODEL, prompt=TEXT, max_tokens=200, logprobs=1,
                                     extra_body={"return_tokens_as_token_ids": True})
    lp = comp.choices[0].logprobs
    assert lp is not None and lp.tokens == [e.token for e in entries]
    assert all(t in top and all(k.startswith("token_id:") for k in top)
               for t, top in zip(lp.tokens, lp.top_logprobs or []))


def test_chat_n2_each_choice_has_its_entries(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL, messages=user(TEXT), n=2, logprobs=True,  # type: ignore[arg-type]
                                          top_logprobs=1)
    for choice in resp.choices:
        assert choice.logprobs is not None
        _check_entries(choice.logprobs.content or [], TEXT, 1)
    streamed: dict[int, list[Any]] = defaultdict(list)
    for chunk in client.chat.completions.create(model=MODEL, messages=user(TEXT), n=2,  # type: ignore[arg-type]
                                                logprobs=True, top_logprobs=1, stream=True):
        choice = chunk.choices[0]
        if choice.logprobs is not None:
            streamed[choice.index] += choice.logprobs.content or []
    assert {i: [e.model_dump() for e in es] for i, es in streamed.items()} == {
        c.index: [e.model_dump() for e in c.logprobs.content or []]  # type: ignore[union-attr]
        for c in resp.choices}


def test_completion_whole_and_streamed(client: openai.OpenAI) -> None:
    prompt = "Completions count offsets in characters: 你好 🦜㐀 ok"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=200, logprobs=2)
    choice = whole.choices[0]
    assert choice.text == prompt and choice.logprobs is not None
    lp = choice.logprobs
    tokens, offsets = lp.tokens or [], lp.text_offset or []
    assert len(tokens) == len(lp.token_logprobs or []) == len(lp.top_logprobs or []) == len(offsets)
    assert all(0 < len(top) <= 3 for top in lp.top_logprobs or [])  # 2 alternatives + the chosen
    assert all(t in top for t, top in zip(tokens, lp.top_logprobs or []))
    assert offsets == sorted(offsets) and offsets[0] == 0
    for token, offset in zip(tokens, offsets):  # whole tokens are where their offset says
        if not token.startswith("bytes:"):
            assert prompt[offset:offset + len(token)] == token
    got: dict[str, list[Any]] = defaultdict(list)
    text = ""
    for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=200,
                                           logprobs=2, stream=True):
        text += chunk.choices[0].text
        clp = chunk.choices[0].logprobs
        if clp is not None:
            for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                got[name] += getattr(clp, name) or []
    assert text == prompt
    assert dict(got) == {"tokens": tokens, "token_logprobs": lp.token_logprobs,
                         "top_logprobs": lp.top_logprobs, "text_offset": offsets}


def test_chat_tool_call_entries_cover_the_raw_output(client: openai.OpenAI) -> None:
    """With a tool-call parser the entries cover every generated token (the call's text too,
    as vLLM): they join to the raw output, not to ``content``; streamed == whole."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    raw = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    kw: Any = {"model": MODEL, "messages": user(raw), "tools": [weather], "logprobs": True,
               "top_logprobs": 1}
    resp = client.chat.completions.create(**kw)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    assert choice.logprobs is not None
    entries = [e.model_dump() for e in choice.logprobs.content or []]
    assert b"".join(bytes(e["bytes"]) for e in entries) == raw.encode()
    streamed = []
    for chunk in client.chat.completions.create(**kw, stream=True):
        if chunk.choices[0].logprobs is not None:
            streamed += [e.model_dump() for e in chunk.choices[0].logprobs.content or []]
    assert streamed == entries


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        ("chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("chat/completions", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
        ("chat/completions", {"logprobs": 3}, "logprobs"),
        ("completions", {"logprobs": 6}, "logprobs"),
        ("completions", {"logprobs": -1}, "logprobs"),
        ("completions", {"logprobs": 1, "echo": True}, "echo"),
    ],
)
def test_bad_values_are_400s_naming_the_param(echo: tuple[Service, str], path: str,
                                              body: dict[str, Any], param: str) -> None:
    base = {"model": MODEL}
    base.update({"messages": user("x")} if path.startswith("chat") else {"prompt": "x"})
    r = httpx.post(f"{echo[1]}/v1/{path}", json={**base, **body}, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_random_mode_gives_the_uniform_value(tmp_path_factory: pytest.TempPathFactory) -> None:
    from textproc.core.tokenizer import Tokenizer

    service, url = _serve(tmp_path_factory.mktemp("logprobs-random"), "--stub-mode", "random")
    try:
        tok = Tokenizer.from_dir(service.model_dir)
        uniform = -math.log(tok.vocab_size - len(tok.special_ids))
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           timeout=30) as c:
            resp = c.completions.create(model=MODEL, prompt="random", max_tokens=20, logprobs=3)
        lp = resp.choices[0].logprobs
        assert lp is not None and lp.token_logprobs
        assert all(v == pytest.approx(uniform, rel=1e-5) for v in lp.token_logprobs)
        assert all(v == pytest.approx(uniform, rel=1e-5)
                   for top in lp.top_logprobs or [] for v in top.values())
        # constrained: uniform over the ids the constraint allows in each state (<= 0, and the
        # entries still join to the text)
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                           timeout=60) as c:
            chat = c.chat.completions.create(  # type: ignore[call-overload]
                model=MODEL, messages=user("x"), logprobs=True, top_logprobs=2, max_tokens=40,
                extra_body={"guided_regex": "(ab|cd|e){2,6}"})
        content = chat.choices[0].message.content
        assert content and chat.choices[0].logprobs is not None
        _check_entries(chat.choices[0].logprobs.content, content, 2)
        assert any(e.logprob > uniform + 1 for e in chat.choices[0].logprobs.content)
    finally:
        service.stop()


def _message_logprobs(resp: Any) -> list[Any]:
    parts = [part for item in resp.output if item.type == "message" for part in item.content]
    return [lp for part in parts for lp in part.logprobs or []]


def test_responses_include_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    include = ["message.output_text.logprobs"]
    resp = client.responses.create(model=MODEL, input=TEXT, include=include, top_logprobs=2)  # type: ignore[arg-type]
    assert resp.output_text == TEXT and resp.top_logprobs == 2
    entries = _message_logprobs(resp)
    _check_entries(entries, TEXT, 2)
    events = list(client.responses.create(model=MODEL, input=TEXT, include=include,  # type: ignore[arg-type]
                                          top_logprobs=2, stream=True))
    streamed = [lp.model_dump() for e in events if e.type == "response.output_text.delta"
                for lp in e.logprobs]
    assert streamed == [lp.model_dump() for lp in entries]
    done = [e for e in events if e.type == "response.output_text.done"][0]
    assert [lp.model_dump() for lp in done.logprobs] == streamed
    plain = client.responses.create(model=MODEL, input=TEXT)  # type: ignore[arg-type]
    assert _message_logprobs(plain) == []


@pytest.mark.parametrize(("body", "param"), [({"top_logprobs": 2}, "top_logprobs"), (
    {"include": ["message.output_text.logprobs"], "top_logprobs": 21}, "top_logprobs")])
def test_responses_bad_logprobs_are_400s(echo: tuple[Service, str], body: dict[str, Any],
                                         param: str) -> None:
    r = httpx.post(f"{echo[1]}/v1/responses", json={"model": MODEL, "input": "x", **body},
                   timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text

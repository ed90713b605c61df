"""textproc in front of a real engine: vLLM's v1 engine core (``--engine vllm``) on a small
seeded Qwen3 model, checked against vLLM's own server (``vllm serve``) on the same model.

Greedy chats give the same content and token counts as vLLM's server, and end at the same
generation-config end id (min_tokens, ignore_eos); seeded logprobs are the model's; structured
outputs and forced tool calls from a random-weight model always validate; stop strings, ``n`` >
1, streaming and the Responses API work; the Messages API answers as vLLM's own
``/v1/messages`` does; the scale-out routes render the ids ``vllm serve --enable-scale-out``
renders, and a body rendered by either server generates the same greedy ids on the other; ``/metrics`` has vLLM's families with its types, labels and buckets, and
their counters move as ``vllm serve``'s after the same requests; an aborted stream frees its KV
blocks inside vLLM's scheduler; a kill -9
of the engine ends every in-flight request with an error and the restarted engine serves again.
The engine runs with ``--fast-forward 4`` (a constraint's forced tokens verified as vLLM
draft tokens): a structured answer takes fewer engine steps than tokens, with the same greedy
answer as vLLM's server, and every plain request above answers as without it. textproc
exports its request spans to a collector in the test process (``--otlp-traces-endpoint``).
Both servers start once for the module (~1 min).
Skips, naming the setup command, where the engine environment is not installed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.helpers.models import REPO_ROOT
from tests.helpers.otlp import Collector, span_attributes
from tests.helpers.prom import families, value
from tests.helpers.real_engine import (
    MAX_MODEL_LEN,
    TINY_MODEL,
    VLLM_PYTHON,
    engine_stats,
    missing,
    serve_vllm_textproc,
)
from tests.helpers.service import Service
from textproc.testing.booking import BOOKING

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

MODEL = TINY_MODEL.name
CONVERSATIONS: list[tuple[str, dict[str, Any]]] = [
    ("emoji", {"messages": [{"role": "user", "content": "Hello 🌍! 👨‍👩‍👧 ❤️‍🔥"}]}),
    ("multilingual", {"messages": [{"role": "user", "content":
                                    "Écris une phrase. 你好，世界！ Привет, мир. مرحبا بالعالم"}]}),
    ("code", {"messages": [{"role": "system", "content": "You review code."},
                           {"role": "user", "content": "def f(x):\n\treturn {'a': [x ** 2]}\n"}]}),
    ("multi-turn", {"messages": [{"role": "user", "content": "Name a color."},
                                 {"role": "assistant", "content": "Blue."},
                                 {"role": "user", "content": "Another one, in German?"}]}),
    ("tools", {"messages": [{"role": "user", "content": "Weather in Paris?"}],
               "tools": [{"type": "function", "function": {
                   "name": "get_weather", "description": "Current weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}}}]}),
]
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}


REFERENCE: dict[str, Any] = {}  # the running `vllm serve` (bench smoke test: its pid)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    """An OTLP/HTTP collector the module's textproc exports its request spans to."""
    got = Collector()
    got.thread.start()
    yield got
    got.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, vllm_reference: Any,
            collector: Collector) -> Iterator[tuple[Service, str, str]]:
    """textproc + vLLM's engine core, and vLLM's own server (the session's): started together."""
    vllm_reference.start()
    service = None
    try:
        # fast-forward on: every plain request below must still answer as vLLM's server does
        service, url = serve_vllm_textproc(tmp_path_factory.mktemp("textproc-vllm"),
                                           "--engine-arg=--fast-forward=4",
                                           "--http-arg=--admin-routes",
                                           "--otlp-traces-endpoint", collector.url)
        reference_url = vllm_reference.url()
        REFERENCE["server"] = vllm_reference
        yield service, url, reference_url
    finally:
        if service is not None:
            service.stop(timeout_s=60)


class StreamFailed(Exception):
    """An SSE error event ended the stream."""


def _chat(url: str, body: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
    resp = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, **body},
                      timeout=timeout_s)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _stream_text(url: str, body: dict[str, Any]) -> tuple[str, str | None]:
    text, reason = "", None
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=120,
                      json={"model": MODEL, "stream": True, **body}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise StreamFailed(str(chunk["error"].get("message")))
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                reason = choice.get("finish_reason") or reason
    return text, reason


def test_engine_start_is_waited_for_with_progress(servers: tuple[Service, str, str]) -> None:
    service, _, _ = servers
    log = service.log(tail=None)
    assert "vLLM's engine core is ready after" in log
    assert "still waiting for engine" in log  # a slow start is never a silent wait


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="vLLM binds every CPU of a 1-CPU box")
def test_text_processes_keep_off_the_cpus_vllm_binds(servers: tuple[Service, str, str]) -> None:
    """--text-cpus auto (this service's; the default lets them float): vLLM's model worker binds
    its threads (its reserved CPUs stay free); every thread of textproc's workers, detokenizer
    and HTTP frontend runs on the rest."""
    from textproc.placement import engine_cpus

    service, _, _ = servers
    pids = service.pids()
    bound = engine_cpus(pids["engine"])
    assert bound and bound < os.sched_getaffinity(0), bound
    text = {name: pid for name, pid in pids.items() if name.startswith(("worker", "detok", "http"))}
    assert any(name.startswith("http") for name in text), pids
    for name, pid in text.items():
        for tid in os.listdir(f"/proc/{pid}/task"):
            assert os.sched_getaffinity(int(tid)) == os.sched_getaffinity(0) - bound, (name, tid)
    assert "text processes on CPUs" in service.log(tail=None)


@pytest.mark.parametrize("name,body", CONVERSATIONS, ids=[n for n, _ in CONVERSATIONS])
def test_greedy_chat_matches_vllm_serve(servers: tuple[Service, str, str], name: str,
                                        body: dict[str, Any]) -> None:
    """Same template, same ids, same detokenization: the same answer and token counts."""
    _, url, reference = servers
    request = {**body, "temperature": 0, "max_tokens": 24}
    ours, theirs = _chat(url, request), _chat(reference, request)
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"]
    assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]


def test_generation_config_eos_ends_where_vllm_serve_ends(servers: tuple[Service, str, str]) -> None:
    """The model's generation_config.json names <|endoftext|> as an end id besides the
    tokenizer's EOS (<|im_end|>); a logit_bias makes it the greedy choice. Both servers mask it
    until min_tokens, then stop on it; with ignore_eos they mask it all the same (vLLM's
    all_stop_token_ids) and then write it without stopping: the same text, token count and
    finish_reason."""
    _, url, reference = servers
    endoftext = 151643  # in generation_config.json's eos_token_id, not the tokenizer's EOS
    base = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
            "logit_bias": {str(endoftext): 100}}
    for extra, tokens, reason in (({"max_tokens": 10, "min_tokens": 2}, 3, "stop"),
                                  ({"max_tokens": 6, "min_tokens": 3, "ignore_eos": True}, 6, "length")):
        ours, theirs = _chat(url, {**base, **extra}), _chat(reference, {**base, **extra})
        assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"] == reason
        assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == tokens
        content = ours["choices"][0]["message"]["content"]
        assert content == theirs["choices"][0]["message"]["content"] and content, (extra, ours)


def _exact(entry: dict[str, Any]) -> bool:
    """vLLM's server writes a token's ``bytes`` from its decoded text (a token inside a UTF-8
    character becomes U+FFFD or ""); textproc's are the token's own bytes. Compare the others."""
    data = bytes(entry["bytes"])
    return bool(data) and "\ufffd".encode() not in data


def test_seeded_logprobs_are_the_models(servers: tuple[Service, str, str]) -> None:
    """A seeded sampled request: the chosen tokens and their logprobs, and the alternatives'
    logprobs, as vLLM's server gives them (to 1e-3: the two processes' float sums).

    textproc lists the k most likely tokens, most likely first (OpenAI's ``top_logprobs``);
    vLLM's server lists the sampled token first and then the most likely others, k in all
    (its ``_get_top_logprobs`` takes the first k of the step's dict), so every alternative it
    shows other than the sampled token is in textproc's list with the same logprob."""
    _, url, reference = servers
    request = {"messages": [{"role": "user", "content": "Count: 1, 2, 3"}], "temperature": 1.0,
               "seed": 11, "max_tokens": 16, "logprobs": True, "top_logprobs": 5}
    ours = _chat(url, request)["choices"][0]["logprobs"]["content"]
    theirs = _chat(reference, request)["choices"][0]["logprobs"]["content"]
    assert len(ours) == len(theirs) == 16
    compared = 0
    for mine, ref in zip(ours, theirs):
        assert mine["logprob"] == pytest.approx(ref["logprob"], abs=1e-3)
        if _exact(ref):
            assert mine["bytes"] == ref["bytes"]
        top = {bytes(t["bytes"]): t["logprob"] for t in mine["top_logprobs"]}
        assert len(top) == 5 and list(top.values()) == sorted(top.values(), reverse=True)
        for alt in ref["top_logprobs"][1:]:
            if _exact(alt):
                assert top[bytes(alt["bytes"])] == pytest.approx(alt["logprob"], abs=1e-3)
                compared += 1
    assert compared >= 30  # most alternatives are whole characters


def test_min_p_and_logit_bias_sample_as_vllm_serve(servers: tuple[Service, str, str]) -> None:
    """vLLM drops its min_p and logit_bias processors under speculative decoding; the engine's
    worker puts them back (fast-forward is on here), so a seeded request with both samples
    the tokens vLLM's server samples."""
    _, url, reference = servers
    request = {"messages": [{"role": "user", "content": "Pick words."}], "temperature": 1.0,
               "seed": 5, "max_tokens": 16, "min_p": 0.2, "logit_bias": {"1112": 3, "9707": 4}}
    ours, theirs = _chat(url, request), _chat(reference, request)
    assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == 16


# fixed text between short free parts: runs of forced tokens
FORCED_REGEX = (r'\{"name": "[a-z]{1,10}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Oslo)", '
                r'"member_since": [0-9]{4}, "verified": (true|false)\}')


FORCED_DRAFTS_CHECK = """
from collections import deque
from types import SimpleNamespace as NS
from vllm.v1.outputs import DraftTokenIds
from engine_vllm.constraints import MaskViolations, TextprocGrammar
from engine_vllm.fast_forward import forced_drafts
from textproc.core.constraints import Guide, TokenVocabulary, compile_constraint

vocab = TokenVocabulary([b"a", b"b", b"c", b"ab", b""], end_ids=[4])
index = compile_constraint(vocab, regex="abcb(a|c)")  # "ab" is "a" "b" or "ab": not forced

def request(guide, max_tokens=64, done=0, finished=False, prefill=False):
    grammar = None if guide is None else TextprocGrammar(guide, {}, deque(), MaskViolations())
    return NS(structured_output_request=None if guide is None else NS(grammar=grammar),
              max_tokens=max_tokens, num_output_tokens=done, is_prefill_chunk=prefill,
              is_finished=lambda: finished)

walked = Guide(index)
walked.advance(3)  # "ab": then "c" "b" are forced, then a choice
partial = Guide(index)
partial.advance(3)
partial.index = NS(partial=True)  # a progressive compile's first states: no drafts
requests = {"forced": request(walked), "capped": request(Guide(index)), "plain": request(None),
            "short": request(walked, max_tokens=10, done=8), "partial": request(partial),
            "ended": request(walked, finished=True)}
capped = requests["capped"].structured_output_request.grammar.guide
scheduler = NS(num_spec_tokens=4, requests=requests)
counts = {}
ids = list(requests)
out = forced_drafts(scheduler, DraftTokenIds(ids, [[9]] * len(ids)), counts)
print(dict(zip(out.req_ids, out.draft_token_ids)), counts)
"""


def test_forced_drafts_replace_a_constrained_requests_drafts() -> None:
    """``forced_drafts`` (vLLM's environment, no engine): a constrained request's forced run
    replaces its drafts, no longer than ``num_speculative_tokens`` nor than its ``max_tokens``
    leaves room for (the run plus the token after it); a request with no forced run, no
    constraint, a finished one or one on a partial index keeps the drafter's."""
    done = subprocess.run([str(VLLM_PYTHON), "-c", FORCED_DRAFTS_CHECK], capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "{'forced': [2, 1], 'capped': [9], 'plain': [9], 'short': [2], 'partial': [9], "
        "'ended': [9]} {'forced_drafts': 3, 'forced_runs': 2}"), done.stdout


def test_forced_tokens_skip_steps(servers: tuple[Service, str, str]) -> None:
    """Fast-forward: a constraint's forced runs are verified in one step each, so a structured
    answer takes fewer engine steps than tokens; the greedy answer and its token count are
    vLLM's server's (xgrammar's mask of the same regex, no fast-forward)."""
    service, url, reference = servers
    first = engine_stats(service)["fast_forward"]["forced_drafts"]
    for content in ("A person.", "Someone from Rome"):
        body = {"messages": [{"role": "user", "content": content}], "temperature": 0,
                "max_tokens": 120, "structured_outputs": {"regex": FORCED_REGEX}}
        ours, theirs = _chat(url, body), _chat(reference, body)
        assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
        assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"]
        assert ours["choices"][0]["finish_reason"] == "stop"
        deadline = time.monotonic() + 10
        while (entry := engine_stats(service)["requests"].get(ours["id"], {})).get(
                "finish_reason") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        tokens = ours["usage"]["completion_tokens"]
        assert entry["generated"] == tokens and entry["steps"] < tokens - 5, entry
    stats = engine_stats(service)
    assert stats["fast_forward"]["forced_drafts"] > first
    assert stats["mask_violations"] == 0


def test_stop_string_cuts_where_vllm_does(servers: tuple[Service, str, str]) -> None:
    _, url, reference = servers
    base = {"messages": [{"role": "user", "content": "Say something long."}],
            "temperature": 1.0, "seed": 5, "max_tokens": 40}
    full = _chat(url, base)["choices"][0]["message"]["content"]
    assert len(full) > 20, full
    stop = full[12:15]
    cut = full.index(stop)
    ours = _chat(url, {**base, "stop": [stop]})["choices"][0]
    theirs = _chat(reference, {**base, "stop": [stop]})["choices"][0]
    assert ours["message"]["content"] == full[:cut] == theirs["message"]["content"]
    assert ours["finish_reason"] == "stop"


def test_stream_equals_whole(servers: tuple[Service, str, str]) -> None:
    _, url, _ = servers
    body = {"messages": [{"role": "user", "content": "Tell me a story 📚"}], "temperature": 0.8,
            "seed": 21, "max_tokens": 48}
    whole = _chat(url, body)["choices"][0]
    text, reason = _stream_text(url, body)
    assert text == whole["message"]["content"] and reason == whole["finish_reason"]


def test_n_choices_are_seeded_apart(servers: tuple[Service, str, str]) -> None:
    _, url, _ = servers
    answer = _chat(url, {"messages": [{"role": "user", "content": "Hi"}], "n": 3, "seed": 3,
                         "temperature": 1.0, "max_tokens": 12})
    texts = [c["message"]["content"] for c in sorted(answer["choices"], key=lambda c: c["index"])]
    assert len(texts) == 3 and len(set(texts)) == 3, texts
    assert answer["usage"]["completion_tokens"] == 36


def test_seeded_request_with_a_chunked_prompt(servers: tuple[Service, str, str]) -> None:
    """A seed on a prompt over one step's token budget (2,048): vLLM prefills it in chunks and
    its CPU build's own rewind of the discarded draws would kill the engine (see
    engine_vllm/worker.py). Here it answers beside an unseeded request in flight, the engine
    lives on, and the same request again alone gives the same text (seeded, whatever the
    chunking)."""
    service, url, _ = servers
    engine_pid = int(service.refresh_pids()["engine"])
    seeded = {"messages": [{"role": "user", "content": "Paris is the capital of France. " * 400}],
              "temperature": 1.0, "seed": 17, "max_tokens": 8}
    unseeded = {"messages": [{"role": "user", "content": "Go on."}], "temperature": 1.0,
                "max_tokens": 400}
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(_chat, url, unseeded)
        _wait_engine(service, lambda s: s["scheduler"]["running"] >= 1)
        beside = _chat(url, seeded)
        assert other.result()["usage"]["completion_tokens"] == 400
    assert beside["usage"]["prompt_tokens"] > 2048 and beside["usage"]["completion_tokens"] == 8
    alone = _chat(url, seeded)
    assert alone["choices"][0]["message"]["content"] == beside["choices"][0]["message"]["content"]
    assert int(service.refresh_pids()["engine"]) == engine_pid


def test_json_schema_outputs_always_validate(servers: tuple[Service, str, str]) -> None:
    """A random-weight model under textproc's compiled schema, sampled: every answer parses
    and validates (the engine applies textproc's masks through vLLM's bitmask)."""
    _, url, _ = servers
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}

    def one(seed: int) -> Any:
        return _chat(url, {"messages": [{"role": "user", "content": f"Person {seed}"}],
                           "response_format": fmt, "temperature": 1.0, "seed": seed,
                           "max_tokens": 400})["choices"][0]

    with ThreadPoolExecutor(4) as pool:
        choices = list(pool.map(one, range(8)))
    for choice in choices:
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMA)
    service, _, _ = servers  # the worker applied the masks itself (engine_vllm.worker)
    assert "masks go through vLLM's own kernel" not in service.log_path.read_text(errors="replace")


XGRAMMAR_CHECK = """
import numpy as np, torch, xgrammar
from engine_vllm.bitmask import apply_row
rng = np.random.default_rng(0)
n = 151936
words = (n + 31) // 32
cases = [np.zeros(words, np.int32), np.full(words, -1, np.int32),
         rng.integers(-2**31, 2**31, words, dtype=np.int64).astype(np.int32)]
for few in (3, 300, 4000):
    for base in (0, -1):
        mask = np.full(words, base, np.int32)
        mask[rng.integers(0, words, few)] = rng.integers(-2**31, 2**31, few, dtype=np.int64).astype(np.int32)
        cases.append(mask)
for mask in cases:
    logits = torch.randn(1, n)
    theirs = logits.clone()
    xgrammar.apply_token_bitmask_inplace(theirs, torch.from_numpy(mask[None].copy()))
    apply_row(logits[0].numpy(), mask)
    assert torch.equal(logits.view(torch.int32), theirs.view(torch.int32))
print(len(cases))
"""


def test_bitmask_apply_equals_xgrammars_kernel() -> None:
    """The worker's mask kernel and xgrammar's (what vLLM calls) give bit-identical logits."""
    done = subprocess.run([str(VLLM_PYTHON), "-c", XGRAMMAR_CHECK], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0 and done.stdout.split() == ["9"], done.stderr[-3000:]


def test_forced_tool_call_is_valid(servers: tuple[Service, str, str]) -> None:
    _, url, _ = servers
    tool = {"type": "function", "function": {"name": "add_person", "parameters": SCHEMA}}
    for seed in range(3):
        choice = _chat(url, {"messages": [{"role": "user", "content": "Add someone."}],
                             "tools": [tool], "temperature": 1.0, "seed": seed,
                             "max_tokens": 400,
                             "tool_choice": {"type": "function",
                                             "function": {"name": "add_person"}}})["choices"][0]
        calls = choice["message"]["tool_calls"]
        assert len(calls) == 1 and calls[0]["function"]["name"] == "add_person", choice
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), SCHEMA)


def test_strict_auto_calls_and_reasoning_budget(servers: tuple[Service, str, str]) -> None:
    """Strict tools with tool_choice auto: every call the random-weight model makes validates
    and no call markup stays in content; a reasoning budget closes the block in time (the
    guide's mask, applied by vLLM)."""
    from textproc.core.tokenizer import Tokenizer

    _, url, _ = servers
    # (a small schema: the strict pattern's free-text states cost ~0.2 s each to index on the
    # Qwen3 vocabulary today, and the person schema's passes the 5 s budget on a loaded box)
    small = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tool = {"type": "function", "function": {"name": "count", "parameters": small, "strict": True}}
    for seed in range(3):
        message = _chat(url, {"messages": [{"role": "user", "content": "Add someone."}], "tools": [tool],
                              "temperature": 1.0, "seed": seed, "max_tokens": 120})["choices"][0]["message"]
        assert "<tool_call>" not in (message.get("content") or ""), message
        for call in message.get("tool_calls") or []:
            jsonschema.validate(json.loads(call["function"]["arguments"]), small)
    tok = Tokenizer.from_dir(TINY_MODEL)
    for budget in (0, 7):
        body = {"messages": [{"role": "user", "content": "Think."}, {"role": "assistant", "content": "<think>\n"}],
                "continue_final_message": True, "add_generation_prompt": False, "temperature": 1.0,
                "seed": 1, "max_tokens": 60, "max_reasoning_tokens": budget}
        message = _chat(url, body)["choices"][0]["message"]
        reasoning = message.get("reasoning_content") or ""
        assert len(tok.encode(reasoning)) <= budget + 1, (budget, message)


def test_responses_api(servers: tuple[Service, str, str]) -> None:
    import openai

    _, url, _ = servers
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        response = client.responses.create(model=MODEL, input="Hello!", max_output_tokens=16,
                                           temperature=0)
    assert response.status == "incomplete" and response.output_text
    assert response.usage is not None and response.usage.output_tokens == 16


def _cached_tokens(path: str, answer: dict[str, Any]) -> int:
    """The prompt tokens an answer says the engine found in its prefix cache, where each API
    puts them."""
    usage = answer["usage"]
    if path == "/v1/responses":
        return int(usage["input_tokens_details"]["cached_tokens"])
    if path == "/v1/messages":
        return int(usage["cache_read_input_tokens"])
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def _streamed_usage(url: str, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=120,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200
        chunks = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    return {"usage": chunks[-1]["usage"]}


def test_cached_prompt_tokens_are_vllms(servers: tuple[Service, str, str]) -> None:
    """A long prompt sent again is found in the engine's prefix cache: every API reports the
    cached prompt tokens vLLM's engine counted, the same number ``vllm serve
    --enable-prompt-tokens-details`` reports for the same bodies (0 the first time)."""
    _, url, reference = servers
    def system(api: str) -> str:  # a prompt no earlier request began with
        return f"{time.time_ns()} {api}: " + "You answer questions about the Rhine. " * 80

    question = [{"role": "user", "content": "Which city is at the mouth of the Rhine?"}]
    bodies = [
        ("/v1/chat/completions", {"model": MODEL, "max_tokens": 2, "temperature": 0, "messages": [
            {"role": "system", "content": system("chat")}, *question]}),
        ("/v1/completions", {"model": MODEL, "max_tokens": 2, "temperature": 0,
                             "prompt": system("completions") + " Which city is at its mouth?"}),
        ("/v1/responses", {"model": MODEL, "max_output_tokens": 16, "temperature": 0,
                           "instructions": system("responses"), "input": question}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 2, "temperature": 0,
                          "system": system("messages"), "messages": question}),
    ]
    for path, body in bodies:
        counts: dict[str, list[int]] = {}
        for side, base in (("textproc", url), ("vllm", reference)):
            counts[side] = []
            for _ in range(2):
                resp = httpx.post(base + path, json=body, timeout=120)
                assert resp.status_code == 200, (side, path, resp.text)
                counts[side].append(_cached_tokens(path, resp.json()))
        assert counts["textproc"] == counts["vllm"], path
        first, again = counts["vllm"]
        assert first == 0 and again >= 512, (path, counts)  # whole KV blocks of the long prompt
    chat = bodies[0][1]
    streamed = [_cached_tokens("", _streamed_usage(base, chat)) for base in (url, reference)]
    assert streamed[0] == streamed[1] >= 512


# vLLM's families textproc serves (the rest of vLLM's are the engine's insides: spec decode,
# preemptions, KV connectors, per-phase timings textproc cannot see)
VLLM_FAMILIES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
    "vllm:generation_tokens", "vllm:request_success", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
)


def _scrape(base: str) -> str:
    resp = httpx.get(base + "/metrics", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.text


def test_metrics_are_vllm_serves_families_with_its_counts(
        servers: tuple[Service, str, str]) -> None:
    """The same few requests on both servers: every vLLM family textproc serves is in its
    scrape with vLLM's type, label names and buckets, and the counters moved alike (the same
    requests, prompt and generated tokens, finish reasons, histogram counts; prefix-cache
    queries and hits, inter-token latencies within reason)."""
    _, url, reference = servers
    bodies = [
        {"messages": [{"role": "user", "content": f"{time.time_ns()} Count to five."}],
         "max_tokens": 12},
        {"messages": [{"role": "user", "content": "Name a river."}], "max_tokens": 6,
         "stream": True},
        {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 200},  # may stop
    ]
    before = {side: _scrape(base) for side, base in (("textproc", url), ("vllm", reference))}
    for side, base in (("textproc", url), ("vllm", reference)):
        for body in bodies:
            if body.get("stream"):
                _stream_text(base, {k: v for k, v in body.items() if k != "stream"})
            else:
                _chat(base, {**body, "temperature": 0})
    after = {side: _scrape(base) for side, base in (("textproc", url), ("vllm", reference))}
    ours, theirs = families(after["textproc"]), families(after["vllm"])

    def shape(family: Any) -> tuple[str, set[str], list[str]]:
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        bounds = sorted({s.labels["le"] for s in family.samples if "le" in s.labels},
                        key=lambda b: float(b))
        return family.type, labels, bounds

    for name in VLLM_FAMILIES:
        assert name in theirs, f"vllm serve has no {name}: the list is out of date"
        assert name in ours, f"no {name} in textproc's /metrics"
        assert shape(ours[name]) == shape(theirs[name]), name

    def moved(side: str, sample: str, **labels: str) -> float:
        return value(after[side], sample, **labels) - value(before[side], sample, **labels)

    for sample in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                   "vllm:e2e_request_latency_seconds_count",
                   "vllm:time_to_first_token_seconds_count",
                   "vllm:request_queue_time_seconds_count",
                   "vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_count",
                   "vllm:request_prompt_tokens_sum", "vllm:request_generation_tokens_sum"):
        assert moved("textproc", sample) == moved("vllm", sample), sample
    assert moved("vllm", "vllm:e2e_request_latency_seconds_count") == len(bodies)
    for reason in ("stop", "length"):
        assert moved("textproc", "vllm:request_success_total", finished_reason=reason) \
            == moved("vllm", "vllm:request_success_total", finished_reason=reason), reason
    queries = moved("vllm", "vllm:prefix_cache_queries_total")
    assert moved("textproc", "vllm:prefix_cache_queries_total") == queries > 0
    hits = [moved(side, "vllm:prefix_cache_hits_total") for side in ("textproc", "vllm")]
    assert abs(hits[0] - hits[1]) <= 16 * len(bodies), hits  # a KV block per request at most
    itl = [moved(side, "vllm:inter_token_latency_seconds_count") for side in ("textproc", "vllm")]
    assert 0.5 * itl[1] <= itl[0] <= itl[1], itl  # textproc sees the steps that carried text
    running = [s for s in ours["vllm:num_requests_running"].samples]
    assert [s.labels["engine"] for s in running] == ["0"] and running[0].value == 0


def _wait_engine(service: Service, predicate: Any, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = engine_stats(service)
        if predicate(stats):
            return stats
        if time.monotonic() > deadline:
            recent = list(stats.get("requests", {}).items())[-3:]
            raise AssertionError(f"engine state not reached in {timeout_s} s: {stats['scheduler']}; "
                                 f"last requests: {recent}\n{service.log()}")
        time.sleep(0.1)


def test_client_that_leaves_frees_its_kv_blocks_in_vllm(servers: tuple[Service, str, str]) -> None:
    """vLLM's own scheduler shows the aborted request gone and its KV blocks free again."""
    service, url, _ = servers
    idle = _wait_engine(service, lambda s: s["scheduler"]["requests"] == 0)["scheduler"]
    # ignore_eos: the random model samples an end id now and then, which would end the
    # request before the client leaves
    body = {"model": MODEL, "stream": True, "max_tokens": 3000, "temperature": 1.0,
            "ignore_eos": True, "messages": [{"role": "user", "content": "word " * 500}]}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        # (the iterator is kept: an abandoned httpx line iterator, collected at once, closes
        # the connection, and the request would be aborted before the engine stats show it)
        stream = resp.iter_lines()
        lines = []
        for line in stream:
            lines += [line] if line.startswith("data: ") else []
            if len(lines) >= 5:
                break
        assert len(lines) == 5, lines  # the stream is still going when the client leaves
        # (the stats file is rewritten every 0.1 s: wait for the one that shows the request)
        busy = _wait_engine(service, lambda s: s["scheduler"]["requests"] == 1)["scheduler"]
        assert busy["free_kv_blocks"] < idle["free_kv_blocks"], busy
    after = _wait_engine(service, lambda s: s["scheduler"]["requests"] == 0)
    assert after["scheduler"]["free_kv_blocks"] == idle["free_kv_blocks"]
    aborted = [r for r in after["requests"].values() if r["finish_reason"] == "abort"]
    assert aborted and all(r["generated"] < 3000 for r in aborted)
    del stream


def test_priority_reaches_vllms_scheduler(servers: tuple[Service, str, str]) -> None:
    """A request's priority is what vLLM's scheduler holds for it; under vLLM's default fcfs
    policy both servers take any int64 priority (vLLM ignores it there) and refuse the same
    bad ones."""
    service, url, reference = servers
    for priority in (17, -(2**63), 2**63 - 1, 2**63, "high", 1.5):
        body = {"model": MODEL, "max_tokens": 2, "priority": priority,
                "messages": [{"role": "user", "content": "Hi"}]}
        status = {side: httpx.post(base + "/v1/chat/completions", json=body,
                                   timeout=120).status_code
                  for side, base in (("textproc", url), ("vllm", reference))}
        assert status["textproc"] == status["vllm"], (priority, status)
        assert status["vllm"] == (200 if isinstance(priority, int) and priority < 2**63
                                  else 400), (priority, status)
    # vLLM's header overrides the body's priority
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    for base in (url, reference):
        assert httpx.post(base + "/v1/chat/completions", json=body, timeout=120,
                          headers={"X-Vllm-Priority": "23"}).status_code == 200
    stats = _wait_engine(service, lambda s: {17, 23} <= {
        r.get("priority") for r in s["requests"].values()})
    assert [r["priority"] for r in stats["requests"].values()].count(17) == 1


def test_reset_prefix_cache_makes_vllm_forget(servers: tuple[Service, str, str]) -> None:
    """After ``POST /reset_prefix_cache`` the prompt found cached a moment ago is not: vLLM's
    prefix cache forgot it. ``vllm serve`` serves the route only with VLLM_SERVER_DEV_MODE=1
    (not the reference's setting: there it is a 404, as textproc's without --admin-routes)."""
    _, url, reference = servers
    body = {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "system", "content": f"{time.time_ns()} " + "The Rhine flows north. " * 80},
        {"role": "user", "content": "Where does it end?"}]}

    def cached() -> int:
        return _cached_tokens("", _chat(url, body))

    assert cached() == 0
    assert cached() >= 512
    r = httpx.post(url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    assert cached() == 0
    assert httpx.post(reference + "/reset_prefix_cache", timeout=60).status_code == 404


def test_pause_sleep_and_wake_up_on_vllm(servers: tuple[Service, str, str]) -> None:
    """vLLM's engine core pauses (a request sent meanwhile waits, then answers on resume),
    sleeps (vLLM's CPU worker keeps its weights: only scheduling stops) and wakes up."""
    _, url, _ = servers
    body = {"max_tokens": 3, "messages": [{"role": "user", "content": "Hello"}]}
    try:
        assert httpx.post(url + "/pause", params={"mode": "keep"}, timeout=60).json() == {
            "status": "paused"}
        assert httpx.get(url + "/is_paused", timeout=60).json() == {"is_paused": True}
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_chat, url, body)
            time.sleep(2)
            assert not waiting.done()
            assert httpx.post(url + "/resume", timeout=60).json() == {"status": "resumed"}
            assert waiting.result(120)["usage"]["completion_tokens"] == 3
        assert httpx.get(url + "/is_paused", timeout=60).json() == {"is_paused": False}
        r = httpx.post(url + "/sleep", params={"level": 1}, timeout=60)
        assert r.status_code == 200 and r.json() == {"status": "sleeping", "level": 1}, r.text
        assert httpx.get(url + "/is_sleeping", timeout=60).json() == {"is_sleeping": True}
        r = httpx.post(url + "/wake_up", timeout=60)
        assert r.json() == {"status": "awake", "tags": None}, r.text
        assert httpx.get(url + "/is_sleeping", timeout=60).json() == {"is_sleeping": False}
        assert _chat(url, body)["usage"]["completion_tokens"] == 3
    finally:  # the other tests need a serving engine
        httpx.post(url + "/wake_up", timeout=60)
        httpx.post(url + "/resume", timeout=60)


def test_bench_vllm_drives_both_servers(servers: tuple[Service, str, str], tmp_path: Path) -> None:
    """Smoke test of bench/vllm.py on the running pair: vLLM's load client against each, the
    growing-conversation client, the CPU split by process group, the summary."""
    import importlib.util
    import sys

    from tests.helpers.models import REPO_ROOT
    from tests.helpers.real_engine import VLLM_PYTHON

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_vllm", REPO_ROOT / "bench" / "vllm.py")
        assert spec is not None and spec.loader is not None
        bench = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = bench  # its dataclasses look their module up there
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
        sys.modules.pop("bench_vllm", None)
    service, url, reference_url = servers
    assert service.proc is not None
    sides = [bench.Side("textproc", url, MODEL, service.proc.pid, "engine_vllm"),
             bench.Side("vllm", reference_url, MODEL, REFERENCE["server"].pid, "EngineCore")]
    rows = []
    for side in sides:
        groups = side.groups()
        assert groups["engine"] and groups["text"], (side.name, groups)
    # one run of vLLM's load client per side, both at once (each start imports vLLM for ~10 s
    # of one core; the runs themselves are a few requests)
    mixes = {"textproc": "schema", "vllm": "short"}
    with ThreadPoolExecutor(2) as pool:
        loads = [pool.submit(bench.run_load, side, mixes[side.name], 2, 4, tmp_path,
                             str(VLLM_PYTHON), TINY_MODEL) for side in sides]
        for side, load in zip(sides, loads):
            row = load.result(timeout=600)
            assert row["completed"] == 4 and row["failed"] == 0, (side.name, row)
            assert row["request_throughput"] > 0 and row["cpu_engine_ms"] > 0
            rows.append({**row, "side": side.name, "mix": mixes[side.name], "concurrency": 2})
    for side in sides:
        grow = bench.run_grow(side, 2, seed=1, chars=1500, turns=2)
        assert grow["completed"] == 4 and grow["median_ttft_ms"] > 0
    summary = bench.summarise(rows, ["textproc"])
    bench.print_summary(summary, ["textproc"])
    assert [(line["mix"], line["concurrency"]) for line in summary] == [("short", 2), ("schema", 2)]
    assert summary[0]["vllm_request_throughput"] > 0 and summary[1]["textproc_request_throughput"] > 0


_WORDS = ("the of and to in is you that it was for on are as with his they at be this have from "
          "or one had by word but not what all were we when your can said there use an each which").split()


def _booking(city_max: int, guest_max: int = 20) -> dict[str, Any]:
    guests = {"type": "array", "items": {"type": "string", "maxLength": guest_max}, "maxItems": 3}
    return {**BOOKING, "properties": {**BOOKING["properties"], "guests": guests,
                                      "city": {"type": "string", "maxLength": city_max}}}


def test_structured_outputs_under_load_stay_in_their_masks(servers: tuple[Service, str, str]) -> None:
    """Structured requests under every kind of load the engine meets at once: a burst of first
    requests with a schema new to the server (counted strings: a compile of seconds), long
    prompts (prefills in chunks beside decodes), streams whose client leaves, ``ignore_eos``
    past the output's end, more new schemas whose compiles end while others decode, plain
    chats. None is refused, every finished answer validates, and the engine counts no sampled
    token outside its mask (vLLM's scheduler logs none rejected by its grammar)."""
    service, url, _ = servers
    first = engine_stats(service)
    before = first.get("mask_violations", 0)
    # the burst's schema takes ~1.7 s of CPU to compile (0.2 s at bounds 16 and 8: then its
    # whole index could come before the engine took the burst's requests, which would not
    # start on the first states), the later ones (shorter strings) ~0.1 s
    schemas = [_booking(200, 60), _booking(6, 4), _booking(7, 4), _booking(8, 4)]

    def prompt(i: int) -> str:
        return " ".join(_WORDS[(i * 7 + k * k) % len(_WORDS)] for k in range(420 + 13 * i))

    def one(i: int) -> tuple[str, Any]:
        kind = ("burst", "burst", "leave", "ignore_eos", "burst", "new", "plain", "burst")[i % 8]
        schema = schemas[1 + i % 3] if kind == "new" else schemas[0]
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt(i)}], "max_tokens": 96,
                                "temperature": 1.0, "seed": i}
        if kind != "plain":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "booking", "schema": schema}}
        if kind == "ignore_eos":
            body.update(ignore_eos=True, max_tokens=160)
        text, reason = "", None
        with httpx.stream("POST", url + "/v1/chat/completions", timeout=300,
                          json={"model": MODEL, "stream": True, **body}) as resp:
            if resp.status_code != 200:
                return kind, f"{resp.status_code} {resp.read()[:300]!r}"
            for n, line in enumerate(resp.iter_lines()):
                if kind == "leave" and n >= 6:
                    return kind, None  # the client goes: textproc aborts it in vLLM
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return kind, f"stream error: {chunk['error']}"
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
                    reason = choice.get("finish_reason") or reason
        if kind in ("burst", "new") and reason == "stop":
            jsonschema.validate(json.loads(text), schema)
        return kind, None

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(one, range(40)))
    failed = [o for o in outcomes if o[1] is not None]
    assert not failed, failed
    stats = _wait_engine(service, lambda s: s["scheduler"]["requests"] == 0, timeout_s=120)
    assert stats["mask_violations"] == before == 0, stats.get("mask_violations_last")
    assert "grammar rejected" not in service.log_path.read_text(errors="replace")
    # the new schemas' first requests decoded on the first states of their indexes (a compile
    # of seconds), left out of vLLM's steps while their next states were not built
    assert stats["started_on_partial"] > first["started_on_partial"]
    assert stats["paused_request_steps"] > first["paused_request_steps"]


def test_engine_killed_under_load_fails_in_flight_and_recovers(
        servers: tuple[Service, str, str]) -> None:
    """kill -9 the engine with streams in flight: each ends with an error within seconds (none
    hangs), new requests get 503 while it restarts, and it serves again after."""
    service, url, _ = servers
    body = {"model": MODEL, "max_tokens": 2000, "temperature": 1.0,
            "messages": [{"role": "user", "content": "Go on forever."}]}

    def stream(i: int) -> str:
        try:
            text, _ = _stream_text(url, {**body, "seed": i})
        except StreamFailed as exc:
            return f"error: {exc}"
        return f"ended without an error after {len(text)} characters"

    engine_pid = int(service.refresh_pids()["engine"])
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(stream, i) for i in range(4)]
        _wait_engine(service, lambda s: s["scheduler"]["running"] == 4)
        killed_at = time.monotonic()
        os.kill(engine_pid, signal.SIGKILL)
        outcomes = [f.result(timeout=60) for f in futures]
    assert time.monotonic() - killed_at < 30
    assert all(o.startswith("error: ") and "engine" in o for o in outcomes), outcomes
    resp = httpx.post(url + "/v1/chat/completions", json={**body, "max_tokens": 4}, timeout=30)
    assert resp.status_code in (200, 503)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if httpx.get(url + "/health", timeout=5).status_code == 200:
            break
        time.sleep(1)
    answer = _chat(url, {"messages": [{"role": "user", "content": "Back?"}], "max_tokens": 4,
                         "temperature": 0})
    assert answer["usage"]["completion_tokens"] == 4
    assert int(service.refresh_pids()["engine"]) != engine_pid


def _blocks_text(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message["content"] if b["type"] == "text")


def test_messages_api_matches_vllm_serve(servers: tuple[Service, str, str]) -> None:
    """Anthropic's Messages API on the real engine: the greedy answer, its token counts and
    stop reason equal vLLM's own ``/v1/messages``; the SDK's stream helper gives the same
    message; ``max_tokens`` over the context (what Claude Code sends) runs with the room left."""
    import anthropic

    _, url, reference = servers
    body = {"model": MODEL, "max_tokens": 24, "temperature": 0, "system": "You are terse.",
            "messages": [{"role": "user", "content": "Hello 🌍! Tell me about Paris."}]}
    ours = httpx.post(url + "/v1/messages", json=body, timeout=120)
    theirs = httpx.post(reference + "/v1/messages", json=body, timeout=120)
    assert ours.status_code == 200 and theirs.status_code == 200, (ours.text, theirs.text)
    mine, vllm = ours.json(), theirs.json()
    assert _blocks_text(mine) == _blocks_text(vllm) and _blocks_text(mine)
    assert mine["usage"]["input_tokens"] == vllm["usage"]["input_tokens"]
    assert mine["usage"]["output_tokens"] == vllm["usage"]["output_tokens"] == 24
    assert mine["stop_reason"] == vllm["stop_reason"] == "max_tokens"
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0,
                             timeout=120) as client:
        greedy = {"temperature": 0}  # sent as is (this SDK's stream() has no such argument)
        kwargs = {k: v for k, v in body.items() if k != "temperature"}
        with client.messages.stream(**kwargs, extra_body=greedy) as stream:  # type: ignore[arg-type]
            final = stream.get_final_message()
        assert _blocks_text(final.model_dump()) == _blocks_text(mine)
        long_user = "Paris is the capital of France. " * 560  # ~3,900 of the 4,096 tokens
        full = client.messages.create(model=MODEL, max_tokens=32000, extra_body=greedy,
                                      messages=[{"role": "user", "content": long_user}])
    # (the prompt: input_tokens and the tokens read from the prefix cache, as Anthropic counts)
    room = MAX_MODEL_LEN - full.usage.input_tokens - (full.usage.cache_read_input_tokens or 0)
    assert 0 < room < 512
    assert full.stop_reason in ("model_context_window_exceeded", "end_turn")
    assert full.usage.output_tokens <= room
    assert (full.stop_reason == "model_context_window_exceeded") == (
        full.usage.output_tokens == room)


def _post_json(url: str, path: str, body: Any) -> Any:
    resp = httpx.post(url + path, json=body, timeout=120)
    assert resp.status_code == 200, (url + path, resp.text)
    return resp.json()


def _generated_stream(url: str, body: dict[str, Any]) -> tuple[list[int], str]:
    ids, text = [], ""
    with httpx.stream("POST", url + "/inference/v1/generate", timeout=120,
                      json={**body, "stream": True, "output_mode": "text"}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:])["choices"]:
                    ids += choice["token_ids"]
                    text += choice["text"]
    return ids, text


def test_scale_out_routes_match_vllm_serve(servers: tuple[Service, str, str]) -> None:
    """vLLM's scale-out routes (``vllm serve --enable-scale-out``) on the same bodies: render
    gives the same ids and sampling params, and a body rendered by either server generates
    the same greedy ids (and text) on the other, whole and streamed, with the same logprobs
    per id."""
    _, url, reference = servers
    keys = ("max_tokens", "temperature", "stop", "stop_token_ids", "seed", "min_tokens")
    for name, conversation in CONVERSATIONS:
        body = {"model": MODEL, **conversation, "max_tokens": 12, "temperature": 0, "seed": 3,
                "stop": ["\n\n\n"]}
        ours = _post_json(url, "/v1/chat/completions/render", body)
        theirs = _post_json(reference, "/v1/chat/completions/render", body)
        assert ours["token_ids"] == theirs["token_ids"], name
        assert ({k: ours["sampling_params"].get(k) for k in keys}
                == {k: theirs["sampling_params"].get(k) for k in keys}), name
        here = _post_json(url, "/inference/v1/generate", theirs)["choices"][0]
        there = _post_json(reference, "/inference/v1/generate", ours)["choices"][0]
        assert here["token_ids"] == there["token_ids"] and len(here["token_ids"]) > 0, name
        assert here["finish_reason"] == there["finish_reason"], name
        assert _generated_stream(url, theirs) == _generated_stream(reference, ours), name
    # a completion batch, the Messages and Responses bodies render as vLLM's
    completion = {"model": MODEL, "prompt": ["Paris is", "Écris 你好"], "max_tokens": 8,
                  "temperature": 0}
    ours_list = _post_json(url, "/v1/completions/render", completion)
    theirs_list = _post_json(reference, "/v1/completions/render", completion)
    assert [r["token_ids"] for r in ours_list] == [r["token_ids"] for r in theirs_list]
    for rendered in ours_list:
        assert (_post_json(reference, "/inference/v1/generate", rendered)["choices"][0]["token_ids"]
                == _post_json(url, "/inference/v1/generate", rendered)["choices"][0]["token_ids"])
    # logprobs by id, one entry per generated id, as vLLM's (the same model, the same numbers)
    rendered = {**ours_list[0], "sampling_params": {**ours_list[0]["sampling_params"],
                                                   "logprobs": 2}}
    here = _post_json(url, "/inference/v1/generate", rendered)["choices"][0]
    there = _post_json(reference, "/inference/v1/generate", rendered)["choices"][0]
    assert here["token_ids"] == there["token_ids"]
    for mine, ref in zip(here["logprobs"]["content"], there["logprobs"]["content"], strict=True):
        assert mine["token_id"] == ref["token_id"] and mine["rank"] == ref["rank"] == 1
        assert mine["logprob"] == pytest.approx(ref["logprob"], abs=1e-3)
        assert [t["token_id"] for t in mine["top_logprobs"]] == [
            t["token_id"] for t in ref["top_logprobs"]]
        assert [t["logprob"] for t in mine["top_logprobs"]] == pytest.approx(
            [t["logprob"] for t in ref["top_logprobs"]], abs=1e-3)
    messages = {"model": MODEL, "max_tokens": 9, "system": "You are terse.",
                "messages": [{"role": "user", "content": "Hello 🌍!"}]}
    assert (_post_json(url, "/v1/messages/render", messages)["token_ids"]
            == _post_json(reference, "/v1/messages/render", messages)["token_ids"])
    responses = {"model": MODEL, "input": "Hello 🌍!", "instructions": "You are terse.",
                 "max_output_tokens": 9}
    assert (_post_json(url, "/v1/responses/render", responses)["token_ids"]
            == _post_json(reference, "/v1/responses/render", responses)["token_ids"])


def test_a_requests_span_on_the_real_engine(servers: tuple[Service, str, str],
                                            collector: Collector) -> None:
    """``--otlp-traces-endpoint`` on the real engine: a request's span comes under its
    ``traceparent`` with its stages in order and the usage the answer gave; its prompt tokens
    are the ones ``vllm serve`` counts for the same body."""
    _, url, reference_url = servers
    trace_id, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Trace me, please."}],
            "max_tokens": 8, "temperature": 0}
    resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=120,
                      headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    reference = httpx.post(reference_url + "/v1/chat/completions", json=body, timeout=120)
    assert reference.json()["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    deadline = time.monotonic() + 30
    ours: list[Any] = []
    while not ours and time.monotonic() < deadline:
        ours = [s for s in collector.wait("llm_request", 1, timeout_s=1)
                if s.trace_id.hex() == trace_id]
    assert ours, "no span of the request reached the collector"
    span = ours[0]
    assert span.parent_span_id.hex() == parent
    assert [e.name for e in span.events] == ["received", "tokenized", "queued", "first_token",
                                             "finished"]
    attrs = span_attributes(span)
    assert attrs["gen_ai.usage.prompt_tokens"] == usage["prompt_tokens"]
    assert attrs["gen_ai.usage.completion_tokens"] == usage["completion_tokens"]
    assert 0 < attrs["gen_ai.latency.time_to_first_token"] <= attrs["gen_ai.latency.e2e"]

"""textproc in front of two of vLLM's own engine processes (``--data-parallel-size 2``), over
vLLM's own wire: rank 0 started by ``textproc serve``, rank 1 by ``textproc engine --headless``
on "another machine" (a network namespace joined by a veth pair, over TCP, where the box allows
it; else a process of its own on loopback), beside ``vllm serve`` on the same model.

Greedy answers on every engine are ``vllm serve``'s; a growing conversation stays on the engine
that holds its prefix (vLLM's own prefix cache hits there); structured outputs and forced calls
hold on every engine, each engine getting a constraint's index once; an abort stops the request
on its engine; kill -9 of an engine core ends its requests with an error while the other
engine's finish, and the restarted engine takes work again; the remote engine's network going
down ends its requests, and it serves again when the network returns. One start of the three
for the module (~2 min on 2 cores; ``vllm serve`` is the session's, shared with
``test_real_engine.py``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.helpers.models import REPO_ROOT
from tests.helpers.netns import Netns, netns_missing
from tests.helpers.real_engine import (
    ENGINE_ENV,
    MAX_MODEL_LEN,
    TINY_MODEL,
    engine_stats,
    missing,
)
from tests.helpers.service import Service, wait_http
from textproc.launchers.vllm_reference import COMPARED_ENGINE_FLAGS

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

MODEL = TINY_MODEL.name
# vllm serve's settings on both sides (as the reference's)
VLLM_FLAGS = list(COMPARED_ENGINE_FLAGS)
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"], "additionalProperties": False}
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Deployment:
    def __init__(self, service: Service, url: str, reference: str, remote: subprocess.Popen[bytes],
                 netns: Netns | None) -> None:
        self.service = service
        self.url = url
        self.reference = reference
        self.remote = remote
        self.netns = netns

    def stats(self) -> dict[str, Any]:
        return engine_stats(self.service)

    def engines(self) -> list[dict[str, Any]]:
        return list(self.stats()["engines"])

    def settled(self) -> list[dict[str, Any]]:
        """The engines once the stats file (written every 0.5 s) shows what just happened."""
        time.sleep(1.2)
        return self.engines()

    def wait(self, what: str, check: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.5)
        raise AssertionError(f"{what} not within {timeout_s} s: {self.engines()}\n"
                             f"{self.service.log(tail=60)}")


@pytest.fixture(scope="module")
def dp(tmp_path_factory: pytest.TempPathFactory, vllm_reference: Any) -> Iterator[Deployment]:
    vllm_reference.start()
    netns = None
    if netns_missing() is None:
        try:  # root without the right to make namespaces (a container): loopback instead
            netns = Netns(f"tpdp{os.getpid() % 100000}", 200 + os.getpid() % 50).create()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            netns = None
    address = netns.host if netns is not None else "127.0.0.1"
    port = _free_port()
    dp_flags = ["--data-parallel-size", "2", "--data-parallel-address", address,
                "--data-parallel-rpc-port", str(port)]
    root = tmp_path_factory.mktemp("textproc-dp")
    service = Service(root, TINY_MODEL, workers=1, engine="vllm",
                      args=["--http", "127.0.0.1:0", "--max-model-len", str(MAX_MODEL_LEN),
                            "--startup-timeout", "600", "--http-arg=--admin-routes",
                            "--data-parallel-size-local", "1", *dp_flags,
                            *[f"--engine-arg={flag}" for flag in VLLM_FLAGS]])
    service.env = {**os.environ, **ENGINE_ENV}
    command = [str(REPO_ROOT / ".venv" / "bin" / "textproc"), "engine", "--model-dir", str(TINY_MODEL),
               "--headless", "--data-parallel-start-rank", "1", *dp_flags,
               "--max-model-len", str(MAX_MODEL_LEN), *VLLM_FLAGS]
    if netns is not None:
        command = netns.command(command)
    remote_log = open(root / "remote-engine.log", "wb")
    remote = subprocess.Popen(command, stdout=remote_log, stderr=subprocess.STDOUT,
                              env={**os.environ, **ENGINE_ENV}, start_new_session=True)
    try:
        service.start(timeout_s=600)
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 60)
        deployment = Deployment(service, url, vllm_reference.url(), remote, netns)
        deployment.wait("both engines ready",
                        lambda: all(e["state"] == "ready" for e in deployment.engines()), 600)
        yield deployment
    finally:
        service.stop(timeout_s=60)
        try:
            os.killpg(remote.pid, signal.SIGTERM)
            remote.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(remote.pid, signal.SIGKILL)
        remote_log.close()
        if netns is not None:
            netns.close()


def _chat(url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, **body}, timeout=300)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _stream(url: str, body: dict[str, Any], started: list[str] | None = None,
            stop: threading.Event | None = None) -> tuple[str, str]:
    """(finish_reason or "error", text or the error message); ("alive", text) when ``stop``
    is set while it still streams (the client leaves)."""
    text = ""
    reason = ""
    tag = str(body.get("_tag"))
    body = {k: v for k, v in body.items() if k != "_tag"}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", timeout=300,
                          json={"model": MODEL, "stream": True, **body}) as resp:
            if resp.status_code != 200:
                return "error", resp.read().decode()
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return "error", str(chunk["error"].get("message"))
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
                    reason = choice.get("finish_reason") or reason
                if started is not None and text and tag not in started:
                    started.append(tag)
                if stop is not None and stop.is_set() and not reason:
                    return "alive", text
    except httpx.HTTPError as exc:
        return "error", repr(exc)
    return reason, text


def _sent(d: Deployment) -> list[int]:
    return [e["requests_sent"] for e in d.settled()]


PROMPTS = ["Hello 🌍! 👨‍👩‍👧 ❤️‍🔥", "Écris une phrase. 你好，世界！", "def f(x):\n\treturn {'a': [x ** 2]}\n",
           "Name a color.", "Count: 1, 2, 3", "Weather in Paris?"]


def test_every_engine_answers_greedy_as_vllm_serve(dp: Deployment) -> None:
    before = _sent(dp)
    bodies = [{"messages": [{"role": "user", "content": p}], "temperature": 0, "max_tokens": 20}
              for p in PROMPTS]
    with ThreadPoolExecutor(3) as pool:  # a few at once: both engines take some
        ours = list(pool.map(lambda b: _chat(dp.url, b), bodies))
    theirs = [_chat(dp.reference, b) for b in bodies]
    for mine, ref in zip(ours, theirs):
        assert mine["choices"][0]["message"]["content"] == ref["choices"][0]["message"]["content"]
        assert mine["usage"]["completion_tokens"] == ref["usage"]["completion_tokens"]
        assert mine["choices"][0]["finish_reason"] == ref["choices"][0]["finish_reason"]
    after = _sent(dp)
    assert all(a > b for a, b in zip(after, before)), (before, after)


def test_admin_routes_reach_every_engine(dp: Deployment) -> None:
    """vLLM's admin routes reach both engines as vLLM's own utility calls: a pause holds the
    requests sent meanwhile until the resume, the prefix cache reset answers for both."""
    r = httpx.post(dp.url + "/reset_prefix_cache", timeout=60)
    assert r.status_code == 200 and r.json() == {"success": True}, r.text
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}
    try:
        r = httpx.post(dp.url + "/pause", params={"mode": "keep"}, timeout=60)
        assert r.status_code == 200 and r.json() == {"status": "paused"}, r.text
        assert httpx.get(dp.url + "/is_paused", timeout=60).json() == {"is_paused": True}
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(_chat, dp.url, body) for _ in range(2)]
            time.sleep(2)
            assert not any(f.done() for f in waiting)
            assert httpx.post(dp.url + "/resume", timeout=60).json() == {"status": "resumed"}
            assert [f.result(120)["usage"]["completion_tokens"] for f in waiting] == [3, 3]
        assert httpx.get(dp.url + "/is_paused", timeout=60).json() == {"is_paused": False}
    finally:
        httpx.post(dp.url + "/resume", timeout=60)


def test_a_growing_conversation_stays_where_its_prefix_is_cached(dp: Deployment) -> None:
    system = "You are a careful assistant. " + " ".join(f"Rule {i}: answer in full sentences." for i in range(60))
    messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                      {"role": "user", "content": "First question?"}]
    first = _chat(dp.url, {"messages": messages, "temperature": 0, "max_tokens": 8})
    assert first["usage"]["prompt_tokens"] > 2 * 128  # whole KV blocks to reuse
    before = dp.settled()
    reported = 0  # what the answers' usage says the engines found cached
    for turn in range(3):
        messages += [{"role": "assistant", "content": f"Answer {turn}."},
                     {"role": "user", "content": f"Question {turn + 2}?"}]
        answer = _chat(dp.url, {"messages": messages, "temperature": 0, "max_tokens": 8})
        reported += answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    after = dp.settled()
    grew = [a["requests_sent"] - b["requests_sent"] for a, b in zip(after, before)]
    assert sorted(grew) == [0, 3], grew  # every turn on one engine
    rank = grew.index(3)
    cached = after[rank]["cached_tokens"] - before[rank]["cached_tokens"]
    assert cached >= 3 * 2 * 128, after  # vLLM's own prefix cache served the shared blocks
    assert reported == cached  # each answer's usage carries its engine's count
    assert dp.stats()["prefix_blocks_matched"] > 0


def test_structured_outputs_and_forced_calls_hold_on_every_engine(dp: Deployment) -> None:
    before = dp.settled()
    schema_body = {"messages": [{"role": "user", "content": "A person, as JSON"}], "max_tokens": 80,
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "person", "schema": SCHEMA}}}
    tool_body = {"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 80,
                 "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    bodies = [{**schema_body, "seed": i} for i in range(4)] + [{**tool_body, "seed": i} for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda b: _chat(dp.url, b), bodies))
    for answer in answers[:4]:
        jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), SCHEMA)
    for answer in answers[4:]:
        (call,) = answer["choices"][0]["message"]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]),
                            TOOL["function"]["parameters"])  # type: ignore[index]
    after = dp.settled()
    sent = [a["requests_sent"] - b["requests_sent"] for a, b in zip(after, before)]
    indexes = [a["indexes_sent"] - b["indexes_sent"] for a, b in zip(after, before)]
    assert all(n > 0 for n in sent), sent
    assert all(n <= 2 for n in indexes), indexes  # two constraints: each engine gets each once


def test_an_abort_stops_the_request_on_its_engine(dp: Deployment) -> None:
    before = dp.settled()
    with httpx.stream("POST", dp.url + "/v1/chat/completions", timeout=120, json={
            "model": MODEL, "stream": True, "max_tokens": 3000, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Go on forever."}]}) as resp:
        chunks = 0
        for line in resp.iter_lines():
            if line.startswith("data: "):
                chunks += 1
            if chunks >= 5:
                break  # the client leaves
    dp.wait("the abort sent to the engine holding the request",
            lambda: sum(e["aborts_sent"] for e in dp.engines()) > sum(e["aborts_sent"] for e in before), 30)
    time.sleep(1.0)
    steps = [e["steps"] for e in dp.engines()]
    time.sleep(2.0)
    assert [e["steps"] for e in dp.engines()] == steps  # no engine steps it any more
    assert all(e["running"] == 0 for e in dp.engines())


def _long(tag: int) -> dict[str, Any]:
    # long enough to be running on an idle box when the engine goes (the tiny model writes
    # a few hundred tokens a second)
    return {"messages": [{"role": "user", "content": f"Story {tag}"}], "max_tokens": 3000,
            "ignore_eos": True, "_tag": tag}


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _ended_by_death(log: str, rank: int) -> int:
    """How many requests the front ended with an error when engine ``rank`` first died in
    ``log`` (its launcher's exit, which may follow, ends none)."""
    found = re.search(rf"engine rank {rank} is gone \(.*?\); ending its (\d+) request", log)
    assert found, log[-4000:]
    return int(found[1])


def _outlive(dp: Deployment, rank: int, futures: list[Any], stop: threading.Event,
             log_before: int) -> tuple[int, list[str]]:
    """Once engine ``rank`` is declared dead and its streams have their errors, the others
    (which go on) are left by their clients: (requests it lost, each stream's reason)."""
    dp.wait(f"engine rank {rank} declared dead",
            lambda: f"engine rank {rank} is gone" in dp.service.log(tail=None)[log_before:], 120)
    lost = _ended_by_death(dp.service.log(tail=None)[log_before:], rank)
    dp.wait(f"the error of each of the {lost} stream(s) it held",
            lambda: sum(f.done() and f.result()[0] == "error" for f in futures) >= lost, 60)
    stop.set()
    reasons = [f.result()[0] for f in futures]
    assert lost >= 1
    assert reasons.count("error") == lost, (reasons, dp.engines())
    assert all(r in ("alive", "length") for r in reasons if r != "error"), reasons
    return lost, reasons


def test_kill_9_of_an_engine_core_fails_only_its_requests(dp: Deployment) -> None:
    launcher = dp.engines()[0]["pid"]
    assert launcher, dp.engines()
    log_before = len(dp.service.log(tail=None))
    stop = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_stream, dp.url, _long(i), None, stop) for i in range(4)]
        # the moment rank 0 holds some (the tiny model writes fast: do not wait for the others)
        dp.wait("streams on rank 0", lambda: dp.engines()[0]["running"] > 0, 120)
        for pid in _descendants(launcher):  # the engine core and its model worker
            os.kill(pid, signal.SIGKILL)
        # the streams on rank 0 when it died (more may have reached it after the look above)
        # end with an error; every other one goes on
        _outlive(dp, 0, futures, stop, log_before)
    # new requests go to the living engine at once
    answer = _chat(dp.url, {"messages": [{"role": "user", "content": "Still there?"}], "max_tokens": 4})
    assert answer["choices"][0]["finish_reason"] == "length"
    dp.wait("rank 0 restarted and ready",
            lambda: dp.engines()[0]["state"] == "ready" and dp.engines()[0]["restarts"] == 1, 600)
    before = dp.settled()[0]["requests_sent"]
    with ThreadPoolExecutor(4) as pool:  # at once: the least loaded engine takes each
        list(pool.map(lambda i: _chat(dp.url, {"messages": [{"role": "user", "content": f"Hi {i}"}],
                                              "max_tokens": 64, "ignore_eos": True}), range(4)))
    assert dp.settled()[0]["requests_sent"] > before


@pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))
def test_a_remote_engine_whose_network_goes_away(dp: Deployment) -> None:
    if dp.netns is None:
        pytest.skip("no network namespace could be made here (ip netns add failed)")
    dp.wait("both engines ready", lambda: all(e["state"] == "ready" for e in dp.engines()), 600)
    stop = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_stream, dp.url, _long(10 + i), None, stop) for i in range(4)]
        dp.wait("streams on the remote rank", lambda: dp.engines()[1]["running"] > 0, 120)
        log_before = len(dp.service.log(tail=None))
        dp.netns.down()
        try:
            _outlive(dp, 1, futures, stop, log_before)
            dp.wait("the remote engine marked dead", lambda: dp.engines()[1]["state"] == "dead", 5)
            # still serving on rank 0, and /health names the rank that is not
            dp.wait("/health naming the dead rank", lambda: "engine rank 1 is dead" in
                    httpx.get(dp.url + "/health", timeout=5).json().get("degraded", ""), 5)
            assert httpx.get(dp.url + "/health", timeout=5).status_code == 200
        finally:
            dp.netns.up()
    dp.wait("the remote engine back once its network is", lambda: dp.engines()[1]["state"] == "ready", 30)  # it dials every 2 s
    before = dp.settled()[1]["requests_sent"]
    with ThreadPoolExecutor(4) as pool:  # at once: the least loaded engine takes each
        list(pool.map(lambda i: _chat(dp.url, {"messages": [{"role": "user", "content": f"Back {i}?"}],
                                              "max_tokens": 64, "ignore_eos": True}), range(4)))
    assert dp.settled()[1]["requests_sent"] > before

"""``priority`` over HTTP against the stub engine: it reaches the engine, the engine's priority
policy serves a later, more urgent request first under overload, and a bad one is a 400."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.service import Service, serve_toy_http, user

pytestmark = pytest.mark.timeout(120)

MODEL = "toy"
STEP_MS = 40


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """One request at a time (``--max-batch 1``), admitted by priority."""
    service, url = serve_toy_http(
        tmp_path_factory.mktemp("priority"), f"--stub-arg=--step-ms={STEP_MS}",
        "--stub-arg=--max-batch=1", "--stub-arg=--scheduling-policy=priority",
        "--stub-arg=--stats-interval-s=0.05", name=MODEL)
    try:
        yield service, url
    finally:
        service.stop()


def _entries(service: Service, priority: int) -> list[dict[str, Any]]:
    requests = service.stub_stats()["requests"]
    return [e for e in requests.values() if e.get("priority") == priority]


def _chat(url: str, priority: int, max_tokens: int, answers: list[int]) -> None:
    r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": user("one two three four five six seven eight"),
        "max_tokens": max_tokens, "priority": priority, "ignore_eos": True})
    answers.append(r.status_code)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
def test_priority_reaches_the_engine(busy: tuple[Service, str], path: str) -> None:
    service, url = busy
    priority = {"/v1/chat/completions": 7, "/v1/completions": 8, "/v1/responses": 9}[path]
    body: dict[str, Any] = {"model": MODEL, "priority": priority}
    if path == "/v1/chat/completions":
        body.update(messages=user("hi"), max_tokens=2)
    elif path == "/v1/completions":
        body.update(prompt="hi", max_tokens=2)
    else:
        body.update(input="hi", max_output_tokens=2)
    r = httpx.post(url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while not _entries(service, priority) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_entries(service, priority)) == 1


def test_a_later_urgent_request_is_served_first(busy: tuple[Service, str]) -> None:
    """Four requests of priority 20 queue behind each other (one runs at a time); one of
    priority -3 sent after them ends before every one of them that had not started."""
    service, url = busy
    answers: list[int] = []
    # each low one runs 25 steps of 40 ms: the urgent one has seconds to reach the engine
    # before the waiting ones are admitted, even on a loaded box
    low = [threading.Thread(target=_chat, args=(url, 20, 25, answers)) for _ in range(4)]
    for t in low:
        t.start()
    deadline = time.monotonic() + 20
    while len(_entries(service, 20)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)  # all four reached the engine: one runs, three wait
    assert len(_entries(service, 20)) == 4
    urgent = threading.Thread(target=_chat, args=(url, -3, 2, answers))
    urgent.start()
    for t in [*low, urgent]:
        t.join(60)
    assert answers == [200] * 5
    time.sleep(0.2)  # the stats file is rewritten every 0.05 s
    ends = sorted(e["ended_at"] for e in _entries(service, 20))
    (first,) = [e["ended_at"] for e in _entries(service, -3)]
    # the one running when it came (and perhaps one admitted meanwhile) ends first; the
    # others waited behind it
    assert first < ends[2], (first, ends)


@pytest.mark.parametrize("priority, what", [
    ("high", "priority"), (2**63, "priority"), (1.5, "priority"), (True, "priority")])
def test_a_bad_priority_is_a_400(busy: tuple[Service, str], priority: Any, what: str) -> None:
    r = httpx.post(busy[1] + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "messages": user("hi"), "priority": priority})
    assert r.status_code == 400, r.text
    assert what in r.text


@pytest.mark.parametrize("header, body, seen", [("11", 1, 11), ("-4", 0, -4),
                                                ("abc", 12, 12), (str(2**63), 13, 13)])
def test_vllms_priority_header_overrides_the_body(busy: tuple[Service, str], header: str,
                                                   body: int, seen: int) -> None:
    """``X-Vllm-Priority``: an integer there is the priority; anything else is ignored."""
    service, url = busy
    r = httpx.post(url + "/v1/completions", timeout=30, headers={"X-Vllm-Priority": header},
                   json={"model": MODEL, "prompt": "hi", "max_tokens": 1, "priority": body})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while not _entries(service, seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_entries(service, seen)) == 1


def test_generate_and_render_carry_the_priority(busy: tuple[Service, str]) -> None:
    """vLLM's scale-out routes: ``/inference/v1/generate``'s priority reaches the engine (an
    int64; else a 400 naming it), and a render answers the body's priority in its
    ``GenerateRequest``."""
    service, url = busy
    r = httpx.post(url + "/inference/v1/generate", timeout=30, json={
        "model": MODEL, "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 1},
        "priority": 31})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while not _entries(service, 31) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_entries(service, 31)) == 1
    r = httpx.post(url + "/inference/v1/generate", timeout=30, json={
        "model": MODEL, "token_ids": [1, 2, 3], "priority": 2**63})
    assert r.status_code == 400 and "priority" in r.text, r.text
    r = httpx.post(url + "/v1/chat/completions/render", timeout=30, json={
        "model": MODEL, "messages": user("hi"), "priority": 32})
    assert r.status_code == 200, r.text
    assert r.json()["priority"] == 32

"""vLLM's admin routes over HTTP against the stub engine (``--admin-routes``): each reaches the
engine and answers vLLM's JSON; pauses and sleeps hold new requests, end or freeze running ones
as vLLM's modes say; a bad query parameter is a 400 naming it."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.service import Service, serve_toy_http, user
from textproc.cli import _dev_mode_flags

pytestmark = pytest.mark.timeout(120)

MODEL = "toy"
STEP_MS = 20


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    service, url = serve_toy_http(
        tmp_path_factory.mktemp("admin"), f"--stub-arg=--step-ms={STEP_MS}",
        "--http-arg=--admin-routes", name=MODEL)
    try:
        yield service, url
    finally:
        service.stop()


def _chat(url: str, max_tokens: int, answers: list[Any], **extra: Any) -> None:
    r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": user("alpha beta gamma delta " * 20), "max_tokens": max_tokens,
        "ignore_eos": True, **extra})
    answers.append(r)


def _started(url: str, max_tokens: int) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=_chat, args=(url, max_tokens, answers))
    thread.start()
    time.sleep(0.5)  # it runs in the engine by now
    return thread, answers


def _get(url: str, path: str) -> Any:
    r = httpx.get(url + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _post(url: str, path: str, **params: Any) -> Any:
    r = httpx.post(url + path, params=params, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_reset_prefix_cache(admin: tuple[Service, str]) -> None:
    url = admin[1]
    assert _post(url, "/reset_prefix_cache") == {"success": True}
    assert _post(url, "/reset_prefix_cache", reset_running_requests="true",
                 reset_external="false") == {"success": True}


def test_pause_keep_freezes_and_resume_goes_on(admin: tuple[Service, str]) -> None:
    url = admin[1]
    running, first = _started(url, 60)
    assert _get(url, "/is_paused") == {"is_paused": False}
    assert _post(url, "/pause", mode="keep") == {"status": "paused"}
    assert _get(url, "/is_paused") == {"is_paused": True}
    assert _get(url, "/is_sleeping") == {"is_sleeping": True}  # vLLM's: paused counts
    later: list[Any] = []
    waiting = threading.Thread(target=_chat, args=(url, 3, later))
    waiting.start()
    time.sleep(1.5)  # 60 tokens at 20 ms would have ended by now
    assert not first and not later
    assert _post(url, "/resume") == {"status": "resumed"}
    running.join(30)
    waiting.join(30)
    assert [r.status_code for r in first + later] == [200, 200]
    assert first[0].json()["usage"]["completion_tokens"] == 60
    assert _get(url, "/is_paused") == {"is_paused": False}


def test_pause_abort_ends_running_requests(admin: tuple[Service, str]) -> None:
    url = admin[1]
    running, first = _started(url, 500)
    assert _post(url, "/pause") == {"status": "paused"}  # mode abort, vLLM's default
    running.join(30)
    assert first and first[0].status_code == 200, first
    answer = first[0].json()
    assert answer["choices"][0]["finish_reason"] == "abort"
    assert answer["usage"]["completion_tokens"] < 500
    assert _post(url, "/resume") == {"status": "resumed"}
    after: list[Any] = []
    _chat(url, 3, after)
    assert after[0].status_code == 200 and after[0].json()["usage"]["completion_tokens"] == 3


def test_pause_wait_answers_once_running_requests_end(admin: tuple[Service, str]) -> None:
    url = admin[1]
    running, first = _started(url, 60)
    r = httpx.post(url + "/pause", params={"mode": "wait"}, timeout=30)
    assert r.status_code == 200 and r.json() == {"status": "paused"}
    running.join(30)  # (its answer may reach the thread a moment after the pause's)
    assert first and first[0].json()["choices"][0]["finish_reason"] == "length"  # ran to its end
    assert _post(url, "/resume") == {"status": "resumed"}


def test_sleep_and_wake_up_by_tags(admin: tuple[Service, str]) -> None:
    url = admin[1]
    assert _post(url, "/sleep") == {"status": "sleeping", "level": 1}
    assert _get(url, "/is_sleeping") == {"is_sleeping": True}
    r = httpx.post(url + "/wake_up", params=[("tags", "weights")], timeout=30)
    assert r.json() == {"status": "sleeping", "tags": ["weights"]}  # the KV cache sleeps on
    assert _get(url, "/is_sleeping") == {"is_sleeping": True}
    r = httpx.post(url + "/wake_up", params=[("tags", "kv_cache")], timeout=30)
    assert r.json() == {"status": "awake", "tags": ["kv_cache"]}
    assert _get(url, "/is_sleeping") == {"is_sleeping": False}
    assert _post(url, "/sleep", level=0) == {"status": "sleeping", "level": 0}
    assert _post(url, "/wake_up") == {"status": "awake", "tags": None}
    after: list[Any] = []
    _chat(url, 2, after)
    assert after[0].status_code == 200


@pytest.mark.parametrize("path, params, param", [
    ("/sleep", {"level": "3"}, "level"), ("/sleep", {"mode": "later"}, "mode"),
    ("/pause", {"mode": "now"}, "mode"), ("/pause", {"clear_cache": "maybe"}, "clear_cache"),
    ("/reset_prefix_cache", {"reset_external": "2"}, "reset_external")])
def test_a_bad_query_parameter_is_a_400(admin: tuple[Service, str], path: str,
                                        params: dict[str, str], param: str) -> None:
    r = httpx.post(admin[1] + path, params=params, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert _get(admin[1], "/is_paused") == {"is_paused": False}


def test_routes_are_off_without_the_flag(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    service, url = serve_toy_http(tmp_path, name=MODEL)
    try:
        for path in ("/reset_prefix_cache", "/sleep", "/pause", "/resume", "/wake_up"):
            assert httpx.post(url + path, timeout=30).status_code == 404
        for path in ("/is_sleeping", "/is_paused"):
            assert httpx.get(url + path, timeout=30).status_code == 404
    finally:
        service.stop()
    # vLLM's switch for them turns them on too
    for value, flags in (("1", ("--admin-routes",)), ("0", ()), ("", ())):
        monkeypatch.setenv("VLLM_SERVER_DEV_MODE", value)
        assert _dev_mode_flags() == flags

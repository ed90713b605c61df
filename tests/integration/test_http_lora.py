"""LoRA adapters by name against the stub engine (``--lora-modules``): ``/v1/models`` lists
them as vLLM does, a request whose model names one reaches the engine with its name, the base
model's with none; vLLM's runtime load and unload routes add and remove one; a bad
``--lora-modules`` item stops the start."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.helpers.service import REPO, Service, serve_toy_http, user

pytestmark = pytest.mark.timeout(120)

MODEL = "toy"


@pytest.fixture(scope="module")
def loras(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    service, url = serve_toy_http(tmp_path_factory.mktemp("lora"), "--lora-modules",
                                  "sql=/adapters/sql", "chat=/adapters/chat",
                                  "--stub-arg=--stats-interval-s=0.05",
                                  "--http-arg=--runtime-lora-updating", name=MODEL)
    try:
        yield service, url
    finally:
        service.stop()


def test_models_lists_the_adapters(loras: tuple[Service, str]) -> None:
    body = httpx.get(loras[1] + "/v1/models", timeout=30).json()
    entries = {e["id"]: e for e in body["data"]}
    assert list(entries) == [MODEL, "sql", "chat"]
    assert (entries["sql"]["root"], entries["sql"]["parent"]) == ("/adapters/sql", MODEL)
    assert "parent" not in entries[MODEL]
    one = httpx.get(loras[1] + "/v1/models/chat", timeout=30).json()
    assert one["root"] == "/adapters/chat"


@pytest.mark.parametrize("model, lora", [("sql", "sql"), ("chat", "chat"), (MODEL, "")])
def test_a_request_naming_an_adapter_reaches_the_engine_with_it(
        loras: tuple[Service, str], model: str, lora: str) -> None:
    service, url = loras
    before = set(service.stub_stats()["requests"])
    r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": model, "messages": user("hi"), "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == model
    entry: dict[str, Any] = {}
    deadline = time.monotonic() + 10
    while not entry and time.monotonic() < deadline:
        new = {k: v for k, v in service.stub_stats()["requests"].items() if k not in before}
        entry = next(iter(new.values()), {})
        time.sleep(0.05)
    assert entry.get("lora") == lora, entry


def _chat_lora(service: Service, url: str, model: str) -> tuple[int, str | None]:
    before = set(service.stub_stats()["requests"])
    r = httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": model, "messages": user("hi"), "max_tokens": 1})
    if r.status_code != 200:
        return r.status_code, None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        new = [v for k, v in service.stub_stats()["requests"].items() if k not in before]
        if new:
            return 200, new[0].get("lora")
        time.sleep(0.05)
    return 200, None


def test_runtime_load_and_unload(loras: tuple[Service, str]) -> None:
    service, url = loras
    r = httpx.post(url + "/v1/load_lora_adapter", timeout=30,
                   json={"lora_name": "math", "lora_path": "/adapters/math"})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'math' added successfully.")
    models = [e["id"] for e in httpx.get(url + "/v1/models", timeout=30).json()["data"]]
    assert models == [MODEL, "sql", "chat", "math"]
    assert _chat_lora(service, url, "math") == (200, "math")
    again = httpx.post(url + "/v1/load_lora_adapter", timeout=30,
                       json={"lora_name": "math", "lora_path": "/adapters/math"})
    assert again.status_code == 400 and "already been loaded" in again.text
    r = httpx.post(url + "/v1/unload_lora_adapter", timeout=30, json={"lora_name": "math"})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'math' removed successfully.")
    assert _chat_lora(service, url, "math") == (404, None)
    gone = httpx.post(url + "/v1/unload_lora_adapter", timeout=30, json={"lora_name": "math"})
    assert gone.status_code == 404 and "cannot be found" in gone.text


@pytest.mark.parametrize("path, body, says", [
    ("/v1/load_lora_adapter", {"lora_name": "x"}, "Both 'lora_name' and 'lora_path'"),
    ("/v1/load_lora_adapter", {"lora_name": MODEL, "lora_path": "/a"}, "conflicts with a served"),
    ("/v1/unload_lora_adapter", {}, "'lora_name' needs to be provided"),
    ("/v1/unload_lora_adapter", [1], "JSON object")])
def test_bad_runtime_lora_bodies_are_400s(loras: tuple[Service, str], path: str, body: Any,
                                         says: str) -> None:
    r = httpx.post(loras[1] + path, timeout=30, json=body)
    assert r.status_code == 400 and says in r.text, r.text


def test_an_unknown_model_is_still_a_404(loras: tuple[Service, str]) -> None:
    r = httpx.post(loras[1] + "/v1/chat/completions", timeout=30, json={
        "model": "sql2", "messages": user("hi")})
    assert r.status_code == 404, r.text


def test_a_bad_lora_module_stops_the_start() -> None:
    done = subprocess.run([sys.executable, "-m", "textproc.cli", "serve", "--lora-modules",
                           "no-path"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--lora-modules takes NAME=PATH" in done.stderr, done.stderr[-2000:]

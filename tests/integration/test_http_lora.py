"""LoRA adapters by name against the stub engine (``--lora-modules``): ``/v1/models`` lists
them as vLLM does, a request whose model names one reaches the engine with its name, the base
model's with none; a bad ``--lora-modules`` item stops the start."""

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
                                  "--stub-arg=--stats-interval-s=0.05", name=MODEL)
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


def test_an_unknown_model_is_still_a_404(loras: tuple[Service, str]) -> None:
    r = httpx.post(loras[1] + "/v1/chat/completions", timeout=30, json={
        "model": "sql2", "messages": user("hi")})
    assert r.status_code == 404, r.text


def test_a_bad_lora_module_stops_the_start() -> None:
    done = subprocess.run([sys.executable, "-m", "textproc.cli", "serve", "--lora-modules",
                           "no-path"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--lora-modules takes NAME=PATH" in done.stderr, done.stderr[-2000:]
